// Exclusive prefix sum of ulong in place, SCAN_WG * SCAN_ITEMS elements per work-group; the host
// scans the block sums recursively and adds them back with scan_add.
#define SCAN_WG 256
#define SCAN_ITEMS 4
#define SCAN_BLOCK (SCAN_WG * SCAN_ITEMS)

// Inclusive scan of one ulong per work-item across the work-group (Hillis-Steele in local
// memory); returns the exclusive prefix of work-item lid and leaves the total in sums[SCAN_WG-1].
inline ulong group_exclusive_scan(__local ulong* sums, uint lid, ulong v) {
    sums[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint off = 1; off < SCAN_WG; off <<= 1) {
        ulong t = lid >= off ? sums[lid - off] : 0;
        barrier(CLK_LOCAL_MEM_FENCE);
        sums[lid] += t;
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    return sums[lid] - v;
}

__kernel __attribute__((reqd_work_group_size(SCAN_WG, 1, 1)))
void scan_blocks(__global ulong* data, ulong n, __global ulong* block_sums) {
    __local ulong sums[SCAN_WG];
    uint lid = get_local_id(0);
    ulong base = (ulong)get_group_id(0) * SCAN_BLOCK + (ulong)lid * SCAN_ITEMS;
    ulong v[SCAN_ITEMS];
    ulong s = 0;
    for (uint k = 0; k < SCAN_ITEMS; ++k) {
        v[k] = base + k < n ? data[base + k] : 0;
        s += v[k];
    }
    ulong run = group_exclusive_scan(sums, lid, s);
    for (uint k = 0; k < SCAN_ITEMS; ++k) {
        if (base + k < n) data[base + k] = run;
        run += v[k];
    }
    if (lid == SCAN_WG - 1) block_sums[get_group_id(0)] = sums[SCAN_WG - 1];
}

__kernel void scan_add(__global ulong* data, ulong n, __global const ulong* block_offsets) {
    ulong i = get_global_id(0);
    if (i >= n) return;
    data[i] += block_offsets[i / SCAN_BLOCK];
}
