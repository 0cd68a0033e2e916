// Warp reductions and atomic accumulation over the accumulator types, shared by the SpMV, SpMM,
// DIA and BSR kernels (engineer B). Complex accumulators move as their two real parts.
#pragma once
#include "common.cuh"

typedef long long i64;

__device__ __forceinline__ float shfl_down(float v, unsigned delta, int width) {
    return __shfl_down_sync(0xffffffffu, v, delta, width);
}
__device__ __forceinline__ double shfl_down(double v, unsigned delta, int width) {
    return __shfl_down_sync(0xffffffffu, v, delta, width);
}
__device__ __forceinline__ hs_c32 shfl_down(hs_c32 v, unsigned delta, int width) {
    return {shfl_down(v.re, delta, width), shfl_down(v.im, delta, width)};
}
__device__ __forceinline__ hs_c64 shfl_down(hs_c64 v, unsigned delta, int width) {
    return {shfl_down(v.re, delta, width), shfl_down(v.im, delta, width)};
}
__device__ __forceinline__ float shfl_idx(float v, int lane, int width) {
    return __shfl_sync(0xffffffffu, v, lane, width);
}
__device__ __forceinline__ double shfl_idx(double v, int lane, int width) {
    return __shfl_sync(0xffffffffu, v, lane, width);
}
__device__ __forceinline__ hs_c32 shfl_idx(hs_c32 v, int lane, int width) {
    return {shfl_idx(v.re, lane, width), shfl_idx(v.im, lane, width)};
}
__device__ __forceinline__ hs_c64 shfl_idx(hs_c64 v, int lane, int width) {
    return {shfl_idx(v.re, lane, width), shfl_idx(v.im, lane, width)};
}

// Sum over groups of `width` consecutive lanes (a power of two up to 32); lane 0 of each group
// holds the result. Every lane of the warp must call it.
template <typename R, typename Acc>
__device__ __forceinline__ Acc group_sum(Acc v, int width) {
    for (int delta = width / 2; delta > 0; delta /= 2) {
        v = R::add(v, shfl_down(v, delta, width));
    }
    return v;
}


__device__ __forceinline__ u64 global_thread() {
    return (u64)blockIdx.x * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ u64 grid_threads() { return (u64)gridDim.x * blockDim.x; }

// Shuffle of a stored value of any size (2, 4, 8 or 16 bytes) as 32-bit words.
template <typename S>
__device__ __forceinline__ S shfl_stored(S v, int lane, int width) {
    constexpr int words = (sizeof(S) + 3) / 4;
    union {
        S value;
        unsigned w[words];
    } u;
    u.w[words - 1] = 0;
    u.value = v;
#pragma unroll
    for (int q = 0; q < words; ++q) u.w[q] = __shfl_sync(0xffffffffu, u.w[q], lane, width);
    return u.value;
}

// Largest r in [lo, hi) with offsets[r] <= k, given offsets[lo] <= k: a 32-way search by the
// whole warp (each round one load per lane and a ballot), log32 of the range in rounds.
__device__ __forceinline__ u64 warp_row_of(const u64* __restrict__ offsets, u64 lo, u64 hi,
                                           u64 k) {
    const u32 lane = threadIdx.x & 31u;
    while (hi - lo > 1) {
        const u64 step = (hi - lo + 31) / 32;
        const u64 probe = lo + (u64)lane * step;
        const bool le = probe < hi && offsets[probe] <= k;
        const u32 below = __ballot_sync(0xffffffffu, le);
        lo += (u64)(31 - __clz(below)) * step;
        hi = min(lo + step, hi);
    }
    return lo;
}
