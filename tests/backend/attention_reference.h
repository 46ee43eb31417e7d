#pragma once
// The float64 attention both attention tests compare against (attention_test.cpp,
// attention_dropout_test.cpp): dropout(softmax(S))·v and its gradient written out loop by loop,
// the mask drawn from the independent Philox of philox_reference.h. p = 0 keeps every
// probability with weight exactly 1, which is plain attention. Also the random inputs and the
// comparison with the reference that both tests run (AttentionInputs).
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "backend_test_util.h"
#include "philox_reference.h"

namespace collage::test {

struct AttentionCase {
  int B, T, NH, HS;
  bool causal, masked;
};
inline size_t qkv_size(const AttentionCase& c) { return size_t(c.B) * c.T * 3 * c.NH * c.HS; }

// Key mask (B, T) with roughly one key in four hidden, never key 0 (so every causal query
// sees something).
inline std::vector<int32_t> random_mask(Rng& rng, const AttentionCase& c) {
  std::vector<int32_t> mask(size_t(c.B) * c.T, 1);
  if (!c.masked) return mask;
  for (int b = 0; b < c.B; b++) {
    for (int t = 1; t < c.T; t++) mask[size_t(b) * c.T + t] = rng.integer(0, 3) != 0;
  }
  return mask;
}

struct Reference {
  std::vector<double> out, lse, dqkv, dqkv_scale;  // dqkv_scale: Σ|terms| per gradient entry
};

// With P = softmax(S) (lse of the undropped scores), F_ij = 1/(1 - p) if kept else 0,
// Z = P∘F: out = Z·v; dv = Zᵀ·dout, dZ = dout·vᵀ, dP = dZ∘F, dS = P∘(dP - rowsum(P∘dP)),
// dq = scale·dS·k, dk = scale·dSᵀ·q.
inline Reference reference(const AttentionCase& c, const std::vector<double>& qkv,
                           const std::vector<int32_t>& mask, const std::vector<double>& dout,
                           float p = 0, uint64_t seed = 0, uint64_t offset = 0) {
  const int C = c.NH * c.HS, T = c.T, HS = c.HS;
  const double scale = 1.0 / std::sqrt(double(HS));
  Reference r{std::vector<double>(size_t(c.B) * T * C), std::vector<double>(size_t(c.B) * c.NH * T),
              std::vector<double>(qkv.size()), std::vector<double>(qkv.size())};
  auto at = [&](int b, int t, int part, int h, int d) {
    return (size_t(b) * T + t) * 3 * C + size_t(part) * C + size_t(h) * HS + d;
  };
  for (int b = 0; b < c.B; b++) {
    for (int h = 0; h < c.NH; h++) {
      for (int i = 0; i < T; i++) {
        std::vector<double> prob(T, 0.0), z(T, 0.0), f(T, 0.0), dp(T, 0.0);
        std::vector<bool> visible(T);
        double max_score = -std::numeric_limits<double>::infinity();
        for (int j = 0; j < T; j++) {
          const uint64_t element = offset + ((uint64_t(b) * c.NH + h) * T + i) * T + j;
          f[j] = dropout_kept_reference(seed, element, p) ? 1.0 / (1.0 - p) : 0.0;
          visible[j] = (!c.causal || j <= i) && mask[size_t(b) * T + j] != 0;
          if (!visible[j]) continue;
          double s = 0;
          for (int d = 0; d < HS; d++) s += qkv[at(b, i, 0, h, d)] * qkv[at(b, j, 1, h, d)];
          prob[j] = s * scale;
          max_score = std::max(max_score, prob[j]);
        }
        double total = 0;
        for (int j = 0; j < T; j++) total += visible[j] ? std::exp(prob[j] - max_score) : 0.0;
        const double lse = max_score + std::log(total);
        r.lse[(size_t(b) * c.NH + h) * T + i] = lse;
        for (int j = 0; j < T; j++) {
          prob[j] = visible[j] ? std::exp(prob[j] - lse) : 0.0;
          z[j] = prob[j] * f[j];
        }
        const size_t o = (size_t(b) * T + i) * C + size_t(h) * HS;
        for (int d = 0; d < HS; d++) {
          for (int j = 0; j < T; j++) r.out[o + d] += z[j] * qkv[at(b, j, 2, h, d)];
        }
        double dot = 0, dot_scale = 0;
        for (int j = 0; j < T; j++) {
          double dz = 0;
          for (int d = 0; d < HS; d++) dz += dout[o + d] * qkv[at(b, j, 2, h, d)];
          dp[j] = dz * f[j];
          dot += prob[j] * dp[j];
          dot_scale += prob[j] * std::fabs(dp[j]);
        }
        for (int j = 0; j < T; j++) {
          const double ds = prob[j] * (dp[j] - dot);
          const double ds_scale = prob[j] * (std::fabs(dp[j]) + dot_scale);
          for (int d = 0; d < HS; d++) {
            r.dqkv[at(b, i, 0, h, d)] += scale * ds * qkv[at(b, j, 1, h, d)];
            r.dqkv_scale[at(b, i, 0, h, d)] += scale * ds_scale * std::fabs(qkv[at(b, j, 1, h, d)]);
            r.dqkv[at(b, j, 1, h, d)] += scale * ds * qkv[at(b, i, 0, h, d)];
            r.dqkv_scale[at(b, j, 1, h, d)] += scale * ds_scale * std::fabs(qkv[at(b, i, 0, h, d)]);
            r.dqkv[at(b, j, 2, h, d)] += z[j] * dout[o + d];
            r.dqkv_scale[at(b, j, 2, h, d)] += z[j] * std::fabs(dout[o + d]);
          }
        }
      }
    }
  }
  return r;
}

// One case's random inputs in `backend`, drawn from `rng` in this order: qkv, the key mask,
// dout, and the dqkv0 the backward accumulates into; with the out and lse the forward writes.
template <typename S>
struct AttentionInputs {
  AttentionInputs(BackendT<S>& backend, Rng& rng, const AttentionCase& c)
      : qkv(random_values<S>(rng, qkv_size(c))),
        mask(random_mask(rng, c)),
        dout(random_values<S>(rng, size_t(c.B) * c.T * c.NH * c.HS)),
        dqkv0(random_values<S>(rng, qkv.size())),
        d_qkv(backend, qkv),
        d_out(backend, dout.size()),
        d_dout(backend, dout),
        d_dqkv(backend, dqkv0),
        d_lse(backend, size_t(c.B) * c.NH * c.T),
        d_mask(backend, mask),
        key_mask(c.masked ? d_mask.get() : nullptr) {}

  // The run's lse, out and dqkv against the float64 reference `r` of the same inputs: lse
  // within 1e-5 (fp32 dot products of HS terms, exp to ~1e-7); out one rounding plus 1e-5·max|v|
  // (fp32 error ~1e-6 of max|v|, the weights summing to at most 1/(1 - p)); dqkv = old +
  // gradient, one rounding plus 1e-5 of each entry's Σ|terms|.
  void expect_matches(const Reference& r) const {
    expect_close(to_double(d_lse.download()), r.lse, 1e-5, 1e-5, "lse");
    const double v_scale = max_abs(to_double(qkv));
    expect_close(to_double(d_out.download()), r.out, result_rel<S>(), 1e-5 * v_scale, "out");
    auto want = to_double(dqkv0);
    for (size_t j = 0; j < want.size(); j++) want[j] += r.dqkv[j];
    const auto got = to_double(d_dqkv.download());
    for (size_t j = 0; j < got.size(); j++) {
      ASSERT_NEAR(got[j], want[j],
                  result_rel<S>() * std::fabs(want[j]) + 1e-5 * (r.dqkv_scale[j] + 1e-3))
          << "dqkv[" << j << "]";
    }
  }

  const std::vector<S> qkv;          // (B, T, 3C)
  const std::vector<int32_t> mask;   // (B, T)
  const std::vector<S> dout, dqkv0;  // (B, T, C), (B, T, 3C)
  DeviceBuffer<S, BackendT<S>> d_qkv, d_out, d_dout, d_dqkv;
  DeviceBuffer<float, BackendT<S>> d_lse;  // (B, NH, T)
  DeviceBuffer<int32_t, BackendT<S>> d_mask;
  const int32_t* key_mask;  // d_mask, null when the case is not masked
};

}  // namespace collage::test
