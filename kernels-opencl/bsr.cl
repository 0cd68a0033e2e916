// Block SpGEMM (Polok et al., sparse block matrices): the expansion of the block structure is
// built by esc_expand with the operand block indices as payload (EXPAND_VALUE), sorted and
// compressed like the scalar one, and the dense blocks are multiplied only here, during
// compression: work-item (c, e) computes element e of block c of C from every pair of blocks in
// c's run. Blocks are row-major: A's r x k, B's k x s, C's r x s. A zero in a block is fill, not
// an entry: products with it are skipped, so 0 x inf never makes a NaN (the CSR answer).
__kernel void bsr_multiply(ulong nnz_c, uint br, uint bk, uint bs,
                           __global const ulong* run_start, __global const ulong2* ex_pairs,
                           __global const STORE* a_vals, __global const STORE* b_vals,
                           __global STORE* c_vals) {
    ulong g = get_global_id(0);
    ulong per = (ulong)br * bs;
    ulong c = g / per;
    if (c >= nnz_c) return;
    uint e = (uint)(g % per);
    uint row = e / bs, col = e % bs;
    ulong a_block = (ulong)br * bk, b_block = (ulong)bk * bs;
    ACC acc = ZERO;
    for (ulong p = run_start[c]; p < run_start[c + 1]; ++p) {
        ulong2 ab = ex_pairs[p];
        __global const STORE* a = a_vals + ab.x * a_block + (ulong)row * bk;
        __global const STORE* b = b_vals + ab.y * b_block + col;
        for (uint t = 0; t < bk; ++t) {
            ACC x = LOAD(a, t), y = LOAD(b, (ulong)t * bs);
            if (!IS_ZERO(x) && !IS_ZERO(y)) acc = ADD(acc, MUL(x, y));
        }
    }
    STORE_AT(c_vals, g, acc);
}
