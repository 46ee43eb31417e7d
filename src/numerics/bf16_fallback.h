#pragma once
// A stand-in for CUDA's __nv_bfloat16 on machines without the CUDA toolkit (CMake did not
// find cuda_bf16.h, so COLLAGE_HAVE_CUDA_BF16 is not defined). Same layout (the 16 high bits
// of an IEEE fp32, 2-byte aligned) and the two bit conversions the optimizer math needs; the
// rounding itself is done by src/numerics/bf16_math.h on the bits, exactly as with the real
// type. Nothing else of cuda_bf16.h is provided: code that needs more must build with CUDA.
#if defined(COLLAGE_HAVE_CUDA_BF16) || defined(__CUDACC__)
#error "bf16_fallback.h is for builds without cuda_bf16.h; include <cuda_bf16.h> instead"
#endif

struct alignas(2) __nv_bfloat16 {
  unsigned short __x;
};

inline unsigned short __bfloat16_as_ushort(const __nv_bfloat16 h) { return h.__x; }

inline __nv_bfloat16 __ushort_as_bfloat16(const unsigned short i) {
  __nv_bfloat16 h;
  h.__x = i;
  return h;
}
