// Just enough of CUDA to run hetsparse's semiring kernels (kernels-cuda/semiring.cu) on the CPU,
// for a test on machines without a GPU: each thread of a block is a std::thread, the 32 lanes of
// a warp meet at __syncwarp / __shfl_down_sync / __ballot_sync through barriers keyed by the lane
// mask (so that the groups of lanes of one warp synchronise apart, as on the GPU), and the whole
// block at __syncthreads. Blocks run one after another, so the dynamic shared memory (hs_smem,
// which the including file defines) is one array. Atomics are the host's.
//
// Threads run concurrently without the GPU's lockstep, so a kernel that relies on lockstep
// without synchronising is caught here rather than hidden.
#pragma once

#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#define __device__
#define __global__
#define __host__
#define __forceinline__ inline
#define __shared__
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(...)

struct hs_dim3 {
    unsigned x, y, z;
};
inline thread_local hs_dim3 threadIdx{0, 0, 0};
inline thread_local hs_dim3 blockIdx{0, 0, 0};
inline hs_dim3 blockDim{1, 1, 1};
inline hs_dim3 gridDim{1, 1, 1};

inline float __int_as_float(int v) { float f; std::memcpy(&f, &v, 4); return f; }
inline float __uint_as_float(unsigned v) { float f; std::memcpy(&f, &v, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned v; std::memcpy(&v, &f, 4); return v; }
inline double __longlong_as_double(long long v) { double d; std::memcpy(&d, &v, 8); return d; }
inline int __popc(unsigned v) { return __builtin_popcount(v); }

inline long long __double_as_longlong(double d) { long long v; std::memcpy(&v, &d, 8); return v; }

// The atomics the kernels use, on the host's atomics (GCC's builtins, sequentially consistent).
template <class W>
inline W hs_cas(W* p, W expected, W desired) {
    __atomic_compare_exchange_n(p, &expected, desired, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    return expected;
}
inline unsigned atomicCAS(unsigned* p, unsigned e, unsigned d) { return hs_cas(p, e, d); }
inline unsigned long long atomicCAS(unsigned long long* p, unsigned long long e,
                                    unsigned long long d) {
    return hs_cas(p, e, d);
}
inline int atomicAdd(int* p, int v) {
    // Wrapping, as the GPU's: on the unsigned bits.
    return (int)__atomic_fetch_add((unsigned*)p, (unsigned)v, __ATOMIC_SEQ_CST);
}
inline unsigned atomicAdd(unsigned* p, unsigned v) {
    return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST);
}
inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) {
    return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST);
}
// Floating-point adds by compare-and-swap on the bits (the GPU adds in memory, one at a time).
template <class F, class W>
inline F hs_float_add(F* p, F v) {
    W* w = (W*)p;
    W seen = __atomic_load_n(w, __ATOMIC_SEQ_CST);
    for (;;) {
        F old, sum;
        std::memcpy(&old, &seen, sizeof(F));
        sum = old + v;
        W want;
        std::memcpy(&want, &sum, sizeof(F));
        W before = hs_cas(w, seen, want);
        if (before == seen) return old;
        seen = before;
    }
}
inline float atomicAdd(float* p, float v) { return hs_float_add<float, unsigned>(p, v); }
inline double atomicAdd(double* p, double v) {
    return hs_float_add<double, unsigned long long>(p, v);
}
template <class V, bool less>
inline V hs_extreme(V* p, V v) {
    V seen = __atomic_load_n(p, __ATOMIC_SEQ_CST);
    for (;;) {
        V want = (less ? v < seen : v > seen) ? v : seen;
        if (want == seen) return seen;
        V before = hs_cas(p, seen, want);
        if (before == seen) return seen;
        seen = before;
    }
}
inline int atomicMin(int* p, int v) { return hs_extreme<int, true>(p, v); }
inline unsigned atomicMin(unsigned* p, unsigned v) { return hs_extreme<unsigned, true>(p, v); }
inline long long atomicMin(long long* p, long long v) { return hs_extreme<long long, true>(p, v); }
inline unsigned long long atomicMin(unsigned long long* p, unsigned long long v) {
    return hs_extreme<unsigned long long, true>(p, v);
}
inline int atomicMax(int* p, int v) { return hs_extreme<int, false>(p, v); }
inline unsigned atomicMax(unsigned* p, unsigned v) { return hs_extreme<unsigned, false>(p, v); }
inline long long atomicMax(long long* p, long long v) { return hs_extreme<long long, false>(p, v); }
inline unsigned long long atomicMax(unsigned long long* p, unsigned long long v) {
    return hs_extreme<unsigned long long, false>(p, v);
}

// One warp's meeting points.
struct hs_warp {
    std::mutex m;
    std::condition_variable cv;
    // Per lane mask: lanes arrived in this round, and the round.
    std::map<unsigned, std::pair<int, unsigned long>> rounds;
    unsigned long long slots[32];

    void barrier(unsigned mask) {
        std::unique_lock<std::mutex> lock(m);
        auto& r = rounds[mask];
        unsigned long round = r.second;
        if (++r.first == __builtin_popcount(mask)) {
            r.first = 0;
            ++r.second;
            cv.notify_all();
        } else {
            cv.wait(lock, [&] { return rounds[mask].second != round; });
        }
    }
};
inline thread_local hs_warp* hs_this_warp = nullptr;

// One block's meeting point, for __syncthreads: every thread of the block.
struct hs_block_barrier {
    std::mutex m;
    std::condition_variable cv;
    unsigned arrived = 0, threads = 0;
    unsigned long round = 0;

    void wait() {
        std::unique_lock<std::mutex> lock(m);
        unsigned long mine = round;
        if (++arrived == threads) {
            arrived = 0;
            ++round;
            cv.notify_all();
        } else {
            cv.wait(lock, [&] { return round != mine; });
        }
    }
};
inline thread_local hs_block_barrier* hs_this_block = nullptr;

inline void __syncthreads() { hs_this_block->wait(); }

inline unsigned hs_lane() { return threadIdx.x & 31u; }

inline void __syncwarp(unsigned mask = 0xffffffffu) { hs_this_warp->barrier(mask); }

template <class V>
inline V __shfl_down_sync(unsigned mask, V v, unsigned delta, int width = 32) {
    static_assert(sizeof(V) <= 8, "one slot per lane");
    hs_warp* w = hs_this_warp;
    unsigned lane = hs_lane();
    unsigned long long bits = 0;
    std::memcpy(&bits, &v, sizeof(V));
    w->barrier(mask);
    w->slots[lane] = bits;
    w->barrier(mask);
    unsigned src = lane + delta;
    V out = v;
    if ((src & ~(unsigned)(width - 1)) == (lane & ~(unsigned)(width - 1)) && src < 32) {
        std::memcpy(&out, &w->slots[src], sizeof(V));
    }
    w->barrier(mask);
    return out;
}

inline unsigned __ballot_sync(unsigned mask, bool pred) {
    hs_warp* w = hs_this_warp;
    unsigned lane = hs_lane();
    w->barrier(mask);
    w->slots[lane] = pred ? 1 : 0;
    w->barrier(mask);
    unsigned out = 0;
    for (unsigned l = 0; l < 32; ++l) {
        if ((mask >> l) & 1u) out |= (unsigned)(w->slots[l] != 0) << l;
    }
    w->barrier(mask);
    return out;
}

// The threads of the one block that runs at a time: kept for the whole process (as many as the
// largest block so far), so that a launch costs a wake-up per thread rather than a thread each.
struct hs_threads {
    std::vector<std::thread> workers;
    std::mutex m;
    std::condition_variable go, done;
    const std::function<void()>* job = nullptr;
    unsigned block = 0, threads = 0;
    unsigned long round = 0;
    unsigned finished = 0;
    bool stop = false;
    std::vector<std::unique_ptr<hs_warp>> warps;
    hs_block_barrier barrier;

    void grow(unsigned n) {
        while (warps.size() * 32 < n) warps.emplace_back(new hs_warp());
        for (unsigned t = (unsigned)workers.size(); t < n; ++t) {
            // Started under the lock: the first round it takes is the next one.
            workers.emplace_back([this, t, start = round] {
                unsigned long seen = start;
                std::unique_lock<std::mutex> lock(m);
                for (;;) {
                    go.wait(lock, [&] { return stop || round != seen; });
                    if (stop) return;
                    seen = round;
                    if (t >= threads) continue;
                    const std::function<void()>* kernel = job;
                    blockIdx = {block, 0, 0};
                    threadIdx = {t, 0, 0};
                    hs_this_warp = warps[t / 32].get();
                    hs_this_block = &barrier;
                    lock.unlock();
                    (*kernel)();
                    lock.lock();
                    if (++finished == threads) done.notify_all();
                }
            });
        }
    }
    ~hs_threads() {
        {
            std::lock_guard<std::mutex> lock(m);
            stop = true;
        }
        go.notify_all();
        for (auto& w : workers) w.join();
    }
    void run(const std::function<void()>& kernel, unsigned b, unsigned n) {
        std::unique_lock<std::mutex> lock(m);
        job = &kernel;
        block = b;
        threads = n;
        barrier.threads = n;
        finished = 0;
        ++round;
        go.notify_all();
        done.wait(lock, [&] { return finished == threads; });
    }
};

// Runs `kernel` on `grid` blocks of `block` threads (a multiple of 32), a block at a time.
inline void hs_launch(unsigned grid, unsigned block, const std::function<void()>& kernel) {
    static hs_threads threads;
    {
        std::lock_guard<std::mutex> lock(threads.m);
        threads.grow(block);
    }
    gridDim = {grid, 1, 1};
    blockDim = {block, 1, 1};
    for (unsigned b = 0; b < grid; ++b) threads.run(kernel, b, block);
}
