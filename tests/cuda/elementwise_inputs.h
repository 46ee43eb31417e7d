#pragma once
// The padded inputs of the elementwise kernel tests (elementwise_test.cpp,
// encoder_elementwise_test.cpp; reduce_test.cpp names its cases the same way). An op runs on
// n elements at an offset of 0 elements from the 256-byte aligned allocation (the 128-bit path
// with a scalar tail) or 1 element (the scalar fallback); kGuard guard elements follow the n,
// and they and the offset's must come back as the cpu leaves them.
#include <string>
#include <vector>

#include "cuda_test_util.h"

namespace collage::test {

constexpr int kOffsets[] = {0, 1};
constexpr int kGuard = 9;  // elements after the n elements

// "op n=… offset=…", the case a failure names.
inline std::string label(const char* op, int64_t n, int offset) {
  return std::string(op) + " n=" + std::to_string(n) + " offset=" + std::to_string(offset);
}

// n random values ~ N(0, scale²) behind `offset` guard values and followed by kGuard.
inline std::vector<bf16> padded_values(Rng& rng, int64_t n, int offset, double scale = 1.0) {
  return random_values<bf16>(rng, size_t(n + offset + kGuard), scale);
}

// Inputs of the activations (GELU, exact GELU, tanh): N(0, 9) (both tails, where exp_approx
// clamps, and the centre) and some exact values at fixed places: ±0, subnormals, and |x| large
// enough for the functions to saturate.
inline std::vector<bf16> activation_inputs(Rng& rng, int64_t n, int offset) {
  std::vector<bf16> v = padded_values(rng, n, offset, 3.0);
  const float specials[] = {0.0f, -0.0f, 1e-39f, -1e-39f, 12.0f, -12.0f, 60.0f, -60.0f};
  for (size_t k = 0; k < std::size(specials) && k < size_t(n); k++)
    v[offset + k * 3 % n] = float_to_bf16(specials[k]);
  return v;
}

}  // namespace collage::test
