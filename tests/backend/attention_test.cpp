// attention_forward / attention_backward against float64 loops (causal, key mask, both),
// queries that see no key, and finite differences.
#include <limits>

#include "attention_reference.h"
#include "backend/cpu/cpu_backend.h"

namespace collage::test {
namespace {

// Odd sizes in every combination of masks, and T = 70 for two query blocks of the kernel.
const AttentionCase kCases[] = {{2, 5, 2, 6, true, false},
                                {2, 5, 2, 6, false, true},
                                {2, 5, 2, 6, true, true},
                                {1, 70, 1, 4, true, true},
                                {1, 70, 2, 4, false, false}};

template <typename S>
class AttentionTest : public ::testing::Test {};
TYPED_TEST_SUITE(AttentionTest, StorageTypes, StorageNames);

TYPED_TEST(AttentionTest, ForwardAndBackwardMatchFloat64) {
  using S = TypeParam;
  auto backend = Storage<S>::make();
  Rng rng(1);
  for (const AttentionCase& c : kCases) {
    SCOPED_TRACE(::testing::Message()
                 << "T=" << c.T << " causal=" << c.causal << " masked=" << c.masked);
    const AttentionInputs<S> in(*backend, rng, c);
    backend->attention_forward(in.d_out.get(), in.d_lse.get(), in.d_qkv.get(), in.key_mask,
                               c.causal, c.B, c.T, c.NH, c.HS);
    backend->attention_backward(in.d_dqkv.get(), in.d_dout.get(), in.d_out.get(), in.d_qkv.get(),
                                in.d_lse.get(), in.key_mask, c.causal, c.B, c.T, c.NH, c.HS);
    // Tolerances: AttentionInputs::expect_matches (attention_reference.h).
    in.expect_matches(reference(c, to_double(in.qkv), in.mask, to_double(in.dout)));
  }
}

// A query whose keys are all hidden has no softmax: out 0, lse -inf, no gradient, no NaN.
TYPED_TEST(AttentionTest, QueriesThatSeeNothingGetZeros) {
  using S = TypeParam;
  auto backend = Storage<S>::make();
  Rng rng(2);
  const int B = 2, T = 4, NH = 1, HS = 2, C = NH * HS;
  // Batch 0: key 0 hidden, so causal query 0 sees nothing. Batch 1: every key hidden.
  const std::vector<int32_t> mask = {0, 1, 1, 1, 0, 0, 0, 0};
  const auto qkv = random_values<S>(rng, size_t(B) * T * 3 * C);
  const auto dout = random_values<S>(rng, size_t(B) * T * C);
  DeviceBuffer<S, BackendT<S>> d_qkv(*backend, qkv), d_out(*backend, dout.size()),
      d_dout(*backend, dout), d_dqkv(*backend, qkv.size());
  DeviceBuffer<float, BackendT<S>> d_lse(*backend, size_t(B) * NH * T);
  DeviceBuffer<int32_t, BackendT<S>> d_mask(*backend, mask);
  backend->attention_forward(d_out.get(), d_lse.get(), d_qkv.get(), d_mask.get(), true, B, T, NH,
                             HS);
  backend->attention_backward(d_dqkv.get(), d_dout.get(), d_out.get(), d_qkv.get(), d_lse.get(),
                              d_mask.get(), true, B, T, NH, HS);
  const auto out = to_double(d_out.download());
  const auto lse = d_lse.download();
  const auto dqkv = to_double(d_dqkv.download());
  for (double v : dqkv) ASSERT_TRUE(std::isfinite(v));
  const float minus_inf = -std::numeric_limits<float>::infinity();
  for (int t = 0; t < T; t++) {  // batch 1: no query sees anything
    EXPECT_EQ(lse[size_t(T) + t], minus_inf);
    for (int d = 0; d < C; d++) EXPECT_EQ(out[(size_t(T) + t) * C + d], 0.0);
  }
  EXPECT_EQ(lse[0], minus_inf);  // batch 0: query 0 sees nothing, the others see keys 1..t
  for (int d = 0; d < C; d++) EXPECT_EQ(out[d], 0.0);
  for (int t = 1; t < T; t++) EXPECT_TRUE(std::isfinite(lse[t]));
  // Batch 1 has no visible key anywhere: all its gradients are 0; batch 0's query 0 gets none.
  for (size_t j = size_t(T) * 3 * C; j < dqkv.size(); j++) EXPECT_EQ(dqkv[j], 0.0);
  for (int d = 0; d < C; d++) EXPECT_EQ(dqkv[d], 0.0);
}

TEST(AttentionGradient, MatchesFiniteDifferencesAtFp32) {
  auto backend = make_cpu_backend_fp32(kFdThreads);
  Rng rng(3);
  for (bool causal : {true, false}) {
    const int B = 1, T = 4, NH = 2, HS = 3, C = NH * HS;
    const std::vector<int32_t> mask = {1, 1, 0, 1};
    auto qkv = random_values<float>(rng, size_t(B) * T * 3 * C);
    const auto loss_weights = random_weights<float>(rng, size_t(B) * T * C);
    DeviceBuffer<int32_t, BackendT<float>> d_mask(*backend, mask);
    auto loss = [&](const std::vector<float>& x) {
      DeviceBuffer<float, BackendT<float>> d_x(*backend, x), d_out(*backend, loss_weights.size()),
          d_lse(*backend, size_t(B) * NH * T);
      backend->attention_forward(d_out.get(), d_lse.get(), d_x.get(), d_mask.get(), causal, B, T,
                                 NH, HS);
      return weighted_sum(d_out.download(), loss_weights);
    };
    DeviceBuffer<float, BackendT<float>> d_x(*backend, qkv), d_out(*backend, loss_weights.size()),
        d_lse(*backend, size_t(B) * NH * T), d_dout(*backend, from_double<float>(loss_weights)),
        dx(*backend, qkv.size());
    backend->attention_forward(d_out.get(), d_lse.get(), d_x.get(), d_mask.get(), causal, B, T, NH,
                               HS);
    backend->attention_backward(dx.get(), d_dout.get(), d_out.get(), d_x.get(), d_lse.get(),
                                d_mask.get(), causal, B, T, NH, HS);
    expect_gradient_matches_differences(loss, qkv, to_double(dx.download()),
                                        causal ? "dqkv causal" : "dqkv");
  }
}

}  // namespace
}  // namespace collage::test
