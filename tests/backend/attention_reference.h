#pragma once
// The float64 attention both attention tests compare against (attention_test.cpp,
// attention_dropout_test.cpp): dropout(softmax(S))·v and its gradient written out loop by loop,
// the mask drawn from the independent Philox of philox_reference.h. p = 0 keeps every
// probability with weight exactly 1, which is plain attention. Also the random inputs, the
// cpu attention engines both tests run, and their comparison with the reference
// (AttentionInputs::expect_matches, which derives the tolerances).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <type_traits>
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
  std::vector<double> out, lse, dqkv;
  std::vector<double> out_scale;   // Σ_j Z_ij·|v_jd| per out entry: Σ|terms|
  std::vector<double> dqkv_scale;  // Σ|terms| per gradient entry, |dS| bounded as below
  // What an error of ε_i in D_i moves each dq and dk entry by, for D_i = dout_i·out_i formed from
  // a bf16 out: ε_i = (2^-7 + 3e-5)·Σ_d |dout_id|·out_scale_id (attention_test.cpp derives it).
  std::vector<double> dqkv_from_delta;
};

// The relative error bound of one round-to-nearest-even to bf16 (8 significant bits): half a
// unit in the last place, 2^-8 of the value.
constexpr double kBf16Rounding = 1.0 / 256;

// With P = softmax(S) (lse of the undropped scores), F_ij = 1/(1 - p) if kept else 0,
// Z = P∘F: out = Z·v; dv = Zᵀ·dout, dZ = dout·vᵀ, dP = dZ∘F, dS = P∘(dP - rowsum(P∘dP)),
// dq = scale·dS·k, dk = scale·dSᵀ·q.
inline Reference reference(const AttentionCase& c, const std::vector<double>& qkv,
                           const std::vector<int32_t>& mask, const std::vector<double>& dout,
                           float p = 0, uint64_t seed = 0, uint64_t offset = 0) {
  const int C = c.NH * c.HS, T = c.T, HS = c.HS;
  const double scale = 1.0 / std::sqrt(double(HS));
  Reference r{std::vector<double>(size_t(c.B) * T * C), std::vector<double>(size_t(c.B) * c.NH * T),
              std::vector<double>(qkv.size()),          std::vector<double>(size_t(c.B) * T * C),
              std::vector<double>(qkv.size()),          std::vector<double>(qkv.size())};
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
        double delta_error = 0;  // ε_i
        for (int d = 0; d < HS; d++) {
          for (int j = 0; j < T; j++) {
            r.out[o + d] += z[j] * qkv[at(b, j, 2, h, d)];
            r.out_scale[o + d] += z[j] * std::fabs(qkv[at(b, j, 2, h, d)]);
          }
          delta_error += std::fabs(dout[o + d]) * r.out_scale[o + d];
        }
        delta_error *= 2 * kBf16Rounding + 3e-5;
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
            r.dqkv_from_delta[at(b, i, 0, h, d)] +=
                scale * prob[j] * delta_error * std::fabs(qkv[at(b, j, 1, h, d)]);
            r.dqkv[at(b, j, 1, h, d)] += scale * ds * qkv[at(b, i, 0, h, d)];
            r.dqkv_scale[at(b, j, 1, h, d)] += scale * ds_scale * std::fabs(qkv[at(b, i, 0, h, d)]);
            r.dqkv_from_delta[at(b, j, 1, h, d)] +=
                scale * prob[j] * delta_error * std::fabs(qkv[at(b, i, 0, h, d)]);
            r.dqkv[at(b, j, 2, h, d)] += z[j] * dout[o + d];
            r.dqkv_scale[at(b, j, 2, h, d)] += z[j] * std::fabs(dout[o + d]);
          }
        }
      }
    }
  }
  return r;
}

// The cpu attention's engines: OpenBLAS sgemm on fp32 (attention.cpp: bf16 and fp32 storage,
// and fp32 storage under cpu_gemm onednn too, whose attention stays there), and oneDNN's bf16
// matmuls (attention_onednn.cpp), which round the left factors of the products to bf16.
using AttentionEngines = ::testing::Types<GemmEngine<bf16, false>, GemmEngine<float, false>,
                                          GemmEngine<bf16, true>, GemmEngine<float, true>>;
template <typename E>
constexpr bool rounds_left_factors = E::onednn&& std::is_same_v<typename E::Storage, bf16>;

// One case's random inputs in `backend`, drawn from `rng` in this order: qkv, the key mask and
// dout; with the out and lse the forward writes, and a dqkv of NaNs that the backward must write
// over without reading (backend.h).
template <typename S>
struct AttentionInputs {
  AttentionInputs(BackendT<S>& backend, Rng& rng, const AttentionCase& c)
      : qkv(random_values<S>(rng, qkv_size(c))),
        mask(random_mask(rng, c)),
        dout(random_values<S>(rng, size_t(c.B) * c.T * c.NH * c.HS)),
        dqkv0(nan_values<S>(qkv.size())),
        d_qkv(backend, qkv),
        d_out(backend, dout.size()),
        d_dout(backend, dout),
        d_dqkv(backend, dqkv0),
        d_lse(backend, size_t(c.B) * c.NH * c.T),
        d_mask(backend, mask),
        key_mask(c.masked ? d_mask.get() : nullptr) {}

  // The run's lse, out and dqkv against the float64 reference `r` of the same inputs.
  // `rounded`: the engine rounds the left factors of its products to bf16 (the oneDNN engine,
  // attention_onednn.cpp: rn(P∘F) before P·v and Pᵀ·dout, rn(dS) before dS·k and dSᵀ·q, and D
  // from the bf16 out); otherwise every product is fp32 (attention.cpp).
  //
  // Both: lse within 1e-5 (fp32 dot products of HS terms, exp to ~1e-7); out one rounding plus
  // 1e-5·max|v| (fp32 error ~1e-6 of max|v|, the weights summing to at most 1/(1 - p)); dqkv the
  // gradient, one rounding plus 1e-5 of each entry's Σ|terms|. A stored result is
  // rn(y) for a y within E of the exact value, so |rn(y) - want| ≤ 2^-8·|want| + (1 + 2^-8)·E;
  // result_rel (2^-8 + 1e-5) covers both factors for the fp32-only E above.
  // Rounded, E grows by what the rounded left factors add, each |rn(x) - x| ≤ 2^-8·|x|:
  //  - out_id = Σ_j rn(p̃_ij·F_ij)·v_jd / l_i: 2^-8·Σ_j Z_ij·|v_jd| (out_scale);
  //  - dv_jd = Σ_i rn(Z_ij)·dout_id: 2^-8·Σ_i Z_ij·|dout_id|; dq_id = scale·Σ_j rn(dS_ij)·k_jd and
  //    dk_jd = scale·Σ_i rn(dS_ij)·q_id: 2^-8·scale·Σ|dS·k| (resp. Σ|dS·q|), all within
  //    2^-8·dqkv_scale since P_ij·(|dP_ij| + Σ_j P_ij·|dP_ij|) ≥ |dS_ij|;
  //  - D_i = dout_i·out_i from the bf16 out, off by at most ε_i (attention_test.cpp), which moves
  //    dS_ij by P_ij·ε_i and, after the rounding of dS, by (1 + 2^-8)·P_ij·ε_i:
  //    (1 + 2^-8)·dqkv_from_delta.
  void expect_matches(const Reference& r, bool rounded = false) const {
    expect_close(to_double(d_lse.download()), r.lse, 1e-5, 1e-5, "lse");
    const double v_scale = max_abs(to_double(qkv));
    const double carry = 1 + kBf16Rounding;  // E through the final rounding
    double used_out = 0, used_dqkv = 0;      // the largest |got - want| / bound
    const auto got_out = to_double(d_out.download());
    for (size_t j = 0; j < got_out.size(); j++) {
      const double rounding = rounded ? carry * kBf16Rounding * r.out_scale[j] : 0.0;
      const double bound = result_rel<S>() * std::fabs(r.out[j]) + 1e-5 * v_scale + rounding;
      ASSERT_NEAR(got_out[j], r.out[j], bound) << "out[" << j << "]";
      used_out = std::max(used_out, std::fabs(got_out[j] - r.out[j]) / bound);
    }
    const std::vector<double>& want = r.dqkv;
    const auto got = to_double(d_dqkv.download());
    for (size_t j = 0; j < got.size(); j++) {
      const double rounding =
          rounded ? carry * (kBf16Rounding * r.dqkv_scale[j] + carry * r.dqkv_from_delta[j]) : 0.0;
      const double bound =
          result_rel<S>() * std::fabs(want[j]) + 1e-5 * (r.dqkv_scale[j] + 1e-3) + rounding;
      ASSERT_NEAR(got[j], want[j], bound) << "dqkv[" << j << "]";
      used_dqkv = std::max(used_dqkv, std::fabs(got[j] - want[j]) / bound);
    }
    std::printf("  largest error as a fraction of its bound: out %.2f, dqkv %.2f\n", used_out,
                used_dqkv);
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
