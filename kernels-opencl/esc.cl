// ESC SpGEMM (Polok, Ila, Smrz), in the row-major (CSR) form of the paper's column-major
// algorithm: C = A·B, each entry A[i,k] multiplies row k of B, and the segments of the expansion
// are the rows of C.

// Setup (Alg. 1): the row of every entry of A (A in coordinate form) and the number of products
// it makes, nnz(B row k); the host then turns a_prods into its exclusive prefix sum, which the
// expansion searches. (The host computes the expansion size itself, without a synchronisation.)
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

// Expansion (Alg. 2 l. 19-38), perfectly balanced: every work-group computes the same number of
// products, EXP_CHUNK (the last one fewer), and locates the entries of A whose products those
// are by searching the prefix sum a_prods (interpolation or binary search, once per end of its
// chunk). Within the group, work-item t makes products t, t + EXP_WG, ..., so neighbouring
// work-items write neighbouring keys and values and read neighbouring entries of B: stores
// coalesce (with a contiguous range per work-item, as in the paper, they did not: 25 ms of the
// power-law product's 131 ms of kernels). Each product finds its entry of A by bisection over
// the group's slice of a_prods, staged in local memory when it fits. The key of a product is
// (row of C << 32 | column of C); what is stored with it, EXPAND_VALUE, is the product's value
// (scalar program; the semiring's MUL_AT, which the inner index k is passed to for
// any_secondi) or its operands' indices (block program).
#define EXP_WG 256
#define EXP_PER 8
#define EXP_CHUNK (EXP_WG * EXP_PER)
#define EXP_LOCAL 1024
__kernel __attribute__((reqd_work_group_size(EXP_WG, 1, 1)))
void esc_expand(ulong exp_size, uint interpolate, ulong nnz_a, __global const ulong* a_prods,
                __global const uint* a_rows, __global const uint* a_index,
                __global const STORE* a_vals, __global const ulong* b_offsets,
                __global const uint* b_index, __global const STORE* b_vals,
                __global ulong* ex_keys, __global PAYLOAD* ex_vals) {
    __local ulong lp[EXP_LOCAL];
    __local ulong bounds[2];
    uint lid = get_local_id(0);
    ulong g0 = (ulong)get_group_id(0) * EXP_CHUNK;
    if (g0 >= exp_size) return; // the whole group leaves, before any barrier
    ulong g1 = min(g0 + (ulong)EXP_CHUNK, exp_size);
    if (lid < 2) {
        ulong x = lid == 0 ? g0 : g1 - 1;
        bounds[lid] = interpolate ? search_interpolation(a_prods, nnz_a, x)
                                  : search_binary(a_prods, nnz_a, x);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    ulong lo = bounds[0];
    ulong cnt = bounds[1] - lo + 1;
    int staged = cnt <= EXP_LOCAL;
    if (staged)
        for (uint i = lid; i < cnt; i += EXP_WG) lp[i] = a_prods[lo + i];
    barrier(CLK_LOCAL_MEM_FENCE);
    // Largest e in [0, cnt) with a_prods[lo + e] <= p; products come in increasing order, so
    // each search starts from the previous answer.
    ulong e = 0;
    for (uint j = 0; j < EXP_PER; ++j) {
        ulong p = g0 + (ulong)j * EXP_WG + lid;
        if (p >= g1) break;
        ulong hi = cnt;
        if (staged) {
            while (hi - e > 1) {
                ulong mid = e + (hi - e) / 2;
                if (lp[mid] <= p) e = mid; else hi = mid;
            }
        } else {
            while (hi - e > 1) {
                ulong mid = e + (hi - e) / 2;
                if (a_prods[lo + mid] <= p) e = mid; else hi = mid;
            }
        }
        ulong ea = lo + e;
        ulong first = staged ? lp[e] : a_prods[ea];
        uint k = a_index[ea];
        ulong eb = b_offsets[k] + (p - first);
        ex_keys[p] = ((ulong)a_rows[ea] << 32) | b_index[eb];
        ex_vals[p] = EXPAND_VALUE(ea, eb, k);
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

// The expansion's longest row for operands already on the device (the host cannot count it
// there): row i of C has a_prods[a_offsets[i+1]] - a_prods[a_offsets[i]] products (a_prods
// scanned). Each work-group reduces SCAN_BLOCK rows to their maximum; max_blocks reduces the
// block maxima further until one is left.
inline void group_max(__local ulong* m, uint lid, ulong v, __global ulong* out) {
    m[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint off = SCAN_WG / 2; off > 0; off >>= 1) {
        if (lid < off) m[lid] = max(m[lid], m[lid + off]);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0) out[get_group_id(0)] = m[0];
}

__kernel __attribute__((reqd_work_group_size(SCAN_WG, 1, 1)))
void row_products_max(ulong nrows, __global const ulong* a_offsets,
                      __global const ulong* a_prods, __global ulong* block_max) {
    __local ulong m[SCAN_WG];
    uint lid = get_local_id(0);
    ulong base = (ulong)get_group_id(0) * SCAN_BLOCK + lid;
    ulong v = 0;
    for (uint k = 0; k < SCAN_ITEMS; ++k) {
        ulong i = base + (ulong)k * SCAN_WG;
        if (i < nrows) v = max(v, a_prods[a_offsets[i + 1]] - a_prods[a_offsets[i]]);
    }
    group_max(m, lid, v, block_max);
}

__kernel __attribute__((reqd_work_group_size(SCAN_WG, 1, 1)))
void max_blocks(__global const ulong* in, ulong n, __global ulong* block_max) {
    __local ulong m[SCAN_WG];
    uint lid = get_local_id(0);
    ulong base = (ulong)get_group_id(0) * SCAN_BLOCK + lid;
    ulong v = 0;
    for (uint k = 0; k < SCAN_ITEMS; ++k) {
        ulong i = base + (ulong)k * SCAN_WG;
        if (i < n) v = max(v, in[i]);
    }
    group_max(m, lid, v, block_max);
}

// The numeric phase of a planned product: C's structure is known, only its values are
// computed. One work-item per row of C walks row i of A and, for each entry A[i,k], row k of B,
// finding each product's column in C's row by bisection and adding it to that entry's
// accumulator (the work-item owns the row, so no atomics). A product whose column is not in the
// planned row sets *flag (operands of another pattern); acc_to_store then rounds to storage.
// Rows with many products serialise on their work-item: plans whose product has such rows
// split them off at plan time (spgemm_row_products) into three tiers by products per row:
// short rows run through spgemm_numeric_rows (one work-item each), medium ones through
// spgemm_numeric_medium (MED_LANES work-items each, several rows per work-group) and long ones
// through spgemm_numeric_segments (a work-group per segment of the row).

inline void numeric_row(ulong i, __global const ulong* a_offsets, __global const uint* a_index,
                        __global const STORE* a_vals, __global const ulong* b_offsets,
                        __global const uint* b_index, __global const STORE* b_vals,
                        __global const ulong* c_offsets, __global const uint* c_index,
                        __global ACC* c_acc, __global uint* flag) {
    ulong lo = c_offsets[i], hi = c_offsets[i + 1];
    for (ulong p = lo; p < hi; ++p) c_acc[p] = ZERO;
    for (ulong ea = a_offsets[i]; ea < a_offsets[i + 1]; ++ea) {
        uint k = a_index[ea];
        ACC av = LOAD(a_vals, ea);
        for (ulong eb = b_offsets[k]; eb < b_offsets[k + 1]; ++eb) {
            ulong c = planned_column(c_index, lo, hi, b_index[eb]);
            if (c == hi) { *flag = 1; continue; }
            c_acc[c] = ADD(c_acc[c], MUL(av, LOAD(b_vals, eb)));
        }
    }
}

// Every row of C.
__kernel void spgemm_numeric(ulong nrows, __global const ulong* a_offsets,
                             __global const uint* a_index, __global const STORE* a_vals,
                             __global const ulong* b_offsets, __global const uint* b_index,
                             __global const STORE* b_vals, __global const ulong* c_offsets,
                             __global const uint* c_index, __global ACC* c_acc,
                             __global uint* flag) {
    ulong i = get_global_id(0);
    if (i >= nrows) return;
    numeric_row(i, a_offsets, a_index, a_vals, b_offsets, b_index, b_vals, c_offsets, c_index,
                c_acc, flag);
}

// The rows rows[0, n) of C, one work-item each.
__kernel void spgemm_numeric_rows(ulong n, __global const uint* rows,
                                  __global const ulong* a_offsets, __global const uint* a_index,
                                  __global const STORE* a_vals, __global const ulong* b_offsets,
                                  __global const uint* b_index, __global const STORE* b_vals,
                                  __global const ulong* c_offsets, __global const uint* c_index,
                                  __global ACC* c_acc, __global uint* flag) {
    ulong t = get_global_id(0);
    if (t >= n) return;
    numeric_row(rows[t], a_offsets, a_index, a_vals, b_offsets, b_index, b_vals, c_offsets,
                c_index, c_acc, flag);
}

// Products of each row of C, sum over row i of A of the lengths of the rows of B it selects
// (saturated to uint): what the plan splits the rows by.
__kernel void spgemm_row_products(ulong nrows, __global const ulong* a_offsets,
                                  __global const uint* a_index, __global const ulong* b_offsets,
                                  __global uint* counts) {
    ulong i = get_global_id(0);
    if (i >= nrows) return;
    ulong n = 0;
    for (ulong ea = a_offsets[i]; ea < a_offsets[i + 1]; ++ea) {
        uint k = a_index[ea];
        n += b_offsets[k + 1] - b_offsets[k];
    }
    counts[i] = (uint)min(n, (ulong)UINT_MAX);
}


// Cutting resident matrices into the parts of a chunked product on the device.
// Rows [r0, r0 + n) as a matrix of their own: offsets rebased to start at 0, and the entries
// from base = offsets[r0] on copied (slice_entries).
__kernel void slice_rows_offsets(ulong n, __global const ulong* offsets, ulong r0,
                                 __global ulong* out) {
    ulong i = get_global_id(0);
    if (i > n) return;
    out[i] = offsets[r0 + i] - offsets[r0];
}

__kernel void slice_entries(ulong n, ulong base, __global const uint* index,
                            __global const STORE* vals, __global uint* out_index,
                            __global STORE* out_vals) {
    ulong e = get_global_id(0);
    if (e >= n) return;
    out_index[e] = index[base + e];
    out_vals[e] = vals[base + e];
}

#if HAS_ATOMICS
// Long rows, in segments: work-group g computes segment segments[g] & 0xffffffff of row
// segments[g] >> 32 of C, the entries [s0, s1) = [lo + seg·NUM_SEG, min(s0 + NUM_SEG, hi)) of
// the planned row. The group stages the segment's columns in local memory with an accumulator
// each, adds every product whose column falls in the segment there, and writes the
// accumulators once: products of a hub column meet in local memory, not in global atomics. The
// segment takes the columns from its first entry's (0 for the first segment) up to the next
// segment's first entry's (unbounded for the last), so every product falls in exactly one
// segment, and one absent from the planned row sets *flag. Rows of B are sorted: a work-item
// finds the segment's first column in row k by bisection and stops at its end. The NUM_WG
// work-items split the products as `lanes` consecutive work-items per entry A[i,k] striding
// over row k of B, the groups of lanes striding over the entries of A's row (lanes: a power of
// two, see below).
#define NUM_WG 256
__kernel __attribute__((reqd_work_group_size(NUM_WG, 1, 1)))
void spgemm_numeric_segments(ulong n, __global const ulong* segments,
                             __global const ulong* a_offsets, __global const uint* a_index,
                             __global const STORE* a_vals, __global const ulong* b_offsets,
                             __global const uint* b_index, __global const STORE* b_vals,
                             __global const ulong* c_offsets, __global const uint* c_index,
                             __global ACC* c_acc, __global uint* flag) {
    __local ACC acc[NUM_SEG];
    __local uint cols[NUM_SEG];
    __local uint products;
    ulong g = get_group_id(0);
    if (g >= n) return; // the whole group leaves, before any barrier
    uint lid = get_local_id(0);
    ulong d = segments[g];
    ulong i = d >> 32;
    ulong lo = c_offsets[i], hi = c_offsets[i + 1];
    ulong s0 = min(lo + (d & 0xffffffffUL) * NUM_SEG, hi);
    ulong s1 = min(s0 + NUM_SEG, hi);
    uint len = (uint)(s1 - s0);
    for (uint t = lid; t < len; t += NUM_WG) {
        cols[t] = c_index[s0 + t];
        acc[t] = ZERO;
    }
    if (lid == 0) products = 0;
    uint first = s0 == lo ? 0 : c_index[s0];
    int last = s1 == hi;
    uint end = last ? 0 : c_index[s1];
    ulong a0 = a_offsets[i], a1 = a_offsets[i + 1];
    ulong na = a1 - a0;
    barrier(CLK_LOCAL_MEM_FENCE);
    // The row's products (saturated), for the mean length of its rows of B.
    ulong mine = 0;
    for (ulong ea = a0 + lid; ea < a1; ea += NUM_WG) {
        uint k = a_index[ea];
        mine += b_offsets[k + 1] - b_offsets[k];
    }
    atomic_add(&products, (uint)min(mine, (ulong)(UINT_MAX / NUM_WG)));
    barrier(CLK_LOCAL_MEM_FENCE);
    ulong mean = products / max(na, (ulong)1);
    // Fewer lanes per entry of A only while the entries outnumber the groups of lanes and the
    // lanes outnumber the mean row of B: a hub row of B then keeps several lanes instead of
    // one work-item walking it alone.
    uint lanes = NUM_WG;
    while (lanes > 1 && (ulong)lanes * na > NUM_WG && lanes > mean) lanes >>= 1;
    uint slot = lid / lanes, lane = lid % lanes, slots = NUM_WG / lanes;
    for (ulong ea = a0 + slot; ea < a1; ea += slots) {
        uint k = a_index[ea];
        ACC av = LOAD(a_vals, ea);
        ulong b0 = b_offsets[k], b1 = b_offsets[k + 1];
        if (first > 0) b0 = lower_bound_column(b_index, b0, b1, first);
        for (ulong eb = b0 + lane; eb < b1; eb += lanes) {
            uint j = b_index[eb];
            if (!last && j >= end) break;
            uint lo_c = 0, hi_c = len;
            while (lo_c < hi_c) {
                uint mid = lo_c + (hi_c - lo_c) / 2;
                if (cols[mid] < j) lo_c = mid + 1; else hi_c = mid;
            }
            if (lo_c == len || cols[lo_c] != j) { *flag = 1; continue; }
            local_add_acc(acc + lo_c, MUL(av, LOAD(b_vals, eb)));
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint t = lid; t < len; t += NUM_WG) c_acc[s0 + t] = acc[t];
}

// Medium rows, several per work-group: group g computes the rows rows[groups[g], groups[g+1])
// of C (at most MED_ROWS of them, whose planned entries together fit MED_SEG), MED_LANES
// consecutive work-items per row. Each row's columns are staged in local memory with an
// accumulator each, after the group's earlier rows; its lanes add every product there and
// write the accumulators once, like spgemm_numeric_segments but without segments (the plan
// sends rows that do not fit to that kernel) and with many rows per group, so a power-law
// product's rows of tens to hundreds of products no longer walk serially on one work-item
// each. A product whose column is not in the planned row sets *flag. Within a row, `lanes`
// consecutive lanes stride over the row of B of one entry A[i,k], the groups of lanes over the
// entries of A's row (lanes chosen from the mean row of B as in spgemm_numeric_segments).
#define MED_ROWS (NUM_WG / MED_LANES)
__kernel __attribute__((reqd_work_group_size(NUM_WG, 1, 1)))
void spgemm_numeric_medium(ulong n, __global const uint* rows, __global const uint* groups,
                           __global const ulong* a_offsets, __global const uint* a_index,
                           __global const STORE* a_vals, __global const ulong* b_offsets,
                           __global const uint* b_index, __global const STORE* b_vals,
                           __global const ulong* c_offsets, __global const uint* c_index,
                           __global ACC* c_acc, __global uint* flag) {
    __local ACC acc[MED_SEG];
    __local uint cols[MED_SEG];
    __local uint products[MED_ROWS];
    ulong g = get_group_id(0);
    if (g >= n) return; // the whole group leaves, before any barrier
    uint lid = get_local_id(0);
    uint r = lid / MED_LANES, lane = lid % MED_LANES;
    uint first = groups[g], count = groups[g + 1] - first;
    // This lane's row (when the group has an r-th) and where its entries start in local
    // memory: after the entries of the group's earlier rows (at most MED_ROWS - 1 of them).
    int has_row = r < count;
    uint at = 0, len = 0;
    ulong i = 0, lo = 0;
    for (uint q = 0; q <= r && q < count; ++q) {
        ulong row = rows[first + q];
        ulong l0 = c_offsets[row], l1 = c_offsets[row + 1];
        if (q < r) {
            at += (uint)min(l1 - l0, (ulong)MED_SEG);
        } else {
            i = row;
            lo = l0;
            len = (uint)min(l1 - l0, (ulong)(MED_SEG + 1));
        }
    }
    // The plan packs the groups from this structure, so the rows always fit; were they not to,
    // the product is refused rather than written past the local arrays.
    if (has_row && (at > MED_SEG || len > MED_SEG - at)) {
        *flag = 1;
        has_row = 0;
    }
    ulong a0 = 0, a1 = 0;
    if (has_row) {
        for (uint t = lane; t < len; t += MED_LANES) {
            cols[at + t] = c_index[lo + t];
            acc[at + t] = ZERO;
        }
        a0 = a_offsets[i];
        a1 = a_offsets[i + 1];
    }
    if (lane == 0) products[r] = 0;
    barrier(CLK_LOCAL_MEM_FENCE);
    // The row's products (saturated), for the mean length of its rows of B.
    ulong mine = 0;
    for (ulong ea = a0 + lane; ea < a1; ea += MED_LANES) {
        uint k = a_index[ea];
        mine += b_offsets[k + 1] - b_offsets[k];
    }
    if (mine > 0) atomic_add(&products[r], (uint)min(mine, (ulong)(UINT_MAX / MED_LANES)));
    barrier(CLK_LOCAL_MEM_FENCE);
    ulong na = a1 - a0;
    ulong mean = products[r] / max(na, (ulong)1);
    // Fewer lanes per entry of A only while the entries outnumber the groups of lanes and the
    // lanes outnumber the mean row of B.
    uint lanes = MED_LANES;
    while (lanes > 1 && (ulong)lanes * na > MED_LANES && lanes > mean) lanes >>= 1;
    uint slot = lane / lanes, sub = lane % lanes, slots = MED_LANES / lanes;
    __local const uint* row_cols = cols + at;
    for (ulong ea = a0 + slot; ea < a1; ea += slots) {
        uint k = a_index[ea];
        ACC av = LOAD(a_vals, ea);
        ulong b1 = b_offsets[k + 1];
        for (ulong eb = b_offsets[k] + sub; eb < b1; eb += lanes) {
            uint j = b_index[eb];
            uint lo_c = 0, hi_c = len;
            while (lo_c < hi_c) {
                uint mid = lo_c + (hi_c - lo_c) / 2;
                if (row_cols[mid] < j) lo_c = mid + 1; else hi_c = mid;
            }
            if (lo_c == len || row_cols[lo_c] != j) { *flag = 1; continue; }
            local_add_acc(acc + at + lo_c, MUL(av, LOAD(b_vals, eb)));
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (has_row)
        for (uint t = lane; t < len; t += MED_LANES) c_acc[lo + t] = acc[at + t];
}
#endif // HAS_ATOMICS

// Columns [c0, c1) of each row: counts[i] entries (counts[nrows] = 0, for the exclusive scan
// that turns the counts into the panel's offsets).
__kernel void panel_count(ulong nrows, __global const ulong* offsets,
                          __global const uint* index, uint c0, uint c1,
                          __global ulong* counts) {
    ulong i = get_global_id(0);
    if (i == 0) counts[nrows] = 0;
    if (i >= nrows) return;
    ulong lo = offsets[i], hi = offsets[i + 1];
    counts[i] = lower_bound_column(index, lo, hi, c1) - lower_bound_column(index, lo, hi, c0);
}

// The panel's entries, columns shifted to start at 0.
__kernel void panel_copy(ulong nrows, __global const ulong* offsets, __global const uint* index,
                         __global const STORE* vals, uint c0, __global const ulong* p_offsets,
                         __global uint* p_index, __global STORE* p_vals) {
    ulong i = get_global_id(0);
    if (i >= nrows) return;
    ulong from = lower_bound_column(index, offsets[i], offsets[i + 1], c0);
    ulong to = p_offsets[i];
    ulong n = p_offsets[i + 1] - to;
    for (ulong k = 0; k < n; ++k) {
        p_index[to + k] = index[from + k] - c0;
        p_vals[to + k] = vals[from + k];
    }
}
