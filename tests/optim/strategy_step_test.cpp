// Each strategy's per-element step (src/numerics/collage_math.h) against the float64 reference
// written from docs/PRECISION.md §3–§5 and §8 (strategy_reference.h), element by element over 5
// steps: bit-exact θ, m, v, δθ, δv, compensation and the EDQ terms u, Δ. Both Adam orders,
// weight decay on and off, β2 = 0.95 and 0.999, early steps (t = 1..5, large bias correction)
// and late ones (t = 100000.., bc → 1), collage-plus with and without the reference quirk.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "numerics/collage_math.h"
#include "strategy_reference.h"

namespace collage::test {
namespace {

using math::bfloat;

struct Hyper {
  bool hf;
  double weight_decay, beta2;
  int64_t t0;
  double lr;
  std::string describe() const {
    return std::string(hf ? "hf" : "torch") + " wd=" + std::to_string(weight_decay) +
           " beta2=" + std::to_string(beta2) + " t0=" + std::to_string(t0) +
           " lr=" + std::to_string(lr);
  }
};

std::vector<Hyper> all_hyper() {
  std::vector<Hyper> out;
  for (bool hf : {false, true})
    for (double wd : {0.0, 0.1})
      for (double beta2 : {0.95, 0.999})
        for (auto [t0, lr] : {std::pair<int64_t, double>{1, 1e-3}, {100000, 3e-6}})
          out.push_back({hf, wd, beta2, t0, lr});
  return out;
}

constexpr double kBeta1 = 0.9, kEps = 1e-8;
constexpr int kElements = 3000, kSteps = 5;
constexpr uint64_t kSeed = 0x5eed;
constexpr int64_t kOffset = 1000;

// Weights from 1e-3 to 10 (some exactly 0), gradients from 1e-6 to 10 (some 0), and
// moments/low parts already populated, so that every line has work to do from step 1.
struct Element {
  RefState state;
  double grad_scale;
};
std::vector<Element> initial_elements(Bf16Random& r) {
  std::vector<Element> out(kElements);
  for (int i = 0; i < kElements; i++) {
    Element& e = out[i];
    e.grad_scale = std::pow(10.0, r.uniform(-6, 1));
    RefState& s = e.state;
    s.theta = i % 50 == 0 ? 0.0 : rb(r.normal() * std::pow(10.0, r.uniform(-3, 1)));
    s.m = rb(r.normal() * e.grad_scale * 0.3);
    s.v = rb(e.grad_scale * e.grad_scale * r.uniform(0.1, 2));
    s.dtheta = r.low_part(s.theta);
    s.dv = r.low_part(s.v);
    s.comp = rb(r.uniform(-0.5, 0.5) * ulp(s.theta));
  }
  return out;
}

math::AdamScalars header_scalars(const Hyper& h, int64_t t) {
  return math::make_adam_scalars(h.lr, kBeta1, h.beta2, kEps, h.weight_decay, t, h.hf);
}

void expect_same(const char* what, double got, double want, int i, int64_t t) {
  ASSERT_EQ(bits_of(got), bits_of(want))
      << what << " element " << i << " t " << t << ": got " << got << " want " << want;
}

void check_strategy(RefStrategy strategy, bool quirk) {
  Bf16Random r(42 + int(strategy));
  for (const Hyper& h : all_hyper()) {
    SCOPED_TRACE(h.describe());
    std::vector<Element> elements = initial_elements(r);
    // The header's copy of the state, as bf16.
    std::vector<bfloat> theta(kElements), m(kElements), v(kElements), extra(kElements),
        dv(kElements);
    for (int i = 0; i < kElements; i++) {
      const RefState& s = elements[i].state;
      theta[i] = to_bfloat(s.theta), m[i] = to_bfloat(s.m), v[i] = to_bfloat(s.v);
      extra[i] = to_bfloat(strategy == RefStrategy::kahan ? s.comp : s.dtheta);
      dv[i] = to_bfloat(s.dv);
    }
    int64_t moved = 0;
    for (int64_t t = h.t0; t < h.t0 + kSteps; t++) {
      const math::AdamScalars hs = header_scalars(h, t);
      const RefScalars rs = ref_scalars(h.lr, kBeta1, h.beta2, kEps, h.weight_decay, t, h.hf);
      for (int i = 0; i < kElements; i++) {
        const double g = i % 37 == 0 ? 0.0 : rb(r.normal() * elements[i].grad_scale);
        RefState& want = elements[i].state;
        ref_step(strategy, want, g, rs, quirk, kSeed, t, kOffset + i);
        const bfloat gb = to_bfloat(g);
        math::EdqTerm term;
        switch (strategy) {
          case RefStrategy::bf16:
            term = math::step_bf16(theta[i], gb, m[i], v[i], hs);
            break;
          case RefStrategy::light:
            term = math::step_collage_light(theta[i], gb, m[i], v[i], extra[i], hs);
            break;
          case RefStrategy::plus:
            term = math::step_collage_plus(theta[i], gb, m[i], v[i], extra[i], dv[i], hs, quirk);
            break;
          case RefStrategy::kahan:
            term = math::step_kahan(theta[i], gb, m[i], v[i], extra[i], hs);
            break;
          case RefStrategy::stochastic:
            term = math::step_stochastic(theta[i], gb, m[i], v[i], hs, kSeed, t, kOffset + i);
            break;
        }
        expect_same("theta", to_double(theta[i]), want.theta, i, t);
        expect_same("m", to_double(m[i]), want.m, i, t);
        expect_same("v", to_double(v[i]), want.v, i, t);
        if (strategy == RefStrategy::light || strategy == RefStrategy::plus) {
          expect_same("dtheta", to_double(extra[i]), want.dtheta, i, t);
        }
        if (strategy == RefStrategy::plus) expect_same("dv", to_double(dv[i]), want.dv, i, t);
        if (strategy == RefStrategy::kahan) {
          expect_same("compensation", to_double(extra[i]), want.comp, i, t);
        }
        ASSERT_EQ(double(term.u), want.u) << "u element " << i << " t " << t;
        ASSERT_EQ(term.delta, want.delta) << "delta element " << i << " t " << t;
        moved += want.delta != 0;
        if (::testing::Test::HasFatalFailure()) return;
      }
    }
    EXPECT_GT(moved, 0);  // the weights did change somewhere
  }
}

TEST(StrategyStep, Bf16MatchesReference) { check_strategy(RefStrategy::bf16, false); }
TEST(StrategyStep, CollageLightMatchesReference) { check_strategy(RefStrategy::light, false); }
TEST(StrategyStep, CollagePlusMatchesReference) { check_strategy(RefStrategy::plus, false); }
TEST(StrategyStep, CollagePlusQuirkMatchesReference) { check_strategy(RefStrategy::plus, true); }
TEST(StrategyStep, KahanMatchesReference) { check_strategy(RefStrategy::kahan, false); }
TEST(StrategyStep, StochasticMatchesReference) { check_strategy(RefStrategy::stochastic, false); }

TEST(StrategyStep, Fp32MasterMatchesReference) {
  Bf16Random r(7);
  for (const Hyper& h : all_hyper()) {
    SCOPED_TRACE(h.describe());
    std::vector<RefMaster> want(kElements);
    std::vector<float> master(kElements), m(kElements), v(kElements);
    std::vector<double> grad_scale(kElements);
    for (int i = 0; i < kElements; i++) {
      grad_scale[i] = std::pow(10.0, r.uniform(-6, 1));
      want[i].master = rf(r.normal() * std::pow(10.0, r.uniform(-3, 1)));
      want[i].m = rf(r.normal() * grad_scale[i] * 0.3);
      want[i].v = rf(grad_scale[i] * grad_scale[i] * r.uniform(0.1, 2));
      master[i] = float(want[i].master), m[i] = float(want[i].m), v[i] = float(want[i].v);
    }
    for (int64_t t = h.t0; t < h.t0 + kSteps; t++) {
      const math::AdamScalars hs = header_scalars(h, t);
      const RefScalars rs = ref_scalars(h.lr, kBeta1, h.beta2, kEps, h.weight_decay, t, h.hf);
      for (int i = 0; i < kElements; i++) {
        const double g = i % 37 == 0 ? 0.0 : rb(r.normal() * grad_scale[i]);  // bf16 gradients
        ref_step_fp32_master(want[i], g, rs);
        const math::EdqTerm term = math::step_fp32_master(master[i], float(g), m[i], v[i], hs);
        ASSERT_EQ(master[i], want[i].master) << "master " << i << " t " << t;
        ASSERT_EQ(m[i], want[i].m) << "m " << i << " t " << t;
        ASSERT_EQ(v[i], want[i].v) << "v " << i << " t " << t;
        ASSERT_EQ(double(term.u), want[i].u) << "u " << i << " t " << t;
        ASSERT_EQ(term.delta, want[i].delta) << "delta " << i << " t " << t;
      }
    }
  }
}

// The scalars are formed in double and rounded once: 1−β1 for β1 = 0.9 is fp32(0.1).
TEST(StrategyStep, ScalarsAreRoundedOnceFromDouble) {
  const math::AdamScalars s = math::make_adam_scalars(1e-3, 0.9, 0.95, 1e-8, 0.1, 3, false);
  uint32_t bits;
  std::memcpy(&bits, &s.one_minus_beta1, sizeof bits);
  EXPECT_EQ(bits, 0x3dcccccdu);
  EXPECT_NE(s.one_minus_beta1, 1.0f - 0.9f);
  EXPECT_EQ(s.neg_lr_over_bc1, float(-1e-3 / (1 - 0.9 * 0.9 * 0.9)));
  EXPECT_EQ(to_double(s.beta2_hi), 0.94921875);
  EXPECT_EQ(to_double(s.beta2_lo), 0.000782012939453125);
  EXPECT_EQ(s.lr_wd, float(1e-4));
}

}  // namespace
}  // namespace collage::test
