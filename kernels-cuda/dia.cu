// DIA × DIA SpGEMM (Matam et al. §IV.C, Alg. 4) (engineer B).
//
// Diagonal a of A (offset oa) times diagonal b of B (offset ob) lands on diagonal oa + ob of C.
// The host lists C's diagonals (the distinct sums inside C) and, for each, the (a, b) pairs that
// reach it, so each thread owns one row of C, sums every pair of an output diagonal in a register
// and writes each output element once: no atomics, one rounding to storage.
//
// As in Alg. 4, a thread block takes BlockSize consecutive rows and first brings the rows of B
// they touch (row0 + min oa .. row0 + BlockSize - 1 + max oa, every diagonal of B) into shared
// memory. When that tile would not fit (a very wide band of A) the host says so and B is read
// from global memory, where consecutive threads still read consecutive elements of a diagonal.
#include "reduce.cuh"

template <typename S, typename R>
__device__ void dia_spgemm(u64 nrows_a, u64 ncols_a, u32 ndiags_a, const i64* __restrict__ off_a,
                           const S* __restrict__ data_a, u32 ndiags_b,
                           const S* __restrict__ data_b, u64 ncols_c, u32 ndiags_c,
                           const i64* __restrict__ off_c, const u64* __restrict__ pair_start,
                           const u32* __restrict__ pair_a, const u32* __restrict__ pair_b,
                           S* __restrict__ data_c, u32 staged) {
    extern __shared__ unsigned char shared_raw[];
    S* tile = reinterpret_cast<S*>(shared_raw);
    const u64 nrows_b = ncols_a;
    const i64 min_oa = off_a[0];
    const i64 span = off_a[ndiags_a - 1] - min_oa;
    const u64 tile_rows = blockDim.x + (u64)span;
    for (u64 row0 = (u64)blockIdx.x * blockDim.x; row0 < nrows_a; row0 += (u64)gridDim.x * blockDim.x) {
        const i64 first_b_row = (i64)row0 + min_oa;
        if (staged) {
            __syncthreads();  // the previous rows' readers are done with the tile
            for (u64 t = threadIdx.x; t < tile_rows * ndiags_b; t += blockDim.x) {
                const u64 b = t / tile_rows;
                const i64 k = first_b_row + (i64)(t - b * tile_rows);
                tile[t] = (k >= 0 && k < (i64)nrows_b) ? data_b[b * nrows_b + (u64)k] : S{};
            }
            __syncthreads();
        }
        const u64 i = row0 + threadIdx.x;
        if (i >= nrows_a) continue;
        for (u32 s = 0; s < ndiags_c; ++s) {
            typename R::acc acc = R::zero();
            const i64 j = (i64)i + off_c[s];
            if (j >= 0 && j < (i64)ncols_c) {
                for (u64 p = pair_start[s]; p < pair_start[s + 1]; ++p) {
                    const u32 a = pair_a[p];
                    const u32 b = pair_b[p];
                    const i64 k = (i64)i + off_a[a];
                    if (k < 0 || k >= (i64)ncols_a) continue;
                    const S vb = staged ? tile[(u64)b * tile_rows + (u64)(k - first_b_row)]
                                        : data_b[(u64)b * nrows_b + (u64)k];
                    const S va = data_a[(u64)a * nrows_a + i];
                    if (hs_is_zero(va) || hs_is_zero(vb)) continue;  // padding
                    acc = R::add(acc, R::mul(va, vb));
                }
            }
            data_c[(u64)s * nrows_a + i] = R::store(acc);
        }
    }
}

HS_INSTANTIATE(dia_spgemm,
               (u64 nrows_a, u64 ncols_a, u32 ndiags_a, const i64* off_a, const void* data_a,
                u32 ndiags_b, const void* data_b, u64 ncols_c, u32 ndiags_c, const i64* off_c,
                const u64* pair_start, const u32* pair_a, const u32* pair_b, void* data_c,
                u32 staged),
               (dia_spgemm<T, S>(nrows_a, ncols_a, ndiags_a, off_a, (const T*)data_a, ndiags_b,
                                (const T*)data_b, ncols_c, ndiags_c, off_c, pair_start, pair_a,
                                pair_b, (T*)data_c, staged)))
