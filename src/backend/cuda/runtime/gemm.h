#pragma once
// The cuda backend's GEMMs: bf16 operands, fp32 accumulation, one rounding to bf16 on store
// (what tensor cores do, and the Backend's contract). On a GPU through cuBLASLt
// (gemm_device.cpp: one handle and workspace, the heuristic's algorithm cached per shape); on
// the emulator the same call runs OpenBLAS's sgemm on widened copies, queued on the stream
// (gemm_emulated.cpp).
#include <cstdint>

#include "backend/cuda/runtime/context.h"
#include "numerics/bf16_math.h"

namespace collage::cuda {
COLLAGE_CUDA_VARIANT_BEGIN

// Row-major matrices: element (r, c) of X at x[r * ldx + c].
//   d (M, N) = op(a) (M, K) · op(b) (K, N)  [+ bias (N) on every row]  [+ d, if accumulate]
// op(x) = xᵀ when transpose_x (then a is stored (K, M), b is stored (N, K)).
struct GemmCall {
  const math::bfloat* a = nullptr;
  int64_t lda = 0;
  bool transpose_a = false;
  const math::bfloat* b = nullptr;
  int64_t ldb = 0;
  bool transpose_b = false;
  math::bfloat* d = nullptr;
  int64_t ldd = 0;
  int64_t M = 0, N = 0, K = 0;
  const math::bfloat* bias = nullptr;  // (N) or null
  bool accumulate = false;             // d += ... with the sum rounded once
};

GemmEngine* create_gemm_engine(CudaContext& cx);
void destroy_gemm_engine(CudaContext& cx, GemmEngine* engine);
void gemm(CudaContext& cx, const GemmCall& call);  // queued on cx.stream; counts as a launch

COLLAGE_CUDA_VARIANT_END
}  // namespace collage::cuda
