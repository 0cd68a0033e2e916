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


// Loads of data read many times and never written by the kernel (the vector x of SpMV),
// through the read-only data cache (ld.global.nc), explicitly: the compiler stops proving it
// read-only once a kernel also stores with `store_once`.
template <typename T>
__device__ __forceinline__ T load_read_only(const T* p) {
    if constexpr (alignof(T) == 8) {
        union { T value; unsigned long long w[sizeof(T) / 8]; } u;
#pragma unroll
        for (unsigned q = 0; q < sizeof(T) / 8; ++q) u.w[q] = __ldg((const unsigned long long*)p + q);
        return u.value;
    } else if constexpr (alignof(T) == 4) {
        union { T value; unsigned w[sizeof(T) / 4]; } u;
#pragma unroll
        for (unsigned q = 0; q < sizeof(T) / 4; ++q) u.w[q] = __ldg((const unsigned*)p + q);
        return u.value;
    } else if constexpr (alignof(T) == 2 && sizeof(T) == 2) {
        union { T value; unsigned short w; } u;
        u.w = __ldg((const unsigned short*)p);
        return u.value;
    } else {
        return *p;
    }
}

// Loads and stores of data touched once (a streamed matrix's entries, the vector a product
// writes), marked evict-first in L2: in SpMV the vector x is gathered again and again while A
// streams past, and A's lines, cached normally, push x's out of L2. L2 cache hints need sm_80;
// the portable PTX (and older GPUs) loads normally. L1 keeps its normal policy (the streaming
// hint `.cs` also evicts from L1, which costs kernels that reuse a line of A from L1).
// Done in words of T's alignment, so complex values (8-aligned, 16 bytes) need no 16-byte
// alignment; read-only data (A, x) through the non-coherent path.
#if __CUDA_ARCH__ >= 800
#define HS_L2_HINTS 1
__device__ __forceinline__ u64 l2_evict_first_policy() {
    u64 policy;
    asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
    return policy;
}
#endif

template <typename T>
__device__ __forceinline__ T load_once(const T* p) {
#ifdef HS_L2_HINTS
    const u64 policy = l2_evict_first_policy();
    if constexpr (alignof(T) == 8) {
        union { T value; unsigned long long w[sizeof(T) / 8]; } u;
#pragma unroll
        for (unsigned q = 0; q < sizeof(T) / 8; ++q) {
            asm("ld.global.nc.L2::cache_hint.b64 %0, [%1], %2;"
                : "=l"(u.w[q]) : "l"((const unsigned long long*)p + q), "l"(policy));
        }
        return u.value;
    } else if constexpr (alignof(T) == 4) {
        union { T value; unsigned w[sizeof(T) / 4]; } u;
#pragma unroll
        for (unsigned q = 0; q < sizeof(T) / 4; ++q) {
            asm("ld.global.nc.L2::cache_hint.b32 %0, [%1], %2;"
                : "=r"(u.w[q]) : "l"((const unsigned*)p + q), "l"(policy));
        }
        return u.value;
    } else if constexpr (alignof(T) == 2 && sizeof(T) == 2) {
        union { T value; unsigned short w; } u;
        asm("ld.global.nc.L2::cache_hint.b16 %0, [%1], %2;"
            : "=h"(u.w) : "l"((const unsigned short*)p), "l"(policy));
        return u.value;
    }
#endif
    return load_read_only(p);
}
template <typename T>
__device__ __forceinline__ void store_once(T* p, T v) {
#ifdef HS_L2_HINTS
    const u64 policy = l2_evict_first_policy();
    if constexpr (alignof(T) == 8) {
        union { T value; unsigned long long w[sizeof(T) / 8]; } u;
        u.value = v;
#pragma unroll
        for (unsigned q = 0; q < sizeof(T) / 8; ++q) {
            asm volatile("st.global.L2::cache_hint.b64 [%0], %1, %2;"
                         :: "l"((unsigned long long*)p + q), "l"(u.w[q]), "l"(policy) : "memory");
        }
        return;
    } else if constexpr (alignof(T) == 4) {
        union { T value; unsigned w[sizeof(T) / 4]; } u;
        u.value = v;
#pragma unroll
        for (unsigned q = 0; q < sizeof(T) / 4; ++q) {
            asm volatile("st.global.L2::cache_hint.b32 [%0], %1, %2;"
                         :: "l"((unsigned*)p + q), "r"(u.w[q]), "l"(policy) : "memory");
        }
        return;
    } else if constexpr (alignof(T) == 2 && sizeof(T) == 2) {
        union { T value; unsigned short w; } u;
        u.value = v;
        asm volatile("st.global.L2::cache_hint.b16 [%0], %1, %2;"
                     :: "l"((unsigned short*)p), "h"(u.w), "l"(policy) : "memory");
        return;
    }
#endif
    *p = v;
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
