// Dropout (src/backend/backend.h, "encoder ops"; the cpu version is
// src/backend/cpu/dropout.cpp). Element i of a call is kept iff
// math::dropout_uniform(seed, offset + i) ≥ p, and then scaled by 1/(1 - p), else 0. The
// uniform is Philox-4x32-10 (src/numerics/elementwise_math.h, shared with the cpu), so the masks
// are the cpu's bit for bit, the backward recomputes them instead of reading a stored mask, and
// the outputs are the cpu's bits too (one fp32 product, rounded once).
//
// A thread owns one Philox counter value: the 4 elements e = 4g .. 4g + 3 of the numbering
// (those of them in [offset, offset + n)), so each evaluation serves 4 elements.
#include <algorithm>

#include "kernels/common.cuh"
#include "kernels/kernels.cuh"

namespace collage::cuda {
COLLAGE_CUDA_VARIANT_BEGIN
namespace {

constexpr int kDropoutThreads = 256;
constexpr int64_t kMaxDropoutBlocks = 4096;  // grid-stride beyond this, derived from n only

// out[i] = rn(in[i]·factor) for the elements of counter values first_group + t, t < groups: the
// forward (in = inp) and the backward (in = dout, out = dinp, which the mask's factors scale the
// same way).
__global__ void dropout_kernel(bf16_t* out, const bf16_t* in, int64_t n, float p, float keep_scale,
                               uint64_t seed, uint64_t offset, int64_t groups) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  const uint64_t first_group = offset >> 2;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < groups; t += stride) {
    const uint64_t group = first_group + uint64_t(t);
    math::Philox4x32 block{};
    if (p > 0.0f) block = math::dropout_block(seed, group);
    for (int word = 0; word < 4; word++) {
      const uint64_t element = 4 * group + uint64_t(word);
      if (element < offset) continue;
      const uint64_t i = element - offset;
      if (i >= uint64_t(n)) break;
      // p = 0: factor 1, x·1 = x (the identity without drawing numbers, as the cpu).
      const float factor =
          p > 0.0f ? math::dropout_factor(math::uniform_from_bits(block.v[word]), p, keep_scale)
                   : 1.0f;
      out[i] = to_bf16(to_float(in[i]) * factor);
    }
  }
}

void dropout_launch(CudaContext& cx, const char* op, bf16_t* out, const bf16_t* in, int64_t n,
                    float p, uint64_t seed, uint64_t offset) {
  if (n == 0) return;  // p, n and the tensors: checked by the contract (backend_contract.h)
  const int64_t groups = int64_t(((offset + uint64_t(n) - 1) >> 2) - (offset >> 2)) + 1;
  const int64_t blocks = std::min(ceil_div(groups, kDropoutThreads), kMaxDropoutBlocks);
  launch(cx, op, dropout_kernel, dim3(unsigned(blocks)), dim3(kDropoutThreads))(
      out, in, n, p, math::dropout_keep_scale(p), seed, offset, groups);
}

}  // namespace

void dropout_forward(CudaContext& cx, bf16_t* out, const bf16_t* inp, int64_t n, float p,
                     uint64_t seed, uint64_t offset) {
  dropout_launch(cx, "dropout_forward", out, inp, n, p, seed, offset);
}

void dropout_backward(CudaContext& cx, bf16_t* dinp, const bf16_t* dout, int64_t n, float p,
                      uint64_t seed, uint64_t offset) {
  if (!dinp) return;  // null gradient: not computed
  dropout_launch(cx, "dropout_backward", dinp, dout, n, p, seed, offset);
}

COLLAGE_CUDA_VARIANT_END
}  // namespace collage::cuda
