// The bias gradient of a matmul (src/backend/backend.h, matmul_backward): dbias (OC) +=
// Σ_rows dout (N, OC), summed in fp32 and accumulated with one rounding. The cpu version is in
// src/backend/cpu/matmul.cpp. Deterministic: column sums by kernels/column_sums.cuh (row chunks,
// then the chunks in order; no float atomics).
#include "kernels/column_sums.cuh"
#include "kernels/common.cuh"
#include "kernels/kernels.cuh"

namespace collage::cuda {
COLLAGE_CUDA_VARIANT_BEGIN
namespace {

// The one column sum of dout (N, OC).
struct BiasTerms {
  static constexpr int kSums = 1;
  const bf16_t* dout;  // (N, OC)
  int OC;
  __device__ void operator()(int64_t row, int c, float* sums) const {
    sums[0] += to_float(dout[row * OC + c]);
  }
};

}  // namespace

void bias_backward(CudaContext& cx, bf16_t* dbias, const bf16_t* dout, int64_t N, int OC) {
  // Called by matmul_backward only, whose contract checked N, OC and dout (backend_contract.h).
  if (!dbias || N == 0 || OC == 0) return;  // null gradient: not computed
  column_sums(cx, "bias_backward", BiasTerms{dout, OC}, N, OC, dbias);
}

COLLAGE_CUDA_VARIANT_END
}  // namespace collage::cuda
