// Dropout from a counter-based generator (backend.h, "encoder ops"): element i of a call is
// kept iff dropout_uniform(seed, offset + i) ≥ p and then scaled by 1/(1 - p), else 0. The
// uniform comes from Philox-4x32-10 (numerics/elementwise_math.h, shared with
// kernels/dropout.cu), so no mask is stored: the backward recomputes it, the cuda backend draws
// the same one, and a resumed run replays it from (seed, offset).
#include <algorithm>

#include "backend/cpu/kernels.h"
#include "backend/cpu/storage.h"

namespace collage::cpu {
namespace {

// Elements per slice: one slice's factors live on the stack, and slices are the unit of the
// parallel loop (a slice starting anywhere draws the same factors as any other split).
constexpr int64_t kSlice = 2048;
constexpr int64_t kParallelThreshold = 1 << 15;

}  // namespace

void dropout_factors(float* factors, int64_t count, float p, uint64_t seed,
                     uint64_t first_element) {
  const float keep_scale = math::dropout_keep_scale(p);
  math::Philox4x32 block{};
  for (int64_t k = 0; k < count; k++) {
    const uint64_t element = first_element + uint64_t(k);
    // One Philox evaluation serves the 4 elements of a counter value.
    if (k == 0 || (element & 3) == 0) block = math::dropout_block(seed, element >> 2);
    factors[k] = math::dropout_factor(math::uniform_from_bits(block.v[element & 3]), p, keep_scale);
  }
}

namespace {

// For every slice of [0, n): the slice's factors (1 everywhere for p = 0: x·1 = x, no rounding),
// then apply(begin, count, factors). The arguments are checked by the contract (backend.h).
template <typename Apply>
void for_each_slice(CpuContext& cx, int64_t n, float p, uint64_t seed, uint64_t offset,
                    Apply apply) {
  const int64_t slices = (n + kSlice - 1) / kSlice;
#pragma omp parallel for schedule(static) num_threads(cx.threads) if (n > kParallelThreshold)
  for (int64_t slice = 0; slice < slices; slice++) {
    const int64_t begin = slice * kSlice, count = std::min(kSlice, n - begin);
    float factors[kSlice];
    if (p == 0.0f) {
      std::fill(factors, factors + count, 1.0f);
    } else {
      dropout_factors(factors, count, p, seed, offset + uint64_t(begin));
    }
    apply(begin, count, factors);
  }
}

}  // namespace

// out = inp · factor.
template <typename S>
void dropout_forward(CpuContext& cx, S* out, const S* inp, int64_t n, float p, uint64_t seed,
                     uint64_t offset) {
  for_each_slice(cx, n, p, seed, offset, [&](int64_t begin, int64_t count, const float* factors) {
#pragma omp simd
    for (int64_t k = 0; k < count; k++) store(out[begin + k], load(inp[begin + k]) * factors[k]);
  });
}

// dinp = dout · factor (the forward's factors, recomputed).
template <typename S>
void dropout_backward(CpuContext& cx, S* dinp, const S* dout, int64_t n, float p, uint64_t seed,
                      uint64_t offset) {
  if (!dinp) return;
  for_each_slice(cx, n, p, seed, offset, [&](int64_t begin, int64_t count, const float* factors) {
#pragma omp simd
    for (int64_t k = 0; k < count; k++) store(dinp[begin + k], load(dout[begin + k]) * factors[k]);
  });
}

#define COLLAGE_INSTANTIATE(S)                                                                  \
  template void dropout_forward(CpuContext&, S*, const S*, int64_t, float, uint64_t, uint64_t); \
  template void dropout_backward(CpuContext&, S*, const S*, int64_t, float, uint64_t, uint64_t);
COLLAGE_INSTANTIATE(bf16)
COLLAGE_INSTANTIATE(float)
#undef COLLAGE_INSTANTIATE

}  // namespace collage::cpu
