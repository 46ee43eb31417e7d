// attention_forward_dropout / attention_backward_dropout (backend.h) against float64 loops that
// compute dropout(softmax(S))·v and its gradient explicitly, with the mask drawn from the
// independent Philox of philox_reference.h; against finite differences (the mask is fixed by
// (seed, offset), so the dropped-out attention is a smooth function of qkv); and p = 0 against
// the plain attention ops, bit for bit.
//
// Tolerances as tests/backend/attention_test.cpp: lse 1e-5; out one rounding plus 1e-5·max|v|
// (the weights Z sum to at most 1/(1 - p) instead of 1); dqkv one rounding plus 1e-5 of each
// entry's Σ|terms|.
#include <limits>
#include <tuple>

#include "backend_test_util.h"
#include "philox_reference.h"

namespace collage::test {
namespace {

struct Case {
  int B, T, NH, HS;
  bool causal, masked;
};
const Case kCases[] = {{2, 5, 2, 6, true, false},
                       {2, 5, 2, 6, false, true},
                       {2, 9, 3, 4, true, true},
                       {1, 70, 2, 4, true, true},  // two query blocks of the cpu kernel
                       {1, 70, 1, 4, false, false}};

size_t qkv_size(const Case& c) { return size_t(c.B) * c.T * 3 * c.NH * c.HS; }

std::vector<int32_t> random_mask(Rng& rng, const Case& c) {
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
Reference reference(const Case& c, const std::vector<double>& qkv, const std::vector<int32_t>& mask,
                    const std::vector<double>& dout, float p, uint64_t seed, uint64_t offset) {
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

template <typename S>
class AttentionDropoutTest : public ::testing::Test {};
TYPED_TEST_SUITE(AttentionDropoutTest, StorageTypes, StorageNames);

TYPED_TEST(AttentionDropoutTest, ForwardAndBackwardMatchFloat64) {
  using S = TypeParam;
  auto backend = Storage<S>::make();
  Rng rng(1);
  const uint64_t seed = 0xabcdef0123ull;
  for (const Case& c : kCases) {
    for (const float p : {0.2f, 0.6f}) {
      const uint64_t offset = uint64_t(rng.integer(0, 1 << 20));
      SCOPED_TRACE(::testing::Message() << "T=" << c.T << " causal=" << c.causal
                                        << " masked=" << c.masked << " p=" << p);
      const int C = c.NH * c.HS;
      const auto qkv = random_values<S>(rng, qkv_size(c));
      const auto mask = random_mask(rng, c);
      const auto dout = random_values<S>(rng, size_t(c.B) * c.T * C);
      const auto dqkv0 = random_values<S>(rng, qkv.size());
      DeviceBuffer<S, BackendT<S>> d_qkv(*backend, qkv), d_out(*backend, dout.size()),
          d_dout(*backend, dout), d_dqkv(*backend, dqkv0);
      DeviceBuffer<float, BackendT<S>> d_lse(*backend, size_t(c.B) * c.NH * c.T);
      DeviceBuffer<int32_t, BackendT<S>> d_mask(*backend, mask);
      const int32_t* key_mask = c.masked ? d_mask.get() : nullptr;
      backend->attention_forward_dropout(d_out.get(), d_lse.get(), d_qkv.get(), key_mask, c.causal,
                                         c.B, c.T, c.NH, c.HS, p, seed, offset);
      backend->attention_backward_dropout(d_dqkv.get(), d_dout.get(), d_out.get(), d_qkv.get(),
                                          d_lse.get(), key_mask, c.causal, c.B, c.T, c.NH, c.HS, p,
                                          seed, offset);

      const Reference r = reference(c, to_double(qkv), mask, to_double(dout), p, seed, offset);
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
  }
}

// The mask matters: with dropout the output is not the plain attention's (a test that could
// not tell the two apart would pass a kernel that ignores p).
TEST(AttentionDropout, DropoutChangesTheOutputAndZeroIsThePlainOp) {
  auto backend = make_cpu_backend(kThreads);
  Rng rng(2);
  const Case c{2, 33, 2, 8, true, true};
  const int C = c.NH * c.HS;
  const auto qkv = random_values<bf16>(rng, qkv_size(c));
  const auto mask = random_mask(rng, c);
  const auto dout = random_values<bf16>(rng, size_t(c.B) * c.T * C);
  DeviceBuffer<bf16, Backend> d_qkv(*backend, qkv), d_dout(*backend, dout);
  DeviceBuffer<int32_t, Backend> d_mask(*backend, mask);
  auto run = [&](bool plain, float p) {
    DeviceBuffer<bf16, Backend> out(*backend, dout.size()), dqkv(*backend, qkv.size());
    DeviceBuffer<float, Backend> lse(*backend, size_t(c.B) * c.NH * c.T);
    const int32_t* m = d_mask.get();
    if (plain) {
      backend->attention_forward(out.get(), lse.get(), d_qkv.get(), m, c.causal, c.B, c.T, c.NH,
                                 c.HS);
      backend->attention_backward(dqkv.get(), d_dout.get(), out.get(), d_qkv.get(), lse.get(), m,
                                  c.causal, c.B, c.T, c.NH, c.HS);
    } else {
      backend->attention_forward_dropout(out.get(), lse.get(), d_qkv.get(), m, c.causal, c.B, c.T,
                                         c.NH, c.HS, p, 3, 0);
      backend->attention_backward_dropout(dqkv.get(), d_dout.get(), out.get(), d_qkv.get(),
                                          lse.get(), m, c.causal, c.B, c.T, c.NH, c.HS, p, 3, 0);
    }
    return std::make_tuple(out.download(), lse.download(), dqkv.download());
  };
  const auto [out0, lse0, dqkv0] = run(true, 0.0f);
  const auto [out1, lse1, dqkv1] = run(false, 0.0f);
  EXPECT_TRUE(same_bits(out0, out1));
  EXPECT_TRUE(same_bits(lse0, lse1));
  EXPECT_TRUE(same_bits(dqkv0, dqkv1));
  const auto [out2, lse2, dqkv2] = run(false, 0.3f);
  EXPECT_FALSE(same_bits(out0, out2));
  EXPECT_TRUE(same_bits(lse0, lse2));  // lse is of the undropped scores
  EXPECT_FALSE(same_bits(dqkv0, dqkv2));
}

TEST(AttentionDropoutGradient, MatchesFiniteDifferencesAtFp32) {
  auto backend = make_cpu_backend_fp32(kFdThreads);
  Rng rng(3);
  const Case c{1, 6, 2, 4, true, true};
  const float p = 0.4f;
  const uint64_t seed = 11, offset = 5;
  const int C = c.NH * c.HS;
  auto qkv = random_values<float>(rng, qkv_size(c));
  const auto mask = random_mask(rng, c);
  const auto loss_weights = random_weights<float>(rng, size_t(c.B) * c.T * C);
  DeviceBuffer<int32_t, BackendT<float>> d_mask(*backend, mask);
  auto loss = [&](const std::vector<float>& x) {
    DeviceBuffer<float, BackendT<float>> d_x(*backend, x), out(*backend, loss_weights.size()),
        lse(*backend, size_t(c.B) * c.NH * c.T);
    backend->attention_forward_dropout(out.get(), lse.get(), d_x.get(), d_mask.get(), c.causal, c.B,
                                       c.T, c.NH, c.HS, p, seed, offset);
    return weighted_sum(out.download(), loss_weights);
  };
  DeviceBuffer<float, BackendT<float>> d_x(*backend, qkv), out(*backend, loss_weights.size()),
      lse(*backend, size_t(c.B) * c.NH * c.T), d_dout(*backend, from_double<float>(loss_weights)),
      dx(*backend, qkv.size());
  backend->attention_forward_dropout(out.get(), lse.get(), d_x.get(), d_mask.get(), c.causal, c.B,
                                     c.T, c.NH, c.HS, p, seed, offset);
  backend->attention_backward_dropout(dx.get(), d_dout.get(), out.get(), d_x.get(), lse.get(),
                                      d_mask.get(), c.causal, c.B, c.T, c.NH, c.HS, p, seed,
                                      offset);
  expect_gradient_matches_differences(loss, qkv, to_double(dx.download()), "dqkv");
}

}  // namespace
}  // namespace collage::test
