// Shared definitions for hetsparse's CUDA kernels: scalar types, the semiring kernels are
// templated over, and the macro that instantiates a template as `extern "C"` entry points.
//
// Built with `cargo xtask kernels` (nvcc -ptx -arch=compute_75, PTX ISA restamped to 8.0 so
// that CUDA 12 drivers load it). Only the CUDA device headers are used: no runtime library.
#pragma once

typedef unsigned int u32;
typedef unsigned long long u64;

// ---------------------------------------------------------------------------------------------
// Scalar types. Complex values are plain {re, im} structs (the layout of num_complex::Complex);
// f16 and bf16 are 16 storage bits converted here, bit-exactly, so that no cuda_fp16 header
// or sm_53+/sm_80+ instruction is needed. Products of f16/bf16 are accumulated in f32.

struct hs_c32 { float re, im; };
struct hs_c64 { double re, im; };
struct hs_f16 { unsigned short bits; };
struct hs_bf16 { unsigned short bits; };

__device__ __forceinline__ hs_c32 operator+(hs_c32 a, hs_c32 b) { return {a.re + b.re, a.im + b.im}; }
__device__ __forceinline__ hs_c32 operator*(hs_c32 a, hs_c32 b) {
    return {a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re};
}
__device__ __forceinline__ hs_c64 operator+(hs_c64 a, hs_c64 b) { return {a.re + b.re, a.im + b.im}; }
__device__ __forceinline__ hs_c64 operator*(hs_c64 a, hs_c64 b) {
    return {a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re};
}

// IEEE binary16 <-> binary32, round to nearest even, with subnormals, infinities and NaN.
__device__ __forceinline__ float hs_f16_to_f32(unsigned short h) {
    u32 sign = (u32)(h & 0x8000u) << 16;
    u32 exp = (h >> 10) & 0x1fu;
    u32 man = h & 0x3ffu;
    if (exp == 0) {
        // zero or subnormal: man * 2^-24, exact in f32
        float v = (float)man * 5.9604644775390625e-8f;
        return __uint_as_float(__float_as_uint(v) | sign);
    }
    if (exp == 31) return __uint_as_float(sign | 0x7f800000u | (man << 13));
    return __uint_as_float(sign | ((exp + 112u) << 23) | (man << 13));
}

__device__ __forceinline__ unsigned short hs_f32_to_f16(float f) {
    u32 x = __float_as_uint(f);
    u32 sign = (x >> 16) & 0x8000u;
    u32 ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) return (unsigned short)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0u));
    if (ax >= 0x477ff000u) return (unsigned short)(sign | 0x7c00u);  // >= 65520 rounds to inf
    if (ax < 0x38800000u) {                                          // below 2^-14: subnormal
        u32 e = ax >> 23;
        if (e < 102u) return (unsigned short)sign;                   // below 2^-25: zero
        u32 mant = (ax & 0x7fffffu) | 0x800000u;
        u32 shift = 126u - e;                                        // 14..24
        u32 m = mant >> shift;
        u32 rem = mant & ((1u << shift) - 1u);
        u32 half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (m & 1u))) m += 1u;
        return (unsigned short)(sign | m);
    }
    u32 r = ax - 0x38000000u;                                        // rebias 127 -> 15
    r += 0xfffu + ((r >> 13) & 1u);
    return (unsigned short)(sign | (r >> 13));
}

// bfloat16 <-> binary32: the top 16 bits, round to nearest even, NaN kept quiet.
__device__ __forceinline__ float hs_bf16_to_f32(unsigned short h) { return __uint_as_float((u32)h << 16); }
__device__ __forceinline__ unsigned short hs_f32_to_bf16(float f) {
    u32 x = __float_as_uint(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((x >> 16) | 0x40u);
    return (unsigned short)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

// hs_scalar<T>: the accumulator type of T and the conversions to and from it.
template <class T> struct hs_scalar;
template <> struct hs_scalar<float> {
    typedef float acc;
    static __device__ __forceinline__ acc to_acc(float v) { return v; }
    static __device__ __forceinline__ float from_acc(acc v) { return v; }
};
template <> struct hs_scalar<double> {
    typedef double acc;
    static __device__ __forceinline__ acc to_acc(double v) { return v; }
    static __device__ __forceinline__ double from_acc(acc v) { return v; }
};
template <> struct hs_scalar<hs_c32> {
    typedef hs_c32 acc;
    static __device__ __forceinline__ acc to_acc(hs_c32 v) { return v; }
    static __device__ __forceinline__ hs_c32 from_acc(acc v) { return v; }
};
template <> struct hs_scalar<hs_c64> {
    typedef hs_c64 acc;
    static __device__ __forceinline__ acc to_acc(hs_c64 v) { return v; }
    static __device__ __forceinline__ hs_c64 from_acc(acc v) { return v; }
};
template <> struct hs_scalar<hs_f16> {
    typedef float acc;
    static __device__ __forceinline__ acc to_acc(hs_f16 v) { return hs_f16_to_f32(v.bits); }
    static __device__ __forceinline__ hs_f16 from_acc(acc v) { return {hs_f32_to_f16(v)}; }
};
template <> struct hs_scalar<hs_bf16> {
    typedef float acc;
    static __device__ __forceinline__ acc to_acc(hs_bf16 v) { return hs_bf16_to_f32(v.bits); }
    static __device__ __forceinline__ hs_bf16 from_acc(acc v) { return {hs_f32_to_bf16(v)}; }
};

// Whether a stored value is zero (either sign; complex: both parts). Zeros stored by DIA and
// BSR are padding, which is not multiplied: 0 × inf and 0 × NaN would otherwise give NaN where
// the same matrix in CSR gives a number.
__device__ __forceinline__ bool hs_is_zero(float v) { return v == 0.0f; }
__device__ __forceinline__ bool hs_is_zero(double v) { return v == 0.0; }
__device__ __forceinline__ bool hs_is_zero(hs_c32 v) { return v.re == 0.0f && v.im == 0.0f; }
__device__ __forceinline__ bool hs_is_zero(hs_c64 v) { return v.re == 0.0 && v.im == 0.0; }
__device__ __forceinline__ bool hs_is_zero(hs_f16 v) { return (v.bits & 0x7fffu) == 0; }
__device__ __forceinline__ bool hs_is_zero(hs_bf16 v) { return (v.bits & 0x7fffu) == 0; }

// Atomic accumulation into shared or global memory (complex: each part on its own; the sum
// of the parts is the complex sum, whatever the interleaving).
__device__ __forceinline__ void hs_atomic_add(float* p, float v) { atomicAdd(p, v); }
__device__ __forceinline__ void hs_atomic_add(double* p, double v) { atomicAdd(p, v); }
__device__ __forceinline__ void hs_atomic_add(hs_c32* p, hs_c32 v) { atomicAdd(&p->re, v.re); atomicAdd(&p->im, v.im); }
__device__ __forceinline__ void hs_atomic_add(hs_c64* p, hs_c64 v) { atomicAdd(&p->re, v.re); atomicAdd(&p->im, v.im); }

template <class A> __device__ __forceinline__ A hs_zero() { return A(); }
template <> __device__ __forceinline__ hs_c32 hs_zero<hs_c32>() { return {0.0f, 0.0f}; }
template <> __device__ __forceinline__ hs_c64 hs_zero<hs_c64>() { return {0.0, 0.0}; }

// ---------------------------------------------------------------------------------------------
// Semirings. A kernel is a template over <T, S>; S says how stored values multiply into the
// accumulator and how partial results add. Other semirings (min-plus, boolean) are further
// structs with the same members.

template <class T> struct PlusTimes {
    typedef typename hs_scalar<T>::acc acc;
    static __device__ __forceinline__ acc zero() { return hs_zero<acc>(); }
    static __device__ __forceinline__ acc mul(T a, T b) {
        return hs_scalar<T>::to_acc(a) * hs_scalar<T>::to_acc(b);
    }
    static __device__ __forceinline__ acc add(acc a, acc b) { return a + b; }
    static __device__ __forceinline__ void atomic_add(acc* p, acc v) { hs_atomic_add(p, v); }
    static __device__ __forceinline__ T store(acc v) { return hs_scalar<T>::from_acc(v); }
};

// ---------------------------------------------------------------------------------------------
// HS_INSTANTIATE(name, (params), body): one `extern "C"` kernel per scalar type, named
// name_f32, name_f64, name_c32, name_c64, name_f16, name_bf16. Value arrays are passed as
// `void*` in `params` so that the parameter list does not depend on the type; inside `body`
// `T` is the storage type and `S` the plus-times semiring over it.
#define HS_INSTANTIATE_ONE(name, suffix, type, params, body) \
    extern "C" __global__ void name##_##suffix params {     \
        typedef type T;                                     \
        typedef PlusTimes<type> S;                          \
        body;                                               \
    }
// The same with __launch_bounds__(threads, min_blocks): registers capped so that min_blocks
// blocks of `threads` fit an SM, for latency-bound kernels that need warps in flight more
// than registers; half as many blocks for 16-byte types (complex f64), whose shared memory
// allows no more and whose registers would spill.
#define HS_INSTANTIATE_ONE_BOUNDED(name, suffix, type, threads, min_blocks, params, body) \
    extern "C" __global__ void                                                               \
    __launch_bounds__(threads, sizeof(type) > 8 ? (min_blocks) / 2 : (min_blocks))           \
        name##_##suffix params {                                                             \
        typedef type T;                                                                      \
        typedef PlusTimes<type> S;                                                           \
        body;                                                                                \
    }
#define HS_INSTANTIATE_BOUNDED(name, threads, min_blocks, params, body)                          \
    HS_INSTANTIATE_ONE_BOUNDED(name, f32, float, threads, min_blocks, params, body)              \
    HS_INSTANTIATE_ONE_BOUNDED(name, f64, double, threads, min_blocks, params, body)             \
    HS_INSTANTIATE_ONE_BOUNDED(name, c32, hs_c32, threads, min_blocks, params, body)             \
    HS_INSTANTIATE_ONE_BOUNDED(name, c64, hs_c64, threads, min_blocks, params, body)             \
    HS_INSTANTIATE_ONE_BOUNDED(name, f16, hs_f16, threads, min_blocks, params, body)             \
    HS_INSTANTIATE_ONE_BOUNDED(name, bf16, hs_bf16, threads, min_blocks, params, body)
#define HS_INSTANTIATE(name, params, body)                   \
    HS_INSTANTIATE_ONE(name, f32, float, params, body)       \
    HS_INSTANTIATE_ONE(name, f64, double, params, body)      \
    HS_INSTANTIATE_ONE(name, c32, hs_c32, params, body)      \
    HS_INSTANTIATE_ONE(name, c64, hs_c64, params, body)      \
    HS_INSTANTIATE_ONE(name, f16, hs_f16, params, body)      \
    HS_INSTANTIATE_ONE(name, bf16, hs_bf16, params, body)

// Dynamic shared memory of every kernel (one declaration: nvcc wants a single linkage).
extern __shared__ __align__(16) unsigned char hs_smem[];

// Grid-stride loop over 64-bit indices.
#define HS_GRID_STRIDE(i, n)                                                          \
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < (u64)(n);            \
         i += (u64)blockDim.x * gridDim.x)
