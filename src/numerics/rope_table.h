#pragma once
// The cos/sin table of rotary position embedding (GPT-NeoX "rotate half", backend.h), shared
// by the cpu rope (src/backend/cpu/rope.cpp) and the cuda launcher (kernels/rope.cu), which
// uploads it once per shape: both backends rotate by the very same fp32 values, so rope is
// bit-identical across them. Host code only.
#include <cmath>
#include <cstddef>
#include <vector>

namespace collage {

// cos, sin (T, HS/2), row t, column i: the angle t·base^(-2i/HS). The angles are computed in
// double: t·θ_i reaches ~T radians, where an fp32 product would be off by ~1e-4 rad.
inline void fill_rope_table(int T, int HS, float base, std::vector<float>& cos,
                            std::vector<float>& sin) {
  const int half = HS / 2;
  cos.resize(size_t(T) * half);
  sin.resize(size_t(T) * half);
  for (int i = 0; i < half; i++) {
    const double frequency = std::pow(double(base), -2.0 * i / HS);
    for (int t = 0; t < T; t++) {
      const double angle = t * frequency;
      cos[size_t(t) * half + i] = float(std::cos(angle));
      sin[size_t(t) * half + i] = float(std::sin(angle));
    }
  }
}

}  // namespace collage
