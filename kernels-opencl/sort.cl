// Segmented sort of the expansion (Polok et al. §Sorting): keys are (segment << 32 | index), and
// segments (output rows) already lie in order, so sorting by the whole key sorts each segment
// without moving anything across segments. Merge based, as the paper prefers for nearly sorted
// input: tiles of SORT_TILE entries are merge-sorted in local memory, then merge passes in global
// memory join the pieces of the segments that cross tile boundaries, leaving every other entry
// where it is.

// Merge-sorts one tile in local memory: log2(SORT_TILE) passes, in each of which every entry
// finds its place in the merged pair of runs by its rank in the partner run (lower rank for the
// left run, upper for the right, so equal keys keep their order).
__kernel __attribute__((reqd_work_group_size(SORT_WG, 1, 1)))
void sort_tiles(__global ulong* keys, __global PAYLOAD* vals, ulong n) {
    __local ulong k0[SORT_TILE], k1[SORT_TILE];
    __local PAYLOAD v0[SORT_TILE], v1[SORT_TILE];
    uint lid = get_local_id(0);
    ulong base = (ulong)get_group_id(0) * SORT_TILE;
    uint len = (uint)min((ulong)SORT_TILE, n - base);
    for (uint i = lid; i < SORT_TILE; i += SORT_WG) {
        if (i < len) {
            k0[i] = keys[base + i];
            v0[i] = vals[base + i];
        } else {
            k0[i] = ULONG_MAX; // padding sorts last
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    __local ulong* sk = k0; __local ulong* dk = k1;
    __local PAYLOAD* sv = v0; __local PAYLOAD* dv = v1;
    for (uint w = 1; w < SORT_TILE; w <<= 1) {
        for (uint i = lid; i < SORT_TILE; i += SORT_WG) {
            uint s = i & ~(2 * w - 1);
            uint mid = s + w;
            ulong key = sk[i];
            uint pos;
            if (i < mid) pos = i + (uint)rank_local(sk, mid, mid + w, key, 1);
            else pos = (i - mid) + s + (uint)rank_local(sk, s, mid, key, 0);
            dk[pos] = key;
            dv[pos] = sv[i];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        __local ulong* tk = sk; sk = dk; dk = tk;
        __local PAYLOAD* tv = sv; sv = dv; dv = tv;
    }
    for (uint i = lid; i < len; i += SORT_WG) {
        keys[base + i] = sk[i];
        vals[base + i] = sv[i];
    }
}

// The segment that crosses the boundary `mid` between the sorted runs [s, mid) and [mid, s+2w),
// or UINT_MAX when none does. Which segment sits at a position never changes (sorting only
// reorders entries within a segment), so this reads the same while the positions are rewritten.
inline uint crossing_segment(__global const ulong* keys, ulong mid) {
    uint left = (uint)(keys[mid - 1] >> 32);
    uint right = (uint)(keys[mid] >> 32);
    return left == right ? right : UINT_MAX;
}

// Whether entry i belongs to the segment crossing the middle of its pair of runs of width w;
// sets the pair's start s, middle mid and end.
inline int in_crossing_segment(__global const ulong* keys, ulong n, ulong w, ulong i,
                               ulong* s, ulong* mid, ulong* end) {
    *s = i / (2 * w) * (2 * w);
    *mid = *s + w;
    if (*mid >= n) return 0;
    *end = min(*s + 2 * w, n);
    uint seg = crossing_segment(keys, *mid);
    return seg != UINT_MAX && (uint)(keys[i] >> 32) == seg;
}

// Entry i of a segment crossing mid goes to its place in the merge of [s, mid) and [mid, end):
// its own offset in its run plus its rank in the partner run (lower rank from the left run,
// upper from the right, so equal keys keep their order).
inline ulong merged_position(__global const ulong* keys, ulong i, ulong key, ulong s, ulong mid,
                             ulong end) {
    if (i < mid) return i + rank_in(keys, mid, end, key, 1);
    return (i - mid) + s + rank_in(keys, s, mid, key, 0);
}

// One global merge pass over pairs of runs of width w, from (keys, vals) into (out_keys,
// out_vals): entries of a segment crossing the middle of their pair move to their merged
// place, every other entry is copied where it is. The host alternates the two buffers, so a
// pass reads and writes each entry once (it used to merge into a scratch copy and copy back).
__kernel void merge_pass(__global const ulong* keys, __global const PAYLOAD* vals,
                         __global ulong* out_keys, __global PAYLOAD* out_vals, ulong n, ulong w) {
    ulong i = get_global_id(0), s, mid, end;
    if (i >= n) return;
    ulong key = keys[i];
    ulong pos = in_crossing_segment(keys, n, w, i, &s, &mid, &end)
                    ? merged_position(keys, i, key, s, mid, end) : i;
    out_keys[pos] = key;
    out_vals[pos] = vals[i];
}

// The final merge pass, once every segment is at most w long: such a segment contains at most
// one multiple of w, so it crosses at most one boundary between sorted runs of width w, and one
// merge across every boundary (not only the middles of pairs) finishes the sort. Entry i looks
// at the boundaries that open and close its run; sets the left run's start s, the boundary mid
// and the right run's end.
inline int in_boundary_segment(__global const ulong* keys, ulong n, ulong w, ulong i, ulong* s,
                               ulong* mid, ulong* end) {
    uint seg = (uint)(keys[i] >> 32);
    ulong open = i / w * w, close = open + w;
    if (open > 0) {
        uint c = crossing_segment(keys, open);
        if (c != UINT_MAX && c == seg) {
            *s = open - w; *mid = open; *end = min(close, n);
            return 1;
        }
    }
    if (close < n) {
        uint c = crossing_segment(keys, close);
        if (c != UINT_MAX && c == seg) {
            *s = open; *mid = close; *end = min(close + w, n);
            return 1;
        }
    }
    return 0;
}

__kernel void merge_boundaries(__global const ulong* keys, __global const PAYLOAD* vals,
                               __global ulong* out_keys, __global PAYLOAD* out_vals, ulong n,
                               ulong w) {
    ulong i = get_global_id(0), s, mid, end;
    if (i >= n) return;
    ulong key = keys[i];
    ulong pos = in_boundary_segment(keys, n, w, i, &s, &mid, &end)
                    ? merged_position(keys, i, key, s, mid, end) : i;
    out_keys[pos] = key;
    out_vals[pos] = vals[i];
}

// Compression, part 1 (Polok Alg. 2 l. 42-49): entries whose key differs from the previous one
// start an element of the product; count them per block of SCAN_BLOCK entries.
inline uint is_head(__global const ulong* keys, ulong i) {
    return i == 0 || keys[i] != keys[i - 1];
}

__kernel __attribute__((reqd_work_group_size(SCAN_WG, 1, 1)))
void count_heads(__global const ulong* keys, ulong n, __global ulong* block_counts) {
    __local ulong sums[SCAN_WG];
    uint lid = get_local_id(0);
    ulong base = (ulong)get_group_id(0) * SCAN_BLOCK + (ulong)lid * SCAN_ITEMS;
    ulong c = 0;
    for (uint k = 0; k < SCAN_ITEMS; ++k)
        if (base + k < n) c += is_head(keys, base + k);
    group_exclusive_scan(sums, lid, c);
    if (lid == SCAN_WG - 1) block_counts[get_group_id(0)] = sums[SCAN_WG - 1];
}

// Compression, part 2 (Alg. 3 l. 53-68): each head gets its index in the product from the block
// offsets and a scan within the block; it records where its run starts (for the reduction), its
// column, and the row offsets of every row that starts at it (runs of empty rows included).
__kernel __attribute__((reqd_work_group_size(SCAN_WG, 1, 1)))
void compress(__global const ulong* keys, ulong n, __global const ulong* block_offsets,
              ulong nnz_c, ulong nrows, __global ulong* run_start, __global uint* c_index,
              __global ulong* c_offsets) {
    __local ulong sums[SCAN_WG];
    uint lid = get_local_id(0);
    ulong base = (ulong)get_group_id(0) * SCAN_BLOCK + (ulong)lid * SCAN_ITEMS;
    uint heads[SCAN_ITEMS];
    ulong c = 0;
    for (uint k = 0; k < SCAN_ITEMS; ++k) {
        heads[k] = base + k < n ? is_head(keys, base + k) : 0;
        c += heads[k];
    }
    ulong idx = block_offsets[get_group_id(0)] + group_exclusive_scan(sums, lid, c);
    for (uint k = 0; k < SCAN_ITEMS; ++k) {
        ulong i = base + k;
        if (i >= n) break;
        ulong key = keys[i];
        uint row = (uint)(key >> 32);
        if (heads[k]) {
            run_start[idx] = i;
            c_index[idx] = (uint)key;
            long first = i == 0 ? 0 : (long)(keys[i - 1] >> 32) + 1;
            for (long r = first; r <= (long)row; ++r) c_offsets[r] = idx;
            ++idx;
        }
        if (i == n - 1) {
            for (ulong r = (ulong)row + 1; r <= nrows; ++r) c_offsets[r] = nnz_c;
            run_start[nnz_c] = n;
        }
    }
}

// Checks the product's arrays where they lie, so that the host need not walk them again: any
// violation of the CSR invariants sets flag[0] (the host zeroed it; every writer stores the same
// value). Work-item i checks offset i (the ends, monotone) and entry i. An entry's row comes from
// the key at the start of its run, but only as a hint: the entry must then lie inside that row's
// offsets, and since monotone offsets give every position exactly one row, the hint is that row.
// Within it, the column must be in bounds and below the next entry's column (sorted, no repeats).
__kernel void check_product(__global const ulong* keys, ulong n, __global const ulong* run_start,
                            ulong nnz_c, ulong nrows, ulong ncols,
                            __global const ulong* c_offsets, __global const uint* c_index,
                            __global uint* flag) {
    ulong i = get_global_id(0);
    uint bad = 0;
    if (i <= nrows) {
        ulong o = c_offsets[i];
        if (i == 0 && o != 0) bad = 1;
        if (i == nrows && o != nnz_c) bad = 1;
        if (i < nrows && o > c_offsets[i + 1]) bad = 1;
    }
    if (i < nnz_c) {
        ulong at = run_start[i];
        if (at >= n) {
            bad = 1;
        } else {
            ulong row = keys[at] >> 32;
            if (row >= nrows) {
                bad = 1;
            } else {
                ulong s = c_offsets[row], e = c_offsets[row + 1];
                uint col = c_index[i];
                if (i < s || i >= e || (ulong)col >= ncols) bad = 1;
                else if (i + 1 < e && i + 1 < nnz_c && c_index[i + 1] <= col) bad = 1;
            }
        }
    }
    if (bad) flag[0] = 1;
}
