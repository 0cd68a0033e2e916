// SpMV and SpMM kernels over the prelude's scalar and semiring.

// Sums part[lid .. lid+lanes) of each group of `lanes` consecutive work-items into part[first].
inline void reduce_lanes(__local ACC* part, uint lid, uint lane, uint lanes) {
    for (uint off = lanes / 2; off > 0; off >>= 1) {
        barrier(CLK_LOCAL_MEM_FENCE);
        if (lane < off) part[lid] = ADD(part[lid], part[lid + off]);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
}

// CSR scalar: one work-item per row.
__kernel void spmv_csr_scalar(ulong nrows, __global const ulong* offsets,
                              __global const uint* index, __global const STORE* vals,
                              __global const STORE* x, __global STORE* y) {
    ulong i = get_global_id(0);
    if (i >= nrows) return;
    ACC acc = ZERO;
    for (ulong p = offsets[i]; p < offsets[i + 1]; ++p)
        acc = ADD(acc, MUL(LOAD(vals, p), LOAD(x, index[p])));
    STORE_AT(y, i, acc);
}

// CSR vector: VEC_LANES work-items per row stride over it, then reduce in local memory.
__kernel __attribute__((reqd_work_group_size(LANE_WG, 1, 1)))
void spmv_csr_vector(ulong nrows, __global const ulong* offsets, __global const uint* index,
                     __global const STORE* vals, __global const STORE* x, __global STORE* y) {
    __local ACC part[LANE_WG];
    uint lid = get_local_id(0), lane = lid % VEC_LANES;
    ulong i = get_global_id(0) / VEC_LANES;
    ACC acc = ZERO;
    if (i < nrows)
        for (ulong p = offsets[i] + lane; p < offsets[i + 1]; p += VEC_LANES)
            acc = ADD(acc, MUL(LOAD(vals, p), LOAD(x, index[p])));
    part[lid] = acc;
    reduce_lanes(part, lid, lane, VEC_LANES);
    if (lane == 0 && i < nrows) STORE_AT(y, i, part[lid]);
}

// ELLR-T (Ortega et al.): ELL_T work-items per row; entry k of row i sits at k*padded + i, so
// the work-items of consecutive rows read consecutive addresses.
__kernel __attribute__((reqd_work_group_size(LANE_WG, 1, 1)))
void spmv_ellr(ulong nrows, ulong padded, __global const uint* lengths,
               __global const uint* index, __global const STORE* vals,
               __global const STORE* x, __global STORE* y) {
    __local ACC part[LANE_WG];
    uint lid = get_local_id(0), lane = lid % ELL_T;
    ulong i = get_global_id(0) / ELL_T;
    ACC acc = ZERO;
    if (i < nrows)
        for (ulong k = lane; k < lengths[i]; k += ELL_T) {
            ulong p = k * padded + i;
            acc = ADD(acc, MUL(LOAD(vals, p), LOAD(x, index[p])));
        }
    part[lid] = acc;
    reduce_lanes(part, lid, lane, ELL_T);
    if (lane == 0 && i < nrows) STORE_AT(y, i, part[lid]);
}

#if HAS_ATOMICS
// CSPR (Neelima & Raghavendra): one work-item per entry, the row and column decoded from the
// linear index, the product added to its row atomically (each component of a complex value on
// its own). y_acc starts at zero; acc_to_store rounds it to storage.
__kernel void spmv_cspr(ulong nnz, ulong ncols, __global const ulong* linear,
                        __global const STORE* vals, __global const STORE* x,
                        __global ACC* y_acc) {
    ulong e = get_global_id(0);
    if (e >= nnz) return;
    ulong l = linear[e];
    ACC v = MUL(LOAD(vals, e), LOAD(x, l % ncols));
    atomic_add_acc(y_acc + l / ncols, v);
}
#endif // HAS_ATOMICS

__kernel void acc_to_store(ulong n, __global const ACC* in, __global STORE* out) {
    ulong i = get_global_id(0);
    if (i < n) STORE_AT(out, i, in[i]);
}

// csrmm (Matam et al.): C = A·B with B dense; work-item (j, i) computes C[i, j], so neighbouring
// work-items read neighbouring columns of B's row. Element (r, c) of a dense matrix sits at
// r*rs + c*cs, which covers both layouts.
__kernel void spmm_csr(ulong nrows, ulong ncols, __global const ulong* offsets,
                       __global const uint* index, __global const STORE* vals,
                       __global const STORE* b, ulong b_rs, ulong b_cs,
                       __global STORE* c, ulong c_rs, ulong c_cs) {
    ulong j = get_global_id(0), i = get_global_id(1);
    if (j >= ncols || i >= nrows) return;
    ACC acc = ZERO;
    for (ulong p = offsets[i]; p < offsets[i + 1]; ++p)
        acc = ADD(acc, MUL(LOAD(vals, p), LOAD(b, index[p] * b_rs + j * b_cs)));
    STORE_AT(c, i * c_rs + j * c_cs, acc);
}

// ELLR-T SpMM (Ortega et al., FastSpMM): ELL_T work-items per row of A, each keeping ELL_LC
// columns of C in registers; dimension 1 walks the column blocks of B and C.
__kernel __attribute__((reqd_work_group_size(LANE_WG, 1, 1)))
void spmm_ellr(ulong nrows, ulong ncols, ulong padded, __global const uint* lengths,
               __global const uint* index, __global const STORE* vals,
               __global const STORE* b, ulong b_rs, ulong b_cs,
               __global STORE* c, ulong c_rs, ulong c_cs) {
    __local ACC part[LANE_WG];
    uint lid = get_local_id(0), lane = lid % ELL_T;
    ulong i = get_global_id(0) / ELL_T;
    ulong j0 = get_global_id(1) * ELL_LC;
    ACC acc[ELL_LC];
    for (uint q = 0; q < ELL_LC; ++q) acc[q] = ZERO;
    if (i < nrows)
        for (ulong k = lane; k < lengths[i]; k += ELL_T) {
            ulong p = k * padded + i;
            ACC a = LOAD(vals, p);
            ulong row = index[p];
            for (uint q = 0; q < ELL_LC; ++q)
                if (j0 + q < ncols) acc[q] = ADD(acc[q], MUL(a, LOAD(b, row * b_rs + (j0 + q) * b_cs)));
        }
    for (uint q = 0; q < ELL_LC; ++q) {
        part[lid] = acc[q];
        reduce_lanes(part, lid, lane, ELL_T);
        if (lane == 0 && i < nrows && j0 + q < ncols) STORE_AT(c, i * c_rs + (j0 + q) * c_cs, part[lid]);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
}
