// ESC SpGEMM (Polok, Ila, Smrz), in the row-major (CSR) form of the paper's column-major
// algorithm: C = A·B, each entry A[i,k] multiplies row k of B, and the segments of the expansion
// are the rows of C.

// Setup (Alg. 1): the row of every entry of A (A in coordinate form) and the number of products
// it makes, nnz(B row k); the host then turns a_prods into its exclusive prefix sum, whose last
// element is the expansion size.
__kernel void esc_setup(ulong nnz_a, ulong nrows_a, __global const ulong* a_offsets,
                        __global const uint* a_index, __global const ulong* b_offsets,
                        __global uint* a_rows, __global ulong* a_prods) {
    ulong e = get_global_id(0);
    if (e == 0) a_prods[nnz_a] = 0;
    if (e >= nnz_a) return;
    a_rows[e] = (uint)search_binary(a_offsets, nrows_a, e);
    uint k = a_index[e];
    a_prods[e] = b_offsets[k + 1] - b_offsets[k];
}

// After the scan of a_prods: the expansion size into info[0] and the length of the longest row
// of the expansion (a segment of the sort; clamped to UINT_MAX) into the uint at info[1], which
// the host zeroed. Both come back in the first host synchronisation; the longest row tells the
// sort how many global merge passes it needs.
__kernel void esc_sizes(ulong nrows_a, ulong nnz_a, __global const ulong* a_offsets,
                        __global const ulong* a_prods, __global ulong* info) {
    ulong r = get_global_id(0);
    if (r == 0) info[0] = a_prods[nnz_a];
    if (r >= nrows_a) return;
    ulong len = a_prods[a_offsets[r + 1]] - a_prods[a_offsets[r]];
    if (len > 0) atomic_max((volatile __global uint*)(info + 1), (uint)min(len, (ulong)UINT_MAX));
}

// Expansion (Alg. 2 l. 19-38): perfectly balanced, each of `items` work-items computes the same
// number of products (up to one), locating its first one by searching the prefix sum a_prods.
// The key of a product is (row of C << 32 | column of C); what is stored with it, EXPAND_VALUE,
// is the product's value (scalar program) or its operands' indices (block program).
__kernel void esc_expand(ulong exp_size, ulong items, uint interpolate, ulong nnz_a,
                         __global const ulong* a_prods, __global const uint* a_rows,
                         __global const uint* a_index, __global const STORE* a_vals,
                         __global const ulong* b_offsets, __global const uint* b_index,
                         __global const STORE* b_vals, __global ulong* ex_keys,
                         __global PAYLOAD* ex_vals) {
    ulong t = get_global_id(0);
    if (t >= items) return;
    ulong q = exp_size / items, r = exp_size % items;
    ulong begin = t * q + min(t, r);
    ulong count = q + (t < r ? 1 : 0);
    if (count == 0) return;
    ulong ea = interpolate ? search_interpolation(a_prods, nnz_a, begin)
                           : search_binary(a_prods, nnz_a, begin);
    ulong skip = begin - a_prods[ea];
    ulong p = 0;
    for (; p < count; ++ea) {
        uint k = a_index[ea];
        ulong row = (ulong)a_rows[ea] << 32;
        ulong eb = b_offsets[k] + skip;
        ulong end = b_offsets[k + 1];
        for (; eb < end && p < count; ++eb, ++p) {
            ex_keys[begin + p] = row | b_index[eb];
            ex_vals[begin + p] = EXPAND_VALUE(ea, eb);
        }
        skip = 0;
    }
}

// Segmented reduction (Alg. 3 l. 69-74): entry c of C sums the run of equal keys that starts at
// run_start[c], in the accumulator, and is rounded once to storage.
__kernel void esc_reduce(ulong nnz_c, __global const ulong* run_start,
                         __global const ACC* ex_vals, __global STORE* c_vals) {
    ulong c = get_global_id(0);
    if (c >= nnz_c) return;
    ACC acc = ZERO;
    for (ulong p = run_start[c]; p < run_start[c + 1]; ++p) acc = ADD(acc, ex_vals[p]);
    STORE_AT(c_vals, c, acc);
}
