#pragma once
// bfloat16 storage type: the top 16 bits of an IEEE fp32. Weights, gradients and activations
// are stored as bf16, and so is the optimizer state of every strategy but fp32-master;
// arithmetic happens in fp32 and is rounded back with round-to-nearest-even
// (docs/ARCHITECTURE.md, "Precision semantics"). Layout-compatible with CUDA's __nv_bfloat16.
#include <cstdint>
#include <cstring>

namespace collage {

struct bf16 {
  uint16_t bits;
};

inline float bf16_to_float(bf16 x) {
  uint32_t u = static_cast<uint32_t>(x.bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Round-to-nearest-even; NaN stays NaN (quiet), infinities stay infinite.
inline bf16 float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{static_cast<uint16_t>((u >> 16) | 0x0040u)};
  uint32_t rounding_bias = 0x7fffu + ((u >> 16) & 1u);
  return bf16{static_cast<uint16_t>((u + rounding_bias) >> 16)};
}

// The fp32 value nearest-even to f that bf16 can represent.
inline float round_to_bf16(float f) { return bf16_to_float(float_to_bf16(f)); }

// Widen n bf16 values to fp32 and round n fp32 values back (OpenMP-parallel for large n).
void bf16_to_float_array(const bf16* in, float* out, int64_t n);
void float_to_bf16_array(const float* in, bf16* out, int64_t n);

}  // namespace collage
