#pragma once
// The shapes, key masks, inputs and exact checks that the two cuda attention tests share
// (attention_test.cpp: the SIMT kernels; flash_attention_test.cpp: the tensor-core kernels).
#include <cstdint>
#include <limits>
#include <vector>

#include "cuda_test_util.h"

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

// One case's random inputs in both backends, drawn from `rng` in this order: qkv ~ N(0, 1.5²),
// dout, and the key mask when `masked`; with the out and lse the forward writes, and a dqkv of
// NaNs that the backward must write over without reading (backend.h).
struct AttentionInputs {
  AttentionInputs(BackendPair& pair, Rng& rng, const AttentionShape& c, bool masked)
      : qkv(random_values<bf16>(rng, size_t(c.B) * c.T * 3 * c.NH * c.HS, 1.5)),
        dout(random_values<bf16>(rng, size_t(c.B) * c.T * c.NH * c.HS)),
        dqkv0(qkv.size(), float_to_bf16(std::numeric_limits<float>::quiet_NaN())),
        mask(masked ? make_attention_mask(rng, c) : std::vector<int32_t>{}),
        x(pair, qkv),
        out(pair, dout.size()),
        dy(pair, dout),
        dx(pair, dqkv0),
        lse(pair, size_t(c.B) * c.NH * c.T),
        key_mask(pair, masked ? mask : std::vector<int32_t>(1)),
        mask_cpu(masked ? key_mask.cpu() : nullptr),
        mask_emulated(masked ? key_mask.emulated() : nullptr) {}

  const std::vector<bf16> qkv, dout, dqkv0;  // (B, T, 3C), (B, T, C), (B, T, 3C)
  const std::vector<int32_t> mask;           // (B, T); empty when not masked
  Mirrored<bf16> x, out, dy, dx;             // qkv, out, dout, dqkv
  Mirrored<float> lse;                       // (B, NH, T)
  Mirrored<int32_t> key_mask;                // mask (one unused element when not masked)
  const int32_t *mask_cpu, *mask_emulated;   // key_mask, null when not masked
};

// What the comparison with the cpu implies, checked exactly: a query that sees no key has out
// 0, lse -inf and a zero dq row; a hidden key has zero dk, dv rows. `out`, `lse`, `dqkv` are the
// cuda backend's results, `in` what it was given.
inline void expect_unseen_rows_zero(const AttentionShape& c, const AttentionInputs& in, bool causal,
                                    const std::vector<bf16>& out, const std::vector<float>& lse,
                                    const std::vector<bf16>& dqkv) {
  const int C = c.NH * c.HS;
  for (int b = 0; b < c.B; b++) {
    for (int i = 0; i < c.T; i++) {
      const size_t row = size_t(b) * c.T + i;
      const bool sees_any = sees_any_key(c, in.mask, causal, b, i);
      for (int e = 0; !sees_any && e < C; e++) {
        EXPECT_EQ(bf16_to_float(out[row * C + e]), 0.0f) << "out row " << row;
        EXPECT_EQ(bf16_to_float(dqkv[row * 3 * C + e]), 0.0f) << "dq row " << row;
      }
      for (int h = 0; !sees_any && h < c.NH; h++)
        EXPECT_EQ(lse[(size_t(b) * c.NH + h) * c.T + i], -std::numeric_limits<float>::infinity());
      for (int e = C; !in.mask.empty() && in.mask[row] == 0 && e < 3 * C; e++)
        EXPECT_EQ(bf16_to_float(dqkv[row * 3 * C + e]), 0.0f) << "dk/dv of hidden key row " << row;
    }
  }
}

}  // namespace collage::test
