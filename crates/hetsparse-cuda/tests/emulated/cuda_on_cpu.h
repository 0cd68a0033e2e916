// Just enough of CUDA to run hetsparse's semiring kernels (kernels-cuda/semiring.cu) on the CPU,
// for a test on machines without a GPU: each lane of a warp is a std::thread, and the 32 lanes
// meet at __syncwarp / __shfl_down_sync / __ballot_sync through barriers keyed by the lane mask
// (so that the groups of lanes of one warp synchronise apart, as on the GPU).
//
// Lanes run concurrently without the GPU's lockstep, so a kernel that relies on lockstep without
// synchronising is caught here rather than hidden.
#pragma once

#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
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

inline std::mutex hs_atomic_lock;
inline float atomicAdd(float* p, float v) { std::lock_guard<std::mutex> g(hs_atomic_lock); float o = *p; *p = o + v; return o; }
inline double atomicAdd(double* p, double v) { std::lock_guard<std::mutex> g(hs_atomic_lock); double o = *p; *p = o + v; return o; }
inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) {
    return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST);
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

// The 32 lanes of the one warp that runs at a time: threads kept for the whole process, so that
// a launch costs a wake-up per warp rather than a thread per lane. Warps run one after another,
// which kernels without block-wide synchronisation or shared memory (semiring.cu's) allow.
struct hs_lanes {
    std::vector<std::thread> workers;
    std::mutex m;
    std::condition_variable go, done;
    const std::function<void()>* job = nullptr;
    unsigned block = 0, warp = 0;
    unsigned long round = 0;
    unsigned finished = 0;
    bool stop = false;
    hs_warp meeting;

    hs_lanes() {
        for (unsigned lane = 0; lane < 32; ++lane) {
            workers.emplace_back([this, lane] {
                unsigned long seen = 0;
                for (;;) {
                    std::unique_lock<std::mutex> lock(m);
                    go.wait(lock, [&] { return stop || round != seen; });
                    if (stop) return;
                    seen = round;
                    const std::function<void()>* kernel = job;
                    blockIdx = {block, 0, 0};
                    threadIdx = {warp * 32 + lane, 0, 0};
                    lock.unlock();
                    hs_this_warp = &meeting;
                    (*kernel)();
                    lock.lock();
                    if (++finished == 32) done.notify_all();
                }
            });
        }
    }
    ~hs_lanes() {
        {
            std::lock_guard<std::mutex> lock(m);
            stop = true;
        }
        go.notify_all();
        for (auto& w : workers) w.join();
    }
    void run(const std::function<void()>& kernel, unsigned b, unsigned w) {
        std::unique_lock<std::mutex> lock(m);
        job = &kernel;
        block = b;
        warp = w;
        finished = 0;
        ++round;
        go.notify_all();
        done.wait(lock, [&] { return finished == 32; });
    }
};

// Runs `kernel` on `grid` blocks of `block` threads (a multiple of 32), a warp at a time.
inline void hs_launch(unsigned grid, unsigned block, const std::function<void()>& kernel) {
    static hs_lanes lanes;
    gridDim = {grid, 1, 1};
    blockDim = {block, 1, 1};
    for (unsigned b = 0; b < grid; ++b) {
        for (unsigned w = 0; w < block / 32; ++w) lanes.run(kernel, b, w);
    }
}
