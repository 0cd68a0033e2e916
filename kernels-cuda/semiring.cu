// SpGEMM over any built-in semiring, with or without a mask (GraphBLAS semantics; the table is
// hetsparse_core::semiring's), over every scalar type including the integers and bool.
//
// A product's pattern never depends on its semiring, so the structure of C is found first and
// the values second:
//
//   unmasked             C's structure from the plus-times pipeline (spgemm.cu), run on ones
//   mask                 sr_mask_hits: which of the mask's positions some product lands on
//                        (structure only; products outside the mask row are not multiplied),
//                        sr_hits_count / sr_hits_compact: those positions as C's structure
//   complemented mask    the unmasked structure, less the mask's positions:
//                        sr_filter_count / sr_filter_compact
//   values               sr_numeric_<semiring>_<type>: a group of lanes per row of C, over a
//                        structure already known, so that no product needs an atomic: for one
//                        entry A(i,k), the entries of B's row k have distinct columns, hence
//                        distinct slots of C's row; the group's lanes take them, and the group
//                        synchronises before the next k. A product whose column is not in C's
//                        row (refused by the mask) is skipped before it is multiplied.
//
// "any" keeps the last product in A's row order (the reference keeps its last); min and max
// ignore NaN (fmin/fmax); integer + and × wrap (computed on the unsigned bits: signed overflow
// is undefined in C++); bool's + is or, × is and, min is and, max is or.
#include "common.cuh"

typedef long long i64;

// bool as stored by Rust: one byte, 0 or 1. Every value written here is 0 or 1.
struct hs_bool { unsigned char v; };

// ---------------------------------------------------------------------------------------------
// Arithmetic of each accumulator type: plus, times, min, max, their identities, one, "is not
// zero" and an inner index as a value.

template <class A> struct sr_ops;

template <> struct sr_ops<float> {
    static __device__ __forceinline__ float plus(float a, float b) { return a + b; }
    static __device__ __forceinline__ float times(float a, float b) { return a * b; }
    static __device__ __forceinline__ float lesser(float a, float b) { return fminf(a, b); }
    static __device__ __forceinline__ float greater(float a, float b) { return fmaxf(a, b); }
    static __device__ __forceinline__ float highest() { return __int_as_float(0x7f800000); }
    static __device__ __forceinline__ float lowest() { return __int_as_float(0xff800000); }
    static __device__ __forceinline__ float zero() { return 0.0f; }
    static __device__ __forceinline__ float one() { return 1.0f; }
    static __device__ __forceinline__ bool nonzero(float a) { return a != 0.0f; }
    static __device__ __forceinline__ float index(u32 k) { return (float)k; }
};
template <> struct sr_ops<double> {
    static __device__ __forceinline__ double plus(double a, double b) { return a + b; }
    static __device__ __forceinline__ double times(double a, double b) { return a * b; }
    static __device__ __forceinline__ double lesser(double a, double b) { return fmin(a, b); }
    static __device__ __forceinline__ double greater(double a, double b) { return fmax(a, b); }
    static __device__ __forceinline__ double highest() { return __longlong_as_double(0x7ff0000000000000ll); }
    static __device__ __forceinline__ double lowest() { return __longlong_as_double((i64)0xfff0000000000000ull); }
    static __device__ __forceinline__ double zero() { return 0.0; }
    static __device__ __forceinline__ double one() { return 1.0; }
    static __device__ __forceinline__ bool nonzero(double a) { return a != 0.0; }
    static __device__ __forceinline__ double index(u32 k) { return (double)k; }
};
// Complex: only the semirings that need + and 1 are defined (and instantiated).
template <> struct sr_ops<hs_c32> {
    static __device__ __forceinline__ hs_c32 plus(hs_c32 a, hs_c32 b) { return a + b; }
    static __device__ __forceinline__ hs_c32 times(hs_c32 a, hs_c32 b) { return a * b; }
    static __device__ __forceinline__ hs_c32 zero() { return {0.0f, 0.0f}; }
    static __device__ __forceinline__ hs_c32 one() { return {1.0f, 0.0f}; }
};
template <> struct sr_ops<hs_c64> {
    static __device__ __forceinline__ hs_c64 plus(hs_c64 a, hs_c64 b) { return a + b; }
    static __device__ __forceinline__ hs_c64 times(hs_c64 a, hs_c64 b) { return a * b; }
    static __device__ __forceinline__ hs_c64 zero() { return {0.0, 0.0}; }
    static __device__ __forceinline__ hs_c64 one() { return {1.0, 0.0}; }
};

// The integers: + and × on the unsigned bits (wrapping, as the reference's Wrapping), the
// type's bounds as the infinities.
#define SR_INTEGER_OPS(type, bits, low, high)                                                         \
    template <> struct sr_ops<type> {                                                                 \
        static __device__ __forceinline__ type plus(type a, type b) { return (type)((bits)a + (bits)b); } \
        static __device__ __forceinline__ type times(type a, type b) { return (type)((bits)a * (bits)b); } \
        static __device__ __forceinline__ type lesser(type a, type b) { return a < b ? a : b; }       \
        static __device__ __forceinline__ type greater(type a, type b) { return a > b ? a : b; }      \
        static __device__ __forceinline__ type highest() { return (type)(high); }                     \
        static __device__ __forceinline__ type lowest() { return (type)(low); }                       \
        static __device__ __forceinline__ type zero() { return (type)0; }                             \
        static __device__ __forceinline__ type one() { return (type)1; }                              \
        static __device__ __forceinline__ bool nonzero(type a) { return a != (type)0; }               \
        static __device__ __forceinline__ type index(u32 k) { return (type)k; }                       \
    };
SR_INTEGER_OPS(int, u32, 0x80000000u, 0x7fffffffu)
SR_INTEGER_OPS(i64, u64, 0x8000000000000000ull, 0x7fffffffffffffffull)
SR_INTEGER_OPS(u32, u32, 0u, 0xffffffffu)
SR_INTEGER_OPS(u64, u64, 0ull, 0xffffffffffffffffull)

// bool, accumulated as a byte 0 or 1: + is or, × is and, min is and, max is or (false < true).
template <> struct sr_ops<unsigned char> {
    typedef unsigned char b8;
    static __device__ __forceinline__ b8 plus(b8 a, b8 b) { return a | b; }
    static __device__ __forceinline__ b8 times(b8 a, b8 b) { return a & b; }
    static __device__ __forceinline__ b8 lesser(b8 a, b8 b) { return a & b; }
    static __device__ __forceinline__ b8 greater(b8 a, b8 b) { return a | b; }
    static __device__ __forceinline__ b8 highest() { return 1; }
    static __device__ __forceinline__ b8 lowest() { return 0; }
    static __device__ __forceinline__ b8 zero() { return 0; }
    static __device__ __forceinline__ b8 one() { return 1; }
    static __device__ __forceinline__ bool nonzero(b8 a) { return a != 0; }
    static __device__ __forceinline__ b8 index(u32 k) { return k != 0; }
};

// Storage type -> accumulator and back (the float types' are common.cuh's hs_scalar).
template <class T> struct sr_scalar {
    typedef typename hs_scalar<T>::acc acc;
    static __device__ __forceinline__ acc to_acc(T v) { return hs_scalar<T>::to_acc(v); }
    static __device__ __forceinline__ T from_acc(acc v) { return hs_scalar<T>::from_acc(v); }
};
#define SR_SELF_SCALAR(type)                                                          \
    template <> struct sr_scalar<type> {                                              \
        typedef type acc;                                                             \
        static __device__ __forceinline__ acc to_acc(type v) { return v; }           \
        static __device__ __forceinline__ type from_acc(acc v) { return v; }          \
    };
SR_SELF_SCALAR(int)
SR_SELF_SCALAR(i64)
SR_SELF_SCALAR(u32)
SR_SELF_SCALAR(u64)
template <> struct sr_scalar<hs_bool> {
    typedef unsigned char acc;
    // A stored bool is 0 or 1; any other byte counts as true all the same.
    static __device__ __forceinline__ acc to_acc(hs_bool v) { return v.v != 0; }
    static __device__ __forceinline__ hs_bool from_acc(acc v) { return {(unsigned char)(v != 0)}; }
};

// ---------------------------------------------------------------------------------------------
// The semirings: add, multiply knowing the inner index k, and the additive identity, over the
// accumulator A of a storage type T.

#define SR_SEMIRING(name, zero_expr, add_expr, mul_expr)                                  \
    template <class T> struct name {                                                      \
        typedef typename sr_scalar<T>::acc acc;                                           \
        typedef sr_ops<acc> O;                                                            \
        static __device__ __forceinline__ acc zero() { return zero_expr; }                \
        static __device__ __forceinline__ acc add(acc x, acc y) { return add_expr; }      \
        static __device__ __forceinline__ acc mul(T av, T bv, u32 k) {                    \
            acc a = sr_scalar<T>::to_acc(av), b = sr_scalar<T>::to_acc(bv);               \
            (void)a; (void)b; (void)k;                                                    \
            return mul_expr;                                                              \
        }                                                                                 \
    };

SR_SEMIRING(SrPlusTimes, O::zero(), O::plus(x, y), O::times(a, b))
SR_SEMIRING(SrPlusPair, O::zero(), O::plus(x, y), O::one())
SR_SEMIRING(SrPlusFirst, O::zero(), O::plus(x, y), a)
SR_SEMIRING(SrPlusSecond, O::zero(), O::plus(x, y), b)
// "any": the last product of the row's order.
SR_SEMIRING(SrAnyPair, O::zero(), ((void)x, y), O::one())
SR_SEMIRING(SrAnySecondI, O::zero(), ((void)x, y), O::index(k))
SR_SEMIRING(SrMinPlus, O::highest(), O::lesser(x, y), O::plus(a, b))
SR_SEMIRING(SrMaxPlus, O::lowest(), O::greater(x, y), O::plus(a, b))
SR_SEMIRING(SrMinFirst, O::highest(), O::lesser(x, y), a)
SR_SEMIRING(SrMinSecond, O::highest(), O::lesser(x, y), b)
SR_SEMIRING(SrMaxTimes, O::lowest(), O::greater(x, y), O::times(a, b))
SR_SEMIRING(SrMaxMin, O::lowest(), O::greater(x, y), O::lesser(a, b))
// "Is not zero" as 1 or 0 (NaN is not zero), as the reference's LorLand.
SR_SEMIRING(SrLorLand, O::zero(), (O::nonzero(x) || O::nonzero(y)) ? O::one() : O::zero(),
            (O::nonzero(a) && O::nonzero(b)) ? O::one() : O::zero())

// ---------------------------------------------------------------------------------------------
// Helpers

// Position of column c in cols[lo, hi), or hi where it is not there.
__device__ __forceinline__ u64 sr_find(const u32* cols, u64 lo, u64 hi, u32 c) {
    u64 end = hi;
    while (lo < hi) {
        u64 mid = lo + (hi - lo) / 2;
        if (cols[mid] < c) lo = mid + 1; else hi = mid;
    }
    return (lo < end && cols[lo] == c) ? lo : end;
}

// The lanes of this thread's group of `g` (a power of two up to 32) within its warp.
__device__ __forceinline__ u32 sr_group_mask(u32 g) {
    u32 lane = threadIdx.x & 31u;
    return g >= 32 ? 0xffffffffu : (((1u << g) - 1u) << (lane & ~(g - 1u)));
}

// Adds a thread's count to *total, one atomic per warp.
__device__ __forceinline__ void sr_add_count(u64* total, u64 mine) {
    for (u32 d = 16; d > 0; d >>= 1) mine += __shfl_down_sync(0xffffffffu, mine, d);
    if ((threadIdx.x & 31u) == 0 && mine > 0) atomicAdd(total, mine);
}

// ---------------------------------------------------------------------------------------------
// Structure

// Products of the unmasked product, summed into *total (a thread per row of A).
extern "C" __global__ void sr_products(u64 nrows, const u64* a_off, const u32* a_col,
                                       const u64* b_off, u64* total) {
    u64 mine = 0;
    HS_GRID_STRIDE(i, nrows) {
        for (u64 q = a_off[i]; q < a_off[i + 1]; ++q) {
            u32 k = a_col[q];
            mine += b_off[k + 1] - b_off[k];
        }
    }
    sr_add_count(total, mine);
}

// Marks hit[s] for each position s of the mask row i that some product A(i,k)·B(k,j) lands on:
// a group of g lanes per row, over B's row k for each k. work[0] counts the products landing in
// the mask (the multiply-adds the values will do).
extern "C" __global__ void sr_mask_hits(u64 nrows, u32 g, const u64* a_off, const u32* a_col,
                                        const u64* b_off, const u32* b_col, const u64* m_off,
                                        const u32* m_col, unsigned char* hit, u64* work) {
    u32 sub = threadIdx.x & (g - 1u);
    u64 groups = ((u64)gridDim.x * blockDim.x) / g;
    u64 admitted = 0;
    for (u64 i = ((u64)blockIdx.x * blockDim.x + threadIdx.x) / g; i < nrows; i += groups) {
        u64 m0 = m_off[i], m1 = m_off[i + 1];
        if (m0 == m1) continue;
        for (u64 q = a_off[i]; q < a_off[i + 1]; ++q) {
            u32 k = a_col[q];
            for (u64 r = b_off[k] + sub; r < b_off[k + 1]; r += g) {
                u64 s = sr_find(m_col, m0, m1, b_col[r]);
                if (s < m1) {
                    hit[s] = 1;
                    ++admitted;
                }
            }
        }
    }
    sr_add_count(work, admitted);
}

// Hit positions per row of the mask (a warp per row).
extern "C" __global__ void sr_hits_count(u64 nrows, const u64* m_off, const unsigned char* hit,
                                         u64* counts) {
    u32 lane = threadIdx.x & 31u;
    u64 warps = ((u64)gridDim.x * blockDim.x) >> 5;
    for (u64 i = ((u64)blockIdx.x * blockDim.x + threadIdx.x) >> 5; i < nrows; i += warps) {
        u64 n = 0;
        for (u64 s = m_off[i] + lane; s < m_off[i + 1]; s += 32) n += hit[s];
        for (u32 d = 16; d > 0; d >>= 1) n += __shfl_down_sync(0xffffffffu, n, d);
        if (lane == 0) counts[i] = n;
    }
}

// The hit positions' columns, in order, from C's row offsets (a warp per row).
extern "C" __global__ void sr_hits_compact(u64 nrows, const u64* m_off, const u32* m_col,
                                           const unsigned char* hit, const u64* c_off,
                                           u32* c_col) {
    u32 lane = threadIdx.x & 31u;
    u64 warps = ((u64)gridDim.x * blockDim.x) >> 5;
    for (u64 i = ((u64)blockIdx.x * blockDim.x + threadIdx.x) >> 5; i < nrows; i += warps) {
        u64 out = c_off[i];
        for (u64 base = m_off[i]; base < m_off[i + 1]; base += 32) {
            u64 s = base + lane;
            bool keep = s < m_off[i + 1] && hit[s];
            u32 ballot = __ballot_sync(0xffffffffu, keep);
            if (keep) c_col[out + __popc(ballot & ((1u << lane) - 1u))] = m_col[s];
            out += __popc(ballot);
        }
    }
}

// Entries of each row of C whose column the mask row holds (keep_listed) or does not hold (a
// warp per row): the complemented mask's structure from the unmasked one.
extern "C" __global__ void sr_filter_count(u64 nrows, u32 keep_listed, const u64* c_off,
                                           const u32* c_col, const u64* m_off, const u32* m_col,
                                           u64* counts) {
    u32 lane = threadIdx.x & 31u;
    u64 warps = ((u64)gridDim.x * blockDim.x) >> 5;
    for (u64 i = ((u64)blockIdx.x * blockDim.x + threadIdx.x) >> 5; i < nrows; i += warps) {
        u64 m0 = m_off[i], m1 = m_off[i + 1], n = 0;
        for (u64 e = c_off[i] + lane; e < c_off[i + 1]; e += 32) {
            bool listed = sr_find(m_col, m0, m1, c_col[e]) < m1;
            n += listed == (keep_listed != 0);
        }
        for (u32 d = 16; d > 0; d >>= 1) n += __shfl_down_sync(0xffffffffu, n, d);
        if (lane == 0) counts[i] = n;
    }
}

// The kept entries' columns (sr_filter_count's), in order, from the new row offsets.
extern "C" __global__ void sr_filter_compact(u64 nrows, u32 keep_listed, const u64* c_off,
                                             const u32* c_col, const u64* m_off,
                                             const u32* m_col, const u64* out_off,
                                             u32* out_col) {
    u32 lane = threadIdx.x & 31u;
    u64 warps = ((u64)gridDim.x * blockDim.x) >> 5;
    for (u64 i = ((u64)blockIdx.x * blockDim.x + threadIdx.x) >> 5; i < nrows; i += warps) {
        u64 m0 = m_off[i], m1 = m_off[i + 1], out = out_off[i];
        for (u64 base = c_off[i]; base < c_off[i + 1]; base += 32) {
            u64 e = base + lane;
            bool keep = false;
            u32 c = 0;
            if (e < c_off[i + 1]) {
                c = c_col[e];
                keep = (sr_find(m_col, m0, m1, c) < m1) == (keep_listed != 0);
            }
            u32 ballot = __ballot_sync(0xffffffffu, keep);
            if (keep) out_col[out + __popc(ballot & ((1u << lane) - 1u))] = c;
            out += __popc(ballot);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Values over a known structure: a group of g lanes per row of C. For each entry A(i,k) in
// order, the group's lanes take B's row k (distinct columns, so distinct slots of C's row: no
// two lanes touch one slot) and the group synchronises before the next k, so the slots are
// combined in A's row order without atomics. Products whose column C's row lacks (refused by
// a mask) are not multiplied. `acc` may be `c_val` itself where the accumulator is the stored
// type. work[0] counts the multiply-adds done (when not null).

template <class T, class S>
__device__ __forceinline__ void sr_numeric(u64 nrows, u32 g, const u64* a_off, const u32* a_col,
                                           const T* a_val, const u64* b_off, const u32* b_col,
                                           const T* b_val, const u64* c_off, const u32* c_col,
                                           typename S::acc* acc, T* c_val, u64* work) {
    u32 sub = threadIdx.x & (g - 1u);
    u32 group = sr_group_mask(g);
    u64 groups = ((u64)gridDim.x * blockDim.x) / g;
    u64 done = 0;
    for (u64 i = ((u64)blockIdx.x * blockDim.x + threadIdx.x) / g; i < nrows; i += groups) {
        u64 c0 = c_off[i], c1 = c_off[i + 1];
        if (c0 == c1) continue;
        for (u64 p = c0 + sub; p < c1; p += g) acc[p] = S::zero();
        __syncwarp(group);
        for (u64 q = a_off[i]; q < a_off[i + 1]; ++q) {
            u32 k = a_col[q];
            T a = a_val[q];
            for (u64 r = b_off[k] + sub; r < b_off[k + 1]; r += g) {
                u64 s = sr_find(c_col, c0, c1, b_col[r]);
                if (s < c1) {
                    acc[s] = S::add(acc[s], S::mul(a, b_val[r], k));
                    ++done;
                }
            }
            __syncwarp(group);
        }
        for (u64 p = c0 + sub; p < c1; p += g) c_val[p] = sr_scalar<T>::from_acc(acc[p]);
    }
    if (work) sr_add_count(work, done);
}

#define SR_NUMERIC_PARAMS                                                                          \
    (u64 nrows, u32 g, const u64* a_off, const u32* a_col, const void* a_val, const u64* b_off,  \
     const u32* b_col, const void* b_val, const u64* c_off, const u32* c_col, void* acc,         \
     void* c_val, u64* work)

#define SR_ONE(semiring, sname, type, tname)                                                      \
    extern "C" __global__ void sr_numeric_##sname##_##tname SR_NUMERIC_PARAMS {                   \
        typedef semiring<type> S;                                                                 \
        sr_numeric<type, S>(nrows, g, a_off, a_col, (const type*)a_val, b_off, b_col,            \
                            (const type*)b_val, c_off, c_col, (typename S::acc*)acc,              \
                            (type*)c_val, work);                                                  \
    }

// The semirings that need + and 1 only: defined over every type.
#define SR_ADDITIVE(type, tname)                                                                   \
    SR_ONE(SrPlusTimes, plus_times, type, tname)                                                  \
    SR_ONE(SrPlusPair, plus_pair, type, tname)                                                    \
    SR_ONE(SrPlusFirst, plus_first, type, tname)                                                  \
    SR_ONE(SrPlusSecond, plus_second, type, tname)                                                \
    SR_ONE(SrAnyPair, any_pair, type, tname)
// Those that need an order (not over complex types).
#define SR_ORDERED(type, tname)                                                                    \
    SR_ONE(SrMinPlus, min_plus, type, tname)                                                      \
    SR_ONE(SrMaxPlus, max_plus, type, tname)                                                      \
    SR_ONE(SrMinFirst, min_first, type, tname)                                                    \
    SR_ONE(SrMinSecond, min_second, type, tname)                                                  \
    SR_ONE(SrMaxTimes, max_times, type, tname)                                                    \
    SR_ONE(SrMaxMin, max_min, type, tname)                                                        \
    SR_ONE(SrLorLand, lor_land, type, tname)
// The index as a value: not over f16, bf16 and bool.
#define SR_INDEXED(type, tname) SR_ONE(SrAnySecondI, any_secondi, type, tname)

SR_ADDITIVE(float, f32) SR_ORDERED(float, f32) SR_INDEXED(float, f32)
SR_ADDITIVE(double, f64) SR_ORDERED(double, f64) SR_INDEXED(double, f64)
SR_ADDITIVE(hs_f16, f16) SR_ORDERED(hs_f16, f16)
SR_ADDITIVE(hs_bf16, bf16) SR_ORDERED(hs_bf16, bf16)
SR_ADDITIVE(hs_c32, c32)
SR_ADDITIVE(hs_c64, c64)
SR_ADDITIVE(int, i32) SR_ORDERED(int, i32) SR_INDEXED(int, i32)
SR_ADDITIVE(i64, i64) SR_ORDERED(i64, i64) SR_INDEXED(i64, i64)
SR_ADDITIVE(u32, u32) SR_ORDERED(u32, u32) SR_INDEXED(u32, u32)
SR_ADDITIVE(u64, u64) SR_ORDERED(u64, u64) SR_INDEXED(u64, u64)
SR_ADDITIVE(hs_bool, bool) SR_ORDERED(hs_bool, bool)

// Ones of f32 for n entries: the values the structure's plus-times run multiplies.
extern "C" __global__ void sr_ones_f32(u64 n, float* out) {
    HS_GRID_STRIDE(i, n) out[i] = 1.0f;
}
