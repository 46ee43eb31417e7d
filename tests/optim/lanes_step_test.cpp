// Every strategy's step (src/numerics/collage_math.h) instantiated with the lane vectors of
// bf16_lanes.h == the scalar step applied to each lane, bit for bit: θ, m, v, δθ, δv, the
// compensation, the fp32 master and the EDQ terms. Inputs mix ordinary training values with
// NaN, ±inf, subnormals and ±0 in every component, both Adam orders, the reference quirk,
// early and late steps, with and without the cpu loop's table of reciprocal denominators.
// (strategy_step_test checks the scalar step against float64; cpu_strategy_step_test the
// backend, which runs these lanes, against the scalar step.)
#include <gtest/gtest.h>

#if defined(__AVX2__) && defined(__FMA__)

#include <cstring>
#include <string>
#include <vector>

#include "backend/cpu/optimizer_chunks.h"
#include "numerics/bf16_lanes.h"
#include "numerics/collage_math.h"
#include "numerics/edq_lanes.h"
#include "reference_math.h"

namespace collage::test {
namespace {

using math::Bf16Lanes;
using math::bfloat;
using math::F32Lanes;
using math::kLanes;

enum class Strategy { bf16, light, plus, kahan, stochastic };

struct Elements {
  std::vector<uint16_t> theta, grad, m, v, extra, dv;
};

Elements make_elements(Bf16Random& r, int n) {
  Elements e;
  for (int i = 0; i < n; i++) {
    e.theta.push_back(component(r, 0.1, false));
    e.grad.push_back(component(r, 1e-3, false));
    e.m.push_back(component(r, 1e-3, false));
    e.v.push_back(component(r, 1e-6, true));
    e.extra.push_back(component(r, 1e-4, false));
    e.dv.push_back(component(r, 1e-9, false));
  }
  return e;
}

// Runs the strategy on lanes i..i+kLanes (template B = Bf16Lanes) or element i (bfloat).
template <typename B>
auto run_step(Strategy strategy, Elements& e, int i, const math::AdamScalars& s, bool quirk,
              int64_t t) {
  B theta, grad, m, v, extra, dv;
  auto load = [&](B& x, const std::vector<uint16_t>& from) {
    if constexpr (std::is_same_v<B, bfloat>) {
      x = math::bf16_from_bits(from[i]);
    } else {
      x = math::load_bf16_lanes(&from[i]);
    }
  };
  auto store = [&](std::vector<uint16_t>& to, B x) {
    if constexpr (std::is_same_v<B, bfloat>) {
      to[i] = math::bf16_bits(x);
    } else {
      math::store_bf16_lanes(&to[i], x);
    }
  };
  load(theta, e.theta), load(grad, e.grad), load(m, e.m), load(v, e.v);
  load(extra, e.extra), load(dv, e.dv);
  constexpr uint64_t kSeed = 99;
  auto term = [&] {
    switch (strategy) {
      case Strategy::bf16:
        return math::step_bf16(theta, grad, m, v, s);
      case Strategy::light:
        return math::step_collage_light(theta, grad, m, v, extra, s);
      case Strategy::plus:
        return math::step_collage_plus(theta, grad, m, v, extra, dv, s, quirk);
      case Strategy::kahan:
        return math::step_kahan(theta, grad, m, v, extra, s);
      default:
        if constexpr (std::is_same_v<B, bfloat>) {
          return math::step_stochastic(theta, grad, m, v, s, kSeed, t, int64_t(i));
        } else {
          return math::step_stochastic(theta, grad, m, v, s, kSeed, t, math::LaneIndices{i});
        }
    }
  }();
  store(e.theta, theta), store(e.m, m), store(e.v, v), store(e.extra, extra), store(e.dv, dv);
  return term;
}

bool same_f64(double got, double want) {
  return std::memcmp(&got, &want, 8) == 0 || (std::isnan(got) && std::isnan(want));
}

TEST(LanesStep, EveryBf16StrategyMatchesTheScalarStepInEveryLane) {
  constexpr int kN = 16 * 1024;
  const char* names[] = {"bf16", "collage-light", "collage-plus", "kahan", "stochastic"};
  for (Strategy strategy :
       {Strategy::bf16, Strategy::light, Strategy::plus, Strategy::kahan, Strategy::stochastic}) {
    for (bool hf : {false, true}) {
      for (bool quirk : {false, true}) {
        for (bool table : {false, true}) {
          if (quirk && strategy != Strategy::plus) continue;
          SCOPED_TRACE(std::string(names[int(strategy)]) + (hf ? " hf" : " torch") +
                       (quirk ? " quirk" : "") + (table ? " table" : ""));
          Bf16Random r(7 + int(strategy));
          Elements lanes = make_elements(r, kN);
          Elements scalar = lanes;
          for (int64_t t : {int64_t(1), int64_t(2), int64_t(100000)}) {
            const math::AdamScalars s =
                math::make_adam_scalars(1e-3, 0.9, t == 2 ? 0.999 : 0.95, 1e-8, 0.1, t, hf);
            // The lanes with the cpu loop's table of reciprocal denominators, or dividing as the
            // scalar step does.
            math::AdamScalars lane_scalars = s;
            std::vector<float> reciprocals(cpu::ReciprocalDenominators::kEntries);
            if (table) {
              ASSERT_TRUE(cpu::fill_reciprocal_denominators(s, reciprocals.data()));
              lane_scalars.reciprocal_denominators = reciprocals.data();
            }
            for (int i = 0; i < kN; i += kLanes) {
              const math::EdqLanesTerm got =
                  run_step<Bf16Lanes>(strategy, lanes, i, lane_scalars, quirk, t);
              float u[kLanes], after[kLanes], before[kLanes];
              math::store_f32_lanes(u, got.u);
              math::store_f32_lanes(after, got.after);
              math::store_f32_lanes(before, got.before);
              for (int k = 0; k < kLanes; k++) {
                const math::EdqTerm want = run_step<bfloat>(strategy, scalar, i + k, s, quirk, t);
                ASSERT_EQ(std::memcmp(&u[k], &want.u, 4), 0) << "u, element " << i + k;
                ASSERT_TRUE(same_f64(double(after[k]) - double(before[k]), want.delta))
                    << "delta, element " << i + k;
              }
            }
            ASSERT_EQ(lanes.theta, scalar.theta) << "t " << t;
            ASSERT_EQ(lanes.m, scalar.m) << "t " << t;
            ASSERT_EQ(lanes.v, scalar.v) << "t " << t;
            ASSERT_EQ(lanes.extra, scalar.extra) << "t " << t;
            ASSERT_EQ(lanes.dv, scalar.dv) << "t " << t;
          }
        }
      }
    }
  }
}

TEST(LanesStep, Fp32MasterMatchesTheScalarStepInEveryLane) {
  // fp32 state: NaN results compared as NaN only (see bf16_lanes_test.cpp); θ = rn(master)
  // is exact.
  constexpr int kN = 16 * 1024;
  for (bool hf : {false, true}) {
    SCOPED_TRACE(hf ? "hf" : "torch");
    Bf16Random r(21);
    std::vector<float> master(kN), grad(kN), m(kN), v(kN);
    auto widen = [](uint16_t bits) { return math::to_f32(math::bf16_from_bits(bits)); };
    for (int i = 0; i < kN; i++) {
      // Full fp32 values: a bf16 component plus random low bits (kept for the edges).
      const uint32_t low = uint32_t(r.engine()()) & 0xffffu;
      auto with_low = [&](float x) {
        uint32_t u;
        std::memcpy(&u, &x, 4);
        u |= (u & 0x7f800000u) == 0x7f800000u ? 0 : low;
        std::memcpy(&x, &u, 4);
        return x;
      };
      master[i] = with_low(widen(component(r, 0.1, false)));
      grad[i] = widen(component(r, 1e-3, false));
      m[i] = with_low(widen(component(r, 1e-3, false)));
      v[i] = with_low(widen(component(r, 1e-6, true)));
    }
    std::vector<float> master2 = master, m2 = m, v2 = v;
    for (int64_t t : {int64_t(1), int64_t(5)}) {
      const math::AdamScalars s = math::make_adam_scalars(1e-3, 0.9, 0.95, 1e-8, 0.1, t, hf);
      for (int i = 0; i < kN; i += kLanes) {
        F32Lanes w = math::load_f32_lanes(&master[i]), mi = math::load_f32_lanes(&m[i]),
                 vi = math::load_f32_lanes(&v[i]);
        const math::EdqLanesTerm got =
            math::step_fp32_master(w, math::load_f32_lanes(&grad[i]), mi, vi, s);
        math::store_f32_lanes(&master[i], w), math::store_f32_lanes(&m[i], mi);
        math::store_f32_lanes(&v[i], vi);
        uint16_t theta[kLanes];
        math::store_bf16_lanes(theta, rn(w));
        float u[kLanes], after[kLanes], before[kLanes];
        math::store_f32_lanes(u, got.u);
        math::store_f32_lanes(after, got.after);
        math::store_f32_lanes(before, got.before);
        for (int k = 0; k < kLanes; k++) {
          const int j = i + k;
          const math::EdqTerm want = math::step_fp32_master(master2[j], grad[j], m2[j], v2[j], s);
          const std::string at = "element " + std::to_string(j) + " t " + std::to_string(t);
          ASSERT_TRUE(same_f64(master[j], master2[j])) << "master " << at;
          ASSERT_TRUE(same_f64(m[j], m2[j])) << "m " << at;
          ASSERT_TRUE(same_f64(v[j], v2[j])) << "v " << at;
          ASSERT_EQ(theta[k], math::bf16_bits(math::rn(master2[j]))) << "theta " << at;
          ASSERT_TRUE(same_f64(u[k], want.u)) << "u " << at;
          ASSERT_TRUE(same_f64(double(after[k]) - double(before[k]), want.delta)) << "delta " << at;
        }
      }
    }
  }
}

}  // namespace
}  // namespace collage::test

#else

TEST(LanesStep, NeedsAvx2AndFma) {
  GTEST_SKIP() << "built without AVX2/FMA: the cpu optimizer runs the scalar path only";
}

#endif
