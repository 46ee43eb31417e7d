#pragma once
// Tensor-core building blocks for the kernels: the fragments of mma.sync.aligned.m16n8k16 with
// bf16 operands and fp32 accumulators, ldmatrix to load them from shared memory, and the
// exponent of the tensor-core attention's softmax. Under nvcc each function is one PTX
// instruction (inline asm); under g++ it is the host emulator's warp collective with the same
// fragment layout (src/simt/warp_matrix.h, which spells the layouts out), or for the exponent
// glibc's. This header, kernels/async_copy.cuh and kernels/turns.cuh are the only places kernels
// use inline PTX.
//
// Every lane of the warp must call mma and ldmatrix together (.sync.aligned), so a kernel never
// calls them under a lane-dependent condition.
#include <cstdint>
#include <cstring>

#include "kernels/common.cuh"

namespace collage::cuda {
COLLAGE_CUDA_VARIANT_BEGIN

// A (16×16, row-major, bf16): 4 registers; B (16×8, k × n, bf16): 2; C/D (16×8, fp32): 4.
struct FragmentA {
  uint32_t r[4];
};
struct FragmentB {
  uint32_t r[2];
};
struct FragmentC {
  float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
};

// d += a·b, fp32 accumulation.
__device__ __forceinline__ void mma(FragmentC& d, const FragmentA& a, const FragmentB& b) {
#if defined(__CUDACC__)
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d.v[0]), "+f"(d.v[1]), "+f"(d.v[2]), "+f"(d.v[3])
      : "r"(a.r[0]), "r"(a.r[1]), "r"(a.r[2]), "r"(a.r[3]), "r"(b.r[0]), "r"(b.r[1]));
#else
  ::simt::mma_m16n8k16_bf16(d.v, a.r, b.r, d.v);
#endif
}

// ldmatrix .x4 / .x2 (optionally .trans) from shared memory: lane l passes the address of row
// l % 8 of matrix l / 8 (16 contiguous, 16-byte aligned bytes); see src/simt/warp_matrix.h for
// what each lane receives.
template <int kCount, bool kTranspose>
__device__ __forceinline__ void ldmatrix(uint32_t (&r)[kCount], const bf16_t* row) {
  static_assert(kCount == 1 || kCount == 2 || kCount == 4, "ldmatrix loads 1, 2 or 4 matrices");
#if defined(__CUDACC__)
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(row));
  if constexpr (kCount == 4 && kTranspose) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(address));
  } else if constexpr (kCount == 4) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(address));
  } else if constexpr (kCount == 2 && kTranspose) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(address));
  } else if constexpr (kCount == 2) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(address));
  } else if constexpr (kTranspose) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\n"
                 : "=r"(r[0])
                 : "r"(address));
  } else {
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n"
                 : "=r"(r[0])
                 : "r"(address));
  }
#else
  ::simt::ldmatrix(r, kCount, kTranspose, row);
#endif
}

// 2^x for the softmax of the tensor-core attention: on the GPU the special function unit's
// exponent alone (ex2.approx.ftz.f32, one MUFU.EX2, ~2 ulp). exp2f, compiled with IEEE math as
// this build is (no --use_fast_math), wraps the same instruction in a compare and two
// multiplies to return results below 2^-126 unflushed; here they are 0. In the softmax that is
// a probability more than 87 nats below its row's largest (whose e^0 = 1 is in every row's
// sum, so no sum changes); at most an output or gradient element of size ~2^-126 can differ.
// Under the emulator: glibc's exp2f, flushed alike.
__device__ __forceinline__ float exp2_flushed(float x) {
#if defined(__CUDACC__)
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
#else
  const float y = exp2f(x);
  return y < 0x1p-126f ? 0.0f : y;
#endif
}

// Two fp32 values rounded to bf16 (nearest-even) in one register, `low` in the low half: the A
// fragment of a product whose left factor was computed in fp32 (P or dS of attention).
__device__ __forceinline__ uint32_t pack_bf16(float low, float high) {
  bf16_t halves[2];
  to_bf16_pair(halves[0], halves[1], low, high);
  uint32_t bits;
  memcpy(&bits, halves, 4);
  return bits;
}

// dst[0], dst[1] = rn(low), rn(high) (the bits of pack_bf16) in one 32-bit store; dst 4-byte
// aligned, in shared or global memory.
__device__ __forceinline__ void store_bf16_pair(bf16_t* dst, float low, float high) {
  const uint32_t bits = pack_bf16(low, high);
#if defined(__CUDACC__)
  *reinterpret_cast<uint32_t*>(dst) = bits;
#else
  memcpy(static_cast<void*>(dst), &bits, 4);
#endif
}

COLLAGE_CUDA_VARIANT_END
}  // namespace collage::cuda
