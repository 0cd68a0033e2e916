// Shared helpers. The host prepends a prelude that defines, per scalar type and semiring:
//   STORE (element type in memory), ACC (accumulator), REAL (real part type), NCOMP (1 or 2),
//   LOAD(p, i) -> ACC, STORE_AT(p, i, acc), ADD(a, b), MUL(a, b), MUL_AT(a, b, k) (the
//   product knowing the inner index k), ZERO, ONE, IS_ZERO(v),
//   PAYLOAD (what the sort carries with each key), and the tile sizes SORT_TILE, SORT_WG.

// Largest idx in [0, n) with a[idx] <= x, given a[0] <= x < a[n] (a is non-decreasing).
// Plain binary search: log2(n) dependent loads.
inline ulong search_binary(__global const ulong* a, ulong n, ulong x) {
    ulong lo = 0, hi = n;
    while (hi - lo > 1) {
        ulong mid = lo + (hi - lo) / 2;
        if (a[mid] <= x) lo = mid; else hi = mid;
    }
    return lo;
}

// The same answer by interpolation search (Perl, Itai, Avni; Polok et al. use it to locate a
// work-item's first product): the probe is placed by linear interpolation between the interval's
// end values, O(log log n) probes on evenly spread prefix sums. Skewed prefix sums make pure
// interpolation O(n), so after INTERP_PROBES probes the loop continues by bisection.
#define INTERP_PROBES 8
inline ulong search_interpolation(__global const ulong* a, ulong n, ulong x) {
    ulong lo = 0, hi = n;
    ulong alo = a[0], ahi = a[n];
    uint probes = 0;
    while (hi - lo > 1) {
        ulong mid;
        if (probes < INTERP_PROBES) {
            // ahi > x >= alo, so the denominator is positive.
            float f = (float)(x - alo) / (float)(ahi - alo);
            mid = lo + (ulong)(f * (float)(hi - lo));
            mid = clamp(mid, lo + 1, hi - 1);
        } else {
            mid = lo + (hi - lo) / 2;
        }
        ++probes;
        ulong am = a[mid];
        if (am <= x) { lo = mid; alo = am; } else { hi = mid; ahi = am; }
    }
    return lo;
}

// Number of entries of the sorted range a[lo, hi) that are < x (strict) or <= x (!strict).
inline ulong rank_in(__global const ulong* a, ulong lo, ulong hi, ulong x, int strict) {
    ulong b = lo, e = hi;
    while (b < e) {
        ulong mid = b + (e - b) / 2;
        ulong v = a[mid];
        if (v < x || (!strict && v == x)) b = mid + 1; else e = mid;
    }
    return b - lo;
}

inline ulong rank_local(__local const ulong* a, uint lo, uint hi, ulong x, int strict) {
    uint b = lo, e = hi;
    while (b < e) {
        uint mid = b + (e - b) / 2;
        ulong v = a[mid];
        if (v < x || (!strict && v == x)) b = mid + 1; else e = mid;
    }
    return b - lo;
}

// Searches of sorted column indices (rows of a CSR matrix), shared by the ESC program's
// numeric phase and panels and by the masked program.
// Position of column j in a row [lo, hi), or hi when the row does not hold it.
inline ulong planned_column(__global const uint* c_index, ulong lo, ulong hi, uint j) {
    ulong b0 = lo, e0 = hi;
    while (b0 < e0) {
        ulong mid = b0 + (e0 - b0) / 2;
        if (c_index[mid] < j) b0 = mid + 1; else e0 = mid;
    }
    return (b0 < hi && c_index[b0] == j) ? b0 : hi;
}

// First position in the sorted index[lo, hi) holding a column >= c.
inline ulong lower_bound_column(__global const uint* index, ulong lo, ulong hi, uint c) {
    while (lo < hi) {
        ulong mid = lo + (hi - lo) / 2;
        if (index[mid] < c) lo = mid + 1; else hi = mid;
    }
    return lo;
}

#if HAS_ATOMICS
#if REAL_IS_BOOL
// bool's `+` is `or`: its accumulator (a uint, 0 or 1) is or-ed into atomically.
inline void atomic_add_real(volatile __global REAL* p, REAL v) {
    atomic_or(p, v);
}
#elif REAL_IS_INT
// Integers add atomically as they are (two's complement: a signed sum wraps as the unsigned
// one does); 64-bit ones by cl_khr_int64_base_atomics.
inline void atomic_add_real(volatile __global REAL* p, REAL v) {
#if REAL_IS_WIDE_INT
    atom_add(p, v);
#else
    atomic_add(p, v);
#endif
}
#else
// OpenCL 1.2 has no floating-point atomics: add by compare-and-swap on the bit pattern (64-bit
// for double, which needs cl_khr_int64_base_atomics: without it the program has no atomics).
inline void atomic_add_real(volatile __global REAL* p, REAL v) {
#if REAL_IS_DOUBLE
    volatile __global ulong* u = (volatile __global ulong*)p;
    ulong old = *u, seen;
    while ((seen = atom_cmpxchg(u, old, as_ulong(as_double(old) + v))) != old) old = seen;
#else
    volatile __global uint* u = (volatile __global uint*)p;
    uint old = *u, seen;
    while ((seen = atomic_cmpxchg(u, old, as_uint(as_float(old) + v))) != old) old = seen;
#endif
}
#endif

// An accumulator added to atomically, each component of a complex value on its own.
inline void atomic_add_acc(__global ACC* p, ACC v) {
    volatile __global REAL* dst = (volatile __global REAL*)p;
#if NCOMP == 1
    atomic_add_real(dst, v);
#else
    atomic_add_real(dst, v.x);
    atomic_add_real(dst + 1, v.y);
#endif
}

// The same adds on local memory (cl_khr_int64_base_atomics covers local 64-bit atomics too),
// where a work-group accumulates its part of a row of C.
#if REAL_IS_BOOL
inline void local_add_real(volatile __local REAL* p, REAL v) {
    atomic_or(p, v);
}
#elif REAL_IS_INT
inline void local_add_real(volatile __local REAL* p, REAL v) {
#if REAL_IS_WIDE_INT
    atom_add(p, v);
#else
    atomic_add(p, v);
#endif
}
#else
inline void local_add_real(volatile __local REAL* p, REAL v) {
#if REAL_IS_DOUBLE
    volatile __local ulong* u = (volatile __local ulong*)p;
    ulong old = *u, seen;
    while ((seen = atom_cmpxchg(u, old, as_ulong(as_double(old) + v))) != old) old = seen;
#else
    volatile __local uint* u = (volatile __local uint*)p;
    uint old = *u, seen;
    while ((seen = atomic_cmpxchg(u, old, as_uint(as_float(old) + v))) != old) old = seen;
#endif
}
#endif

inline void local_add_acc(__local ACC* p, ACC v) {
    volatile __local REAL* dst = (volatile __local REAL*)p;
#if NCOMP == 1
    local_add_real(dst, v);
#else
    local_add_real(dst, v.x);
    local_add_real(dst + 1, v.y);
#endif
}
#endif // HAS_ATOMICS
