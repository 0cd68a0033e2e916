// SpMM kernels, C = A·B with A sparse and B dense (engineer B).
//
// B and C are addressed through strides, element (j, col) of B at j·b_rs + col·b_cs, so one
// kernel serves row-major and column-major operands and column panels of them (FastSpMM streams
// B and C in panels of L_GPU columns). Templates over the storage type S and a semiring R, as in
// spmv.cu.
#include "reduce.cuh"

// Columns of C a lane of csrmm keeps in registers per pass: a half-warp covers 16·4 = 64
// columns of B per pass over the row of A (Matam's TR_B).
#define CSRMM_COLS_PER_LANE 4

// csrmm (Matam et al. §V), B row-major: a half-warp per row of A. The half-warp loads 16 entries
// of its row at a time (one per lane) and passes each to all 16 lanes by shuffles, which is the
// register form of the paper's staging of A in shared memory; lane l owns columns l, l+16, ...
// of the pass, so the reads of a row of B coalesce.
template <typename S, typename R>
__device__ void spmm_csr_rowmajor(u64 nrows, u64 ncols, const u64* __restrict__ offsets,
                                  const u32* __restrict__ cols, const S* __restrict__ vals,
                                  const S* __restrict__ b, u64 ldb, S* __restrict__ c, u64 ldc) {
    typedef typename R::acc Acc;
    const int lane = threadIdx.x % 16;
    const u64 groups = grid_threads() / 16;
    const u64 rounds = (nrows + groups - 1) / groups;
    const u64 pass = 16 * CSRMM_COLS_PER_LANE;
    for (u64 r = 0; r < rounds; ++r) {
        const u64 i = global_thread() / 16 + r * groups;
        const bool live = i < nrows;
        const u64 start = live ? offsets[i] : 0;
        const u64 len = live ? offsets[i + 1] - start : 0;
        // Both half-warps of a warp shuffle together, so they run the longer row's trip count.
        const u64 both = max(len, (u64)__shfl_xor_sync(0xffffffffu, len, 16));
        for (u64 col0 = 0; col0 < ncols; col0 += pass) {
            Acc acc[CSRMM_COLS_PER_LANE];
#pragma unroll
            for (int q = 0; q < CSRMM_COLS_PER_LANE; ++q) acc[q] = R::zero();
            for (u64 batch = 0; batch < both; batch += 16) {
                u32 my_col = 0;
                S my_val = S{};
                if (batch + lane < len) {
                    my_col = cols[start + batch + lane];
                    my_val = vals[start + batch + lane];
                }
                for (int e = 0; e < 16; ++e) {
                    const u32 j = __shfl_sync(0xffffffffu, my_col, e, 16);
                    const S v = shfl_stored(my_val, e, 16);
                    if (batch + e < len) {
                        const S* brow = b + (u64)j * ldb;
#pragma unroll
                        for (int q = 0; q < CSRMM_COLS_PER_LANE; ++q) {
                            const u64 col = col0 + lane + 16 * q;
                            if (col < ncols) acc[q] = R::add(acc[q], R::mul(v, brow[col]));
                        }
                    }
                }
            }
            if (live) {
#pragma unroll
                for (int q = 0; q < CSRMM_COLS_PER_LANE; ++q) {
                    const u64 col = col0 + lane + 16 * q;
                    if (col < ncols) c[i * ldc + col] = R::store(acc[q]);
                }
            }
        }
    }
}

// CSR, B row-major, each warp an equal share of A's entries whatever the rows (as spmv_csr_tiles):
// a warp takes SPMM_TILE consecutive entries, its lanes the columns of a pass of 32. The warp
// loads 32 entries at a time (one per lane) and passes each to every lane by shuffles; each lane
// adds the entry times its column of B's row (the reads of B coalesce) and stores a row of C
// when the row ends. A row that starts or ends outside the tile is added atomically, so C is
// zeroed first. A row of 10^6 entries is shared by thousands of warps instead of one.
#define SPMM_TILE 256

template <typename S, typename R>
__device__ void spmm_csr_tiles(u64 nrows, u64 nnz, u64 ncols, const u64* __restrict__ offsets,
                               const u32* __restrict__ cols, const S* __restrict__ vals,
                               const S* __restrict__ b, u64 b_rs, u64 b_cs,
                               typename R::acc* __restrict__ c, u64 c_rs, u64 c_cs) {
    typedef typename R::acc Acc;
    const u32 lane = threadIdx.x & 31u;
    const u64 tiles = (nnz + SPMM_TILE - 1) / SPMM_TILE;
    for (u64 t = global_thread() / 32; t < tiles; t += grid_threads() / 32) {
        const u64 kb = t * SPMM_TILE;
        const u64 ke = min(kb + SPMM_TILE, nnz);
        const u64 r_first = warp_row_of(offsets, 0, nrows, kb);
        for (u64 col0 = 0; col0 < ncols; col0 += 32) {
            const u64 col = col0 + lane;
            const bool live = col < ncols;
            u64 row = r_first, row_start = offsets[row], row_end = offsets[row + 1];
            bool whole = row_start >= kb;  // the row starts in this tile
            Acc acc = R::zero();
            for (u64 base = kb; base < ke; base += 32) {
                u32 my_col = 0;
                S my_val = S{};
                if (base + lane < ke) {
                    my_col = cols[base + lane];
                    my_val = vals[base + lane];
                }
                const u32 count = (u32)min((u64)32, ke - base);
                for (u32 e = 0; e < count; ++e) {
                    const u64 k = base + e;
                    while (k >= row_end) {  // the same for every lane
                        if (live && row_end > row_start) {
                            Acc* out = c + row * c_rs + col * c_cs;
                            if (whole) *out = acc; else R::atomic_add(out, acc);
                        }
                        ++row;
                        row_start = row_end;
                        row_end = offsets[row + 1];
                        whole = true;
                        acc = R::zero();
                    }
                    const u32 j = __shfl_sync(0xffffffffu, my_col, e);
                    const S v = shfl_stored(my_val, e, 32);
                    if (live) acc = R::add(acc, R::mul(v, b[(u64)j * b_rs + col * b_cs]));
                }
            }
            if (live) {
                // The row of the tile's last entry: stored if it also ends here.
                Acc* out = c + row * c_rs + col * c_cs;
                if (whole && row_end <= ke) *out = acc; else R::atomic_add(out, acc);
            }
        }
    }
}

// csrmm, B column-major: a half-warp per row of A, its lanes over the row's entries (a column of
// B is contiguous, so the lanes' reads of B are gathers either way), four columns per pass, then
// a half-warp reduction per column.
template <typename S, typename R>
__device__ void spmm_csr_colmajor(u64 nrows, u64 ncols, const u64* __restrict__ offsets,
                                  const u32* __restrict__ cols, const S* __restrict__ vals,
                                  const S* __restrict__ b, u64 ldb, S* __restrict__ c, u64 ldc) {
    typedef typename R::acc Acc;
    const int lane = threadIdx.x % 16;
    const u64 groups = grid_threads() / 16;
    const u64 rounds = (nrows + groups - 1) / groups;
    for (u64 r = 0; r < rounds; ++r) {
        const u64 i = global_thread() / 16 + r * groups;
        const bool live = i < nrows;
        const u64 start = live ? offsets[i] : 0;
        const u64 end = live ? offsets[i + 1] : 0;
        for (u64 col0 = 0; col0 < ncols; col0 += CSRMM_COLS_PER_LANE) {
            Acc acc[CSRMM_COLS_PER_LANE];
#pragma unroll
            for (int q = 0; q < CSRMM_COLS_PER_LANE; ++q) acc[q] = R::zero();
            for (u64 k = start + lane; k < end; k += 16) {
                const u64 j = cols[k];
                const S v = vals[k];
#pragma unroll
                for (int q = 0; q < CSRMM_COLS_PER_LANE; ++q) {
                    if (col0 + q < ncols) acc[q] = R::add(acc[q], R::mul(v, b[j + (col0 + q) * ldb]));
                }
            }
#pragma unroll
            for (int q = 0; q < CSRMM_COLS_PER_LANE; ++q) {
                const Acc sum = group_sum<R>(acc[q], 16);
                if (live && lane == 0 && col0 + q < ncols) c[i + (col0 + q) * ldc] = R::store(sum);
            }
        }
    }
}

// ELLR-T SpMM (Ortega et al., Alg. 1, SSFastSpMM): T threads per row of A, each keeping LC
// partial sums, one per column of the pass, so A is read once per LC columns of C instead of once
// per column. The T partial sums of each column meet in a shuffle reduction.
template <typename S, typename R, int LC>
__device__ void spmm_ellr(u64 nrows, u64 padded_rows, u32 threads_per_row,
                          const u32* __restrict__ row_lengths, const u32* __restrict__ cols,
                          const S* __restrict__ vals, u64 ncols, const S* __restrict__ b,
                          u64 b_rs, u64 b_cs, S* __restrict__ c, u64 c_rs, u64 c_cs) {
    typedef typename R::acc Acc;
    const u32 t = threads_per_row;
    const u32 p = threadIdx.x % t;
    const u64 groups = grid_threads() / t;
    const u64 rounds = (nrows + groups - 1) / groups;
    for (u64 r = 0; r < rounds; ++r) {
        const u64 i = global_thread() / t + r * groups;
        const u32 len = i < nrows ? row_lengths[i] : 0;
        for (u64 col0 = 0; col0 < ncols; col0 += LC) {
            Acc sv[LC];
#pragma unroll
            for (int q = 0; q < LC; ++q) sv[q] = R::zero();
            for (u32 k = p; k < len; k += t) {
                const u64 at = (u64)k * padded_rows + i;
                const S v = vals[at];
                const S* brow = b + (u64)cols[at] * b_rs;
#pragma unroll
                for (int q = 0; q < LC; ++q) {
                    if (col0 + q < ncols) sv[q] = R::add(sv[q], R::mul(v, brow[(col0 + q) * b_cs]));
                }
            }
#pragma unroll
            for (int q = 0; q < LC; ++q) {
                const Acc sum = group_sum<R>(sv[q], (int)t);
                if (i < nrows && p == 0 && col0 + q < ncols) {
                    c[i * c_rs + (col0 + q) * c_cs] = R::store(sum);
                }
            }
        }
    }
}

// Entry points, one per scalar type (T the storage type, S the plus-times semiring over it).
HS_INSTANTIATE(spmm_csr_rowmajor,
               (u64 nrows, u64 ncols, const u64* offsets, const u32* cols, const void* vals,
                const void* b, u64 ldb, void* c, u64 ldc),
               (spmm_csr_rowmajor<T, S>(nrows, ncols, offsets, cols, (const T*)vals, (const T*)b,
                                       ldb, (T*)c, ldc)))
HS_INSTANTIATE(spmm_csr_tiles,
               (u64 nrows, u64 nnz, u64 ncols, const u64* offsets, const u32* cols,
                const void* vals, const void* b, u64 b_rs, u64 b_cs, void* c, u64 c_rs,
                u64 c_cs),
               (spmm_csr_tiles<T, S>(nrows, nnz, ncols, offsets, cols, (const T*)vals,
                                     (const T*)b, b_rs, b_cs, (S::acc*)c, c_rs, c_cs)))
HS_INSTANTIATE(spmm_csr_colmajor,
               (u64 nrows, u64 ncols, const u64* offsets, const u32* cols, const void* vals,
                const void* b, u64 ldb, void* c, u64 ldc),
               (spmm_csr_colmajor<T, S>(nrows, ncols, offsets, cols, (const T*)vals, (const T*)b,
                                       ldb, (T*)c, ldc)))

// One entry point per L_c in {1, 2, 4, 8}: the partial sums live in registers, so L_c is a
// compile-time constant.
#define SPMM_ELLR_PARAMS                                                                        \
    (u64 nrows, u64 padded_rows, u32 t, const u32* row_lengths, const u32* cols,               \
     const void* vals, u64 ncols, const void* b, u64 b_rs, u64 b_cs, void* c, u64 c_rs,        \
     u64 c_cs)
#define SPMM_ELLR_CALL(LC)                                                                      \
    (spmm_ellr<T, S, LC>(nrows, padded_rows, t, row_lengths, cols, (const T*)vals, ncols,      \
                         (const T*)b, b_rs, b_cs, (T*)c, c_rs, c_cs))
HS_INSTANTIATE(spmm_ellr_lc1, SPMM_ELLR_PARAMS, (SPMM_ELLR_CALL(1)))
HS_INSTANTIATE(spmm_ellr_lc2, SPMM_ELLR_PARAMS, (SPMM_ELLR_CALL(2)))
HS_INSTANTIATE(spmm_ellr_lc4, SPMM_ELLR_PARAMS, (SPMM_ELLR_CALL(4)))
HS_INSTANTIATE(spmm_ellr_lc8, SPMM_ELLR_PARAMS, (SPMM_ELLR_CALL(8)))
