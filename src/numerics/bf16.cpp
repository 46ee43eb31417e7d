#include "numerics/bf16.h"

namespace collage {

void bf16_to_float_array(const bf16* in, float* out, int64_t n) {
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; i++) out[i] = bf16_to_float(in[i]);
}

void float_to_bf16_array(const float* in, bf16* out, int64_t n) {
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; i++) out[i] = float_to_bf16(in[i]);
}

}  // namespace collage
