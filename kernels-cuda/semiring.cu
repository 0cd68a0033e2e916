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
//   heavy rows           sr_row_pieces: each row's products (and their sum), and the pieces a
//                        heavy row is split into (below); sr_piece_rows: each piece's row
//   values               sr_numeric_<semiring>_<type>: a group of lanes per row of C, over a
//                        structure already known, so that no product needs an atomic: for one
//                        entry A(i,k), the entries of B's row k have distinct columns, hence
//                        distinct slots of C's row; the group's lanes take them, and the group
//                        synchronises before the next k. A product whose column is not in C's
//                        row (refused by the mask) is skipped before it is multiplied.
//
// Heavy rows (the hubs of power-law graphs: rows of far more products than a group of lanes
// gets through while the rest of the GPU finishes) are split into pieces by sr_row_pieces, a
// range of the row's A entries each, and a block per piece finds the row's hits
// (sr_mask_hits_heavy) and combines its products into C with atomics
// (sr_numeric_heavy_<semiring>_<type>, for the types whose accumulator is a 4- or 8-byte word):
// pieces of one row run in different blocks at once, so no order between them exists. The
// block keeps the row's columns (the mask's or C's) in shared memory where they fit, since
// every product of the piece searches them.
//
// "any" keeps the last product in A's row order (the reference keeps its last) on the one-group
// path, and whichever product lands last on the heavy path (any product is a valid answer);
// split rows of f32 and f64 add in no fixed order. min and max ignore NaN (fmin/fmax); integer
// + and × wrap (computed on the unsigned bits: signed overflow is undefined in C++); bool's + is
// or, × is and, min is and, max is or.
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
// accumulator A of a storage type T; the kind of their add (which atomic combines it).

struct sr_monoid_plus {};
struct sr_monoid_min {};
struct sr_monoid_max {};
struct sr_monoid_any {};
// An add with no atomic of its own (logical or): compare-and-swap.
struct sr_monoid_other {};

#define SR_SEMIRING(name, monoid_kind, zero_expr, add_expr, mul_expr)                     \
    template <class T> struct name {                                                      \
        typedef typename sr_scalar<T>::acc acc;                                           \
        typedef sr_ops<acc> O;                                                            \
        typedef monoid_kind monoid;                                                       \
        static __device__ __forceinline__ acc zero() { return zero_expr; }                \
        static __device__ __forceinline__ acc add(acc x, acc y) { return add_expr; }      \
        static __device__ __forceinline__ acc mul(T av, T bv, u32 k) {                    \
            acc a = sr_scalar<T>::to_acc(av), b = sr_scalar<T>::to_acc(bv);               \
            (void)a; (void)b; (void)k;                                                    \
            return mul_expr;                                                              \
        }                                                                                 \
    };

SR_SEMIRING(SrPlusTimes, sr_monoid_plus, O::zero(), O::plus(x, y), O::times(a, b))
SR_SEMIRING(SrPlusPair, sr_monoid_plus, O::zero(), O::plus(x, y), O::one())
SR_SEMIRING(SrPlusFirst, sr_monoid_plus, O::zero(), O::plus(x, y), a)
SR_SEMIRING(SrPlusSecond, sr_monoid_plus, O::zero(), O::plus(x, y), b)
// "any": the last product of the row's order.
SR_SEMIRING(SrAnyPair, sr_monoid_any, O::zero(), ((void)x, y), O::one())
SR_SEMIRING(SrAnySecondI, sr_monoid_any, O::zero(), ((void)x, y), O::index(k))
SR_SEMIRING(SrMinPlus, sr_monoid_min, O::highest(), O::lesser(x, y), O::plus(a, b))
SR_SEMIRING(SrMaxPlus, sr_monoid_max, O::lowest(), O::greater(x, y), O::plus(a, b))
SR_SEMIRING(SrMinFirst, sr_monoid_min, O::highest(), O::lesser(x, y), a)
SR_SEMIRING(SrMinSecond, sr_monoid_min, O::highest(), O::lesser(x, y), b)
SR_SEMIRING(SrMaxTimes, sr_monoid_max, O::lowest(), O::greater(x, y), O::times(a, b))
SR_SEMIRING(SrMaxMin, sr_monoid_max, O::lowest(), O::greater(x, y), O::lesser(a, b))
// "Is not zero" as 1 or 0 (NaN is not zero), as the reference's LorLand.
SR_SEMIRING(SrLorLand, sr_monoid_other, O::zero(),
            (O::nonzero(x) || O::nonzero(y)) ? O::one() : O::zero(),
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

// The products of each row (each entry A(i,k) times B's row k), summed into total[0]; and the
// pieces of each row: none for a row of at most `heavy` products (the one-group kernels take
// it), else one per `piece` products, but no fewer than `piece_entries` entries of A a piece
// (a piece is a range of A's entries, which the groups of its block share: so that few groups
// are left without an entry). The heavy rows' products and entries of A are summed into
// total[1] and total[2] (the host sizes the pieces' groups by their ratio). A group of g lanes
// per row, so that a hub's row is not summed by one thread.
extern "C" __global__ void sr_row_pieces(u64 nrows, u32 g, const u64* a_off, const u32* a_col,
                                         const u64* b_off, u64 heavy, u64 piece,
                                         u64 piece_entries, u64* pieces, u64* total) {
    u32 sub = threadIdx.x & (g - 1u);
    u32 group = sr_group_mask(g);
    u64 groups = ((u64)gridDim.x * blockDim.x) / g;
    u64 mine = 0, heavy_products = 0, heavy_entries = 0;
    for (u64 i = ((u64)blockIdx.x * blockDim.x + threadIdx.x) / g; i < nrows; i += groups) {
        u64 a0 = a_off[i], a1 = a_off[i + 1], n = 0;
        for (u64 q = a0 + sub; q < a1; q += g) {
            u32 k = a_col[q];
            n += b_off[k + 1] - b_off[k];
        }
        for (u32 d = g >> 1; d > 0; d >>= 1) n += __shfl_down_sync(group, n, d, g);
        if (sub == 0) {
            u64 split = n > heavy ? (n - 1) / piece + 1 : 0;
            u64 most = (a1 - a0) / piece_entries;
            most = most > 0 ? most : 1;
            pieces[i] = split < most ? split : most;
            mine += n;
            if (split > 0) {
                heavy_products += n;
                heavy_entries += a1 - a0;
            }
        }
    }
    sr_add_count(total, mine);
    sr_add_count(total + 1, heavy_products);
    sr_add_count(total + 2, heavy_entries);
}

// Whether row i is split into pieces (piece_off: the exclusive scan of sr_row_pieces' pieces,
// or null where no row is).
__device__ __forceinline__ bool sr_is_heavy(const u64* piece_off, u64 i) {
    return piece_off && piece_off[i + 1] > piece_off[i];
}

// The row of each piece (piece_row, npieces entries): a thread per row writes its pieces'
// slots, so that a block finds its piece's row in one load.
extern "C" __global__ void sr_piece_rows(u64 nrows, const u64* piece_off, u64* piece_row) {
    HS_GRID_STRIDE(i, nrows) {
        for (u64 p = piece_off[i]; p < piece_off[i + 1]; ++p) piece_row[p] = i;
    }
}

// A piece of a heavy row: the row, and its range [q0, q1) of A's entries.
struct sr_piece {
    u64 row, q0, q1;
};

// Piece p: its row, and the row's entries of A split evenly between the row's pieces.
__device__ __forceinline__ sr_piece sr_piece_of(const u64* piece_off, const u64* piece_row,
                                                const u64* a_off, u64 p) {
    u64 row = piece_row[p];
    u64 first = piece_off[row], count = piece_off[row + 1] - first, j = p - first;
    u64 a0 = a_off[row], d = a_off[row + 1] - a0;
    return {row, a0 + d * j / count, a0 + d * (j + 1) / count};
}

// The columns of a heavy row's target (the mask row, or C's row): staged into the block's
// shared memory (hs_smem, shared_cols words) where they fit, else read where they are. Every
// product of the piece searches them, and a piece has many more products than they have
// entries (see the host's piece size). Called by the whole block.
__device__ __forceinline__ bool sr_stage_row(const u32* cols, u64 lo, u64 hi, u64 shared_cols) {
    if (hi - lo > shared_cols) return false;
    u32* staged = (u32*)hs_smem;
    for (u64 s = threadIdx.x; s < hi - lo; s += blockDim.x) staged[s] = cols[lo + s];
    __syncthreads();
    return true;
}

// One piece's hits: the block's groups of g lanes take the piece's entries of A in turn, a
// lane per entry of B's row; `cols` are the mask row's `len` columns. (The heavy kernels' g is
// their own: about the heavy rows' mean products per entry of A, up to a warp, so that an
// entry whose row of B is long, a hub's, is swept by a whole warp.)
__device__ __forceinline__ void sr_piece_hits(u32 g, sr_piece piece, const u32* a_col,
                                              const u64* b_off, const u32* b_col,
                                              const u32* cols, u64 len, unsigned char* hit) {
    u32 sub = threadIdx.x & (g - 1u);
    u32 groups = blockDim.x / g;
    for (u64 q = piece.q0 + threadIdx.x / g; q < piece.q1; q += groups) {
        u32 k = a_col[q];
        for (u64 r = b_off[k] + sub; r < b_off[k + 1]; r += g) {
            u64 s = sr_find(cols, 0, len, b_col[r]);
            if (s < len) hit[s] = 1;
        }
    }
}

// Marks hit[s] for each position s of the mask row i that some product A(i,k)·B(k,j) lands on:
// a group of g lanes per row, over B's row k for each k. Heavy rows (piece_off) are left to
// sr_mask_hits_heavy.
extern "C" __global__ void sr_mask_hits(u64 nrows, u32 g, const u64* piece_off, const u64* a_off,
                                        const u32* a_col, const u64* b_off, const u32* b_col,
                                        const u64* m_off, const u32* m_col, unsigned char* hit) {
    u32 sub = threadIdx.x & (g - 1u);
    u64 groups = ((u64)gridDim.x * blockDim.x) / g;
    for (u64 i = ((u64)blockIdx.x * blockDim.x + threadIdx.x) / g; i < nrows; i += groups) {
        u64 m0 = m_off[i], m1 = m_off[i + 1];
        if (m0 == m1 || sr_is_heavy(piece_off, i)) continue;
        for (u64 q = a_off[i]; q < a_off[i + 1]; ++q) {
            u32 k = a_col[q];
            for (u64 r = b_off[k] + sub; r < b_off[k + 1]; r += g) {
                u64 s = sr_find(m_col, m0, m1, b_col[r]);
                if (s < m1) hit[s] = 1;
            }
        }
    }
}

// The heavy rows' hits: a block per piece (npieces of them). A hit is a byte store of 1, so
// the pieces of one row, and the groups of one piece, mark its positions without atomics.
// Needs shared_cols words of dynamic shared memory.
extern "C" __global__ void sr_mask_hits_heavy(u32 g, const u64* piece_off,
                                              const u64* piece_row, u64 npieces,
                                              u64 shared_cols, const u64* a_off,
                                              const u32* a_col, const u64* b_off,
                                              const u32* b_col, const u64* m_off,
                                              const u32* m_col, unsigned char* hit) {
    for (u64 p = blockIdx.x; p < npieces; p += gridDim.x) {
        sr_piece piece = sr_piece_of(piece_off, piece_row, a_off, p);
        u64 m0 = m_off[piece.row], m1 = m_off[piece.row + 1];
        // Nothing to find in an empty mask row (the whole block skips it, as it shares p).
        if (m0 == m1) continue;
        if (sr_stage_row(m_col, m0, m1, shared_cols)) {
            sr_piece_hits(g, piece, a_col, b_off, b_col, (const u32*)hs_smem, m1 - m0, hit + m0);
        } else {
            sr_piece_hits(g, piece, a_col, b_off, b_col, m_col + m0, m1 - m0, hit + m0);
        }
        // The next piece stages its row over this one's.
        __syncthreads();
    }
}

// The kernels below that turn per-entry flags into a structure (count the kept entries of each
// row, then write their columns in order) run a group of g lanes per row, g about the rows'
// mean length (a power of two up to 32): a warp per row would leave most of its lanes idle on
// a graph's rows of one or two entries and launch 32 threads per row.

// This group's bits of a ballot over its lanes, from bit 0 (the group's first lane).
__device__ __forceinline__ u32 sr_group_ballot(u32 g, bool pred) {
    u32 group = sr_group_mask(g);
    return (__ballot_sync(group, pred) & group) >> ((threadIdx.x & 31u) & ~(g - 1u));
}

// Hit positions per row of the mask.
extern "C" __global__ void sr_hits_count(u64 nrows, u32 g, const u64* m_off,
                                         const unsigned char* hit, u64* counts) {
    u32 sub = threadIdx.x & (g - 1u);
    u32 group = sr_group_mask(g);
    u64 groups = ((u64)gridDim.x * blockDim.x) / g;
    for (u64 i = ((u64)blockIdx.x * blockDim.x + threadIdx.x) / g; i < nrows; i += groups) {
        u64 n = 0;
        for (u64 s = m_off[i] + sub; s < m_off[i + 1]; s += g) n += hit[s];
        for (u32 d = g >> 1; d > 0; d >>= 1) n += __shfl_down_sync(group, n, d, g);
        if (sub == 0) counts[i] = n;
    }
}

// The hit positions' columns, in order, from C's row offsets.
extern "C" __global__ void sr_hits_compact(u64 nrows, u32 g, const u64* m_off, const u32* m_col,
                                           const unsigned char* hit, const u64* c_off,
                                           u32* c_col) {
    u32 sub = threadIdx.x & (g - 1u);
    u64 groups = ((u64)gridDim.x * blockDim.x) / g;
    for (u64 i = ((u64)blockIdx.x * blockDim.x + threadIdx.x) / g; i < nrows; i += groups) {
        u64 out = c_off[i], m1 = m_off[i + 1];
        for (u64 base = m_off[i]; base < m1; base += g) {
            u64 s = base + sub;
            bool keep = s < m1 && hit[s];
            u32 kept = sr_group_ballot(g, keep);
            if (keep) c_col[out + __popc(kept & ((1u << sub) - 1u))] = m_col[s];
            out += __popc(kept);
        }
    }
}

// Entries of each row of C whose column the mask row holds (keep_listed) or does not hold:
// the complemented mask's structure from the unmasked one.
extern "C" __global__ void sr_filter_count(u64 nrows, u32 g, u32 keep_listed, const u64* c_off,
                                           const u32* c_col, const u64* m_off, const u32* m_col,
                                           u64* counts) {
    u32 sub = threadIdx.x & (g - 1u);
    u32 group = sr_group_mask(g);
    u64 groups = ((u64)gridDim.x * blockDim.x) / g;
    for (u64 i = ((u64)blockIdx.x * blockDim.x + threadIdx.x) / g; i < nrows; i += groups) {
        u64 m0 = m_off[i], m1 = m_off[i + 1], n = 0;
        for (u64 e = c_off[i] + sub; e < c_off[i + 1]; e += g) {
            bool listed = sr_find(m_col, m0, m1, c_col[e]) < m1;
            n += listed == (keep_listed != 0);
        }
        for (u32 d = g >> 1; d > 0; d >>= 1) n += __shfl_down_sync(group, n, d, g);
        if (sub == 0) counts[i] = n;
    }
}

// The kept entries' columns (sr_filter_count's), in order, from the new row offsets.
extern "C" __global__ void sr_filter_compact(u64 nrows, u32 g, u32 keep_listed,
                                             const u64* c_off, const u32* c_col,
                                             const u64* m_off, const u32* m_col,
                                             const u64* out_off, u32* out_col) {
    u32 sub = threadIdx.x & (g - 1u);
    u64 groups = ((u64)gridDim.x * blockDim.x) / g;
    for (u64 i = ((u64)blockIdx.x * blockDim.x + threadIdx.x) / g; i < nrows; i += groups) {
        u64 m0 = m_off[i], m1 = m_off[i + 1], out = out_off[i], c1 = c_off[i + 1];
        for (u64 base = c_off[i]; base < c1; base += g) {
            u64 e = base + sub;
            bool keep = false;
            u32 c = 0;
            if (e < c1) {
                c = c_col[e];
                keep = (sr_find(m_col, m0, m1, c) < m1) == (keep_listed != 0);
            }
            u32 kept = sr_group_ballot(g, keep);
            if (keep) out_col[out + __popc(kept & ((1u << sub) - 1u))] = c;
            out += __popc(kept);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Values over a known structure: a group of g lanes per row of C. For each entry A(i,k) in
// order, the group's lanes take B's row k (distinct columns, so distinct slots of C's row: no
// two lanes touch one slot) and the group synchronises before the next k, so the slots are
// combined in A's row order without atomics. Products whose column C's row lacks (refused by
// a mask) are not multiplied. `acc` may be `c_val` itself where the accumulator is the stored
// type. work[0] counts the multiply-adds done (when not null). Heavy rows (piece_off, only
// given where the accumulator is the stored type) are set to the semiring's zero here and left
// to sr_numeric_heavy, launched after.

template <class T, class S>
__device__ __forceinline__ void sr_numeric(u64 nrows, u32 g, const u64* piece_off,
                                           const u64* a_off, const u32* a_col, const T* a_val,
                                           const u64* b_off, const u32* b_col, const T* b_val,
                                           const u64* c_off, const u32* c_col,
                                           typename S::acc* acc, T* c_val, u64* work) {
    u32 sub = threadIdx.x & (g - 1u);
    u32 group = sr_group_mask(g);
    u64 groups = ((u64)gridDim.x * blockDim.x) / g;
    u64 done = 0;
    for (u64 i = ((u64)blockIdx.x * blockDim.x + threadIdx.x) / g; i < nrows; i += groups) {
        u64 c0 = c_off[i], c1 = c_off[i + 1];
        if (c0 == c1) continue;
        for (u64 p = c0 + sub; p < c1; p += g) acc[p] = S::zero();
        if (sr_is_heavy(piece_off, i)) continue;
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

// An accumulator's bits as a word of its size, and back (for compare-and-swap).
__device__ __forceinline__ u32 sr_word(float v) { return __float_as_uint(v); }
__device__ __forceinline__ u32 sr_word(int v) { return (u32)v; }
__device__ __forceinline__ u32 sr_word(u32 v) { return v; }
__device__ __forceinline__ u64 sr_word(double v) { return (u64)__double_as_longlong(v); }
__device__ __forceinline__ u64 sr_word(i64 v) { return (u64)v; }
__device__ __forceinline__ u64 sr_word(u64 v) { return v; }
__device__ __forceinline__ void sr_unword(u32 w, float* v) { *v = __uint_as_float(w); }
__device__ __forceinline__ void sr_unword(u32 w, int* v) { *v = (int)w; }
__device__ __forceinline__ void sr_unword(u32 w, u32* v) { *v = w; }
__device__ __forceinline__ void sr_unword(u64 w, double* v) { *v = __longlong_as_double((i64)w); }
__device__ __forceinline__ void sr_unword(u64 w, i64* v) { *v = (i64)w; }
__device__ __forceinline__ void sr_unword(u64 w, u64* v) { *v = w; }

// *p = S::add(*p, v) by compare-and-swap on the accumulator's word. Where the sum leaves *p as
// it was, nothing is written: the add is commutative and associative, so a value v absorbed by
// *p is absorbed by whatever *p becomes later too.
template <class S, class A>
__device__ __forceinline__ void sr_combine_by_cas(A* p, A v) {
    typedef decltype(sr_word(v)) W;
    W* w = (W*)p;
    W seen = *(volatile W*)w;
    for (;;) {
        A current;
        sr_unword(seen, &current);
        W want = sr_word(S::add(current, v));
        if (want == seen) return;
        W before = atomicCAS(w, seen, want);
        if (before == seen) return;
        seen = before;
    }
}

// *p = S::add(*p, v) atomically, by the add's kind (S::monoid) and the accumulator A: the
// hardware's atomics where they exist, compare-and-swap otherwise.
template <class M, class A> struct sr_atomic {
    template <class S> static __device__ __forceinline__ void combine(A* p, A v) {
        sr_combine_by_cas<S>(p, v);
    }
};
// "any": every product is a valid answer, so the last store stands.
template <class A> struct sr_atomic<sr_monoid_any, A> {
    template <class S> static __device__ __forceinline__ void combine(A* p, A v) {
        *(volatile A*)p = v;
    }
};
#define SR_ATOMIC(monoid, type, call)                                                      \
    template <> struct sr_atomic<monoid, type> {                                           \
        template <class S> static __device__ __forceinline__ void combine(type* p, type v) { \
            call;                                                                          \
        }                                                                                  \
    };
// The integers' + wraps in the hardware's atomics as in sr_ops (two's complement).
SR_ATOMIC(sr_monoid_plus, float, atomicAdd(p, v))
SR_ATOMIC(sr_monoid_plus, double, atomicAdd(p, v))
SR_ATOMIC(sr_monoid_plus, int, atomicAdd(p, v))
SR_ATOMIC(sr_monoid_plus, u32, atomicAdd(p, v))
SR_ATOMIC(sr_monoid_plus, i64, atomicAdd((u64*)p, (u64)v))
SR_ATOMIC(sr_monoid_plus, u64, atomicAdd(p, v))
SR_ATOMIC(sr_monoid_min, int, atomicMin(p, v))
SR_ATOMIC(sr_monoid_min, u32, atomicMin(p, v))
SR_ATOMIC(sr_monoid_min, i64, atomicMin(p, v))
SR_ATOMIC(sr_monoid_min, u64, atomicMin(p, v))
SR_ATOMIC(sr_monoid_max, int, atomicMax(p, v))
SR_ATOMIC(sr_monoid_max, u32, atomicMax(p, v))
SR_ATOMIC(sr_monoid_max, i64, atomicMax(p, v))
SR_ATOMIC(sr_monoid_max, u64, atomicMax(p, v))

// One piece's products combined into C's row: as sr_piece_hits, `cols` the row's `len`
// columns, `acc` its values (the stored type).
template <class T, class S>
__device__ __forceinline__ u64 sr_piece_values(u32 g, sr_piece piece, const u32* a_col,
                                               const T* a_val, const u64* b_off,
                                               const u32* b_col, const T* b_val,
                                               const u32* cols, u64 len, T* acc) {
    u32 sub = threadIdx.x & (g - 1u);
    u32 groups = blockDim.x / g;
    u64 done = 0;
    for (u64 q = piece.q0 + threadIdx.x / g; q < piece.q1; q += groups) {
        u32 k = a_col[q];
        T a = a_val[q];
        for (u64 r = b_off[k] + sub; r < b_off[k + 1]; r += g) {
            u64 s = sr_find(cols, 0, len, b_col[r]);
            if (s < len) {
                sr_atomic<typename S::monoid, T>::template combine<S>(acc + s,
                                                                     S::mul(a, b_val[r], k));
                ++done;
            }
        }
    }
    return done;
}

// The heavy rows' values: a block per piece, over C's rows that sr_numeric set to zero. The
// accumulator is the stored type (C's values). Needs shared_cols words of dynamic shared memory.
template <class T, class S>
__device__ __forceinline__ void sr_numeric_heavy(u32 g, const u64* piece_off,
                                                 const u64* piece_row, u64 npieces,
                                                 u64 shared_cols, const u64* a_off,
                                                 const u32* a_col, const T* a_val,
                                                 const u64* b_off, const u32* b_col,
                                                 const T* b_val, const u64* c_off,
                                                 const u32* c_col, T* c_val, u64* work) {
    u64 done = 0;
    for (u64 p = blockIdx.x; p < npieces; p += gridDim.x) {
        sr_piece piece = sr_piece_of(piece_off, piece_row, a_off, p);
        u64 c0 = c_off[piece.row], c1 = c_off[piece.row + 1];
        if (c0 == c1) continue;
        if (sr_stage_row(c_col, c0, c1, shared_cols)) {
            done += sr_piece_values<T, S>(g, piece, a_col, a_val, b_off, b_col, b_val,
                                          (const u32*)hs_smem, c1 - c0, c_val + c0);
        } else {
            done += sr_piece_values<T, S>(g, piece, a_col, a_val, b_off, b_col, b_val,
                                          c_col + c0, c1 - c0, c_val + c0);
        }
        // The next piece stages its row over this one's.
        __syncthreads();
    }
    if (work) sr_add_count(work, done);
}

#define SR_NUMERIC_PARAMS                                                                          \
    (u64 nrows, u32 g, const u64* piece_off, const u64* a_off, const u32* a_col,                \
     const void* a_val, const u64* b_off, const u32* b_col, const void* b_val,                 \
     const u64* c_off, const u32* c_col, void* acc, void* c_val, u64* work)

#define SR_HEAVY_PARAMS                                                                            \
    (u32 g, const u64* piece_off, const u64* piece_row, u64 npieces, u64 shared_cols,           \
     const u64* a_off, const u32* a_col, const void* a_val, const u64* b_off,                   \
     const u32* b_col, const void* b_val, const u64* c_off, const u32* c_col, void* c_val,      \
     u64* work)

#define SR_ONE(semiring, sname, type, tname)                                                      \
    extern "C" __global__ void sr_numeric_##sname##_##tname SR_NUMERIC_PARAMS {                   \
        typedef semiring<type> S;                                                                 \
        sr_numeric<type, S>(nrows, g, piece_off, a_off, a_col, (const type*)a_val, b_off, b_col, \
                            (const type*)b_val, c_off, c_col, (typename S::acc*)acc,              \
                            (type*)c_val, work);                                                  \
    }

// The values' kernels of a type whose accumulator is itself (a 4- or 8-byte word), with the
// heavy rows' kernel beside each.
#define SR_ONE_HEAVY(semiring, sname, type, tname)                                                \
    SR_ONE(semiring, sname, type, tname)                                                          \
    extern "C" __global__ void sr_numeric_heavy_##sname##_##tname SR_HEAVY_PARAMS {               \
        sr_numeric_heavy<type, semiring<type>>(g, piece_off, piece_row, npieces, shared_cols,    \
                                               a_off, a_col, (const type*)a_val, b_off, b_col,    \
                                               (const type*)b_val, c_off, c_col, (type*)c_val,    \
                                               work);                                             \
    }

// The semirings that need + and 1 only: defined over every type.
#define SR_ADDITIVE(one, type, tname)                                                              \
    one(SrPlusTimes, plus_times, type, tname)                                                     \
    one(SrPlusPair, plus_pair, type, tname)                                                       \
    one(SrPlusFirst, plus_first, type, tname)                                                     \
    one(SrPlusSecond, plus_second, type, tname)                                                   \
    one(SrAnyPair, any_pair, type, tname)
// Those that need an order (not over complex types).
#define SR_ORDERED(one, type, tname)                                                               \
    one(SrMinPlus, min_plus, type, tname)                                                         \
    one(SrMaxPlus, max_plus, type, tname)                                                         \
    one(SrMinFirst, min_first, type, tname)                                                       \
    one(SrMinSecond, min_second, type, tname)                                                     \
    one(SrMaxTimes, max_times, type, tname)                                                       \
    one(SrMaxMin, max_min, type, tname)                                                           \
    one(SrLorLand, lor_land, type, tname)
// The index as a value: not over f16, bf16 and bool.
#define SR_INDEXED(one, type, tname) one(SrAnySecondI, any_secondi, type, tname)

// Heavy rows over f16, bf16, complex and bool stay on the one-group path: their accumulators
// have no atomic of their size (f16 and bf16 add in a separate f32, bool in a byte).
SR_ADDITIVE(SR_ONE_HEAVY, float, f32) SR_ORDERED(SR_ONE_HEAVY, float, f32)
SR_INDEXED(SR_ONE_HEAVY, float, f32)
SR_ADDITIVE(SR_ONE_HEAVY, double, f64) SR_ORDERED(SR_ONE_HEAVY, double, f64)
SR_INDEXED(SR_ONE_HEAVY, double, f64)
SR_ADDITIVE(SR_ONE, hs_f16, f16) SR_ORDERED(SR_ONE, hs_f16, f16)
SR_ADDITIVE(SR_ONE, hs_bf16, bf16) SR_ORDERED(SR_ONE, hs_bf16, bf16)
SR_ADDITIVE(SR_ONE, hs_c32, c32)
SR_ADDITIVE(SR_ONE, hs_c64, c64)
SR_ADDITIVE(SR_ONE_HEAVY, int, i32) SR_ORDERED(SR_ONE_HEAVY, int, i32)
SR_INDEXED(SR_ONE_HEAVY, int, i32)
SR_ADDITIVE(SR_ONE_HEAVY, i64, i64) SR_ORDERED(SR_ONE_HEAVY, i64, i64)
SR_INDEXED(SR_ONE_HEAVY, i64, i64)
SR_ADDITIVE(SR_ONE_HEAVY, u32, u32) SR_ORDERED(SR_ONE_HEAVY, u32, u32)
SR_INDEXED(SR_ONE_HEAVY, u32, u32)
SR_ADDITIVE(SR_ONE_HEAVY, u64, u64) SR_ORDERED(SR_ONE_HEAVY, u64, u64)
SR_INDEXED(SR_ONE_HEAVY, u64, u64)
SR_ADDITIVE(SR_ONE, hs_bool, bool) SR_ORDERED(SR_ONE, hs_bool, bool)

// Ones of f32 for n entries: the values the structure's plus-times run multiplies.
extern "C" __global__ void sr_ones_f32(u64 n, float* out) {
    HS_GRID_STRIDE(i, n) out[i] = 1.0f;
}
