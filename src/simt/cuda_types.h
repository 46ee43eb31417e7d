#pragma once
// The spelling of CUDA C++ that a kernel file needs before any code: the function and variable
// qualifiers (__global__, __device__, __shared__, ...) and the vector types (dim3, uint3,
// float4, ...) with their make_* functions. With the CUDA toolkit on the include path these
// are the toolkit's own <vector_types.h>/<vector_functions.h> (so cuda_bf16.h and friends
// interoperate); without it, layout-compatible definitions below. See simt.h for the design.
#if defined(__CUDACC__)
#error "simt is the host emulator of CUDA; nvcc builds use the real CUDA builtins"
#endif

#if __has_include(<vector_types.h>) && __has_include(<vector_functions.h>)
#include <vector_functions.h>
#include <vector_types.h>
#define SIMT_HAVE_CUDA_VECTOR_TYPES 1
#else
#define SIMT_HAVE_CUDA_VECTOR_TYPES 0
#endif

// Qualifiers. The toolkit's host_defines.h (if included, before or after this file) defines
// the location qualifiers as nothing for a host compiler but leaves __shared__ meaningless;
// here __shared__ becomes per-OS-thread storage: blocks run one at a time on each OS thread,
// so a block's static shared arrays are the running OS thread's. ASan builds (or
// -DSIMT_SHARED_STATIC) use plain statics, which ASan surrounds with redzones, and then run
// every launch on one OS thread. (__restrict__ is a g++ keyword already; __noinline__ is left
// alone because libstdc++ spells __attribute__((__noinline__)).)
#undef __global__
#undef __device__
#undef __host__
#undef __shared__
#undef __forceinline__
#undef __launch_bounds__
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __launch_bounds__(...)
#if defined(__SANITIZE_ADDRESS__) && !defined(SIMT_SHARED_STATIC)
#define SIMT_SHARED_STATIC 1
#endif
#if defined(SIMT_SHARED_STATIC)
#define __shared__ static
#else
#define __shared__ static thread_local
#endif
#ifndef __align__
#define __align__(n) __attribute__((aligned(n)))
#endif

#if !SIMT_HAVE_CUDA_VECTOR_TYPES
// Layout-compatible stand-ins for CUDA's vector types (same members, sizes and alignments).
#define SIMT_VECTOR_TYPES(T, name, align2, align4)                      \
  struct name##1 {                                                      \
    T x;                                                                \
  };                                                                    \
  struct alignas(align2) name##2 {                                      \
    T x, y;                                                             \
  };                                                                    \
  struct name##3 {                                                      \
    T x, y, z;                                                          \
  };                                                                    \
  struct alignas(align4) name##4 {                                      \
    T x, y, z, w;                                                       \
  };                                                                    \
  constexpr name##1 make_##name##1(T x) { return {x}; }                 \
  constexpr name##2 make_##name##2(T x, T y) { return {x, y}; }         \
  constexpr name##3 make_##name##3(T x, T y, T z) { return {x, y, z}; } \
  constexpr name##4 make_##name##4(T x, T y, T z, T w) { return {x, y, z, w}; }
SIMT_VECTOR_TYPES(signed char, char, 2, 4)
SIMT_VECTOR_TYPES(unsigned char, uchar, 2, 4)
SIMT_VECTOR_TYPES(short, short, 4, 8)
SIMT_VECTOR_TYPES(unsigned short, ushort, 4, 8)
SIMT_VECTOR_TYPES(int, int, 8, 16)
SIMT_VECTOR_TYPES(unsigned int, uint, 8, 16)
SIMT_VECTOR_TYPES(long long, longlong, 16, 16)
SIMT_VECTOR_TYPES(unsigned long long, ulonglong, 16, 16)
SIMT_VECTOR_TYPES(float, float, 8, 16)
SIMT_VECTOR_TYPES(double, double, 16, 16)
#undef SIMT_VECTOR_TYPES

struct dim3 {
  unsigned int x, y, z;
  constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1)
      : x(vx), y(vy), z(vz) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
  constexpr operator uint3() const { return uint3{x, y, z}; }
};
#endif

// The index variables: set by the scheduler for the fiber it resumes (a fiber never moves to
// another OS thread, so per-OS-thread storage is per CUDA thread while the fiber runs).
inline thread_local uint3 threadIdx;
inline thread_local uint3 blockIdx;
inline thread_local dim3 blockDim;
inline thread_local dim3 gridDim;
constexpr int warpSize = 32;
