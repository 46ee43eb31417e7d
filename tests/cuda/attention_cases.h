#pragma once
// The shapes and key masks that the two cuda attention tests share (attention_test.cpp: the
// SIMT kernels; flash_attention_test.cpp: the tensor-core kernels).
#include <cstdint>
#include <vector>

#include "../backend/backend_test_util.h"

namespace collage::test {

struct AttentionShape {
  int B, T, NH, HS;
};

// Key mask (B, T): about one key in four hidden, always key 0 of batch row 0 (so causal query
// 0 sees nothing) and, with B > 1, every key of batch row 1 (no query there sees anything).
inline std::vector<int32_t> make_attention_mask(Rng& rng, const AttentionShape& c) {
  std::vector<int32_t> mask(size_t(c.B) * c.T);
  for (int b = 0; b < c.B; b++) {
    for (int t = 0; t < c.T; t++) {
      const bool hidden = (b == 0 && t == 0) || b == 1 || rng.integer(0, 3) == 0;
      mask[size_t(b) * c.T + t] = hidden ? 0 : 1;
    }
  }
  return mask;
}

// Whether query i of batch row b sees any key (an empty mask hides none).
inline bool sees_any_key(const AttentionShape& c, const std::vector<int32_t>& mask, bool causal,
                         int b, int i) {
  const int end = causal ? i + 1 : c.T;
  for (int j = 0; j < end; j++) {
    if (mask.empty() || mask[size_t(b) * c.T + j] != 0) return true;
  }
  return false;
}

}  // namespace collage::test
