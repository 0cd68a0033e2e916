// SpMV kernels, y = A·x, for every sparse format (engineer B).
//
// Every kernel is a template over the storage type S and a semiring R (add, multiply, zero);
// sums are formed in R::acc (f32 for f16/bf16) and rounded to S once. Counts and offsets are
// 64-bit; loops are grid-strided so any size fits any grid.
//
// Kernels that sum with atomics (COO, CSPR, CSC) add into an accumulator buffer of R::acc that the
// caller zeroes; `acc_to_storage` then rounds it to S (skipped where S is its own accumulator).
#include "reduce.cuh"

// CSR scalar: one thread per row. Best when rows are short (a warp per row would idle).
template <typename S, typename R>
__device__ void spmv_csr_scalar(u64 nrows, const u64* __restrict__ offsets,
                                const u32* __restrict__ cols, const S* __restrict__ vals,
                                const S* __restrict__ x, S* __restrict__ y) {
    for (u64 i = global_thread(); i < nrows; i += grid_threads()) {
        typename R::acc acc = R::zero();
        for (u64 k = offsets[i]; k < offsets[i + 1]; ++k) {
            acc = R::add(acc, R::mul(vals[k], x[cols[k]]));
        }
        y[i] = R::store(acc);
    }
}

// CSR vector: one warp per row, lanes stride over the row so loads of A coalesce, then a warp
// reduction. Best when rows are long. Each load of the warp takes whole lines of A, which are
// then done with: A and y pass L2 as evict-first, leaving L2 to x. (Kernels whose warps come
// back to a line of A in later loads, scalar and sub-warp, measured slower with the hint.)
template <typename S, typename R>
__device__ void spmv_csr_vector(u64 nrows, const u64* __restrict__ offsets,
                                const u32* __restrict__ cols, const S* __restrict__ vals,
                                const S* __restrict__ x, S* __restrict__ y) {
    const int lane = threadIdx.x % 32;
    const u64 warps = grid_threads() / 32;
    // Every lane of a warp takes the same trip count, so the shuffles see all 32 lanes.
    for (u64 i = global_thread() / 32; i < nrows; i += warps) {
        typename R::acc acc = R::zero();
        const u64 end = offsets[i + 1];
        for (u64 k = offsets[i] + lane; k < end; k += 32) {
            acc = R::add(acc, R::mul(load_once(vals + k), load_read_only(x + load_once(cols + k))));
        }
        acc = group_sum<R>(acc, 32);
        if (lane == 0) store_once(y + i, R::store(acc));
    }
}

// CSR sub-warp: `lanes` lanes per row (a power of two, 2 to 32), 32 / lanes rows per warp, lanes
// striding over their row so that a warp's loads of A cover its rows' consecutive entries, then
// a reduction within each group. For rows of a few to a few tens of entries, where a thread per
// row reads scattered and a warp per row idles most lanes. Every warp runs the same number of
// rounds (rows past the end sum nothing), so the shuffles see all 32 lanes.
// With `long_row` (SkipLong), rows of that many entries or more are left out (not written):
// spmv_csr_long_rows sums them.
// `thread` of `threads` (a multiple of 32) are this kernel's.
template <typename S, typename R, bool SkipLong>
__device__ void spmv_csr_subwarp(u64 nrows, u32 lanes, u64 long_row,
                                 const u64* __restrict__ offsets, const u32* __restrict__ cols,
                                 const S* __restrict__ vals, const S* __restrict__ x,
                                 S* __restrict__ y, u64 thread, u64 threads) {
    const u32 lane = threadIdx.x & (lanes - 1u);
    const u64 groups = threads / lanes;
    const u64 rounds = (nrows + groups - 1) / groups;
    for (u64 r = 0; r < rounds; ++r) {
        const u64 i = thread / lanes + r * groups;
        typename R::acc acc = R::zero();
        bool write = i < nrows;
        if (write) {
            const u64 start = offsets[i], end = offsets[i + 1];
            if (SkipLong && end - start >= long_row) {
                write = false;
            } else {
                for (u64 k = start + lane; k < end; k += lanes) {
                    acc = R::add(acc, R::mul(vals[k], x[cols[k]]));
                }
            }
        }
        acc = group_sum<R>(acc, (int)lanes);
        if (lane == 0 && write) y[i] = R::store(acc);
    }
}

// CSR with its long rows apart (spmv_csr_apart): the long rows (listed in `rows`, their
// entries counted before each in `prefix`, nlong + 1 values) are laid end to end and cut into
// tiles of LONG_TILE entries, a warp a tile (`warp` of `warps`), lanes striding over it (the
// loads of A coalesce); each part of a row is summed over the warp and added atomically into
// `sums` (zeroed, one accumulator per long row), which spmv_long_rows_store then writes to y.
#define LONG_TILE 1024
#define LONG_UNROLL 8
template <typename S, typename R>
__device__ void spmv_csr_long_rows(u64 nlong, const u64* __restrict__ rows,
                                   const u64* __restrict__ prefix,
                                   const u64* __restrict__ offsets, const u32* __restrict__ cols,
                                   const S* __restrict__ vals, const S* __restrict__ x,
                                   typename R::acc* __restrict__ sums, u64 warp, u64 warps) {
    const u32 lane = threadIdx.x & 31u;
    const u64 total = prefix[nlong];
    const u64 tiles = (total + LONG_TILE - 1) / LONG_TILE;
    for (u64 t = warp; t < tiles; t += warps) {
        const u64 vb = t * LONG_TILE, ve = min(vb + LONG_TILE, total);
        // The long row holding vb: the last j with prefix[j] <= vb.
        u64 lo = 0, hi = nlong;
        while (hi - lo > 1) {
            const u64 mid = lo + (hi - lo) / 2;
            if (prefix[mid] <= vb) lo = mid; else hi = mid;
        }
        for (u64 j = lo, v = vb; v < ve; ++j) {
            const u64 seg_end = min(ve, prefix[j + 1]);
            // Entries v..seg_end of row j, from its entry v - prefix[j].
            const u64 base = offsets[rows[j]] - prefix[j];
            typename R::acc acc = R::zero();
            // LONG_UNROLL entries a lane at a time, their loads issued together: a warp's
            // tile would otherwise wait for one gather of x after another.
            for (u64 k0 = v + lane; k0 < seg_end; k0 += 32 * LONG_UNROLL) {
                u32 c[LONG_UNROLL];
                S a[LONG_UNROLL];
#pragma unroll
                for (u32 u = 0; u < LONG_UNROLL; ++u) {
                    const u64 k = k0 + 32 * u;
                    c[u] = k < seg_end ? load_once(cols + base + k) : 0u;
                    a[u] = k < seg_end ? load_once(vals + base + k) : S();
                }
#pragma unroll
                for (u32 u = 0; u < LONG_UNROLL; ++u) {
                    if (k0 + 32 * u < seg_end) {
                        acc = R::add(acc, R::mul(a[u], load_read_only(x + c[u])));
                    }
                }
            }
            acc = group_sum<R>(acc, 32);
            if (lane == 0) R::atomic_add(&sums[j], acc);
            v = seg_end;
        }
    }
}

// One launch for both parts, so that they share the GPU: the first `long_warps` warps take the
// long rows' tiles, the others the other rows, `lanes` lanes a row, leaving out rows of
// `long_row` entries or more. Each part alone waits on its gathers with the GPU's memory half
// idle; side by side they keep it busier.
template <typename S, typename R>
__device__ void spmv_csr_apart(u64 nrows, u32 lanes, u64 long_row, u64 long_warps, u64 nlong,
                               const u64* __restrict__ rows, const u64* __restrict__ prefix,
                               const u64* __restrict__ offsets, const u32* __restrict__ cols,
                               const S* __restrict__ vals, const S* __restrict__ x,
                               S* __restrict__ y, typename R::acc* __restrict__ sums) {
    const u64 warp = global_thread() / 32;
    if (warp < long_warps) {
        spmv_csr_long_rows<S, R>(nlong, rows, prefix, offsets, cols, vals, x, sums, warp,
                                 long_warps);
    } else {
        spmv_csr_subwarp<S, R, true>(nrows, lanes, long_row, offsets, cols, vals, x, y,
                                     global_thread() - 32 * long_warps,
                                     grid_threads() - 32 * long_warps);
    }
}

// y at the long rows, from their sums.
template <typename S, typename R>
__device__ void spmv_long_rows_store(u64 nlong, const u64* __restrict__ rows,
                                     const typename R::acc* __restrict__ sums, S* __restrict__ y) {
    for (u64 j = global_thread(); j < nlong; j += grid_threads()) y[rows[j]] = R::store(sums[j]);
}

// The rows of `threshold` entries or more, and their entry counts, in no particular order:
// rows[slot] and lengths[slot] for a slot taken from `found` (zeroed); the longest of the
// other rows goes to `longest_short` (zeroed).
extern "C" __global__ void csr_find_long_rows(u64 nrows, u64 threshold,
                                              const u64* __restrict__ offsets,
                                              unsigned long long* found, u64* __restrict__ rows,
                                              u64* __restrict__ lengths,
                                              unsigned long long* longest_short) {
    u64 longest = 0;
    for (u64 i = global_thread(); i < nrows; i += grid_threads()) {
        const u64 len = offsets[i + 1] - offsets[i];
        if (len >= threshold) {
            const u64 slot = atomicAdd(found, 1ull);
            rows[slot] = i;
            lengths[slot] = len;
        } else {
            longest = max(longest, len);
        }
    }
    for (int d = 16; d > 0; d /= 2)
        longest = max(longest, (u64)__shfl_down_sync(0xffffffffu, longest, d));
    if ((threadIdx.x & 31u) == 0 && longest > 0)
        atomicMax(longest_short, (unsigned long long)longest);
}

// CSR by equal shares of entries, whatever the rows (the idea of Merrill & Garland's merge-based
// SpMV, in a segmented-sum form): each warp takes a tile of 32·TILE_ITEMS consecutive entries, so
// a row of 10^6 entries is shared by thousands of warps and rows of 3 entries leave no lane idle.
// The tile's products are staged in shared memory in entry order (the loads of A coalesce); each
// lane then sums its run of TILE_ITEMS consecutive products row by row. Rows that start and end
// in a run are stored directly; the open end of each run (its last row, unfinished) meets the
// next runs' in a segmented scan over the lanes, and the lane where such a row's last run ends
// stores it, or adds it atomically where the row crosses a tile boundary. y_acc is zeroed first,
// so rows without entries are never written.
//
// Each tile's first row comes from `tile_rows` (computed once per matrix by csr_tile_rows), and
// the offsets of its rows are loaded by the whole warp at once into shared memory, where the
// lanes find their runs' rows: the only global loads a tile waits on are that one and its
// products, where searching `offsets` cost a chain of dependent loads per lane.
#define TILE_ITEMS 8
#define TILE_WARPS 8  // warps per block: BLOCK / 32 on the host
#define TILE_ENTRIES (32 * TILE_ITEMS)  // CSR_TILE_ENTRIES on the host
// Offsets a warp keeps in shared memory: a tile meets at most TILE_ENTRIES rows with entries in it and
// the row after them; more (empty rows) and the lanes read `offsets` from global memory.
#define TILE_OFFSETS (TILE_ENTRIES + 2)
// Blocks per SM the kernel's registers must allow: its warps wait on the gathers of x, and 8
// blocks (32 registers) hid them better than the 5 its 48 registers allowed.
#define TILE_MIN_BLOCKS 8

// tile_rows[t] = the row holding entry min(t·TILE_ENTRIES, nnz - 1), for t in 0..=tiles (nnz > 0): the
// last row that starts at or before it.
extern "C" __global__ void csr_tile_rows(u64 nrows, u64 nnz, const u64* __restrict__ offsets,
                                         u64* __restrict__ tile_rows) {
    const u64 tiles = (nnz + TILE_ENTRIES - 1) / TILE_ENTRIES;
    for (u64 t = global_thread(); t <= tiles; t += grid_threads()) {
        const u64 k = min(t * TILE_ENTRIES, nnz - 1);
        u64 lo = 0, hi = nrows;  // offsets[lo] <= k < offsets[hi]
        while (hi - lo > 1) {
            const u64 mid = lo + (hi - lo) / 2;
            if (offsets[mid] <= k) lo = mid; else hi = mid;
        }
        tile_rows[t] = lo;
    }
}

// A row offset relative to the tile's first entry, clamped to [-1, TILE_ENTRIES + 1]: every comparison
// the tile makes (with 0, its runs' bounds and its end, all in [0, TILE_ENTRIES]) keeps its answer.
__device__ __forceinline__ int tile_relative(u64 offset, u64 kb) {
    if (offset < kb) return -1;
    return (int)min(offset - kb, (u64)TILE_ENTRIES + 1);
}

// The offsets of the tile's rows, relative to it: from shared memory, or global past its room.
struct TileOffsetsShared {
    const int* rel;
    __device__ int operator()(u64 r) const { return rel[r]; }
};
struct TileOffsetsGlobal {
    const u64* offsets;  // from the tile's first row
    u64 kb;
    __device__ int operator()(u64 r) const { return tile_relative(offsets[r], kb); }
};

// One tile of entries kb.. (`entries` of them) whose rows are r_first + 0..rows, their offsets
// relative to kb in `off` (rows + 1 of them). `sh` holds the tile's products in entry order.
template <typename R, typename Off>
__device__ __forceinline__ void spmv_tile_rows(u64 r_first, u64 rows, int entries, Off off,
                                               const typename R::acc* sh,
                                               typename R::acc* __restrict__ y_acc) {
    typedef typename R::acc Acc;
    const u32 lane = threadIdx.x & 31u;
    const int k0 = (int)(lane * TILE_ITEMS);
    const int k1 = min(k0 + TILE_ITEMS, entries);
    u64 row = 0, first_row = 0;
    Acc head = R::zero(), sum = R::zero();
    bool has_head = false, has_tail = false;
    if (k0 < entries) {
        u64 lo = 0, hi = rows;
        while (hi - lo > 1) {
            const u64 mid = lo + (hi - lo) / 2;
            if (off(mid) <= k0) lo = mid; else hi = mid;
        }
        row = first_row = lo;
        int row_start = off(row), row_end = off(row + 1);
        bool from_before = row_start < k0;  // the row's first entries are in earlier runs
        for (int k = k0; k < k1; ++k) {
            while (k >= row_end) {
                if (from_before) {
                    head = sum;
                    has_head = true;
                    from_before = false;
                } else if (row_end > row_start) {
                    y_acc[r_first + row] = sum;  // started and ended in this run
                }
                ++row;
                row_start = row_end;
                row_end = off(row + 1);
                sum = R::zero();
            }
            sum = R::add(sum, sh[k + k / TILE_ITEMS]);
        }
        if (!from_before && row_end == k1) {
            y_acc[r_first + row] = sum;  // started in this run and ends with it
        } else {
            has_tail = true;
        }
    }
    // Keys of the open ends, non-decreasing over the lanes: equal keys are one row's runs.
    // A lane without an open end gets an odd key no other lane has; idle lanes the largest.
    const u64 key = k0 >= entries ? ~0ull : 2 * row + (has_tail ? 0 : 1);
    Acc carry = has_tail ? sum : R::zero();
    for (u32 d = 1; d < 32; d <<= 1) {
        const int from = lane >= d ? (int)(lane - d) : (int)lane;
        const Acc up = shfl_idx(carry, from, 32);
        const u64 up_key = __shfl_sync(0xffffffffu, key, from);
        if (lane >= d && up_key == key) carry = R::add(carry, up);
    }
    const int next = lane < 31 ? (int)lane + 1 : (int)lane;
    const u64 next_key = __shfl_sync(0xffffffffu, key, next);
    const u64 next_first = __shfl_sync(0xffffffffu, first_row, next);
    const bool next_has_head = __shfl_sync(0xffffffffu, has_head, next);
    const Acc next_head = shfl_idx(head, next, 32);
    if (has_tail && (lane == 31 || next_key != key)) {
        // The last of this row's runs here; its last entries, if any, are the next lane's head.
        if (lane < 31 && next_has_head && next_first == row) carry = R::add(carry, next_head);
        if (off(row) >= 0 && off(row + 1) <= entries) {
            y_acc[r_first + row] = carry;
        } else {
            R::atomic_add(&y_acc[r_first + row], carry);
        }
    }
    // A row that came from the previous tile and ends in lane 0's run.
    if (lane == 0 && has_head) R::atomic_add(&y_acc[r_first + first_row], head);
}

template <typename S, typename R>
__device__ void spmv_csr_tiles(u64 nnz, const u64* __restrict__ tile_rows,
                               const u64* __restrict__ offsets, const u32* __restrict__ cols,
                               const S* __restrict__ vals, const S* __restrict__ x,
                               typename R::acc* __restrict__ y_acc) {
    typedef typename R::acc Acc;
    // One padding slot per run, so that the lanes' reads of their runs miss each other's banks.
    constexpr u32 PADDED = TILE_ENTRIES + 32;
    __shared__ Acc staged[TILE_WARPS][PADDED];
    __shared__ int staged_offsets[TILE_WARPS][TILE_OFFSETS];
    const u32 lane = threadIdx.x & 31u;
    Acc* sh = staged[threadIdx.x >> 5];
    int* sh_off = staged_offsets[threadIdx.x >> 5];
    const u64 tiles = (nnz + TILE_ENTRIES - 1) / TILE_ENTRIES;
    for (u64 t = global_thread() / 32; t < tiles; t += grid_threads() / 32) {
        const u64 kb = t * TILE_ENTRIES;
        const u64 ke = min(kb + TILE_ENTRIES, nnz);
        const u64 r_first = tile_rows[t];
        // Rows r_first..=tile_rows[t + 1]: the last may start at or after ke.
        const u64 rows = tile_rows[t + 1] - r_first + 1;
#pragma unroll
        for (u32 j = 0; j < TILE_ITEMS; ++j) {
            const u32 idx = j * 32 + lane;
            const u64 k = kb + idx;
            sh[idx + idx / TILE_ITEMS] = k < ke ? R::mul(vals[k], x[cols[k]]) : R::zero();
        }
        const bool fits = rows + 1 <= TILE_OFFSETS;
        if (fits) {
            for (u32 r = lane; r <= (u32)rows; r += 32) {
                sh_off[r] = tile_relative(offsets[r_first + r], kb);
            }
        }
        __syncwarp();
        if (fits) {
            spmv_tile_rows<R>(r_first, rows, (int)(ke - kb), TileOffsetsShared{sh_off}, sh, y_acc);
        } else {
            spmv_tile_rows<R>(r_first, rows, (int)(ke - kb),
                              TileOffsetsGlobal{offsets + r_first, kb}, sh, y_acc);
        }
        __syncwarp();
    }
}

// CSR-stream (the row blocks of Greathouse & Daga's CSR-Adaptive): rows are grouped once per
// matrix into row blocks of whole rows; a thread block takes one row block, loads its entries'
// products vals[k]·x[cols[k]] into shared memory with consecutive threads on consecutive
// entries (the loads of A coalesce whatever the rows), then sums the rows out of shared memory,
// `t` threads per row with `t` the largest power of two up to 32 that gives every row its own
// group. Every sum is formed in a fixed order, with no atomics on y: y needs no zeroing and the
// result does not depend on scheduling.
//
// Row block c holds the rows i with floor((i + offsets[i]) / STREAM_SPAN) = c: a row's position
// on the merge path of rows and entries (row i at i + offsets[i], its entries after it). So a
// row block covers STREAM_SPAN rows-plus-entries, which bounds both its rows (the serial part
// of the reduction) and the entries before its last row (fewer than STREAM_SPAN). Its last row
// may be of any length: if the block's entries do not fit STREAM_BUDGET, that row is summed
// apart by the whole thread block, each thread striding over it in registers. A row of
// STREAM_SPAN entries or more leaves the row blocks its entries cover without rows; given
// `partials` and `arrivals` (the host passes them where the longest row is that long), those
// blocks share the row: each sums the entries in its span of the merge path, and the block that
// finishes the row last (a counter per row) adds the parts in order and stores it.
#define STREAM_SPAN 1024    // CSR_STREAM_SPAN on the host
#define STREAM_BUDGET 2048  // products staged in shared memory per thread block
static_assert(STREAM_SPAN <= STREAM_BUDGET, "the rows before a block's last fit its budget");

// The row blocks: first[c] = the first row i with i + offsets[i] >= c·STREAM_SPAN (nrows if
// none), for c in 0..=nblocks. Row block c is rows first[c]..first[c + 1], empty where it lies
// inside the entries of row first[c] - 1.
extern "C" __global__ void csr_stream_blocks(u64 nrows, u64 nblocks,
                                             const u64* __restrict__ offsets,
                                             u64* __restrict__ first) {
    for (u64 c = global_thread(); c <= nblocks; c += grid_threads()) {
        const u64 target = c * STREAM_SPAN;
        u64 lo = 0, hi = nrows + 1;  // the answer lies in [lo, hi]; nrows + 1 is none
        while (lo < hi) {
            const u64 mid = lo + (hi - lo) / 2;
            if (mid + offsets[mid] >= target) hi = mid; else lo = mid + 1;
        }
        first[c] = min(lo, nrows);
    }
}

// Loads that bypass L1, for partial sums other thread blocks wrote (L1 is not coherent).
__device__ __forceinline__ float load_cg(const float* p) { return __ldcg(p); }
__device__ __forceinline__ double load_cg(const double* p) { return __ldcg(p); }
__device__ __forceinline__ hs_c32 load_cg(const hs_c32* p) {
    return {__ldcg(&p->re), __ldcg(&p->im)};
}
__device__ __forceinline__ hs_c64 load_cg(const hs_c64* p) {
    return {__ldcg(&p->re), __ldcg(&p->im)};
}

// Sum of v over the thread block, in thread 0 (a fixed order). Every thread must call it; it
// begins and ends with a barrier, so `warp_sums` is free again when it returns.
template <typename R>
__device__ typename R::acc stream_block_sum(typename R::acc v, typename R::acc* warp_sums) {
    const u32 tid = threadIdx.x;
    v = group_sum<R>(v, 32);
    __syncthreads();
    if ((tid & 31u) == 0) warp_sums[tid >> 5] = v;
    __syncthreads();
    if (tid < 32) {
        v = tid < (blockDim.x + 31) / 32 ? warp_sums[tid] : R::zero();
        v = group_sum<R>(v, 32);
    }
    __syncthreads();
    return v;
}

// Entries [k0, k1) of a row, summed by the whole thread block (in thread 0).
template <typename S, typename R>
__device__ typename R::acc stream_row_part(u64 k0, u64 k1, const u32* __restrict__ cols,
                                           const S* __restrict__ vals,
                                           const S* __restrict__ x,
                                           typename R::acc* warp_sums) {
    typename R::acc acc = R::zero();
#pragma unroll 4
    for (u64 k = k0 + threadIdx.x; k < k1; k += blockDim.x) {
        acc = R::add(acc, R::mul(vals[k], x[cols[k]]));
    }
    return stream_block_sum<R>(acc, warp_sums);
}

// Part `b - owner` of `parts` of row `row` is `sum` (in thread 0): stored in partials[b]; the
// block that stores the row's last part adds all of them, in order, into y[row]. Every thread
// must call it.
template <typename S, typename R>
__device__ void stream_finish_part(u64 row, u64 b, u64 owner, u64 parts,
                                   typename R::acc sum, typename R::acc* __restrict__ partials,
                                   u32* __restrict__ arrivals, typename R::acc* warp_sums,
                                   S* __restrict__ y) {
    typedef typename R::acc Acc;
    __shared__ bool last;
    if (threadIdx.x == 0) {
        partials[b] = sum;
        __threadfence();  // the part is visible before the count says so
        last = atomicAdd(&arrivals[owner], 1u) == (u32)(parts - 1);
    }
    __syncthreads();
    if (!last) return;  // uniform: `last` is the block's
    __threadfence();
    Acc acc = R::zero();
    for (u64 j = threadIdx.x; j < parts; j += blockDim.x) {
        acc = R::add(acc, load_cg(&partials[owner + j]));
    }
    acc = stream_block_sum<R>(acc, warp_sums);
    if (threadIdx.x == 0) {
        y[row] = R::store(acc);
        arrivals[owner] = 0;  // as the caller gave it, for the next product on this buffer
    }
}

template <typename S, typename R>
__device__ void spmv_csr_stream(u64 nblocks, const u64* __restrict__ first,
                                const u64* __restrict__ offsets, const u32* __restrict__ cols,
                                const S* __restrict__ vals, const S* __restrict__ x,
                                S* __restrict__ y, typename R::acc* __restrict__ partials,
                                u32* __restrict__ arrivals) {
    typedef typename R::acc Acc;
    __shared__ Acc staged[STREAM_BUDGET];
    __shared__ Acc warp_sums[32];
    const u32 tid = threadIdx.x;
    const bool split = partials != nullptr;
    // Every bound below is uniform over the thread block, so all threads reach each barrier.
    for (u64 b = blockIdx.x; b < nblocks; b += gridDim.x) {
        const u64 r0 = first[b], r1 = first[b + 1];
        if (r0 == r1) {
            // Inside the entries of row r0 - 1 (r0 > 0: row 0 is in block 0).
            if (!split) continue;
            const u64 row = r0 - 1;
            const u64 owner = (row + offsets[row]) / STREAM_SPAN;
            const u64 next = (row + 1 + offsets[row + 1]) / STREAM_SPAN;  // the next row's
            if (b >= next) continue;  // past the last row's end
            // Entry k of the row lies at row + 1 + k on the merge path; the last part also
            // takes the entries in the next row's block.
            const u64 k0 = b * STREAM_SPAN - row - 1;
            const u64 k1 = b + 1 == next ? offsets[row + 1] : (b + 1) * STREAM_SPAN - row - 1;
            const Acc sum = stream_row_part<S, R>(k0, k1, cols, vals, x, warp_sums);
            stream_finish_part<S, R>(row, b, owner, next - owner, sum, partials, arrivals,
                                     warp_sums, y);
            continue;
        }
        const u64 kb = offsets[r0], ke = offsets[r1];
        const u64 last_row = r1 - 1;
        // Row blocks this block's last row is shared by (1 unless it is split).
        const u64 parts = split ? (last_row + 1 + ke) / STREAM_SPAN - b : 1;
        // Rows r0..staged_end are summed from shared memory: all of them where they fit.
        u64 staged_end = r1, ks = ke;
        if (ke - kb > STREAM_BUDGET || parts > 1) {
            staged_end = last_row;
            ks = offsets[last_row];  // fewer than STREAM_SPAN entries before the last row
        }
#pragma unroll 4
        for (u64 k = kb + tid; k < ks; k += blockDim.x) {
            staged[k - kb] = R::mul(vals[k], x[cols[k]]);
        }
        __syncthreads();
        const u64 nr = staged_end - r0;
        if (nr > 0) {
            u32 t = 1;
            while (t < 32 && nr * (2 * t) <= blockDim.x) t *= 2;
            const u32 p = tid % t;
            const u64 groups = blockDim.x / t;
            const u64 rounds = (nr + groups - 1) / groups;
            // Groups of t lanes fill whole warps and every lane takes every round, so the
            // shuffles of group_sum see all 32 lanes.
            for (u64 round = 0; round < rounds; ++round) {
                const u64 row = r0 + tid / t + round * groups;
                Acc acc = R::zero();
                if (row < staged_end) {
                    const u64 end = offsets[row + 1] - kb;
                    for (u64 k = offsets[row] - kb + p; k < end; k += t) {
                        acc = R::add(acc, staged[k]);
                    }
                }
                acc = group_sum<R>(acc, (int)t);
                if (row < staged_end && p == 0) y[row] = R::store(acc);
            }
        }
        if (staged_end < r1) {
            if (parts > 1) {
                const u64 k1 = (b + 1) * STREAM_SPAN - last_row - 1;
                const Acc sum = stream_row_part<S, R>(ks, k1, cols, vals, x, warp_sums);
                stream_finish_part<S, R>(last_row, b, b, parts, sum, partials, arrivals,
                                         warp_sums, y);
            } else {
                const Acc sum = stream_row_part<S, R>(ks, ke, cols, vals, x, warp_sums);
                if (tid == 0) y[last_row] = R::store(sum);
            }
        }
        // The next row block overwrites staged.
        __syncthreads();
    }
}

// ELLR-T (Ortega et al.): T threads per row (T a power of two up to 32). Thread p of a row takes
// entries p, p+T, p+2T, ... of it; entry k of row i sits at k·N' + i, so for each k the threads
// of consecutive rows read consecutive addresses. The T partial sums meet in a shuffle reduction
// (the paper reduces through shared memory; shuffles do the same without it).
template <typename S, typename R>
__device__ void spmv_ellr(u64 nrows, u64 padded_rows, u32 threads_per_row,
                          const u32* __restrict__ row_lengths, const u32* __restrict__ cols,
                          const S* __restrict__ vals, const S* __restrict__ x,
                          S* __restrict__ y) {
    const u32 t = threads_per_row;
    const u32 p = threadIdx.x % t;
    const u64 groups = grid_threads() / t;
    const u64 first = global_thread() / t;
    // Loop bounds are uniform over each group of T lanes and whole groups fill a warp, so lanes
    // outside the matrix still join the shuffles.
    const u64 rounds = (nrows + groups - 1) / groups;
    for (u64 r = 0; r < rounds; ++r) {
        const u64 i = first + r * groups;
        typename R::acc acc = R::zero();
        if (i < nrows) {
            const u32 len = row_lengths[i];
            for (u32 k = p; k < len; k += t) {
                const u64 at = (u64)k * padded_rows + i;
                acc = R::add(acc, R::mul(vals[at], x[cols[at]]));
            }
        }
        acc = group_sum<R>(acc, (int)t);
        if (i < nrows && p == 0) y[i] = R::store(acc);
    }
}

// COO: one thread per triplet, row sums by atomics (triplets come in any order, repeats allowed).
template <typename S, typename R>
__device__ void spmv_coo(u64 nnz, const u32* __restrict__ rows, const u32* __restrict__ cols,
                         const S* __restrict__ vals, const S* __restrict__ x,
                         typename R::acc* __restrict__ y_acc) {
    for (u64 k = global_thread(); k < nnz; k += grid_threads()) {
        R::atomic_add(&y_acc[rows[k]], R::mul(vals[k], x[cols[k]]));
    }
}

// CSPR (Neelima & Raghavendra, Fig. 2): one thread per entry; the row and column come out of the
// single linear index row·ncols + col, and rows are summed with atomics. Indices increase, so
// the lanes of a warp hold runs of equal rows: a segmented reduction in registers first leaves
// one atomic per run instead of one per entry (the paper's version is the run length 1 case).
template <typename S, typename R>
__device__ void spmv_cspr(u64 nnz, u64 ncols, const u64* __restrict__ indices,
                          const S* __restrict__ vals, const S* __restrict__ x,
                          typename R::acc* __restrict__ y_acc) {
    typedef typename R::acc Acc;
    const int lane = threadIdx.x % 32;
    const u64 rounds = (nnz + grid_threads() - 1) / grid_threads();
    for (u64 r = 0; r < rounds; ++r) {
        const u64 k = global_thread() + r * grid_threads();
        u64 row = ~0ull;
        Acc v = R::zero();
        if (k < nnz) {
            const u64 linear = indices[k];
            row = linear / ncols;
            v = R::mul(vals[k], x[linear - row * ncols]);
        }
        // Suffix sums within runs: rows are sorted, so if lane+d has this lane's row, so do all
        // lanes between, and its partial sum covers exactly the next d entries of the run.
        for (int d = 1; d < 32; d *= 2) {
            const Acc other = shfl_down(v, d, 32);
            const u64 other_row = __shfl_down_sync(0xffffffffu, row, d, 32);
            if (lane + d < 32 && other_row == row) v = R::add(v, other);
        }
        const u64 prev_row = __shfl_up_sync(0xffffffffu, row, 1, 32);
        if (k < nnz && (lane == 0 || prev_row != row)) R::atomic_add(&y_acc[row], v);
    }
}

// CSC: one thread per column scatters x[j]·A[:, j] into the rows with atomics, so CSC needs no
// transpose on the host or the device.
template <typename S, typename R>
__device__ void spmv_csc(u64 ncols, const u64* __restrict__ offsets, const u32* __restrict__ rows,
                         const S* __restrict__ vals, const S* __restrict__ x,
                         typename R::acc* __restrict__ y_acc) {
    for (u64 j = global_thread(); j < ncols; j += grid_threads()) {
        const S xj = x[j];
        for (u64 k = offsets[j]; k < offsets[j + 1]; ++k) {
            R::atomic_add(&y_acc[rows[k]], R::mul(vals[k], xj));
        }
    }
}

// DIA: one thread per row; for each diagonal, consecutive threads read consecutive elements of
// the diagonal and of x.
template <typename S, typename R>
__device__ void spmv_dia(u64 nrows, u64 ncols, u32 ndiags, const i64* __restrict__ offsets,
                         const S* __restrict__ data, const S* __restrict__ x,
                         S* __restrict__ y) {
    for (u64 i = global_thread(); i < nrows; i += grid_threads()) {
        typename R::acc acc = R::zero();
        for (u32 d = 0; d < ndiags; ++d) {
            const i64 j = (i64)i + offsets[d];
            if (j >= 0 && j < (i64)ncols) {
                const S a = data[(u64)d * nrows + i];
                if (!hs_is_zero(a)) acc = R::add(acc, R::mul(a, x[j]));  // zeros are padding
            }
        }
        y[i] = R::store(acc);
    }
}

// BSR: one thread per scalar row; it walks its block row's blocks and multiplies its row of each
// r×c block (stored row-major) with c elements of x.
template <typename S, typename R>
__device__ void spmv_bsr(u64 nrows, u32 r, u32 c, const u64* __restrict__ offsets,
                         const u32* __restrict__ block_cols, const S* __restrict__ vals,
                         const S* __restrict__ x, S* __restrict__ y) {
    const u64 block_size = (u64)r * c;
    for (u64 i = global_thread(); i < nrows; i += grid_threads()) {
        const u64 br = i / r;
        const u64 within = i - br * r;
        typename R::acc acc = R::zero();
        for (u64 b = offsets[br]; b < offsets[br + 1]; ++b) {
            const S* row = vals + b * block_size + within * c;
            const S* xs = x + (u64)block_cols[b] * c;
            for (u32 m = 0; m < c; ++m)
                if (!hs_is_zero(row[m])) acc = R::add(acc, R::mul(row[m], xs[m]));  // padding
        }
        y[i] = R::store(acc);
    }
}

// The longest row of a CSR matrix: *out (zeroed by the caller) becomes the largest
// offsets[i + 1] - offsets[i]. The host picks the SpMV and SpMM kernels from it.
extern "C" __global__ void csr_longest_row(u64 nrows, const u64* __restrict__ offsets,
                                           unsigned long long* out) {
    u64 longest = 0;
    for (u64 i = global_thread(); i < nrows; i += grid_threads())
        longest = max(longest, offsets[i + 1] - offsets[i]);
    for (int d = 16; d > 0; d /= 2)
        longest = max(longest, (u64)__shfl_down_sync(0xffffffffu, longest, d));
    if ((threadIdx.x & 31u) == 0 && longest > 0) atomicMax(out, (unsigned long long)longest);
}

// Rounds an accumulator buffer to storage.
template <typename S, typename R>
__device__ void acc_to_storage(u64 n, const typename R::acc* __restrict__ in,
                               S* __restrict__ out) {
    for (u64 i = global_thread(); i < n; i += grid_threads()) out[i] = R::store(in[i]);
}

// Entry points, one per scalar type (T the storage type, S the plus-times semiring over it).
HS_INSTANTIATE(spmv_csr_scalar,
               (u64 nrows, const u64* offsets, const u32* cols, const void* vals, const void* x,
                void* y),
               (spmv_csr_scalar<T, S>(nrows, offsets, cols, (const T*)vals, (const T*)x, (T*)y)))
HS_INSTANTIATE(spmv_csr_vector,
               (u64 nrows, const u64* offsets, const u32* cols, const void* vals, const void* x,
                void* y),
               (spmv_csr_vector<T, S>(nrows, offsets, cols, (const T*)vals, (const T*)x, (T*)y)))
HS_INSTANTIATE(spmv_csr_subwarp,
               (u64 nrows, u32 lanes, const u64* offsets, const u32* cols, const void* vals,
                const void* x, void* y),
               (spmv_csr_subwarp<T, S, false>(nrows, lanes, 0, offsets, cols, (const T*)vals,
                                              (const T*)x, (T*)y, global_thread(),
                                              grid_threads())))
HS_INSTANTIATE(spmv_csr_apart,
               (u64 nrows, u32 lanes, u64 long_row, u64 long_warps, u64 nlong, const u64* rows,
                const u64* prefix, const u64* offsets, const u32* cols, const void* vals,
                const void* x, void* y, void* sums),
               (spmv_csr_apart<T, S>(nrows, lanes, long_row, long_warps, nlong, rows, prefix,
                                     offsets, cols, (const T*)vals, (const T*)x, (T*)y,
                                     (S::acc*)sums)))
HS_INSTANTIATE(spmv_long_rows_store,
               (u64 nlong, const u64* rows, const void* sums, void* y),
               (spmv_long_rows_store<T, S>(nlong, rows, (const S::acc*)sums, (T*)y)))
HS_INSTANTIATE_BOUNDED(spmv_csr_tiles, TILE_WARPS * 32, TILE_MIN_BLOCKS,
               (u64 nnz, const u64* tile_rows, const u64* offsets, const u32* cols,
                const void* vals, const void* x, void* y_acc),
               (spmv_csr_tiles<T, S>(nnz, tile_rows, offsets, cols, (const T*)vals, (const T*)x,
                                     (S::acc*)y_acc)))
HS_INSTANTIATE(spmv_csr_stream,
               (u64 nblocks, const u64* first, const u64* offsets, const u32* cols,
                const void* vals, const void* x, void* y, void* partials, u32* arrivals),
               (spmv_csr_stream<T, S>(nblocks, first, offsets, cols, (const T*)vals,
                                      (const T*)x, (T*)y, (S::acc*)partials, arrivals)))
HS_INSTANTIATE(spmv_ellr,
               (u64 nrows, u64 padded_rows, u32 t, const u32* row_lengths, const u32* cols,
                const void* vals, const void* x, void* y),
               (spmv_ellr<T, S>(nrows, padded_rows, t, row_lengths, cols, (const T*)vals,
                               (const T*)x, (T*)y)))
HS_INSTANTIATE(spmv_coo,
               (u64 nnz, const u32* rows, const u32* cols, const void* vals, const void* x,
                void* y_acc),
               (spmv_coo<T, S>(nnz, rows, cols, (const T*)vals, (const T*)x, (S::acc*)y_acc)))
HS_INSTANTIATE(spmv_cspr,
               (u64 nnz, u64 ncols, const u64* indices, const void* vals, const void* x,
                void* y_acc),
               (spmv_cspr<T, S>(nnz, ncols, indices, (const T*)vals, (const T*)x, (S::acc*)y_acc)))
HS_INSTANTIATE(spmv_csc,
               (u64 ncols, const u64* offsets, const u32* rows, const void* vals, const void* x,
                void* y_acc),
               (spmv_csc<T, S>(ncols, offsets, rows, (const T*)vals, (const T*)x, (S::acc*)y_acc)))
HS_INSTANTIATE(spmv_dia,
               (u64 nrows, u64 ncols, u32 ndiags, const i64* offsets, const void* data,
                const void* x, void* y),
               (spmv_dia<T, S>(nrows, ncols, ndiags, offsets, (const T*)data, (const T*)x, (T*)y)))
HS_INSTANTIATE(spmv_bsr,
               (u64 nrows, u32 r, u32 c, const u64* offsets, const u32* block_cols,
                const void* vals, const void* x, void* y),
               (spmv_bsr<T, S>(nrows, r, c, offsets, block_cols, (const T*)vals, (const T*)x,
                              (T*)y)))
HS_INSTANTIATE(acc_to_storage, (u64 n, const void* in, void* out),
               (acc_to_storage<T, S>(n, (const S::acc*)in, (T*)out)))
