// Masked SpGEMM, C<M> = A·B (GraphBLAS semantics), over the semiring of the prelude (ADD,
// MUL_AT, ZERO). The mask comes as the CSR structure of its admitting positions (a valued
// mask's zeros already left out on the host), m_offsets and m_index, of C's shape.

// A mask that is not complemented: Gustavson's row-by-row product, one work-item per row i of
// C, whose accumulator is the mask's row itself. acc and hit hold one slot per admitted
// position (the mask's entries), so a product is multiplied only when its column is one the
// mask row admits (found by bisection over the sorted mask row): the refused products are
// skipped before their multiply, and C's entries are the admitted positions some product
// landed on (whatever its value: the pattern never depends on the semiring). B's rows are
// sorted, so the walk over row k of B starts at the mask row's first column and stops past
// its last; a row the mask admits nothing of is skipped whole. counts[i] gets the row's
// entries and counts[nrows] 0, for the exclusive scan that makes C's offsets. What the mask
// saved is counted as the CPU backend counts it (RunControl::add_masked_work): done[i] gets
// the row's multiply-adds (its products whose column the mask row holds) and all[i] the
// products of the row without the mask (the lengths of the rows of B its entries select),
// done[nrows] = all[nrows] = 0, for the scans that total them.
__kernel void masked_rows(ulong nrows, __global const ulong* a_offsets,
                          __global const uint* a_index, __global const STORE* a_vals,
                          __global const ulong* b_offsets, __global const uint* b_index,
                          __global const STORE* b_vals, __global const ulong* m_offsets,
                          __global const uint* m_index, __global ACC* acc, __global uchar* hit,
                          __global ulong* counts, __global ulong* done, __global ulong* all) {
    ulong i = get_global_id(0);
    if (i == 0) {
        counts[nrows] = 0;
        done[nrows] = 0;
        all[nrows] = 0;
    }
    if (i >= nrows) return;
    ulong unmasked = 0;
    for (ulong ea = a_offsets[i]; ea < a_offsets[i + 1]; ++ea) {
        uint k = a_index[ea];
        unmasked += b_offsets[k + 1] - b_offsets[k];
    }
    all[i] = unmasked;
    ulong lo = m_offsets[i], hi = m_offsets[i + 1];
    ulong n = 0, products = 0;
    if (lo < hi) {
        for (ulong p = lo; p < hi; ++p) {
            acc[p] = ZERO;
            hit[p] = 0;
        }
        uint first = m_index[lo], last = m_index[hi - 1];
        for (ulong ea = a_offsets[i]; ea < a_offsets[i + 1]; ++ea) {
            uint k = a_index[ea];
            ACC av = LOAD(a_vals, ea);
            ulong b1 = b_offsets[k + 1];
            for (ulong eb = lower_bound_column(b_index, b_offsets[k], b1, first); eb < b1; ++eb) {
                uint j = b_index[eb];
                if (j > last) break;
                ulong p = planned_column(m_index, lo, hi, j);
                if (p == hi) continue;
                acc[p] = ADD(acc[p], MUL_AT(av, LOAD(b_vals, eb), k));
                hit[p] = 1;
                ++products;
            }
        }
        for (ulong p = lo; p < hi; ++p) n += hit[p];
    }
    counts[i] = n;
    done[i] = products;
}

// C's entries of row i, from the slots of masked_rows that a product landed on, at the row's
// offset (counts scanned), rounded once to storage.
__kernel void masked_compact(ulong nrows, __global const ulong* m_offsets,
                             __global const uint* m_index, __global const ACC* acc,
                             __global const uchar* hit, __global const ulong* c_offsets,
                             __global uint* c_index, __global STORE* c_vals) {
    ulong i = get_global_id(0);
    if (i >= nrows) return;
    ulong out = c_offsets[i];
    for (ulong p = m_offsets[i]; p < m_offsets[i + 1]; ++p) {
        if (!hit[p]) continue;
        c_index[out] = m_index[p];
        STORE_AT(c_vals, out, acc[p]);
        ++out;
    }
}

// A complemented mask admits every position its matrix does not hold: there is no row of
// candidates to accumulate into, so the product is computed whole (ESC) and the entries the
// mask's matrix holds are dropped here, one work-item per row merging C's sorted row with the
// mask's. keep_count counts each row's kept entries (counts[nrows] = 0, for the scan),
// keep_copy copies them to the row's scanned offset.
inline ulong next_kept(__global const uint* c_index, ulong e, ulong e1,
                       __global const uint* m_index, ulong* q, ulong q1) {
    for (; e < e1; ++e) {
        uint j = c_index[e];
        while (*q < q1 && m_index[*q] < j) ++*q;
        if (*q == q1 || m_index[*q] != j) return e;
    }
    return e1;
}

__kernel void keep_count(ulong nrows, __global const ulong* c_offsets,
                         __global const uint* c_index, __global const ulong* m_offsets,
                         __global const uint* m_index, __global ulong* counts) {
    ulong i = get_global_id(0);
    if (i == 0) counts[nrows] = 0;
    if (i >= nrows) return;
    ulong q = m_offsets[i], q1 = m_offsets[i + 1], e1 = c_offsets[i + 1], n = 0;
    for (ulong e = next_kept(c_index, c_offsets[i], e1, m_index, &q, q1); e < e1;
         e = next_kept(c_index, e + 1, e1, m_index, &q, q1))
        ++n;
    counts[i] = n;
}

__kernel void keep_copy(ulong nrows, __global const ulong* c_offsets,
                        __global const uint* c_index, __global const STORE* c_vals,
                        __global const ulong* m_offsets, __global const uint* m_index,
                        __global const ulong* out_offsets, __global uint* out_index,
                        __global STORE* out_vals) {
    ulong i = get_global_id(0);
    if (i >= nrows) return;
    ulong q = m_offsets[i], q1 = m_offsets[i + 1], e1 = c_offsets[i + 1], out = out_offsets[i];
    for (ulong e = next_kept(c_index, c_offsets[i], e1, m_index, &q, q1); e < e1;
         e = next_kept(c_index, e + 1, e1, m_index, &q, q1)) {
        out_index[out] = c_index[e];
        out_vals[out] = c_vals[e];
        ++out;
    }
}
