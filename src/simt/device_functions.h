#pragma once
// CUDA's device functions that are not about threads: fast-math intrinsics, bit casts and
// counts, min/max, cache-hinted loads and stores, atomics. Every one is the EXACT host
// equivalent (no approximation where CUDA approximates: __expf is expf, rsqrtf is 1/sqrtf),
// so an emulated kernel computes what the cpu backend computes with the same expression.
// Atomics are relaxed read-modify-writes (as on a GPU) and work across the SIMT_THREADS
// workers; __threadfence is a full fence.
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "simt/cuda_types.h"

// ---- math ----
// (glibc's <math.h> declares __expf, __logf, ... as its own noexcept aliases; these inline
// definitions match those declarations and are what kernels call.)
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
inline float __expf(float x) noexcept { return std::exp(x); }
inline float __logf(float x) noexcept { return std::log(x); }
inline float __log2f(float x) noexcept { return std::log2(x); }
inline float __sinf(float x) noexcept { return std::sin(x); }
inline float __cosf(float x) noexcept { return std::cos(x); }
inline float __powf(float x, float y) noexcept { return std::pow(x, y); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return std::sqrt(x); }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
// Clamp to [0, 1]; NaN becomes 0 (as the PTX .sat modifier).
inline float __saturatef(float x) { return x >= 1.0f ? 1.0f : (x > 0.0f ? x : 0.0f); }

// ---- bit casts and bit counts ----
inline unsigned int __float_as_uint(float x) {
  unsigned int u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}
inline int __float_as_int(float x) {
  int i;
  std::memcpy(&i, &x, sizeof i);
  return i;
}
inline float __uint_as_float(unsigned int u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}
inline float __int_as_float(int i) {
  float x;
  std::memcpy(&x, &i, sizeof x);
  return x;
}
inline long long __double_as_longlong(double x) {
  long long i;
  std::memcpy(&i, &x, sizeof i);
  return i;
}
inline double __longlong_as_double(long long i) {
  double x;
  std::memcpy(&x, &i, sizeof x);
  return x;
}
inline int __popc(unsigned int x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(static_cast<unsigned int>(x)); }
inline int __clzll(long long x) {
  return x == 0 ? 64 : __builtin_clzll(static_cast<unsigned long long>(x));
}
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline unsigned int __brev(unsigned int x) {
  x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
  x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
  x = ((x >> 4) & 0x0f0f0f0fu) | ((x & 0x0f0f0f0fu) << 4);
  x = ((x >> 8) & 0x00ff00ffu) | ((x & 0x00ff00ffu) << 8);
  return (x >> 16) | (x << 16);
}

// ---- min / max: the overload set of CUDA's math_functions.hpp ----
#define SIMT_MIN_MAX(R, A, B)                             \
  inline R min(A a, B b) {                                \
    const R x = static_cast<R>(a), y = static_cast<R>(b); \
    return x < y ? x : y;                                 \
  }                                                       \
  inline R max(A a, B b) {                                \
    const R x = static_cast<R>(a), y = static_cast<R>(b); \
    return x > y ? x : y;                                 \
  }
SIMT_MIN_MAX(int, int, int)
SIMT_MIN_MAX(unsigned int, unsigned int, unsigned int)
SIMT_MIN_MAX(unsigned int, int, unsigned int)
SIMT_MIN_MAX(unsigned int, unsigned int, int)
SIMT_MIN_MAX(long, long, long)
SIMT_MIN_MAX(unsigned long, unsigned long, unsigned long)
SIMT_MIN_MAX(unsigned long, long, unsigned long)
SIMT_MIN_MAX(unsigned long, unsigned long, long)
SIMT_MIN_MAX(long long, long long, long long)
SIMT_MIN_MAX(unsigned long long, unsigned long long, unsigned long long)
SIMT_MIN_MAX(unsigned long long, long long, unsigned long long)
SIMT_MIN_MAX(unsigned long long, unsigned long long, long long)
#undef SIMT_MIN_MAX
inline float min(float a, float b) { return std::fmin(a, b); }
inline float max(float a, float b) { return std::fmax(a, b); }
inline double min(double a, double b) { return std::fmin(a, b); }
inline double max(double a, double b) { return std::fmax(a, b); }
inline double min(float a, double b) { return std::fmin(double(a), b); }
inline double max(float a, double b) { return std::fmax(double(a), b); }
inline double min(double a, float b) { return std::fmin(a, double(b)); }
inline double max(double a, float b) { return std::fmax(a, double(b)); }

// ---- loads and stores with cache hints: plain accesses on the host ----
// Each hint only steers the GPU's caches, so every one of them is the same plain access here.
#define SIMT_PLAIN_LOAD(name) \
  template <typename T>       \
  inline T name(const T* p) { \
    return *p;                \
  }
#define SIMT_PLAIN_STORE(name)  \
  template <typename T>         \
  inline void name(T* p, T v) { \
    *p = v;                     \
  }
SIMT_PLAIN_LOAD(__ldg)
SIMT_PLAIN_LOAD(__ldcg)
SIMT_PLAIN_LOAD(__ldca)
SIMT_PLAIN_LOAD(__ldcs)
SIMT_PLAIN_LOAD(__ldlu)
SIMT_PLAIN_LOAD(__ldcv)
SIMT_PLAIN_STORE(__stcg)
SIMT_PLAIN_STORE(__stcs)
SIMT_PLAIN_STORE(__stwb)
SIMT_PLAIN_STORE(__stwt)
#undef SIMT_PLAIN_LOAD
#undef SIMT_PLAIN_STORE

// ---- fences and atomics ----
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __threadfence_block() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __threadfence_system() { std::atomic_thread_fence(std::memory_order_seq_cst); }

namespace simt::detail {
// *address = update(old) as one relaxed atomic step, through a compare-and-swap on the bits
// (for float and double, which have no fetch_add of their own here).
template <typename T, typename Update>
inline T atomic_update(T* address, Update update) {
  T old = __atomic_load_n(address, __ATOMIC_RELAXED);
  while (!__atomic_compare_exchange_n(address, &old, update(old), true, __ATOMIC_RELAXED,
                                      __ATOMIC_RELAXED)) {
  }
  return old;
}
template <typename Float, typename Bits>
inline Float atomic_add_float(Float* address, Float value) {
  static_assert(sizeof(Float) == sizeof(Bits));
  Bits* bits = reinterpret_cast<Bits*>(address);
  const Bits before = atomic_update(bits, [value](Bits old) {
    Float x;
    std::memcpy(&x, &old, sizeof x);
    x += value;
    Bits result;
    std::memcpy(&result, &x, sizeof result);
    return result;
  });
  Float old;
  std::memcpy(&old, &before, sizeof old);
  return old;
}
}  // namespace simt::detail

#define SIMT_INTEGER_ATOMICS(T)                                                               \
  inline T atomicAdd(T* address, T value) {                                                   \
    return __atomic_fetch_add(address, value, __ATOMIC_RELAXED);                              \
  }                                                                                           \
  inline T atomicSub(T* address, T value) {                                                   \
    return __atomic_fetch_sub(address, value, __ATOMIC_RELAXED);                              \
  }                                                                                           \
  inline T atomicAnd(T* address, T value) {                                                   \
    return __atomic_fetch_and(address, value, __ATOMIC_RELAXED);                              \
  }                                                                                           \
  inline T atomicOr(T* address, T value) {                                                    \
    return __atomic_fetch_or(address, value, __ATOMIC_RELAXED);                               \
  }                                                                                           \
  inline T atomicXor(T* address, T value) {                                                   \
    return __atomic_fetch_xor(address, value, __ATOMIC_RELAXED);                              \
  }                                                                                           \
  inline T atomicMax(T* address, T value) {                                                   \
    return simt::detail::atomic_update(address,                                               \
                                       [value](T old) { return old < value ? value : old; }); \
  }                                                                                           \
  inline T atomicMin(T* address, T value) {                                                   \
    return simt::detail::atomic_update(address,                                               \
                                       [value](T old) { return old > value ? value : old; }); \
  }                                                                                           \
  inline T atomicExch(T* address, T value) {                                                  \
    return __atomic_exchange_n(address, value, __ATOMIC_RELAXED);                             \
  }                                                                                           \
  inline T atomicCAS(T* address, T compare, T value) {                                        \
    __atomic_compare_exchange_n(address, &compare, value, false, __ATOMIC_RELAXED,            \
                                __ATOMIC_RELAXED);                                            \
    return compare;                                                                           \
  }
SIMT_INTEGER_ATOMICS(int)
SIMT_INTEGER_ATOMICS(unsigned int)
SIMT_INTEGER_ATOMICS(long long)
SIMT_INTEGER_ATOMICS(unsigned long long)
#undef SIMT_INTEGER_ATOMICS
inline unsigned short atomicCAS(unsigned short* address, unsigned short compare,
                                unsigned short value) {
  __atomic_compare_exchange_n(address, &compare, value, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
  return compare;
}
inline float atomicAdd(float* address, float value) {
  return simt::detail::atomic_add_float<float, uint32_t>(address, value);
}
inline double atomicAdd(double* address, double value) {
  return simt::detail::atomic_add_float<double, uint64_t>(address, value);
}
inline float atomicExch(float* address, float value) {
  return __uint_as_float(
      atomicExch(reinterpret_cast<unsigned int*>(address), __float_as_uint(value)));
}
// atomicInc/atomicDec: wrap-around counters as CUDA defines them.
inline unsigned int atomicInc(unsigned int* address, unsigned int limit) {
  return simt::detail::atomic_update(
      address, [limit](unsigned int old) { return old >= limit ? 0u : old + 1; });
}
inline unsigned int atomicDec(unsigned int* address, unsigned int limit) {
  return simt::detail::atomic_update(
      address, [limit](unsigned int old) { return (old == 0 || old > limit) ? limit : old - 1; });
}
