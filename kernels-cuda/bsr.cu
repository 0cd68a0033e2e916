// BSR × BSR SpGEMM, numeric phase (engineer B).
//
// C's block pattern comes from the symbolic phase (a SpGEMM of the block patterns). Here one
// thread block takes one block row I of C; its threads stride over the elements of the row's
// output blocks. For output block (I, J) and each block (I, K) of A, the thread finds block
// (K, J) of B by binary search in B's sorted block row K and adds one row of the dense r×m block
// A_IK times one column of the m×c block B_KJ. Each output element is summed in a register and
// written once, so no atomics and one rounding to storage.
#include "reduce.cuh"

template <typename S, typename R>
__device__ void bsr_spgemm(u64 block_rows, u32 r, u32 m, u32 c, const u64* __restrict__ a_offsets,
                           const u32* __restrict__ a_cols, const S* __restrict__ a_vals,
                           const u64* __restrict__ b_offsets, const u32* __restrict__ b_cols,
                           const S* __restrict__ b_vals, const u64* __restrict__ c_offsets,
                           const u32* __restrict__ c_cols, S* __restrict__ c_vals) {
    const u64 a_block = (u64)r * m;
    const u64 b_block = (u64)m * c;
    const u64 c_block = (u64)r * c;
    for (u64 bi = blockIdx.x; bi < block_rows; bi += gridDim.x) {
        const u64 c_first = c_offsets[bi];
        const u64 elements = (c_offsets[bi + 1] - c_first) * c_block;
        for (u64 e = threadIdx.x; e < elements; e += blockDim.x) {
            const u64 n = e / c_block;
            const u32 within = (u32)(e - n * c_block);
            const u32 ri = within / c;
            const u32 cj = within - ri * c;
            const u32 bj = c_cols[c_first + n];
            typename R::acc acc = R::zero();
            for (u64 ka = a_offsets[bi]; ka < a_offsets[bi + 1]; ++ka) {
                const u32 bk = a_cols[ka];
                u64 lo = b_offsets[bk];
                u64 hi = b_offsets[bk + 1];
                while (lo < hi) {
                    const u64 mid = lo + (hi - lo) / 2;
                    if (b_cols[mid] < bj) lo = mid + 1; else hi = mid;
                }
                if (lo == b_offsets[bk + 1] || b_cols[lo] != bj) continue;
                const S* arow = a_vals + ka * a_block + (u64)ri * m;
                const S* bcol = b_vals + lo * b_block + cj;
                for (u32 q = 0; q < m; ++q) {
                    const S av = arow[q], bv = bcol[(u64)q * c];
                    if (hs_is_zero(av) || hs_is_zero(bv)) continue;  // padding
                    acc = R::add(acc, R::mul(av, bv));
                }
            }
            c_vals[(c_first + n) * c_block + within] = R::store(acc);
        }
    }
}

HS_INSTANTIATE(bsr_spgemm,
               (u64 block_rows, u32 r, u32 m, u32 c, const u64* a_offsets, const u32* a_cols,
                const void* a_vals, const u64* b_offsets, const u32* b_cols, const void* b_vals,
                const u64* c_offsets, const u32* c_cols, void* c_vals),
               (bsr_spgemm<T, S>(block_rows, r, m, c, a_offsets, a_cols, (const T*)a_vals,
                                b_offsets, b_cols, (const T*)b_vals, c_offsets, c_cols,
                                (T*)c_vals)))
