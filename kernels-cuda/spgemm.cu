// SpGEMM kernels: C = A * B for CSR A and B with 64-bit row offsets and 32-bit column indices.
//
// Every kernel works on a chunk of C: rows listed or in a range, and the columns of B in the
// window [col_lo, col_hi) (the whole of B for a plain product), with output columns relative to
// col_lo. Row offsets and product counts are 64-bit throughout.
//
//   row analysis         spgemm_row_products(_huge)                  products per row
//   Adaptive             spgemm_hash_symbolic, spgemm_hash_numeric_T  hash accumulators per bin
//                        spgemm_warp_symbolic, spgemm_warp_numeric_T  short rows, a warp each
//                        spgemm_threadM_symbolic, spgemm_threadM_numeric_T
//                                                                     tiniest rows, a thread each
//                        spgemm_dense_symbolic, spgemm_dense_numeric_T, spgemm_dense_count,
//                        spgemm_dense_write_T                         long rows, dense, several blocks each
//                        spgemm_range_count, spgemm_range_numeric_T   long rows, by column ranges
//                                                                     dense in shared memory
//   Row-Row (Matam 1)    spgemm_rowrow_symbolic, spgemm_rowrow_numeric_T
//   Column-Row (Matam 2) spgemm_colrow_symbolic, spgemm_colrow_numeric_T
//   ESC (Polok 1-3)      spgemm_esc_expand_T, spgemm_esc_sort_T, spgemm_esc_sort_long_T,
//                        spgemm_esc_count, spgemm_esc_compress_T
#include "common.cuh"

#define HS_EMPTY 0xffffffffu

// ---------------------------------------------------------------------------------------------
// Helpers

// First position in b_col[lo, hi) whose column is >= c.
__device__ __forceinline__ u64 lower_bound_col(const u32* b_col, u64 lo, u64 hi, u32 c) {
    while (lo < hi) {
        u64 mid = lo + (hi - lo) / 2;
        if (b_col[mid] < c) lo = mid + 1; else hi = mid;
    }
    return lo;
}

// Sorts n (a power of two) keys ascending, moving values along. Whole block; ends synchronised.
template <class A>
__device__ void bitonic_sort(u32* keys, A* vals, u32 n) {
    for (u32 k = 2; k <= n; k <<= 1) {
        for (u32 j = k >> 1; j > 0; j >>= 1) {
            for (u32 i = threadIdx.x; i < n; i += blockDim.x) {
                u32 ixj = i ^ j;
                if (ixj > i) {
                    u32 ki = keys[i], kj = keys[ixj];
                    bool ascending = (i & k) == 0;
                    if (ascending ? (ki > kj) : (ki < kj)) {
                        keys[i] = kj; keys[ixj] = ki;
                        A t = vals[i]; vals[i] = vals[ixj]; vals[ixj] = t;
                    }
                }
            }
            __syncthreads();
        }
    }
}

// Exclusive scan of one u32 per thread over the block (blockDim a multiple of 32, <= 1024).
// Returns this thread's prefix; *total gets the block's sum. Ends synchronised.
__device__ u32 block_exclusive_scan(u32 v, u32* total) {
    __shared__ u32 warp_sums[32];
    u32 lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
    u32 x = v;
    for (u32 d = 1; d < 32; d <<= 1) {
        u32 y = __shfl_up_sync(0xffffffffu, x, d);
        if (lane >= d) x += y;
    }
    if (lane == 31) warp_sums[warp] = x;
    __syncthreads();
    if (warp == 0) {
        u32 nw = blockDim.x >> 5;
        u32 s = lane < nw ? warp_sums[lane] : 0u;
        for (u32 d = 1; d < 32; d <<= 1) {
            u32 y = __shfl_up_sync(0xffffffffu, s, d);
            if (lane >= d) s += y;
        }
        if (lane < nw) warp_sums[lane] = s;  // inclusive per warp
    }
    __syncthreads();
    u32 before = warp == 0 ? 0u : warp_sums[warp - 1];
    *total = warp_sums[(blockDim.x >> 5) - 1];
    __syncthreads();
    return before + x - v;
}

// ---------------------------------------------------------------------------------------------
// Row analysis: products (upper bound of C's entries) per row of the chunk. A thread per row,
// except that rows of A longer than RP_LONG entries are summed by their whole warp, so that a
// dense row of A does not hold up its warp's other 31 rows; rows longer than RP_HUGE (a warp
// would walk them for milliseconds: a skewed matrix's dense rows hold 90 % of its columns) are
// listed instead, their products 0, and summed by every block of spgemm_row_products_huge.

#define RP_LONG 32u
#define RP_HUGE 16384u

extern "C" __global__ void spgemm_row_products(u64 nrows, u64 row0, const u64* a_off,
                                               const u32* a_col, const u64* b_off, u64* products,
                                               u32* huge_rows, u32* huge_count) {
    u32 lane = threadIdx.x & 31u;
    u64 warp_id = ((u64)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    u64 warps = ((u64)gridDim.x * blockDim.x) >> 5;
    for (u64 first = warp_id * 32; first < nrows; first += warps * 32) {
        u64 i = first + lane;
        u64 sum = 0;
        bool long_row = false;
        if (i < nrows) {
            u64 r = row0 + i, e0 = a_off[r], e1 = a_off[r + 1];
            long_row = e1 - e0 > RP_LONG && e1 - e0 <= RP_HUGE;
            if (e1 - e0 > RP_HUGE) {
                huge_rows[atomicAdd(huge_count, 1u)] = (u32)i;
            } else if (!long_row) {
                for (u64 e = e0; e < e1; ++e) {
                    u32 k = a_col[e];
                    sum += b_off[k + 1] - b_off[k];
                }
            }
        }
        u32 pending = __ballot_sync(0xffffffffu, long_row);
        while (pending) {
            u32 j = __ffs(pending) - 1;
            pending &= pending - 1;
            u64 r = row0 + first + j, part = 0;
            for (u64 e = a_off[r] + lane; e < a_off[r + 1]; e += 32) {
                u32 k = a_col[e];
                part += b_off[k + 1] - b_off[k];
            }
            for (u32 d = 16; d > 0; d >>= 1) part += __shfl_xor_sync(0xffffffffu, part, d);
            if (lane == j) sum = part;
        }
        if (i < nrows) products[i] = sum;
    }
}

// Rows of A of RP_LONG entries or more on average: `warps_per_row` warps (1, 2, 4 or 8) of the
// block share each row, so that a product of few, long rows (a coarse AMG level's R: a thousand
// rows of 2000 entries) walks each row in a few steps of all its lanes instead of one warp
// walking 32 rows in turn. Rows longer than RP_HUGE are listed as above.
extern "C" __global__ void spgemm_row_products_wide(u64 nrows, u64 row0, const u64* a_off,
                                                    const u32* a_col, const u64* b_off,
                                                    u64* products, u32* huge_rows,
                                                    u32* huge_count, u32 warps_per_row) {
    __shared__ unsigned long long part_sums[32];
    const u32 warp = threadIdx.x >> 5, lane = threadIdx.x & 31u;
    const u32 rows_per_block = (blockDim.x >> 5) / warps_per_row;
    const u32 slot = warp / warps_per_row, sub = warp % warps_per_row;
    const u32 lanes = 32u * warps_per_row, me = sub * 32u + lane;
    // Every thread of the block runs the same rounds (the barriers below).
    for (u64 first = (u64)blockIdx.x * rows_per_block; first < nrows;
         first += (u64)gridDim.x * rows_per_block) {
        const u64 i = first + slot;
        u64 part = 0;
        if (i < nrows) {
            const u64 r = row0 + i, e0 = a_off[r], e1 = a_off[r + 1];
            if (e1 - e0 > RP_HUGE) {
                if (me == 0) huge_rows[atomicAdd(huge_count, 1u)] = (u32)i;
            } else {
                for (u64 e = e0 + me; e < e1; e += lanes) {
                    const u32 k = a_col[e];
                    part += b_off[k + 1] - b_off[k];
                }
            }
        }
        for (u32 d = 16; d > 0; d >>= 1) part += __shfl_xor_sync(0xffffffffu, part, d);
        if (lane == 0) part_sums[warp] = part;
        __syncthreads();
        if (i < nrows && sub == 0 && lane == 0) {
            u64 sum = 0;
            for (u32 w = 0; w < warps_per_row; ++w) sum += part_sums[slot * warps_per_row + w];
            products[i] = sum;
        }
        __syncthreads();
    }
}

// The listed rows' products: each row's entries split evenly over the grid's blocks, a warp's
// sum added to the row's count.
extern "C" __global__ void spgemm_row_products_huge(u64 row0, const u64* a_off, const u32* a_col,
                                                    const u64* b_off, const u32* huge_rows,
                                                    const u32* huge_count, u64* products) {
    u32 count = *huge_count;
    for (u32 j = 0; j < count; ++j) {
        u64 i = huge_rows[j], r = row0 + i;
        u64 e0 = a_off[r], e1 = a_off[r + 1];
        u64 per = (e1 - e0 + gridDim.x - 1) / gridDim.x;
        u64 lo = min(e1, e0 + per * blockIdx.x), hi = min(e1, lo + per);
        u64 part = 0;
        for (u64 e = lo + threadIdx.x; e < hi; e += blockDim.x) {
            u32 k = a_col[e];
            part += b_off[k + 1] - b_off[k];
        }
        for (u32 d = 16; d > 0; d >>= 1) part += __shfl_xor_sync(0xffffffffu, part, d);
        if ((threadIdx.x & 31u) == 0 && part)
            atomicAdd((unsigned long long*)&products[i], (unsigned long long)part);
    }
}

// ---------------------------------------------------------------------------------------------
// Adaptive: one block per row, an open-addressing hash table of `table_size` (a power of two)
// slots in shared memory, or in global memory (`table_offsets` non-null: the row's table starts
// at global_keys + table_offsets[position]) for rows too long for shared memory.

__device__ __forceinline__ u32 hash_slot(u32 col, u32 mask) { return (col * 2654435761u) & mask; }

// Inserts col; returns its slot. *fresh is set when this call created the entry.
__device__ __forceinline__ u32 hash_insert(u32* keys, u32 mask, u32 col, bool* fresh) {
    u32 h = hash_slot(col, mask);
    while (true) {
        u32 old = atomicCAS(&keys[h], HS_EMPTY, col);
        if (old == HS_EMPTY) { *fresh = true; return h; }
        if (old == col) { *fresh = false; return h; }
        h = (h + 1) & mask;
    }
}

// Scans and searches over a group of G lanes (defined with the short-row kernels below).
template <u32 G>
__device__ __forceinline__ u64 group_inclusive_scan64(u64 x, u32 mask);
template <u32 G>
__device__ __forceinline__ u32 group_find_entry(u64 start, u64 p, u32 mask);

// Sets, over the whole warp, the bits of the lanes' columns (`in`: the lane has one, `rel`
// relative to the window) in a bitmap of the window; returns on one lane of each run of
// neighbouring lanes whose columns share a word how many of the run's columns were new (0 on
// the others). A run ORs its bits together first (shuffles) and takes one atomicOr: a row of B
// is sorted, so lanes reading neighbouring entries of it often hit one word, and would
// otherwise queue on it. Runs that share a word without being neighbours stay correct, each
// counting only the bits that the others had not set.
__device__ __forceinline__ u32 bitmap_set_warp(u32* bitmap, bool in, u32 rel) {
    u32 lane = threadIdx.x & 31u;
    u32 word = in ? rel >> 5 : HS_EMPTY;
    u32 bits = in ? 1u << (rel & 31u) : 0u;
    u32 prev = __shfl_up_sync(0xffffffffu, word, 1);
    bool head = lane == 0 || prev != word;
    u32 later_heads = __ballot_sync(0xffffffffu, head) & ~((2u << lane) - 1u);
    u32 run_end = later_heads ? __ffs(later_heads) - 1 : 32u;
    for (u32 d = 1; d < 32; d <<= 1) {
        u32 y = __shfl_down_sync(0xffffffffu, bits, d);
        if (lane + d < run_end) bits |= y;
    }
    if (!head || !bits) return 0;
    return __popc(bits & ~atomicOr(&bitmap[word], bits));
}

// With bitmap_words > 0 (a table in shared memory, a window of at most 32 * bitmap_words
// columns) the row's columns are the bits of a bitmap of the window instead of the keys of a
// hash table: an atomicOr per run of a warp's products instead of probing, and a clear of
// bitmap_words words. The host chooses it where the bitmap is no larger than the table.
extern "C" __global__ void spgemm_hash_symbolic(const u32* rows, u64 nlist, u64 row_base,
                                                u32 table_size, const u64* table_offsets,
                                                u32* global_keys, const u64* a_off,
                                                const u32* a_col, const u64* b_off,
                                                const u32* b_col, u32 col_lo, u32 col_hi,
                                                u64* row_nnz, u32 bitmap_words) {
    unsigned char* smem = hs_smem;
    __shared__ unsigned long long count;
    u32 mask = table_size - 1;
    u32 lane = threadIdx.x & 31u, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    bool bitmap = bitmap_words != 0 && !table_offsets;
    for (u64 pos = blockIdx.x; pos < nlist; pos += gridDim.x) {
        u32* keys = table_offsets ? global_keys + table_offsets[pos] : (u32*)smem;
        u64 r = rows[pos];
        u32 clear = bitmap ? bitmap_words : table_size;
        u32 empty = bitmap ? 0u : HS_EMPTY;
        for (u32 t = threadIdx.x; t < clear; t += blockDim.x) keys[t] = empty;
        if (threadIdx.x == 0) count = 0;
        __syncthreads();
        u64 local = 0;
        // Whole warps call it (every loop below is uniform over the warp): the bitmap's runs
        // are formed over the warp's lanes.
        auto note = [&](u32 c) {
            bool in = c >= col_lo && c < col_hi;
            if (bitmap) {
                local += bitmap_set_warp(keys, in, c - col_lo);
            } else if (in) {
                bool fresh;
                hash_insert(keys, mask, c, &fresh);
                local += fresh;
            }
        };
        // Each warp takes an equal run of the row's entries of A, 32 at a time. Where their
        // B rows hold 16 entries or more on average, the lanes walk each B row in turn; where
        // they are shorter (AMG's interpolation and Galerkin operands: 5 to 30) the batch's
        // products are spread evenly over the lanes (a scan of the lengths, a search per
        // product), which a lane per B entry would leave mostly idle. Lanes holding
        // neighbouring products of one B row still hold neighbouring columns.
        u64 e0 = a_off[r], e1 = a_off[r + 1];
        u64 share = (e1 - e0 + nwarps - 1) / nwarps;
        u64 begin = min(e1, e0 + share * warp), end = min(e1, begin + share);
        for (u64 base = begin; base < end; base += 32) {
            u64 e = base + lane, len = 0, bs = 0;
            if (e < end) {
                u32 k = a_col[e];
                bs = b_off[k];
                len = b_off[k + 1] - bs;
            }
            u64 n = min((u64)32, end - base);
            u64 incl = group_inclusive_scan64<32>(len, 0xffffffffu);
            u64 total = __shfl_sync(0xffffffffu, incl, 31);
            if (total >= 16 * n) {
                for (u32 j = 0; j < n; ++j) {
                    u64 q0 = __shfl_sync(0xffffffffu, bs, j);
                    u64 q1 = q0 + __shfl_sync(0xffffffffu, len, j);
                    for (; q0 < q1; q0 += 32) {
                        u64 q = q0 + lane;
                        note(q < q1 ? b_col[q] : col_hi);
                    }
                }
            } else {
                u64 start = incl - len;
                for (u64 p0 = 0; p0 < total; p0 += 32) {
                    u64 p = p0 + lane;
                    u32 j = group_find_entry<32>(start, p, 0xffffffffu);
                    u64 sj = __shfl_sync(0xffffffffu, start, j);
                    u64 bj = __shfl_sync(0xffffffffu, bs, j);
                    note(p < total ? b_col[bj + (p - sj)] : col_hi);
                }
            }
        }
        if (local) atomicAdd(&count, (unsigned long long)local);
        __syncthreads();
        if (threadIdx.x == 0) row_nnz[r - row_base] = count;
        __syncthreads();
    }
}

// Calls visit(position in B, entry(its entry of A)) for every product of the entries [e0, e1)
// of A, over the block (defined with the short-row kernels below, whose helpers it shares).
template <class E, class F>
__device__ __forceinline__ void block_row_products(u64 e0, u64 e1, const u32* a_col,
                                                   const u64* b_off, E entry, F visit);

template <class T, class S>
__device__ void hash_numeric(const u32* rows, u64 nlist, u64 row_base, u32 table_size,
                             const u64* table_offsets, u32* global_keys, void* global_vals,
                             const u64* a_off, const u32* a_col, const void* a_val_,
                             const u64* b_off, const u32* b_col, const void* b_val_, u32 col_lo,
                             u32 col_hi, const u64* c_off, u64 out_base, u32* out_col,
                             void* out_val_, const u32* known_col, u32 bitmap_words) {
    typedef typename S::acc A;
    unsigned char* smem = hs_smem;
    __shared__ u32 packed;
    // The least and greatest occupied key and the most keys of one bucket (bucketed ranking).
    __shared__ u32 key_lo, key_hi, widest;
    // A bitmap of the window after the table (shared tables only): see below.
    bool ranked = bitmap_words != 0 && !table_offsets && !known_col;
    u32* bitmap = (u32*)(smem + (u64)table_size * (4u + sizeof(A)));
    const T* a_val = (const T*)a_val_;
    const T* b_val = (const T*)b_val_;
    T* out_val = (T*)out_val_;
    u32 mask = table_size - 1;
    if (threadIdx.x == 0) packed = 0;
    for (u64 pos = blockIdx.x; pos < nlist; pos += gridDim.x) {
        u32* keys;
        A* vals;
        if (table_offsets) {
            keys = global_keys + table_offsets[pos];
            vals = (A*)global_vals + table_offsets[pos];
        } else {
            keys = (u32*)smem;
            vals = (A*)(smem + (u64)table_size * 4u);  // table_size >= 32: 16-byte aligned
        }
        u64 r = rows[pos];
        for (u32 t = threadIdx.x; t < table_size; t += blockDim.x) {
            keys[t] = HS_EMPTY;
            vals[t] = S::zero();
        }
        if (ranked)
            for (u32 t = threadIdx.x; t < bitmap_words; t += blockDim.x) bitmap[t] = 0;
        if (threadIdx.x == 0) {
            key_lo = HS_EMPTY;
            key_hi = 0;
            widest = 0;
        }
        __syncthreads();
        block_row_products(
            a_off[r], a_off[r + 1], a_col, b_off, [&](u64 e) { return a_val[e]; },
            [&](u64 q, T av) {
                u32 c = b_col[q];
                if (c < col_lo || c >= col_hi) return;
                bool fresh;
                u32 h = hash_insert(keys, mask, c, &fresh);
                S::atomic_add(&vals[h], S::mul(av, b_val[q]));
            });
        __syncthreads();
        u64 i = r - row_base;
        u64 n = c_off[i + 1] - c_off[i];
        u64 dst = c_off[i] - out_base;
        if (known_col) {
            // A plan's execution: C's columns are known (and sorted), so each value is looked
            // up under its column instead of sorting the table and writing the columns again.
            // A column the table lacks (only if the plan does not match the operands) is 0;
            // the probe ends at an empty slot, which a table at most half full always has.
            for (u64 t = threadIdx.x; t < n; t += blockDim.x) {
                u32 c = known_col[dst + t] + col_lo;
                u32 h = hash_slot(c, mask);
                u32 k = keys[h];
                while (k != c && k != HS_EMPTY) {
                    h = (h + 1) & mask;
                    k = keys[h];
                }
                out_val[dst + t] = S::store(k == c ? vals[h] : S::zero());
            }
        } else if (ranked) {
            // Ranking through a bitmap of the window: a bit per occupied slot's column (slots
            // hold scattered columns, so a warp's atomics rarely meet on a word); the bits
            // before each word (threads take equal runs of words: their counts, a block scan,
            // then each word's prefix); then each occupied slot's entry goes to its rank, the
            // bits before its column. Passes over the window's words and the table, one block
            // scan, instead of a sort of the table. The work per thread follows the slots, not
            // the columns, so columns bunched in a few words do not load a few threads.
            unsigned short* prefix = (unsigned short*)(bitmap + bitmap_words);
            for (u32 t = threadIdx.x; t < table_size; t += blockDim.x) {
                u32 k = keys[t];
                if (k != HS_EMPTY) {
                    u32 rel = k - col_lo;
                    atomicOr(&bitmap[rel >> 5], 1u << (rel & 31u));
                }
            }
            __syncthreads();
            // An odd run length puts the words a warp's threads read at once in distinct banks.
            u32 run = ((bitmap_words + blockDim.x - 1) / blockDim.x) | 1u;
            u32 w0 = min(threadIdx.x * run, bitmap_words), w1 = min(w0 + run, bitmap_words);
            u32 mine = 0;
            for (u32 w = w0; w < w1; ++w) mine += __popc(bitmap[w]);
            u32 total;
            u32 before = block_exclusive_scan(mine, &total);  // ends synchronised
            // A row of a shared table has fewer than 2^16 entries (the host checks).
            for (u32 w = w0; w < w1; ++w) {
                prefix[w] = (unsigned short)before;
                before += __popc(bitmap[w]);
            }
            __syncthreads();
            for (u32 t = threadIdx.x; t < table_size; t += blockDim.x) {
                u32 k = keys[t];
                if (k == HS_EMPTY) continue;
                u32 rel = k - col_lo, w = rel >> 5;
                u64 rank = prefix[w] + __popc(bitmap[w] & ((1u << (rel & 31u)) - 1u));
                if (rank < n) {  // the symbolic phase's count: always, unless it is wrong
                    out_col[dst + rank] = rel;
                    out_val[dst + rank] = S::store(vals[t]);
                }
            }
        } else {
            // The occupied slots compacted to the front, blockDim slots at a time (a slot moves
            // only to a lower index, and every slot of a round is read before any is written),
            // noting the least and greatest key.
            u32 lo = HS_EMPTY, hi = 0;
            for (u32 first = 0; first < table_size; first += blockDim.x) {
                u32 t = first + threadIdx.x;
                u32 k = keys[t];
                A v = vals[t];
                u32 occupied = k != HS_EMPTY, total;
                if (occupied) {
                    lo = min(lo, k);
                    hi = max(hi, k);
                }
                u32 before = block_exclusive_scan(occupied, &total);  // ends synchronised
                u32 base = packed;
                if (occupied) {
                    keys[base + before] = k;
                    vals[base + before] = v;
                }
                __syncthreads();
                if (threadIdx.x == 0) packed = base + total;
                __syncthreads();
            }
            u32 count = packed;
            // Shared tables: each key ranked within a bucket of the keys' span. A table is at
            // most half full, so its upper half is free after the compaction: table_size / 8
            // bucket cursors, then a u16 list of the keys in bucket order. Buckets split the
            // span [lo, hi] evenly (monotonic in the key), so a key's rank is the keys of the
            // buckets before its own plus the smaller keys of its own bucket: a handful on
            // spread keys. Four passes over the keys and a scan of the cursors, where a
            // bitonic sort takes log2(m)(log2(m) + 1) / 2 barrier-separated passes. Keys
            // bunched into a few buckets keep the sort.
            bool bucketed = !table_offsets && count > 32 && count <= table_size / 2;
            u32 nb = table_size / 8;
            u32* cursor = keys + table_size / 2;
            unsigned short* order = (unsigned short*)(cursor + nb);
            u64 scale = 0;
            if (bucketed) {
                if (lo != HS_EMPTY) {
                    atomicMin(&key_lo, lo);
                    atomicMax(&key_hi, hi);
                }
                for (u32 b = threadIdx.x; b < nb; b += blockDim.x) cursor[b] = 0;
                __syncthreads();
                lo = key_lo;
                // bucket(k) = ((k - lo) * scale) >> 32: below nb for every k in [lo, hi].
                scale = ((u64)nb << 32) / ((u64)(key_hi - lo) + 1);
                for (u32 t = threadIdx.x; t < count; t += blockDim.x)
                    atomicAdd(&cursor[(u32)(((u64)(keys[t] - lo) * scale) >> 32)], 1u);
                __syncthreads();
                u32 run = (nb + blockDim.x - 1) / blockDim.x;
                u32 b0 = min(threadIdx.x * run, nb), b1 = min(b0 + run, nb);
                u32 mine = 0, most = 0;
                for (u32 b = b0; b < b1; ++b) {
                    mine += cursor[b];
                    most = max(most, cursor[b]);
                }
                if (most) atomicMax(&widest, most);
                u32 total;
                u32 before = block_exclusive_scan(mine, &total);  // ends synchronised
                for (u32 b = b0; b < b1; ++b) {
                    u32 c = cursor[b];
                    cursor[b] = before;
                    before += c;
                }
                __syncthreads();
                bucketed = widest <= 64;
            }
            if (bucketed) {
                for (u32 t = threadIdx.x; t < count; t += blockDim.x) {
                    u32 b = (u32)(((u64)(keys[t] - lo) * scale) >> 32);
                    order[atomicAdd(&cursor[b], 1u)] = (unsigned short)t;
                }
                __syncthreads();
                // Each cursor now ends its bucket, so the one before begins it.
                for (u32 t = threadIdx.x; t < count; t += blockDim.x) {
                    u32 k = keys[t];
                    u32 b = (u32)(((u64)(k - lo) * scale) >> 32);
                    u32 end = cursor[b];
                    u32 rank = b ? cursor[b - 1] : 0u;
                    for (u32 u = rank; u < end; ++u) rank += keys[order[u]] < k;
                    if (rank < n) {  // the symbolic phase's count: always, unless it is wrong
                        out_col[dst + rank] = k - col_lo;
                        out_val[dst + rank] = S::store(vals[t]);
                    }
                }
            } else {
                // The bitonic sort of the next power of two of the keys only (at most half
                // the slots).
                u32 m = 1;
                while (m < count) m <<= 1;
                for (u32 t = count + threadIdx.x; t < m; t += blockDim.x) keys[t] = HS_EMPTY;
                __syncthreads();
                bitonic_sort(keys, vals, m);  // empty slots (all ones) sort last
                for (u64 t = threadIdx.x; t < n; t += blockDim.x) {
                    out_col[dst + t] = keys[t] - col_lo;
                    out_val[dst + t] = S::store(vals[t]);
                }
            }
            if (threadIdx.x == 0) packed = 0;
        }
        __syncthreads();
    }
}

HS_INSTANTIATE(spgemm_hash_numeric,
               (const u32* rows, u64 nlist, u64 row_base, u32 table_size,
                const u64* table_offsets, u32* global_keys, void* global_vals, const u64* a_off,
                const u32* a_col, const void* a_val, const u64* b_off, const u32* b_col,
                const void* b_val, u32 col_lo, u32 col_hi, const u64* c_off, u64 out_base,
                u32* out_col, void* out_val, const u32* known_col, u32 bitmap_words),
               (hash_numeric<T, S>(rows, nlist, row_base, table_size, table_offsets,
                                   global_keys, global_vals, a_off, a_col, a_val, b_off, b_col,
                                   b_val, col_lo, col_hi, c_off, out_base, out_col, out_val,
                                   known_col, bitmap_words)))

// ---------------------------------------------------------------------------------------------
// Short rows: a group of G lanes per row (a warp), the row's hash table in the group's part of
// shared memory, no block-wide synchronisation. The row's products are spread
// evenly over the group's lanes whatever the lengths of the B rows they come from: G entries
// of A at a time, a scan of their B-row lengths over the group, and each lane finds the entry
// of its product by a binary search over the scan (shuffles). In the numeric phase the
// occupied slots are compacted and each entry's place in the row is its rank among the row's
// keys, so the table is never sorted.

template <u32 G>
__device__ __forceinline__ u32 group_mask() {
    if constexpr (G == 32) {
        return 0xffffffffu;
    } else {
        return ((1u << G) - 1u) << ((threadIdx.x & 31u) & ~(G - 1u));
    }
}

// A ballot's bits of this lane's group, the group's first lane at bit 0.
template <u32 G>
__device__ __forceinline__ u32 group_bits(u32 ballot) {
    if constexpr (G == 32) {
        return ballot;
    } else {
        return (ballot >> ((threadIdx.x & 31u) & ~(G - 1u))) & ((1u << G) - 1u);
    }
}

__device__ __forceinline__ u64 warp_inclusive_scan64(u64 x) {
    u32 lane = threadIdx.x & 31u;
    for (u32 d = 1; d < 32; d <<= 1) {
        u64 y = __shfl_up_sync(0xffffffffu, x, d);
        if (lane >= d) x += y;
    }
    return x;
}

template <u32 G>
__device__ __forceinline__ u64 group_inclusive_scan64(u64 x, u32 mask) {
    u32 g = threadIdx.x & (G - 1u);
    for (u32 d = 1; d < G; d <<= 1) {
        u64 y = __shfl_up_sync(mask, x, d, G);
        if (g >= d) x += y;
    }
    return x;
}

// Largest lane j of the group with start_j <= p (start non-decreasing, start_0 <= p).
template <u32 G>
__device__ __forceinline__ u32 group_find_entry(u64 start, u64 p, u32 mask) {
    u32 j = 0;
    for (u32 step = G / 2; step > 0; step >>= 1) {
        u32 probe = j + step;
        u64 s = __shfl_sync(mask, start, probe < G ? probe : G - 1, G);
        if (probe < G && s <= p) j = probe;
    }
    return j;
}

// Calls visit(position in B, entry(its entry of A)) for every product of the entries [e0, e1)
// of A, over the block: each warp takes an equal run of the entries, 32 at a time. Where
// their B rows hold 16 entries or more on average, the warp's lanes walk each B row in turn;
// where they are shorter (LP's Aᵀ: 7 entries) the batch's products are spread evenly over the
// lanes (a scan of the lengths, a search per product), which a lane per B entry would leave
// mostly idle.
template <class E, class F>
__device__ __forceinline__ void block_row_products(u64 e0, u64 e1, const u32* a_col,
                                                   const u64* b_off, E entry, F visit) {
    u32 lane = threadIdx.x & 31u, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    u64 share = (e1 - e0 + nwarps - 1) / nwarps;
    u64 begin = min(e1, e0 + share * warp), end = min(e1, begin + share);
    for (u64 base = begin; base < end; base += 32) {
        u64 e = base + lane, len = 0, bs = 0;
        if (e < end) {
            u32 k = a_col[e];
            bs = b_off[k];
            len = b_off[k + 1] - bs;
        }
        u64 n = min((u64)32, end - base);
        u64 incl = group_inclusive_scan64<32>(len, 0xffffffffu);
        u64 total = __shfl_sync(0xffffffffu, incl, 31);
        if (total >= 16 * n) {
            for (u32 j = 0; j < n; ++j) {
                u64 bj = __shfl_sync(0xffffffffu, bs, j);
                u64 lj = __shfl_sync(0xffffffffu, len, j);
                auto ej = entry(base + j);  // once per entry of A, not per product
                for (u64 q = bj + lane; q < bj + lj; q += 32) visit(q, ej);
            }
        } else {
            u64 start = incl - len;
            for (u64 p0 = 0; p0 < total; p0 += 32) {
                u64 p = p0 + lane;
                u32 j = group_find_entry<32>(start, p, 0xffffffffu);
                u64 sj = __shfl_sync(0xffffffffu, start, j);
                u64 bj = __shfl_sync(0xffffffffu, bs, j);
                if (p < total) visit(bj + (p - sj), entry(base + j));
            }
        }
    }
}

// Calls visit(entry of A, position in B) for every product of row r, each by one lane of the
// group.
template <u32 G, class F>
__device__ __forceinline__ void group_products(u64 r, const u64* a_off, const u32* a_col,
                                               const u64* b_off, u32 mask, F visit) {
    u32 g = threadIdx.x & (G - 1u);
    u64 e1 = a_off[r + 1];
    for (u64 base = a_off[r]; base < e1; base += G) {
        u64 e = base + g;
        u64 len = 0, bs = 0;
        if (e < e1) {
            u32 k = a_col[e];
            bs = b_off[k];
            len = b_off[k + 1] - bs;
        }
        u64 incl = group_inclusive_scan64<G>(len, mask);
        u64 total = __shfl_sync(mask, incl, G - 1, G);
        u64 start = incl - len;
        for (u64 p0 = 0; p0 < total; p0 += G) {
            u64 p = p0 + g;
            u32 j = group_find_entry<G>(start, p, mask);
            u64 sj = __shfl_sync(mask, start, j, G);
            u64 bj = __shfl_sync(mask, bs, j, G);
            if (p < total) visit(base + j, bj + (p - sj));
        }
    }
}

// Rows of at most 32 entries of A and 33 to 64 products, in the numeric warp kernel: the warp
// holds the row's products in registers, P = 2 a lane (product g + 32 h in lane g, register
// h), sorts them by column (a bitonic network: partners 32 or more apart are in the same lane,
// nearer ones are exchanged by shuffles), adds up each run of one column (a segmented scan)
// and writes each column's sum at its rank. No table to clear, no shared-memory atomics, no
// compaction or ranking by comparisons, which took most of the hash path's instructions on
// such rows (uniform random rows of 64 products: the numeric pass 8.2 -> 7.0 ms on an H200).
// The network's cost is fixed by its size, so rows of fewer products, the symbolic phase and
// rows of 4 products a lane (rows of up to 128 products of banded matrices, which repeat
// columns often) stay faster on the hash path.

#define WS_FULL 0xffffffffu

// A shuffle of an accumulator of any size, as 32-bit words each moved by shuffle_word.
template <class A, class F>
__device__ __forceinline__ A acc_shuffle(A v, F shuffle_word) {
    constexpr int words = sizeof(A) / 4;
    union {
        A value;
        u32 w[words];
    } u;
    u.value = v;
#pragma unroll
    for (int q = 0; q < words; ++q) u.w[q] = shuffle_word(u.w[q]);
    return u.value;
}

// Sorts the warp's 32·P keys ascending (empty keys, all ones, last), values moving along.
// Element lane + 32 h is k[h].
template <u32 P, class A>
__device__ __forceinline__ void warp_sort(u32 (&k)[P], A (&v)[P]) {
    u32 lane = threadIdx.x & 31u;
#pragma unroll
    for (u32 size = 2; size <= 32 * P; size <<= 1) {
#pragma unroll
        for (u32 j = size >> 1; j > 0; j >>= 1) {
#pragma unroll
            for (u32 h = 0; h < P; ++h) {
                bool ascending = ((lane + 32 * h) & size) == 0;
                if (j >= 32) {
                    u32 hp = h ^ (j / 32);
                    if (hp > h && (ascending ? k[h] > k[hp] : k[h] < k[hp])) {
                        u32 t = k[h]; k[h] = k[hp]; k[hp] = t;
                        A w = v[h]; v[h] = v[hp]; v[hp] = w;
                    }
                } else {
                    u32 other = __shfl_xor_sync(WS_FULL, k[h], j);
                    A other_v =
                        acc_shuffle(v[h], [&](u32 w) { return __shfl_xor_sync(WS_FULL, w, j); });
                    // Both lanes of a pair decide from the same two keys, so ties swap on
                    // neither side.
                    bool lower = (lane & j) == 0;
                    u32 lo = lower ? k[h] : other, hi = lower ? other : k[h];
                    if (ascending ? lo > hi : lo < hi) {
                        k[h] = other;
                        v[h] = other_v;
                    }
                }
            }
        }
    }
}

// The products of row r (at most 32 entries of A, whose B rows start at bs and hold len
// products, start the exclusive scan of len over the lanes, total the row's products <= 32 P)
// as keys (columns; empty outside the window or past the last product) and values.
template <u32 P, class T, class S>
__device__ __forceinline__ void warp_row_products(u64 e0, u64 bs, u64 start, u64 total,
                                                  const T* a_val, const u32* b_col,
                                                  const T* b_val, u32 col_lo, u32 col_hi,
                                                  u32 (&k)[P], typename S::acc (&v)[P]) {
    u32 lane = threadIdx.x & 31u;
#pragma unroll
    for (u32 h = 0; h < P; ++h) {
        u64 p = lane + 32 * h;
        u32 j = group_find_entry<32>(start, p, WS_FULL);
        u64 sj = __shfl_sync(WS_FULL, start, j);
        u64 bj = __shfl_sync(WS_FULL, bs, j);
        k[h] = HS_EMPTY;
        v[h] = S::zero();
        if (p < total) {
            u64 q = bj + (p - sj);
            u32 c = b_col[q];
            if (c >= col_lo && c < col_hi) {
                k[h] = c;
                v[h] = S::mul(a_val[e0 + j], b_val[q]);
            }
        }
    }
}

// Whether each sorted element ends a run of one column (and is not empty), as ballots per
// register.
template <u32 P>
__device__ __forceinline__ void warp_run_ends(const u32 (&k)[P], u32 (&ends)[P]) {
    u32 lane = threadIdx.x & 31u;
#pragma unroll
    for (u32 h = 0; h < P; ++h) {
        u32 next = __shfl_down_sync(WS_FULL, k[h], 1);
        // The first key of the next register follows lane 31's (no key after the last).
        u32 following = __shfl_sync(WS_FULL, k[h + 1 < P ? h + 1 : h], 0);
        if (lane == 31) next = h + 1 < P ? following : HS_EMPTY;
        ends[h] = __ballot_sync(WS_FULL, k[h] != HS_EMPTY && k[h] != next);
    }
}

// The row's scan of B-row lengths when it has at most 32 entries of A (else total is
// u64 max): each lane's entry's B row start, and the exclusive scan.
__device__ __forceinline__ u64 warp_short_row_scan(u64 e0, u64 e1, const u32* a_col,
                                                   const u64* b_off, u64* bs, u64* start) {
    if (e1 - e0 > 32) return ~0ull;
    u32 lane = threadIdx.x & 31u;
    u64 e = e0 + lane, len = 0;
    *bs = 0;
    if (e < e1) {
        u32 c = a_col[e];
        *bs = b_off[c];
        len = b_off[c + 1] - *bs;
    }
    u64 incl = group_inclusive_scan64<32>(len, WS_FULL);
    *start = incl - len;
    return __shfl_sync(WS_FULL, incl, 31);
}

template <u32 P, class T, class S>
__device__ __forceinline__ void warp_sorted_write(u64 e0, u64 bs, u64 start, u64 total,
                                                  const T* a_val, const u32* b_col,
                                                  const T* b_val, u32 col_lo, u32 col_hi,
                                                  u32* out_col, T* out_val,
                                                  const u32* known_col) {
    typedef typename S::acc A;
    u32 lane = threadIdx.x & 31u;
    u32 k[P], ends[P];
    A v[P];
    warp_row_products<P, T, S>(e0, bs, start, total, a_val, b_col, b_val, col_lo, col_hi,
                                     k, v);
    warp_sort<P>(k, v);
    // Segmented inclusive scan: a run's last element gets the run's sum. Keys are sorted, so
    // an equal key d places back means the whole stretch between is the same column.
#pragma unroll
    for (u32 h = 0; h < P; ++h) {
#pragma unroll
        for (u32 d = 1; d < 32; d <<= 1) {
            u32 kd = __shfl_up_sync(WS_FULL, k[h], d);
            A vd = acc_shuffle(v[h], [&](u32 w) { return __shfl_up_sync(WS_FULL, w, d); });
            if (lane >= d && kd == k[h]) v[h] = S::add(vd, v[h]);
        }
    }
    // A run may go on from one register into the next: its part there (from lane 0) gets
    // what the previous register's last lane holds, itself complete, registers in order.
#pragma unroll
    for (u32 h = 1; h < P; ++h) {
        u32 kl = __shfl_sync(WS_FULL, k[h - 1], 31);
        A vl = acc_shuffle(v[h - 1], [](u32 w) { return __shfl_sync(WS_FULL, w, 31); });
        if (k[h] == kl) v[h] = S::add(vl, v[h]);
    }
    warp_run_ends<P>(k, ends);
    u32 before = 0;
#pragma unroll
    for (u32 h = 0; h < P; ++h) {
        if ((ends[h] >> lane) & 1u) {
            u32 rank = before + __popc(ends[h] & ((1u << lane) - 1u));
            if (!known_col) out_col[rank] = k[h] - col_lo;
            out_val[rank] = S::store(v[h]);
        }
        before += __popc(ends[h]);
    }
}

template <u32 G>
__device__ void group_symbolic(const u32* rows, u64 nlist, u64 row_base, u32 table_size,
                               const u64* a_off, const u32* a_col, const u64* b_off,
                               const u32* b_col, u32 col_lo, u32 col_hi, u64* row_nnz) {
    u32 g = threadIdx.x & (G - 1u), group = threadIdx.x / G, groups = blockDim.x / G;
    u32 mask = group_mask<G>();
    u32* keys = (u32*)hs_smem + (u64)group * table_size;
    u32 hmask = table_size - 1;
    for (u64 pos = (u64)blockIdx.x * groups + group; pos < nlist; pos += (u64)gridDim.x * groups) {
        u64 r = rows[pos];
        for (u32 t = g; t < table_size; t += G) keys[t] = HS_EMPTY;
        __syncwarp(mask);
        u32 fresh_count = 0;
        group_products<G>(r, a_off, a_col, b_off, mask, [&](u64, u64 q) {
            u32 c = b_col[q];
            if (c < col_lo || c >= col_hi) return;
            bool fresh;
            hash_insert(keys, hmask, c, &fresh);
            fresh_count += fresh;
        });
        for (u32 d = G / 2; d > 0; d >>= 1) fresh_count += __shfl_xor_sync(mask, fresh_count, d, G);
        if (g == 0) row_nnz[r - row_base] = fresh_count;
        __syncwarp(mask);
    }
}

#define WARP_SYMBOLIC_PARAMS                                                                 \
    (const u32* rows, u64 nlist, u64 row_base, u32 table_size, const u64* a_off,             \
     const u32* a_col, const u64* b_off, const u32* b_col, u32 col_lo, u32 col_hi,           \
     u64* row_nnz)
extern "C" __global__ void spgemm_warp_symbolic WARP_SYMBOLIC_PARAMS {
    group_symbolic<32>(rows, nlist, row_base, table_size, a_off, a_col, b_off, b_col, col_lo,
                       col_hi, row_nnz);
}

template <u32 G, class T, class S>
__device__ void group_numeric(const u32* rows, u64 nlist, u64 row_base, u32 table_size,
                              const u64* a_off, const u32* a_col, const void* a_val_,
                              const u64* b_off, const u32* b_col, const void* b_val_, u32 col_lo,
                              u32 col_hi, const u64* c_off, u64 out_base, u32* out_col,
                              void* out_val_, const u32* known_col) {
    typedef typename S::acc A;
    const T* a_val = (const T*)a_val_;
    const T* b_val = (const T*)b_val_;
    T* out_val = (T*)out_val_;
    u32 g = threadIdx.x & (G - 1u), group = threadIdx.x / G, groups = blockDim.x / G;
    u32 mask = group_mask<G>();
    // Values first (16-byte aligned for every accumulator), then keys, then the compacted
    // keys and their slots (a table is at most half full).
    A* vals = (A*)hs_smem + (u64)group * table_size;
    u32* keys = (u32*)((A*)hs_smem + (u64)groups * table_size) + (u64)group * table_size;
    u32* packed_keys = (u32*)((A*)hs_smem + (u64)groups * table_size) +
                       (u64)groups * table_size + (u64)group * table_size;
    u32* packed_slots = packed_keys + table_size / 2;
    u32 hmask = table_size - 1;
    for (u64 pos = (u64)blockIdx.x * groups + group; pos < nlist; pos += (u64)gridDim.x * groups) {
        u64 r = rows[pos];
        u64 i = r - row_base;
        u64 dst = c_off[i] - out_base;
        u64 n = c_off[i + 1] - c_off[i];
        if constexpr (G == 32) {
            u64 e0 = a_off[r], bs, start;
            u64 total = warp_short_row_scan(e0, a_off[r + 1], a_col, b_off, &bs, &start);
            if (total > 32 && total <= 64) {
                warp_sorted_write<2, T, S>(e0, bs, start, total, a_val, b_col, b_val, col_lo,
                                           col_hi, out_col + dst, out_val + dst,
                                           known_col ? known_col + dst : nullptr);
                continue;
            }
        }
        for (u32 t = g; t < table_size; t += G) {
            keys[t] = HS_EMPTY;
            vals[t] = S::zero();
        }
        __syncwarp(mask);
        group_products<G>(r, a_off, a_col, b_off, mask, [&](u64 e, u64 q) {
            u32 c = b_col[q];
            if (c < col_lo || c >= col_hi) return;
            bool fresh;
            u32 h = hash_insert(keys, hmask, c, &fresh);
            S::atomic_add(&vals[h], S::mul(a_val[e], b_val[q]));
        });
        __syncwarp(mask);
        if (known_col) {
            for (u64 t = g; t < n; t += G) {
                u32 c = known_col[dst + t] + col_lo;
                u32 h = hash_slot(c, hmask);
                u32 k = keys[h];
                while (k != c && k != HS_EMPTY) {
                    h = (h + 1) & hmask;
                    k = keys[h];
                }
                out_val[dst + t] = S::store(k == c ? vals[h] : S::zero());
            }
        } else {
            // The occupied slots, compacted (a ballot per G slots), then each entry written at
            // its rank among the row's keys: n² comparisons over the group instead of a sort.
            u32 n32 = 0;
            for (u32 first = 0; first < table_size; first += G) {
                u32 t = first + g;
                u32 k = keys[t];
                bool occupied = k != HS_EMPTY;
                u32 bits = group_bits<G>(__ballot_sync(mask, occupied));
                if (occupied) {
                    u32 at = n32 + __popc(bits & ((1u << g) - 1u));
                    packed_keys[at] = k;
                    packed_slots[at] = t;
                }
                n32 += __popc(bits);
            }
            __syncwarp(mask);
            for (u32 j = g; j < n32; j += G) {
                u32 k = packed_keys[j];
                u32 rank = 0;
                for (u32 s = 0; s < n32; ++s) rank += packed_keys[s] < k;
                out_col[dst + rank] = k - col_lo;
                out_val[dst + rank] = S::store(vals[packed_slots[j]]);
            }
        }
        __syncwarp(mask);
    }
}

#define WARP_NUMERIC_PARAMS                                                                  \
    (const u32* rows, u64 nlist, u64 row_base, u32 table_size, const u64* a_off,             \
     const u32* a_col, const void* a_val, const u64* b_off, const u32* b_col,                \
     const void* b_val, u32 col_lo, u32 col_hi, const u64* c_off, u64 out_base,              \
     u32* out_col, void* out_val, const u32* known_col)
HS_INSTANTIATE(spgemm_warp_numeric, WARP_NUMERIC_PARAMS,
               (group_numeric<32, T, S>(rows, nlist, row_base, table_size, a_off, a_col, a_val,
                                        b_off, b_col, b_val, col_lo, col_hi, c_off, out_base,
                                        out_col, out_val, known_col)))

// ---------------------------------------------------------------------------------------------
// The tiniest rows (the first two bins: tables of 16 or 32 slots, so at most M = 8 or 16
// entries of C): a thread per row, its entries in registers. A row's few products are too
// little work to spread over lanes (the scan and search that spread them cost more than the
// products), while a thread per row keeps 32 rows' loads in flight per warp. The list is
// kept sorted by column with unrolled compare-and-shift steps, so every index is known at
// compile time and nothing spills to local memory; the row comes out in order with no sort.
// Every product costs a step per register slot, so rows of at most 8 entries get their own
// instances with 8 slots: half the work per product and half the registers (more rows in
// flight).

#define TR_THREADS 128

// Visits every product of row r of the window, in the order of A's and B's entries.
template <class F>
__device__ __forceinline__ void thread_products(u64 r, const u64* a_off, const u32* a_col,
                                                const u64* b_off, const u32* b_col, u32 col_lo,
                                                u32 col_hi, F visit) {
    u64 e1 = a_off[r + 1];
    for (u64 e = a_off[r]; e < e1; ++e) {
        u32 k = a_col[e];
        u64 q1 = b_off[k + 1];
        for (u64 q = b_off[k]; q < q1; ++q) {
            u32 c = b_col[q];
            if (c >= col_lo && c < col_hi) visit(e, q, c);
        }
    }
}

template <u32 M>
__device__ void thread_symbolic(const u32* rows, u64 nlist, u64 row_base, const u64* a_off,
                                const u32* a_col, const u64* b_off, const u32* b_col,
                                u32 col_lo, u32 col_hi, u64* row_nnz) {
    for (u64 pos = (u64)blockIdx.x * blockDim.x + threadIdx.x; pos < nlist;
         pos += (u64)gridDim.x * blockDim.x) {
        u64 r = rows[pos];
        u32 keys[M];
        u32 n = 0;
        thread_products(r, a_off, a_col, b_off, b_col, col_lo, col_hi, [&](u64, u64, u32 c) {
            bool seen = false;
#pragma unroll
            for (u32 j = 0; j < M; ++j) seen |= j < n && keys[j] == c;
            if (seen || n == M) return;  // a row of this bin has at most M columns
#pragma unroll
            for (u32 j = 0; j < M; ++j)
                if (j == n) keys[j] = c;
            ++n;
        });
        row_nnz[r - row_base] = n;
    }
}

extern "C" __global__ void spgemm_thread8_symbolic WARP_SYMBOLIC_PARAMS {
    thread_symbolic<8>(rows, nlist, row_base, a_off, a_col, b_off, b_col, col_lo, col_hi,
                       row_nnz);
}
extern "C" __global__ void spgemm_thread16_symbolic WARP_SYMBOLIC_PARAMS {
    thread_symbolic<16>(rows, nlist, row_base, a_off, a_col, b_off, b_col, col_lo, col_hi,
                        row_nnz);
}

template <u32 M, class T, class S>
__device__ void thread_numeric(const u32* rows, u64 nlist, u64 row_base, const u64* a_off,
                               const u32* a_col, const void* a_val_, const u64* b_off,
                               const u32* b_col, const void* b_val_, u32 col_lo, u32 col_hi,
                               const u64* c_off, u64 out_base, u32* out_col, void* out_val_,
                               const u32* known_col) {
    typedef typename S::acc A;
    const T* a_val = (const T*)a_val_;
    const T* b_val = (const T*)b_val_;
    T* out_val = (T*)out_val_;
    for (u64 pos = (u64)blockIdx.x * blockDim.x + threadIdx.x; pos < nlist;
         pos += (u64)gridDim.x * blockDim.x) {
        u64 r = rows[pos];
        u64 i = r - row_base;
        u64 dst = c_off[i] - out_base;
        u32 expected = (u32)min(c_off[i + 1] - c_off[i], (u64)M);
        u32 keys[M];
        A vals[M];
        u32 n = 0;
        if (known_col) {
            // A plan's structure: the row's columns are known and sorted.
#pragma unroll
            for (u32 j = 0; j < M; ++j) {
                if (j < expected) keys[j] = known_col[dst + j] + col_lo;
                vals[j] = S::zero();
            }
            n = expected;
        }
        thread_products(r, a_off, a_col, b_off, b_col, col_lo, col_hi, [&](u64 e, u64 q, u32 c) {
            A v = S::mul(a_val[e], b_val[q]);
            u32 at = 0;
            bool seen = false;
#pragma unroll
            for (u32 j = 0; j < M; ++j) {
                if (j < n) {
                    at += keys[j] < c;
                    if (keys[j] == c) {
                        vals[j] = S::add(vals[j], v);
                        seen = true;
                    }
                }
            }
            if (seen || n == M) return;  // a row of this bin has at most M columns
#pragma unroll
            for (u32 j = M - 1; j > 0; --j) {
                if (j > at && j <= n) {
                    keys[j] = keys[j - 1];
                    vals[j] = vals[j - 1];
                }
            }
#pragma unroll
            for (u32 j = 0; j < M; ++j) {
                if (j == at) {
                    keys[j] = c;
                    vals[j] = v;
                }
            }
            ++n;
        });
#pragma unroll
        for (u32 j = 0; j < M; ++j) {
            if (j < n && j < expected) {
                if (!known_col) out_col[dst + j] = keys[j] - col_lo;
                out_val[dst + j] = S::store(vals[j]);
            }
        }
    }
}

HS_INSTANTIATE(spgemm_thread8_numeric, WARP_NUMERIC_PARAMS,
               (thread_numeric<8, T, S>(rows, nlist, row_base, a_off, a_col, a_val, b_off,
                                        b_col, b_val, col_lo, col_hi, c_off, out_base, out_col,
                                        out_val, known_col)))
HS_INSTANTIATE(spgemm_thread16_numeric, WARP_NUMERIC_PARAMS,
               (thread_numeric<16, T, S>(rows, nlist, row_base, a_off, a_col, a_val, b_off,
                                         b_col, b_val, col_lo, col_hi, c_off, out_base, out_col,
                                         out_val, known_col)))

// ---------------------------------------------------------------------------------------------
// Long rows whose window is not much wider than their hash table would be, and whose rows of A
// are long (the skewed class's dense rows; see the column ranges below for the others): a dense
// accumulator per row in global memory (a byte per column saying the column occurs, and in the numeric phase
// a value per column), filled by several blocks per row, each taking an equal share of the
// row's products. Columns then come out in order by a scan over the flags: no table to sort.
//
// Row `pos` of a launch owns flags[pos * stride ..] and vals[pos * stride ..]; every row of a
// launch (a bin: tables of one size) gets parts_per_row blocks, pos * parts_per_row onwards.

#define DN_THREADS 512u

// Exclusive scan of one u64 per thread over the block (blockDim a multiple of 32); *total gets
// the block's sum. Ends synchronised.
__device__ u64 block_exclusive_scan64(u64 v, u64* total) {
    __shared__ u64 warp_sums[32];
    u32 lane = threadIdx.x & 31u, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    u64 x = warp_inclusive_scan64(v);
    if (lane == 31) warp_sums[warp] = x;
    __syncthreads();
    if (warp == 0) {
        u64 s = lane < nw ? warp_sums[lane] : 0ull;
        s = warp_inclusive_scan64(s);
        if (lane < nw) warp_sums[lane] = s;
    }
    __syncthreads();
    u64 before = warp == 0 ? 0ull : warp_sums[warp - 1];
    *total = warp_sums[nw - 1];
    __syncthreads();
    return before + x - v;
}

template <bool NUMERIC, class T, class S>
__device__ void dense_accumulate(const u32* rows, u32 parts_per_row, u64 nlist, u64 stride,
                                 unsigned char* flags, void* vals_, const u64* a_off,
                                 const u32* a_col, const void* a_val_, const u64* b_off,
                                 const u32* b_col, const void* b_val_, u32 col_lo, u32 col_hi) {
    typedef typename S::acc A;
    __shared__ u64 s_start[DN_THREADS];
    __shared__ u64 s_b[DN_THREADS];
    __shared__ u64 s_e[DN_THREADS];
    const T* a_val = (const T*)a_val_;
    const T* b_val = (const T*)b_val_;
    u32 t = threadIdx.x;
    u64 pos = blockIdx.x / parts_per_row, part = blockIdx.x % parts_per_row;
    u64 nparts = parts_per_row;
    if (pos >= nlist) return;
    u64 r = rows[pos];
    u64 e0 = a_off[r], e1 = a_off[r + 1];
    unsigned char* f = flags + pos * stride;
    A* v = NUMERIC ? (A*)vals_ + pos * stride : nullptr;
    // The row's products, then this block's share [plo, phi) of them.
    u64 mine = 0;
    for (u64 e = e0 + t; e < e1; e += blockDim.x) {
        u32 k = a_col[e];
        mine += b_off[k + 1] - b_off[k];
    }
    u64 all;
    block_exclusive_scan64(mine, &all);
    u64 plo = all / nparts * part + min(part, all % nparts);
    u64 phi = plo + all / nparts + (part < all % nparts ? 1 : 0);
    u64 cum = 0;
    for (u64 base = e0; base < e1 && cum < phi; base += blockDim.x) {
        u64 e = base + t, len = 0, bs = 0;
        if (e < e1) {
            u32 k = a_col[e];
            bs = b_off[k];
            len = b_off[k + 1] - bs;
        }
        u64 total;
        u64 ex = block_exclusive_scan64(len, &total);
        u32 n = (u32)min((u64)blockDim.x, e1 - base);
        s_start[t] = cum + ex;
        s_b[t] = bs;
        s_e[t] = e;
        __syncthreads();
        u64 from = max(plo, cum), to = min(phi, cum + total);
        for (u64 p = from + t; p < to; p += blockDim.x) {
            u32 jl = 0, jh = n;
            while (jh - jl > 1) {
                u32 mid = (jl + jh) / 2;
                if (s_start[mid] <= p) jl = mid; else jh = mid;
            }
            u64 q = s_b[jl] + (p - s_start[jl]);
            u32 c = b_col[q];
            if (c < col_lo || c >= col_hi) continue;
            u32 j = c - col_lo;
            f[j] = 1;
            if (NUMERIC) S::atomic_add(&v[j], S::mul(a_val[s_e[jl]], b_val[q]));
        }
        cum += total;
        __syncthreads();
    }
}

extern "C" __global__ void spgemm_dense_symbolic(const u32* rows, u32 parts_per_row,
                                                 u64 nlist, u64 stride, unsigned char* flags,
                                                 const u64* a_off, const u32* a_col,
                                                 const u64* b_off, const u32* b_col,
                                                 u32 col_lo, u32 col_hi) {
    dense_accumulate<false, float, PlusTimes<float>>(rows, parts_per_row, nlist, stride, flags,
                                                     nullptr, a_off, a_col, nullptr, b_off,
                                                     b_col, nullptr, col_lo, col_hi);
}

HS_INSTANTIATE(spgemm_dense_numeric,
               (const u32* rows, u32 parts_per_row, u64 nlist, u64 stride,
                unsigned char* flags, void* vals, const u64* a_off, const u32* a_col,
                const void* a_val, const u64* b_off, const u32* b_col, const void* b_val,
                u32 col_lo, u32 col_hi),
               (dense_accumulate<true, T, S>(rows, parts_per_row, nlist, stride, flags, vals,
                                             a_off, a_col, a_val, b_off, b_col, b_val, col_lo,
                                             col_hi)))

// Entries of each row: the flags set (a byte is 0 or 1, so a word's bit count counts its
// columns). A block per row; stride is a multiple of 16.
extern "C" __global__ void spgemm_dense_count(const u32* rows, u64 nlist, u64 row_base,
                                              u64 stride, const unsigned char* flags,
                                              u64* row_nnz) {
    for (u64 pos = blockIdx.x; pos < nlist; pos += gridDim.x) {
        const u32* words = (const u32*)(flags + pos * stride);
        u64 count = 0;
        for (u64 w = threadIdx.x; w < stride / 4; w += blockDim.x) count += __popc(words[w]);
        u64 all;
        block_exclusive_scan64(count, &all);
        if (threadIdx.x == 0) row_nnz[rows[pos] - row_base] = all;
    }
}

// Writes each row's entries in column order (or, with known_col, the values of the columns a
// plan holds). A block per row.
template <class T, class S>
__device__ void dense_write(const u32* rows, u64 nlist, u64 row_base, u64 stride, u64 width,
                            const unsigned char* flags, const void* vals_, const u64* c_off,
                            u64 out_base, u32* out_col, void* out_val_, const u32* known_col) {
    typedef typename S::acc A;
    T* out_val = (T*)out_val_;
    for (u64 pos = blockIdx.x; pos < nlist; pos += gridDim.x) {
        const u32* words = (const u32*)(flags + pos * stride);
        const A* v = (const A*)vals_ + pos * stride;
        u64 i = rows[pos] - row_base;
        u64 dst = c_off[i] - out_base;
        if (known_col) {
            u64 n = c_off[i + 1] - c_off[i];
            for (u64 t = threadIdx.x; t < n; t += blockDim.x)
                out_val[dst + t] = S::store(v[known_col[dst + t]]);
            continue;
        }
        u64 written = 0;
        for (u64 w0 = 0; w0 < stride / 4; w0 += blockDim.x) {
            u64 w = w0 + threadIdx.x;
            u32 bits = w < stride / 4 ? words[w] : 0u;
            u32 total;
            u32 before = block_exclusive_scan(__popc(bits), &total);
            u64 o = dst + written + before;
            for (u32 b = 0; b < 4; ++b) {
                if ((bits >> (8 * b)) & 1u) {
                    u64 col = w * 4 + b;
                    if (col < width) {
                        out_col[o] = (u32)col;
                        out_val[o] = S::store(v[col]);
                    }
                    ++o;
                }
            }
            written += total;
        }
    }
}

HS_INSTANTIATE(spgemm_dense_write,
               (const u32* rows, u64 nlist, u64 row_base, u64 stride, u64 width,
                const unsigned char* flags, const void* vals, const u64* c_off, u64 out_base,
                u32* out_col, void* out_val, const u32* known_col),
               (dense_write<T, S>(rows, nlist, row_base, stride, width, flags, vals, c_off,
                                  out_base, out_col, out_val, known_col)))

// ---------------------------------------------------------------------------------------------
// Long rows whose window is not much wider than their hash table would be, and whose rows of A
// are short against their products (the Rust side decides by each bin's longest row of A, from
// spgemm_bin_count; long rows of A take the dense rows above): the window
// [col_lo, col_hi) cut into ranges of range_cols columns (a power of two, at least 1024), each
// accumulated densely in shared memory (a value and a bit per column) by one block, and
// written from there in column order straight into C. A listed row gets blocks_per_row
// blocks; block `part` of row `pos` (blockIdx.x = pos * blocks_per_row + part) takes ranges
// part * ranges_per_block onwards, one after another.
//
// For its range [lo, hi) a block walks all of the row's A entries, blockDim at a time staged
// in shared memory with the positions where each one's B row enters and leaves the range
// (binary searches: B's columns are sorted in each row), and spreads the range's products
// evenly over its threads whatever the lengths of the B rows they come from. Where the row's
// A entries fit one stage, the block's later ranges start each B row where the previous range
// left it: one search per entry and range.
//
// Counting (spgemm_range_count: the symbolic phase, and in the numeric phase the pass that
// places rows split over several blocks): each range's entries are added to the row's count
// (row_nnz), or stored per (row, range) in range_counts (pos * ranges + range). Numeric
// (spgemm_range_numeric_T): a range's entries go after those of the row's earlier ranges (the
// counts of the other blocks' ranges from range_counts, this block's own as it goes); with
// known_col (a plan's execution) each of C's known columns in the range takes its value from
// the accumulator, and no bit is kept.
//
// Dynamic shared memory, in this order: values (numeric: range_cols accumulators), bits
// (range_cols / 32 words), then per staged entry its first B position in the range (u64), its
// B row's end (u64), the start of its products in the range's (u32) and (numeric) its value.


template <bool NUMERIC, class T, class S>
__device__ void range_accumulate(const u32* rows, u64 nlist, u64 row_base, u32 range_cols,
                                 u32 ranges_per_block, u32 blocks_per_row, const u64* a_off,
                                 const u32* a_col, const void* a_val_, const u64* b_off,
                                 const u32* b_col, const void* b_val_, u32 col_lo, u32 col_hi,
                                 u64* row_nnz, u32* range_counts, const u64* c_off,
                                 u64 out_base, u32* out_col, void* out_val_,
                                 const u32* known_col) {
    typedef typename S::acc A;
    const T* a_val = (const T*)a_val_;
    const T* b_val = (const T*)b_val_;
    T* out_val = (T*)out_val_;
    const u32 R = range_cols, nb = blockDim.x, t = threadIdx.x;
    const u32 lane = t & 31u, warp = t >> 5, nwarps = nb >> 5;
    unsigned char* smem = hs_smem;
    A* acc = (A*)smem;
    u32* bits = (u32*)(smem + (NUMERIC ? (u64)R * sizeof(A) : 0));
    u64* st_lo = (u64*)(bits + R / 32);
    u64* st_end = st_lo + nb;
    u32* st_start = (u32*)(st_end + nb);
    T* st_val = (T*)(st_start + nb);
    const bool keep_bits = !NUMERIC || known_col == nullptr;

    const u64 ranges = ((u64)col_hi - col_lo + R - 1) / R;
    const u64 pos = blockIdx.x / blocks_per_row, part = blockIdx.x % blocks_per_row;
    if (pos >= nlist) return;
    const u64 j0 = part * ranges_per_block, j1 = min(j0 + ranges_per_block, ranges);
    if (j0 >= j1) return;
    const u64 r = rows[pos], i = r - row_base;
    const u64 e0 = a_off[r], e1 = a_off[r + 1];
    const bool carried = e1 - e0 <= nb;
    // Numeric, columns to write: where this block's first range starts in C.
    u64 dst = 0;
    if (NUMERIC && !known_col) {
        u64 before = 0;
        if (range_counts)
            for (u64 j = t; j < j0; j += nb) before += range_counts[pos * ranges + j];
        u64 all;
        block_exclusive_scan64(before, &all);
        dst = c_off[i] - out_base + all;
    }
    for (u64 j = j0; j < j1; ++j) {
        const u32 lo = col_lo + (u32)(j * R);
        const u32 hi = (u32)min((u64)lo + R, (u64)col_hi);
        if (NUMERIC)
            for (u32 x = t; x < R; x += nb) acc[x] = S::zero();
        if (keep_bits)
            for (u32 w = t; w < R / 32; w += nb) bits[w] = 0;
        __syncthreads();
        for (u64 cs = e0; cs < e1; cs += nb) {
            const u64 e = cs + t;
            const bool valid = e < e1;
            u64 from = 0, to = 0;
            if (valid) {
                if (carried && j > j0) {
                    from = st_lo[t];
                } else {
                    u32 k = a_col[e];
                    u64 be = b_off[k + 1];
                    st_end[t] = be;
                    from = lower_bound_col(b_col, b_off[k], be, lo);
                    if (NUMERIC) st_val[t] = a_val[e];
                }
                to = lower_bound_col(b_col, from, st_end[t], hi);
                st_lo[t] = from;
            }
            u32 total;
            const u32 start = block_exclusive_scan((u32)(to - from), &total);  // synchronised
            st_start[t] = start;
            __syncthreads();
            const u32 n = (u32)min((u64)nb, e1 - cs);
            for (u32 p = t; p < total; p += nb) {
                // The last staged entry whose products start at or before p.
                u32 jl = 0, jh = n;
                while (jh - jl > 1) {
                    u32 mid = (jl + jh) >> 1;
                    if (st_start[mid] <= p) jl = mid; else jh = mid;
                }
                const u64 q = st_lo[jl] + (p - st_start[jl]);
                const u32 x = b_col[q] - lo;
                // Bits are only set while the range accumulates: one seen set needs no atomic,
                // and in a narrow window most products find their column's bit set already.
                const u32 bit = 1u << (x & 31u);
                if (keep_bits && !(bits[x >> 5] & bit)) atomicOr(&bits[x >> 5], bit);
                if (NUMERIC) S::atomic_add(&acc[x], S::mul(st_val[jl], b_val[q]));
            }
            __syncthreads();
            if (valid) st_lo[t] = to;  // where the block's next range starts in this B row
        }
        __syncthreads();
        if (!NUMERIC) {
            u32 count = 0;
            for (u32 w = t; w < R / 32; w += nb) count += __popc(bits[w]);
            u32 total;
            block_exclusive_scan(count, &total);
            if (t == 0) {
                if (range_counts)
                    range_counts[pos * ranges + j] = total;
                else
                    atomicAdd((unsigned long long*)&row_nnz[i], (unsigned long long)total);
            }
        } else if (known_col) {
            const u64 s = c_off[i] - out_base, e = c_off[i + 1] - out_base;
            const u64 from = lower_bound_col(known_col, s, e, lo - col_lo);
            const u64 to = lower_bound_col(known_col, from, e, hi - col_lo);
            for (u64 q = from + t; q < to; q += nb)
                out_val[q] = S::store(acc[known_col[q] + col_lo - lo]);
        } else {
            // The range's words split evenly over the warps, in order: a warp's entries start
            // after those of the warps before it; lane l writes bit l of each word.
            const u32 words = (hi - lo + 31) / 32;
            const u32 per_warp = (words + nwarps - 1) / nwarps;
            const u32 w_lo = min(warp * per_warp, words), w_hi = min(w_lo + per_warp, words);
            u32 count = 0;
            for (u32 w = w_lo + lane; w < w_hi; w += 32) count += __popc(bits[w]);
            for (u32 d = 16; d > 0; d >>= 1) count += __shfl_xor_sync(0xffffffffu, count, d);
            u32 total;
            const u32 before = block_exclusive_scan(lane == 0 ? count : 0u, &total);
            u64 o = dst + __shfl_sync(0xffffffffu, before, 0);
            for (u32 w = w_lo; w < w_hi; ++w) {
                const u32 word = bits[w];
                if ((word >> lane) & 1u) {
                    const u64 at = o + __popc(word & ((1u << lane) - 1u));
                    const u32 x = w * 32u + lane;
                    out_col[at] = lo - col_lo + x;
                    out_val[at] = S::store(acc[x]);
                }
                o += __popc(word);
            }
            dst += total;
        }
        __syncthreads();  // the accumulator is cleared for the next range
    }
}

extern "C" __global__ void spgemm_range_count(const u32* rows, u64 nlist, u64 row_base,
                                              u32 range_cols, u32 ranges_per_block,
                                              u32 blocks_per_row, const u64* a_off,
                                              const u32* a_col, const u64* b_off,
                                              const u32* b_col, u32 col_lo, u32 col_hi,
                                              u64* row_nnz, u32* range_counts) {
    range_accumulate<false, float, PlusTimes<float>>(
        rows, nlist, row_base, range_cols, ranges_per_block, blocks_per_row, a_off, a_col,
        nullptr, b_off, b_col, nullptr, col_lo, col_hi, row_nnz, range_counts, nullptr, 0,
        nullptr, nullptr, nullptr);
}

HS_INSTANTIATE(spgemm_range_numeric,
               (const u32* rows, u64 nlist, u64 row_base, u32 range_cols, u32 ranges_per_block,
                u32 blocks_per_row, const u64* a_off, const u32* a_col, const void* a_val,
                const u64* b_off, const u32* b_col, const void* b_val, u32 col_lo, u32 col_hi,
                const u32* range_counts, const u64* c_off, u64 out_base, u32* out_col,
                void* out_val, const u32* known_col),
               (range_accumulate<true, T, S>(rows, nlist, row_base, range_cols,
                                             ranges_per_block, blocks_per_row, a_off, a_col,
                                             a_val, b_off, b_col, b_val, col_lo, col_hi, nullptr,
                                             (u32*)range_counts, c_off, out_base, out_col,
                                             out_val, known_col)))


// ---------------------------------------------------------------------------------------------
// Row-Row, Matam et al. Alg. 1: a warp per row of A. The row of C is built TR_B columns at a
// time in the warp's PartialOutput (dense accumulators in shared memory) and NonZeroIndices (a
// bit per column, set atomically); each tile is compacted in column order, so the row comes
// out sorted. Tiles start at the smallest remaining column, so empty column ranges cost nothing.

#define RR_TRB 256u          // columns per tile: 8 per lane
#define RR_WARPS 4u          // warps per block

// Smallest column >= from (and < col_hi) among the B rows that row r of A selects, over the
// warp; HS_EMPTY when none.
__device__ u32 warp_next_column(u64 r, const u64* a_off, const u32* a_col, const u64* b_off,
                                const u32* b_col, u64 from, u32 col_hi) {
    u32 lane = threadIdx.x & 31u;
    u32 best = HS_EMPTY;
    if (from < col_hi) {
        for (u64 e = a_off[r] + lane; e < a_off[r + 1]; e += 32) {
            u32 k = a_col[e];
            u64 p = lower_bound_col(b_col, b_off[k], b_off[k + 1], (u32)from);
            if (p < b_off[k + 1]) {
                u32 c = b_col[p];
                if (c < col_hi && c < best) best = c;
            }
        }
    }
    for (u32 d = 16; d > 0; d >>= 1) best = min(best, __shfl_xor_sync(0xffffffffu, best, d));
    return best;
}

template <bool NUMERIC, class T, class S>
__device__ void rowrow(u64 row0, u64 nrows, const u64* a_off, const u32* a_col,
                       const void* a_val_, const u64* b_off, const u32* b_col,
                       const void* b_val_, u32 col_lo, u32 col_hi, u64* row_nnz,
                       const u64* c_off, u64 out_base, u32* out_col, void* out_val_) {
    typedef typename S::acc A;
    unsigned char* smem = hs_smem;
    const T* a_val = (const T*)a_val_;
    const T* b_val = (const T*)b_val_;
    T* out_val = (T*)out_val_;
    u32 lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
    A* partial = (A*)smem + (u64)warp * RR_TRB;
    u32* nonzero = (u32*)(smem + (u64)RR_WARPS * RR_TRB * (NUMERIC ? sizeof(A) : 0)) +
                   warp * (RR_TRB / 32);
    u64 warps_total = (u64)gridDim.x * RR_WARPS;
    for (u64 i = (u64)blockIdx.x * RR_WARPS + warp; i < nrows; i += warps_total) {
        u64 r = row0 + i;
        u64 written = 0;
        u64 dst = NUMERIC ? c_off[i] - out_base : 0;
        u32 tile = warp_next_column(r, a_off, a_col, b_off, b_col, col_lo, col_hi);
        while (tile != HS_EMPTY) {
            u64 tile_end = min((u64)tile + RR_TRB, (u64)col_hi);
            if (NUMERIC)
                for (u32 t = lane; t < RR_TRB; t += 32) partial[t] = S::zero();
            if (lane < RR_TRB / 32) nonzero[lane] = 0;
            __syncwarp();
            for (u64 e = a_off[r]; e < a_off[r + 1]; ++e) {
                u32 k = a_col[e];
                u64 end = b_off[k + 1];
                u64 p = lower_bound_col(b_col, b_off[k], end, tile);
                T av = NUMERIC ? a_val[e] : T();
                for (u64 q = p + lane; q < end; q += 32) {
                    u32 c = b_col[q];
                    if (c >= tile_end) break;
                    u32 j = c - tile;
                    if (NUMERIC) S::atomic_add(&partial[j], S::mul(av, b_val[q]));
                    atomicOr(&nonzero[j >> 5], 1u << (j & 31u));
                }
            }
            __syncwarp();
            // Compaction: lane l owns columns 8l..8l+7 of the tile.
            u32 bits = (nonzero[lane >> 2] >> ((lane & 3u) * 8u)) & 0xffu;
            u32 n = __popc(bits), x = n;
            for (u32 d = 1; d < 32; d <<= 1) {
                u32 y = __shfl_up_sync(0xffffffffu, x, d);
                if (lane >= d) x += y;
            }
            u32 tile_count = __shfl_sync(0xffffffffu, x, 31);
            if (NUMERIC) {
                u64 o = dst + written + (x - n);
                for (u32 b = 0; b < 8; ++b) {
                    if (bits & (1u << b)) {
                        u32 j = lane * 8u + b;
                        out_col[o] = tile + j - col_lo;
                        out_val[o] = S::store(partial[j]);
                        ++o;
                    }
                }
            }
            written += tile_count;
            __syncwarp();
            tile = warp_next_column(r, a_off, a_col, b_off, b_col, tile_end, col_hi);
        }
        if (!NUMERIC && lane == 0) row_nnz[i] = written;
    }
}

extern "C" __global__ void spgemm_rowrow_symbolic(u64 row0, u64 nrows, const u64* a_off,
                                                  const u32* a_col, const u64* b_off,
                                                  const u32* b_col, u32 col_lo, u32 col_hi,
                                                  u64* row_nnz) {
    rowrow<false, float, PlusTimes<float>>(row0, nrows, a_off, a_col, nullptr, b_off, b_col,
                                           nullptr, col_lo, col_hi, row_nnz, nullptr, 0,
                                           nullptr, nullptr);
}

HS_INSTANTIATE(spgemm_rowrow_numeric,
               (u64 row0, u64 nrows, const u64* a_off, const u32* a_col, const void* a_val,
                const u64* b_off, const u32* b_col, const void* b_val, u32 col_lo, u32 col_hi,
                const u64* c_off, u64 out_base, u32* out_col, void* out_val),
               (rowrow<true, T, S>(row0, nrows, a_off, a_col, a_val, b_off, b_col, b_val, col_lo,
                                   col_hi, nullptr, c_off, out_base, out_col, out_val)))

// ---------------------------------------------------------------------------------------------
// Column-Row, Matam et al. Alg. 2: a block per part of A (CR_ROWS consecutive rows), a thread
// per nonzero A(i,k) of the part, which scales row k of B into PartialOutput(i, :), TC_B
// columns at a time (dense accumulators and NonZeroIndices bits in shared memory, updated
// atomically). A warp per row then compacts the tile in column order.

#define CR_ROWS 8u          // rows of A per part (one warp each for compaction)
#define CR_TCB 128u         // columns per tile: 4 per lane

template <bool NUMERIC, class T, class S>
__device__ void colrow(u64 row0, u64 nrows, const u64* a_off, const u32* a_col,
                       const void* a_val_, const u64* b_off, const u32* b_col,
                       const void* b_val_, u32 col_lo, u32 col_hi, u64* row_nnz,
                       const u64* c_off, u64 out_base, u32* out_col, void* out_val_) {
    typedef typename S::acc A;
    unsigned char* smem = hs_smem;
    __shared__ u32 next_tile;
    __shared__ unsigned long long written[CR_ROWS];
    const T* a_val = (const T*)a_val_;
    const T* b_val = (const T*)b_val_;
    T* out_val = (T*)out_val_;
    A* partial = (A*)smem;
    u32* nonzero = (u32*)(smem + (u64)CR_ROWS * CR_TCB * (NUMERIC ? sizeof(A) : 0));
    u32 lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
    u64 parts = (nrows + CR_ROWS - 1) / CR_ROWS;
    for (u64 part = blockIdx.x; part < parts; part += gridDim.x) {
        u64 first = row0 + part * CR_ROWS;
        u32 rows_here = (u32)min((u64)CR_ROWS, nrows - part * CR_ROWS);
        u64 e_lo = a_off[first], e_hi = a_off[first + rows_here];
        if (threadIdx.x < CR_ROWS) written[threadIdx.x] = 0;
        u64 from = col_lo;
        while (true) {
            // The next tile starts at the smallest remaining column of the part's products.
            if (threadIdx.x == 0) next_tile = HS_EMPTY;
            __syncthreads();
            if (from < col_hi) {
                for (u64 e = e_lo + threadIdx.x; e < e_hi; e += blockDim.x) {
                    u32 k = a_col[e];
                    u64 p = lower_bound_col(b_col, b_off[k], b_off[k + 1], (u32)from);
                    if (p < b_off[k + 1] && b_col[p] < col_hi) atomicMin(&next_tile, b_col[p]);
                }
            }
            __syncthreads();
            u32 tile = next_tile;
            if (tile == HS_EMPTY) break;
            u64 tile_end = min((u64)tile + CR_TCB, (u64)col_hi);
            if (NUMERIC)
                for (u32 t = threadIdx.x; t < CR_ROWS * CR_TCB; t += blockDim.x) partial[t] = S::zero();
            for (u32 t = threadIdx.x; t < CR_ROWS * CR_TCB / 32; t += blockDim.x) nonzero[t] = 0;
            __syncthreads();
            for (u64 e = e_lo + threadIdx.x; e < e_hi; e += blockDim.x) {
                u32 arow = 0;
                while (a_off[first + arow + 1] <= e) ++arow;
                u32 k = a_col[e];
                T av = NUMERIC ? a_val[e] : T();
                u64 end = b_off[k + 1];
                for (u64 q = lower_bound_col(b_col, b_off[k], end, tile); q < end; ++q) {
                    u32 c = b_col[q];
                    if (c >= tile_end) break;
                    u32 j = arow * CR_TCB + (c - tile);
                    if (NUMERIC) S::atomic_add(&partial[j], S::mul(av, b_val[q]));
                    atomicOr(&nonzero[j >> 5], 1u << (j & 31u));
                }
            }
            __syncthreads();
            if (warp < rows_here) {
                // lane l owns columns 4l..4l+3 of this row's tile
                u32 bits = (nonzero[warp * (CR_TCB / 32) + (lane >> 3)] >> ((lane & 7u) * 4u)) & 0xfu;
                u32 n = __popc(bits), x = n;
                for (u32 d = 1; d < 32; d <<= 1) {
                    u32 y = __shfl_up_sync(0xffffffffu, x, d);
                    if (lane >= d) x += y;
                }
                u32 tile_count = __shfl_sync(0xffffffffu, x, 31);
                if (NUMERIC) {
                    u64 i = first - row0 + warp;
                    u64 o = c_off[i] - out_base + written[warp] + (x - n);
                    for (u32 b = 0; b < 4; ++b) {
                        if (bits & (1u << b)) {
                            u32 j = lane * 4u + b;
                            out_col[o] = tile + j - col_lo;
                            out_val[o] = S::store(partial[warp * CR_TCB + j]);
                            ++o;
                        }
                    }
                }
                __syncwarp();
                if (lane == 0) written[warp] += tile_count;
            }
            from = tile_end;
            __syncthreads();
        }
        if (!NUMERIC && threadIdx.x < rows_here)
            row_nnz[first - row0 + threadIdx.x] = written[threadIdx.x];
        __syncthreads();
    }
}

extern "C" __global__ void spgemm_colrow_symbolic(u64 row0, u64 nrows, const u64* a_off,
                                                  const u32* a_col, const u64* b_off,
                                                  const u32* b_col, u32 col_lo, u32 col_hi,
                                                  u64* row_nnz) {
    colrow<false, float, PlusTimes<float>>(row0, nrows, a_off, a_col, nullptr, b_off, b_col,
                                           nullptr, col_lo, col_hi, row_nnz, nullptr, 0,
                                           nullptr, nullptr);
}

HS_INSTANTIATE(spgemm_colrow_numeric,
               (u64 row0, u64 nrows, const u64* a_off, const u32* a_col, const void* a_val,
                const u64* b_off, const u32* b_col, const void* b_val, u32 col_lo, u32 col_hi,
                const u64* c_off, u64 out_base, u32* out_col, void* out_val),
               (colrow<true, T, S>(row0, nrows, a_off, a_col, a_val, b_off, b_col, b_val, col_lo,
                                   col_hi, nullptr, c_off, out_base, out_col, out_val)))

// ---------------------------------------------------------------------------------------------
// ESC, Polok et al. Alg. 1-3, on a batch of rows. Expansion is perfectly balanced: thread t
// forms products [t*per_thread, (t+1)*per_thread), finding its first nonzero of A by binary
// search over the prefix sum of products per nonzero (entry_prefix, from the host, which also
// gives each nonzero's first B position inside the column window, entry_b_start). Products of
// one row of C are contiguous; each row's segment is sorted by column (bitonic, in shared
// memory or, for long segments, in a global scratch), then compressed: equal columns summed.

template <class T, class S>
__device__ void esc_expand(u64 nentries, u64 total, u64 per_thread, u64 a_entry0,
                           const u64* entry_prefix, const u64* entry_b_start,
                           const void* a_val_, const u32* b_col, const void* b_val_,
                           u32 col_lo, u32* keys, void* vals_) {
    typedef typename S::acc A;
    const T* a_val = (const T*)a_val_;
    const T* b_val = (const T*)b_val_;
    A* vals = (A*)vals_;
    u64 threads = (total + per_thread - 1) / per_thread;
    HS_GRID_STRIDE(t, threads) {
        u64 p = t * per_thread, p_end = min(p + per_thread, total);
        // last entry whose prefix is <= p
        u64 lo = 0, hi = nentries;
        while (hi - lo > 1) {
            u64 mid = lo + (hi - lo) / 2;
            if (entry_prefix[mid] <= p) lo = mid; else hi = mid;
        }
        u64 e = lo;
        for (; p < p_end; ++p) {
            while (entry_prefix[e + 1] <= p) ++e;
            u64 q = entry_b_start[e] + (p - entry_prefix[e]);
            keys[p] = b_col[q] - col_lo;
            vals[p] = S::mul(a_val[a_entry0 + e], b_val[q]);
        }
    }
}

HS_INSTANTIATE(spgemm_esc_expand,
               (u64 nentries, u64 total, u64 per_thread, u64 a_entry0, const u64* entry_prefix,
                const u64* entry_b_start, const void* a_val, const u32* b_col,
                const void* b_val, u32 col_lo, u32* keys, void* vals),
               (esc_expand<T, S>(nentries, total, per_thread, a_entry0, entry_prefix,
                                 entry_b_start, a_val, b_col, b_val, col_lo, keys, vals)))

// Sorts each listed row segment [seg[r], seg[r+1]) of length <= sort_size in shared memory.
template <class T, class S>
__device__ void esc_sort(const u32* rows, u64 nlist, const u64* seg, u32 sort_size, u32* keys,
                         void* vals_) {
    typedef typename S::acc A;
    unsigned char* smem = hs_smem;
    A* vals = (A*)vals_;
    u32* sk = (u32*)smem;
    A* sv = (A*)(smem + (u64)sort_size * 4u);
    for (u64 pos = blockIdx.x; pos < nlist; pos += gridDim.x) {
        u32 r = rows[pos];
        u64 s = seg[r];
        u32 n = (u32)(seg[r + 1] - s);
        for (u32 t = threadIdx.x; t < sort_size; t += blockDim.x) {
            sk[t] = t < n ? keys[s + t] : HS_EMPTY;
            sv[t] = t < n ? vals[s + t] : S::zero();
        }
        __syncthreads();
        bitonic_sort(sk, sv, sort_size);
        for (u32 t = threadIdx.x; t < n; t += blockDim.x) {
            keys[s + t] = sk[t];
            vals[s + t] = sv[t];
        }
        __syncthreads();
    }
}

HS_INSTANTIATE(spgemm_esc_sort,
               (const u32* rows, u64 nlist, const u64* seg, u32 sort_size, u32* keys, void* vals),
               (esc_sort<T, S>(rows, nlist, seg, sort_size, keys, vals)))

// One long segment, sorted by one block in a global scratch of sort_size (a power of two).
template <class T, class S>
__device__ void esc_sort_long(u64 start, u64 n, u64 sort_size, u32* scratch_keys,
                              void* scratch_vals_, u32* keys, void* vals_) {
    typedef typename S::acc A;
    A* vals = (A*)vals_;
    A* sv = (A*)scratch_vals_;
    for (u64 t = threadIdx.x; t < sort_size; t += blockDim.x) {
        scratch_keys[t] = t < n ? keys[start + t] : HS_EMPTY;
        sv[t] = t < n ? vals[start + t] : S::zero();
    }
    __syncthreads();
    bitonic_sort(scratch_keys, sv, (u32)sort_size);
    for (u64 t = threadIdx.x; t < n; t += blockDim.x) {
        keys[start + t] = scratch_keys[t];
        vals[start + t] = sv[t];
    }
}

HS_INSTANTIATE(spgemm_esc_sort_long,
               (u64 start, u64 n, u64 sort_size, u32* scratch_keys, void* scratch_vals,
                u32* keys, void* vals),
               (esc_sort_long<T, S>(start, n, sort_size, scratch_keys, scratch_vals, keys, vals)))

// Distinct columns per sorted row segment (a block per row).
extern "C" __global__ void spgemm_esc_count(u64 nrows, const u64* seg, const u32* keys,
                                            u64* row_nnz) {
    __shared__ unsigned long long count;
    for (u64 r = blockIdx.x; r < nrows; r += gridDim.x) {
        if (threadIdx.x == 0) count = 0;
        __syncthreads();
        u64 local = 0;
        for (u64 p = seg[r] + threadIdx.x; p < seg[r + 1]; p += blockDim.x)
            local += (p == seg[r] || keys[p] != keys[p - 1]);
        if (local) atomicAdd(&count, (unsigned long long)local);
        __syncthreads();
        if (threadIdx.x == 0) row_nnz[r] = count;
        __syncthreads();
    }
}

// Compression: the first product of each run of equal columns sums its run and writes it at
// its rank among the row's runs (a block scan of the head flags).
template <class T, class S>
__device__ void esc_compress(u64 nrows, const u64* seg, const u32* keys, const void* vals_,
                             const u64* c_off, u64 out_base, u32* out_col, void* out_val_) {
    typedef typename S::acc A;
    const A* vals = (const A*)vals_;
    T* out_val = (T*)out_val_;
    for (u64 r = blockIdx.x; r < nrows; r += gridDim.x) {
        u64 s = seg[r], e = seg[r + 1];
        u64 base = c_off[r] - out_base;
        u64 heads_before = 0;
        for (u64 chunk = s; chunk < e; chunk += blockDim.x) {
            u64 p = chunk + threadIdx.x;
            bool head = p < e && (p == s || keys[p] != keys[p - 1]);
            u32 total;
            u32 rank = block_exclusive_scan(head ? 1u : 0u, &total);
            if (head) {
                A sum = vals[p];
                for (u64 q = p + 1; q < e && keys[q] == keys[p]; ++q) sum = S::add(sum, vals[q]);
                u64 o = base + heads_before + rank;
                out_col[o] = keys[p];
                out_val[o] = S::store(sum);
            }
            heads_before += total;
        }
    }
}

HS_INSTANTIATE(spgemm_esc_compress,
               (u64 nrows, const u64* seg, const u32* keys, const void* vals, const u64* c_off,
                u64 out_base, u32* out_col, void* out_val),
               (esc_compress<T, S>(nrows, seg, keys, vals, c_off, out_base, out_col, out_val)))

// ---------------------------------------------------------------------------------------------
// Row binning on the GPU, so that no per-row array has to visit the host: each row's weight
// (its products, or its entries from C's offsets, capped at the window's width) gives a bin,
// the log2 of its hash table's size less 4 (tables of 16 to 2^31 slots: bins 0 to 27); rows of
// weight 0 land in bin BIN_EMPTY and are not listed. spgemm_bin_count counts the rows of each
// bin and sums the raw weights; spgemm_bin_scatter writes each row's index into its bin's part
// of a list (bin_start gives each bin's first position; order within a bin is arbitrary).

#define BIN_COUNT 29u
#define BIN_EMPTY 28u
// binning::WIDE_ROW_WEIGHT_MAX.
#define WIDE_ROW_WEIGHT_MAX 4096u
#define BIN_THREADS 256u

// A row's weight: values[i], or with from_offsets the difference of two offsets. With a_scale
// (the weight of an entry of A, in 256ths) a non-zero weight is raised to the row's entries of
// A times it: the numeric phase bins rows by their entries of C, raised so that rows of many
// products per entry (AMG's coarse operators) get more lanes. Only a thread's row (at most 16
// entries) or a row raised fourfold or more: a table twice as large for the same threads
// (tables of 1024 and 2048 slots both get 128) would cost its clearing and compaction for
// nothing.
__device__ __forceinline__ u64 bin_weight(const u64* values, u32 from_offsets, u32 a_scale,
                                          const u64* a_off, u64 row, u64 i) {
    u64 w = from_offsets ? values[i + 1] - values[i] : values[i];
    if (a_scale && w) {
        u64 work = ((a_off[row + 1] - a_off[row]) * a_scale) >> 8;
        if (work > w && (w <= 16 || work >= 4 * w)) w = work;
    }
    return w;
}

// The bin of a row of weight w in a window of cap columns: a table of twice its weight, the
// weight capped at the window, except that a row of many more products than columns (a coarse
// AMG level's few wide rows: thousands of products, a dozen columns) keeps a quarter of its
// weight, up to 32 windows and 4096 (a table that stays in shared memory), so that more lanes
// share its products. binning::bin_of mirrors it.
// A listed row's bin is at least `floor_bin`: where a product's rows are too few to fill the
// GPU with a thread each, a warp per row costs no more and no lane walks a row's products alone.
__device__ __forceinline__ u32 weight_bin(u64 w, u64 cap, u32 floor_bin) {
    w = min(w, max(cap, min(w / 4, min(32 * cap, (u64)WIDE_ROW_WEIGHT_MAX))));
    if (w == 0) return BIN_EMPTY;
    u64 slots = 2 * w;
    u32 b = 0;
    if (slots > 16) {
        u32 bits = 64u - (u32)__clzll(slots - 1);  // table of 2^bits slots
        b = min(bits - 4u, BIN_EMPTY - 1u);
    }
    return max(b, floor_bin);
}

// Lanes of the warp with the same bin find each other (__match_any_sync): the lowest of them
// does the group's atomic, the others take their place from it, so a bin that most rows share
// costs one atomic per warp, not one per row.
__device__ __forceinline__ u32 lanes_below(u32 peers) {
    return __popc(peers & ((1u << (threadIdx.x & 31u)) - 1u));
}

// sums[0] gets the sum of the raw weights, sums[1] of the capped ones. For the bins of long
// rows (LONG_A_MIN_BIN on), bin_longest_a gets the longest row of A among the bin's rows (row
// i of the list is row row0 + i of A): what walking a row's A entries once per column range
// costs (the Rust side's choice between column ranges and a dense row in global memory).
#define LONG_A_MIN_BIN 8u

extern "C" __global__ void spgemm_bin_count(u64 n, const u64* values, u32 from_offsets,
                                            u32 a_scale, u64 cap, u64* bin_rows, u64* sums,
                                            const u64* a_off, u64 row0, u64* bin_longest_a,
                                            u32 floor_bin) {
    __shared__ unsigned long long counts[BIN_COUNT];
    __shared__ unsigned long long longest[BIN_COUNT];
    __shared__ unsigned long long block_sums[2];
    if (threadIdx.x < BIN_COUNT) counts[threadIdx.x] = longest[threadIdx.x] = 0;
    if (threadIdx.x < 2) block_sums[threadIdx.x] = 0;
    __syncthreads();
    u64 raw = 0, capped = 0;
    u64 stride = (u64)blockDim.x * gridDim.x;
    u64 rounds = (n + stride - 1) / stride;  // the same for every lane, so warps stay whole
    for (u64 round = 0; round < rounds; ++round) {
        u64 i = round * stride + (u64)blockIdx.x * blockDim.x + threadIdx.x;
        u32 b = BIN_COUNT;  // no row
        if (i < n) {
            u64 w = bin_weight(values, from_offsets, a_scale, a_off, row0 + i, i);
            raw += w;
            capped += min(w, cap);
            b = weight_bin(w, cap, floor_bin);
        }
        u32 peers = __match_any_sync(0xffffffffu, b);
        if (b < BIN_COUNT && lanes_below(peers) == 0)
            atomicAdd(&counts[b], (unsigned long long)__popc(peers));
        if (b >= LONG_A_MIN_BIN && b < BIN_EMPTY)
            atomicMax(&longest[b], (unsigned long long)(a_off[row0 + i + 1] - a_off[row0 + i]));
    }
    for (u32 d = 16; d > 0; d >>= 1) {
        raw += __shfl_xor_sync(0xffffffffu, raw, d);
        capped += __shfl_xor_sync(0xffffffffu, capped, d);
    }
    if ((threadIdx.x & 31u) == 0) {
        if (raw) atomicAdd(&block_sums[0], (unsigned long long)raw);
        if (capped) atomicAdd(&block_sums[1], (unsigned long long)capped);
    }
    __syncthreads();
    if (threadIdx.x < BIN_COUNT && counts[threadIdx.x])
        atomicAdd((unsigned long long*)&bin_rows[threadIdx.x], counts[threadIdx.x]);
    if (threadIdx.x < BIN_COUNT && longest[threadIdx.x])
        atomicMax((unsigned long long*)&bin_longest_a[threadIdx.x], longest[threadIdx.x]);
    if (threadIdx.x < 2 && block_sums[threadIdx.x])
        atomicAdd((unsigned long long*)&sums[threadIdx.x], block_sums[threadIdx.x]);
}

extern "C" __global__ void spgemm_bin_scatter(u64 n, u64 row0, const u64* values,
                                              u32 from_offsets, u32 a_scale, const u64* a_off,
                                              u64 cap, const u64* bin_start, u64* bin_cursor,
                                              u32* list, u32 floor_bin) {
    __shared__ unsigned long long counts[BIN_COUNT];
    __shared__ unsigned long long base[BIN_COUNT];
    // One pass per blockDim rows: positions within the block by one shared atomic per group of
    // lanes with the same bin, then one global reservation per bin per pass.
    for (u64 first = (u64)blockIdx.x * blockDim.x; first < n; first += (u64)gridDim.x * blockDim.x) {
        if (threadIdx.x < BIN_COUNT) counts[threadIdx.x] = 0;
        __syncthreads();
        u64 i = first + threadIdx.x;
        u32 b = BIN_EMPTY;
        if (i < n)
            b = weight_bin(bin_weight(values, from_offsets, a_scale, a_off, row0 + i, i), cap,
                           floor_bin);
        u32 peers = __match_any_sync(0xffffffffu, b);
        u32 leader = __ffs(peers) - 1;
        unsigned long long group = 0;
        if (b != BIN_EMPTY && (threadIdx.x & 31u) == leader)
            group = atomicAdd(&counts[b], (unsigned long long)__popc(peers));
        group = __shfl_sync(0xffffffffu, group, leader);
        unsigned long long local = group + lanes_below(peers);
        __syncthreads();
        if (threadIdx.x < BIN_COUNT && counts[threadIdx.x])
            base[threadIdx.x] = atomicAdd((unsigned long long*)&bin_cursor[threadIdx.x],
                                          counts[threadIdx.x]);
        __syncthreads();
        if (b != BIN_EMPTY) list[bin_start[b] + base[b] + local] = (u32)(row0 + i);
        __syncthreads();
    }
}

// ---------------------------------------------------------------------------------------------
// Exclusive scan of n 64-bit counts into n + 1 offsets (the last one the total): block sums,
// a scan of the block sums by one block, then each block's part again with its prefix.

#define SCAN_THREADS 1024u
#define SCAN_ITEMS 8u

extern "C" __global__ void scan_block_sums(u64 n, const u64* in, u64* block_sums) {
    u64 base = (u64)blockIdx.x * SCAN_THREADS * SCAN_ITEMS + (u64)threadIdx.x * SCAN_ITEMS;
    u64 mine = 0;
    for (u32 k = 0; k < SCAN_ITEMS; ++k)
        if (base + k < n) mine += in[base + k];
    u64 total;
    block_exclusive_scan64(mine, &total);
    if (threadIdx.x == 0) block_sums[blockIdx.x] = total;
}

extern "C" __global__ void scan_block_prefixes(u64 nblocks, u64* block_sums, u64* total) {
    u64 carry = 0;
    for (u64 first = 0; first < nblocks; first += blockDim.x) {
        u64 i = first + threadIdx.x;
        u64 v = i < nblocks ? block_sums[i] : 0;
        u64 sum;
        u64 ex = block_exclusive_scan64(v, &sum);
        if (i < nblocks) block_sums[i] = carry + ex;
        carry += sum;
    }
    if (threadIdx.x == 0) *total = carry;
}

extern "C" __global__ void scan_apply(u64 n, const u64* in, const u64* block_sums, u64* out) {
    u64 base = (u64)blockIdx.x * SCAN_THREADS * SCAN_ITEMS + (u64)threadIdx.x * SCAN_ITEMS;
    u64 v[SCAN_ITEMS];
    u64 mine = 0;
    for (u32 k = 0; k < SCAN_ITEMS; ++k) {
        v[k] = base + k < n ? in[base + k] : 0;
        mine += v[k];
    }
    u64 total;
    u64 at = block_sums[blockIdx.x] + block_exclusive_scan64(mine, &total);
    for (u32 k = 0; k < SCAN_ITEMS; ++k) {
        if (base + k < n) out[base + k] = at;
        at += v[k];
    }
}

// ---------------------------------------------------------------------------------------------
// Checks a CSR matrix where it lies (a product about to go to the host), so that the host need
// not walk C again: any broken invariant stores 1 in *flag (zeroed by the host; every writer
// stores the same value). A warp per row, rows by grid stride: lane 0 checks the row's offsets
// (the first is 0, the last nnz, none decreasing, none past nnz), the lanes the row's entries
// (columns below ncols, each below the next: sorted without repeats).

extern "C" __global__ void csr_check(u64 nrows, u64 ncols, u64 nnz, const u64* offsets,
                                     const u32* cols, u32* flag) {
    const u32 lane = threadIdx.x & 31u;
    const u64 warps = ((u64)gridDim.x * blockDim.x) >> 5;
    bool bad = false;
    for (u64 r = ((u64)blockIdx.x * blockDim.x + threadIdx.x) >> 5; r < nrows; r += warps) {
        const u64 s = offsets[r], e = offsets[r + 1];
        if (s > e || e > nnz || (r == 0 && s != 0) || (r + 1 == nrows && e != nnz)) {
            bad = true;
            continue;
        }
        for (u64 j = s + lane; j < e; j += 32u) {
            const u32 c = cols[j];
            if ((u64)c >= ncols || (j + 1 < e && cols[j + 1] <= c)) bad = true;
        }
    }
    if (bad) *flag = 1u;
}
