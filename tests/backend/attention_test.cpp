// attention_forward / attention_backward against float64 loops (causal, key mask, both),
// queries that see no key, and finite differences, on each of the cpu attention's engines
// (attention_reference.h): OpenBLAS sgemm with fp32 probabilities, and oneDNN's bf16 matmuls,
// which round the probabilities and dS to bf16 where the GPU's tensor-core kernels do
// (src/backend/cpu/attention_onednn.cpp). Where oneDNN has no bf16 matmul its cases skip.
//
// Tolerances: AttentionInputs::expect_matches derives them. The oneDNN engine's widen by what
// the bf16 left factors add, 2^-8 of each result's Σ|terms| (rn(x) is within 2^-8·|x|), and for
// dq, dk by what D_i = dout_i·out_i from the bf16 out adds: the forward's out_id is within
// (2^-8 + 1e-5)·Σ_j Z_ij·|v_jd| of the exact value before its rounding to bf16 and within
// 2^-8·|out_id| ≤ 2^-8·Σ_j Z_ij·|v_jd| after, so |ΔD_i| ≤ ε_i = (2^-7 + 3e-5)·Σ_d |dout_id|·
// Σ_j Z_ij·|v_jd| (3e-5 for the fp32 sums: the out sum's 1e-5 and the dot's HS terms), and dS_ij
// moves by P_ij·ε_i. OnednnAttention.RoundsWhereTheTensorCoresRound pins where the roundings
// are, bit for bit.
#include <limits>

#include "attention_reference.h"
#include "backend/cpu/context.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/kernels.h"
#include "numerics/elementwise_math.h"

namespace collage::test {
namespace {

// Odd sizes in every combination of masks, T = 70 for two query blocks of the kernels, and
// T = 130 for three, whose causal key counts are 64, 128 and 130.
const AttentionCase kCases[] = {{2, 5, 2, 6, true, false},   {2, 5, 2, 6, false, true},
                                {2, 5, 2, 6, true, true},    {1, 70, 1, 4, true, true},
                                {1, 70, 2, 4, false, false}, {1, 130, 2, 16, true, true}};

template <typename E>
class AttentionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = E::unavailable(); !why.empty()) GTEST_SKIP() << why;
  }
};
TYPED_TEST_SUITE(AttentionTest, AttentionEngines, GemmEngineNames);

TYPED_TEST(AttentionTest, ForwardAndBackwardMatchFloat64) {
  using S = typename TypeParam::Storage;
  auto backend = TypeParam::make();
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
    in.expect_matches(reference(c, to_double(in.qkv), in.mask, to_double(in.dout)),
                      rounds_left_factors<TypeParam>);
  }
}

// A query whose keys are all hidden has no softmax: out 0, lse -inf, no gradient, no NaN.
TYPED_TEST(AttentionTest, QueriesThatSeeNothingGetZeros) {
  using S = typename TypeParam::Storage;
  auto backend = TypeParam::make();
  Rng rng(2);
  const int B = 2, T = 4, NH = 1, HS = 2, C = NH * HS;
  // Batch 0: key 0 hidden, so causal query 0 sees nothing. Batch 1: every key hidden.
  const std::vector<int32_t> mask = {0, 1, 1, 1, 0, 0, 0, 0};
  const auto qkv = random_values<S>(rng, size_t(B) * T * 3 * C);
  const auto dout = random_values<S>(rng, size_t(B) * T * C);
  // dqkv starts as NaNs: the zeros must be written, not left (backend.h).
  DeviceBuffer<S, BackendT<S>> d_qkv(*backend, qkv), d_out(*backend, dout.size()),
      d_dout(*backend, dout), d_dqkv(*backend, nan_values<S>(qkv.size()));
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

// The oneDNN engine rounds exactly where the tensor-core kernels do, bit for bit: the forward's
// left factor rn(p̃_ij) before p̃·v (p̃_ij = e^(scale·S_ij - m_i), unnormalized) and out_i =
// rn(O_i / l_i) with l_i the fp32 sum of the unrounded p̃; the backward's rn(P_ij) before Pᵀ·dout
// and rn(dS_ij) before dS·k and dSᵀ·q, with dS_ij = P_ij·(dZ_ij - D_i) and D_i = dout_i·out_i
// from the bf16 out. With two keys every product is one sum of two terms that are exact in fp32
// (bf16 times bf16), and q, k are multiples of 1/2 and each dout row has one nonzero entry, so
// S, dZ and D are exact: the whole computation is predictable in fp32 with the same operations,
// whatever order oneDNN sums in. The same prediction without the roundings must differ (else
// the inputs would not test them): hence 16 heads of such two-token attentions.
TEST(OnednnAttention, RoundsWhereTheTensorCoresRound) {
  if (const std::string why = GemmEngine<bf16, true>::unavailable(); !why.empty())
    GTEST_SKIP() << why;
  constexpr int B = 4, T = 2, NH = 4, HS = 4, C = NH * HS;
  Rng rng(7);
  // Element d of q, k, v (part 0, 1, 2) of token t in head (b, h): qkv (B, T, 3C).
  auto at = [](int b, int t, int part, int h, int d) {
    return (size_t(b) * T + t) * 3 * C + size_t(part) * C + size_t(h) * HS + d;
  };
  auto row = [](int b, int t, int h) { return (size_t(b) * T + t) * C + size_t(h) * HS; };
  std::vector<bf16> qkv(size_t(B) * T * 3 * C), dout(size_t(B) * T * C);
  for (size_t e = 0; e < qkv.size(); e++) {
    const bool qk = (e / C) % 3 < 2;
    qkv[e] = float_to_bf16(qk ? 0.5f * float(rng.integer(-3, 3)) : float(rng.normal()));
  }
  for (size_t r = 0; r < dout.size(); r += HS)
    dout[r] = float_to_bf16(float(rng.normal()));  // one nonzero entry a row, in column 0
  auto backend = GemmEngine<bf16, true>::make();
  DeviceBuffer<bf16, Backend> d_qkv(*backend, qkv), d_out(*backend, dout.size()),
      d_dout(*backend, dout), d_dqkv(*backend, qkv.size());
  DeviceBuffer<float, Backend> d_lse(*backend, size_t(B) * NH * T);
  backend->attention_forward(d_out.get(), d_lse.get(), d_qkv.get(), nullptr, false, B, T, NH, HS);
  backend->attention_backward(d_dqkv.get(), d_dout.get(), d_out.get(), d_qkv.get(), d_lse.get(),
                              nullptr, false, B, T, NH, HS);
  const auto out = d_out.download(), dqkv = d_dqkv.download();
  const auto lse = d_lse.download();

  // The prediction, with (rounded = true) and without the bf16 roundings of the left factors:
  // lse (B, NH, T), out (B, T, C), dqkv (B, T, 3C) as floats.
  const float scale = 1.0f / std::sqrt(float(HS));
  struct Prediction {
    std::vector<float> lse, out, dqkv;
  };
  auto predict = [&](bool rounded) {
    auto rn = [&](float x) { return rounded ? round_to_bf16(x) : x; };
    Prediction x{std::vector<float>(lse.size()), std::vector<float>(out.size()),
                 std::vector<float>(dqkv.size())};
    for (int b = 0; b < B; b++) {
      for (int h = 0; h < NH; h++) {
        auto value = [&](int t, int part, int d) {
          return bf16_to_float(qkv[at(b, t, part, h, d)]);
        };
        auto dy = [&](int t, int d) { return bf16_to_float(dout[row(b, t, h) + d]); };
        auto dot = [&](auto first, auto second) {  // exact: halves, or one nonzero term
          float s = 0;
          for (int d = 0; d < HS; d++) s += first(d) * second(d);
          return s;
        };
        auto score = [&](int i, int j) {
          return scale *
                 dot([&](int d) { return value(i, 0, d); }, [&](int d) { return value(j, 1, d); });
        };
        float P[T][T], dS[T][T];
        for (int i = 0; i < T; i++) {
          const float m = std::max(score(i, 0), score(i, 1));
          const float p[T] = {math::exp_approx(score(i, 0) - m), math::exp_approx(score(i, 1) - m)};
          const float l = p[0] + p[1];
          const float row_lse = m + std::log(l);
          x.lse[(size_t(b) * NH + h) * T + i] = row_lse;
          for (int d = 0; d < HS; d++)
            x.out[row(b, i, h) + d] =
                round_to_bf16((rn(p[0]) * value(0, 2, d) + rn(p[1]) * value(1, 2, d)) / l);
          const float D =
              dot([&](int d) { return dy(i, d); }, [&](int d) { return x.out[row(b, i, h) + d]; });
          for (int j = 0; j < T; j++) {
            P[i][j] = math::exp_approx(score(i, j) - row_lse);
            const float dZ =
                dot([&](int d) { return dy(i, d); }, [&](int d) { return value(j, 2, d); });
            dS[i][j] = P[i][j] * (dZ - D);
          }
        }
        for (int t = 0; t < T; t++) {
          for (int d = 0; d < HS; d++) {
            const float dq = rn(dS[t][0]) * value(0, 1, d) + rn(dS[t][1]) * value(1, 1, d);
            const float dk = rn(dS[0][t]) * value(0, 0, d) + rn(dS[1][t]) * value(1, 0, d);
            const float dv = rn(P[0][t]) * dy(0, d) + rn(P[1][t]) * dy(1, d);
            x.dqkv[at(b, t, 0, h, d)] = round_to_bf16(0.0f + scale * dq);
            x.dqkv[at(b, t, 1, h, d)] = round_to_bf16(0.0f + scale * dk);
            x.dqkv[at(b, t, 2, h, d)] = round_to_bf16(0.0f + dv);
          }
        }
      }
    }
    return x;
  };
  const Prediction want = predict(true), unrounded = predict(false);
  for (size_t i = 0; i < lse.size(); i++) EXPECT_EQ(lse[i], want.lse[i]) << "lse[" << i << "]";
  int out_differ = 0, differ[3] = {};  // where the roundings change out, dq, dk, dv
  for (size_t i = 0; i < out.size(); i++) {
    EXPECT_EQ(bf16_to_float(out[i]), want.out[i]) << "out[" << i << "]";
    out_differ += want.out[i] != unrounded.out[i];
  }
  for (size_t i = 0; i < dqkv.size(); i++) {
    EXPECT_EQ(bf16_to_float(dqkv[i]), want.dqkv[i]) << "dqkv[" << i << "]";
    differ[(i / C) % 3] += want.dqkv[i] != unrounded.dqkv[i];
  }
  EXPECT_GT(out_differ, 0) << "these inputs do not test the rounding of p̃";
  for (int part = 0; part < 3; part++)
    EXPECT_GT(differ[part], 0) << "these inputs do not test the rounding of d"
                               << "qkv"[part];
  std::printf("  the roundings change %d of %zu out, %d, %d and %d of %zu dq, dk and dv entries\n",
              out_differ, out.size(), differ[0], differ[1], differ[2], dqkv.size() / 3);
}

// Attention's primitives are made in the first step and reused after: a (rows, keys) pair of a
// query block needs three, since every operand is a dense (T, HS) copy or a dense block (S = q·kᵀ,
// also the backward's and dZ = dout·vᵀ; O = rn(p̃)·v, also dq's rn(dS)·k; the dv and dk sums).
// Each thread caches its own, and the blocks of T = 130 have three pairs when causal ((64, 64),
// (64, 128), (2, 130)) and two when not ((64, 130), (2, 130)): 9 or 6 per thread that ran a
// head, whatever B and NH, in the first call and none after.
TEST(OnednnAttention, CreatesItsPrimitivesInTheFirstStepOnly) {
  if (const std::string why = GemmEngine<bf16, true>::unavailable(); !why.empty())
    GTEST_SKIP() << why;
  const int B = 2, T = 130, NH = 2, HS = 8, C = NH * HS;
  Rng rng(8);
  const auto qkv = random_values<bf16>(rng, size_t(B) * T * 3 * C);
  const auto dout = random_values<bf16>(rng, size_t(B) * T * C);
  for (const bool causal : {true, false}) {
    SCOPED_TRACE(causal ? "causal" : "not causal");
    cpu::CpuContext cx;
    cx.threads = kThreads;
    cx.onednn = std::make_unique<cpu::OnednnGemm>(kThreads);
    for (int t = 0; t < kThreads; t++)
      cx.onednn_per_thread.push_back(std::make_unique<cpu::OnednnGemm>(1));
    std::vector<bf16> out(dout.size()), dqkv(qkv.size());
    std::vector<float> lse(size_t(B) * NH * T);
    auto step = [&] {
      for (const float p : {0.0f, 0.1f}) {  // dropout changes no shape
        cpu::attention_forward_dropout(cx, out.data(), lse.data(), qkv.data(), nullptr, causal, B,
                                       T, NH, HS, p, 1, 0);
        cpu::attention_backward_dropout(cx, dqkv.data(), dout.data(), out.data(), qkv.data(),
                                        lse.data(), nullptr, causal, B, T, NH, HS, p, 1, 0);
      }
      std::vector<int64_t> created;
      for (const auto& gemm : cx.onednn_per_thread) created.push_back(gemm->primitives_created());
      return created;
    };
    const std::vector<int64_t> first = step(), second = step();
    EXPECT_EQ(first, second);
    int64_t total = 0;
    for (const int64_t n : first) {
      EXPECT_TRUE(n == 0 || n == (causal ? 9 : 6)) << n;
      total += n;
    }
    EXPECT_GT(total, 0);
    EXPECT_EQ(cx.onednn->primitives_created(), 0);  // the matmuls' engine is not attention's
  }
}

}  // namespace
}  // namespace collage::test
