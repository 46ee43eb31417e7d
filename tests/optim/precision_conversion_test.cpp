// Converting the training state between precision strategies (the table in
// precision_conversion.cpp), on values whose results are worked out by hand in binary, and
// on random values against a float64 reference rounding written here.
#include "optim/precision_conversion.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "core/error.h"
#include "optim/optimizer.h"

namespace collage {
namespace {

// Nearest bf16 to x (ties to even), found by comparing the two neighbours in float64:
// independent of the code under test.
double reference_bf16(double x) {
  if (x == 0) return x;
  const int e = std::ilogb(x);                // x in [2^e, 2^(e+1))
  const double ulp = std::ldexp(1.0, e - 7);  // bf16: 8 significant bits
  const double below = std::floor(x / ulp) * ulp, above = below + ulp;
  const double d_below = x - below, d_above = above - x;
  if (d_below != d_above) return d_below < d_above ? below : above;
  return std::fmod(std::fabs(below / ulp), 2.0) == 0 ? below : above;  // the even one
}

double value(bf16 x) { return bf16_to_float(x); }
bf16 exact_bf16(double x) {
  const bf16 b = float_to_bf16(float(x));
  EXPECT_EQ(value(b), x) << x << " is not a bf16";
  return b;
}

template <typename T>
std::vector<uint8_t> bytes_of(const std::vector<T>& values) {
  std::vector<uint8_t> out(values.size() * sizeof(T));
  std::memcpy(out.data(), values.data(), out.size());
  return out;
}
template <typename T>
std::vector<T> values_of(const HostTrainingState& s, const std::string& name) {
  const std::vector<uint8_t>& bytes = s.state.at(name);
  std::vector<T> out(bytes.size() / sizeof(T));
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

// fp32-master state of the masters `master` (θ = rn(master)) and moments m, v.
HostTrainingState fp32_state(const std::vector<float>& master, const std::vector<float>& m,
                             const std::vector<float>& v) {
  HostTrainingState s;
  s.precision = Precision::fp32_master;
  for (float x : master) s.params.push_back(float_to_bf16(x));
  s.state = {{"master", bytes_of(master)}, {"m", bytes_of(m)}, {"v", bytes_of(v)}};
  return s;
}

double p2(int e) { return std::ldexp(1.0, e); }

TEST(PrecisionConversion, Fp32MasterToCollageKeepsTheLowBitsInTheErrorTerms) {
  // bf16 steps are 2^-7 in [1, 2): 1 + 2^-7 + 2^-12 -> θ = 1 + 2^-7, δθ = 2^-12;
  // 1 + 2^-8 is a tie -> even 1, δθ = 2^-8; 1 + 3·2^-8 a tie -> even 1 + 2^-6, δθ = -2^-8;
  // -(2 + 2^-5 + 2^-9) -> θ = -(2 + 2^-5), δθ = -2^-9 (steps 2^-6 in [2, 4)).
  const std::vector<float> master = {float(1 + p2(-7) + p2(-12)), float(1 + p2(-8)),
                                     float(1 + 3 * p2(-8)), float(-(2 + p2(-5) + p2(-9)))};
  const std::vector<double> theta = {1 + p2(-7), 1, 1 + p2(-6), -(2 + p2(-5))};
  const std::vector<double> dtheta = {p2(-12), p2(-8), -p2(-8), -p2(-9)};
  // v = 1 + 2^-7 + 2^-9 + 2^-20 -> rn = 1 + 2^-7, δv = rn(2^-9 + 2^-20) = 2^-9 (2^-20 is 11
  // bits below: it rounds away); m = 0.1f -> rn(0.1f) = 0.10009765625.
  const std::vector<float> m(4, 0.1f), v(4, float(1 + p2(-7) + p2(-9) + p2(-20)));
  for (Precision to : {Precision::collage_light, Precision::collage_plus}) {
    SCOPED_TRACE(precision_name(to));
    const HostTrainingState out = convert_training_state(fp32_state(master, m, v), to);
    EXPECT_EQ(out.precision, to);
    const auto out_dtheta = values_of<bf16>(out, "dtheta");
    const auto out_m = values_of<bf16>(out, "m"), out_v = values_of<bf16>(out, "v");
    for (size_t i = 0; i < 4; i++) {
      EXPECT_EQ(value(out.params[i]), theta[i]) << i;
      EXPECT_EQ(value(out_dtheta[i]), dtheta[i]) << i;
      EXPECT_EQ(value(out_m[i]), 0.10009765625) << i;
      EXPECT_EQ(value(out_v[i]), 1 + p2(-7)) << i;
    }
    if (to == Precision::collage_plus) {
      for (bf16 dv : values_of<bf16>(out, "dv")) EXPECT_EQ(value(dv), p2(-9));
    } else {
      EXPECT_EQ(out.state.count("dv"), 0u);
    }
    EXPECT_EQ(out.state.count("master"), 0u);
  }
}

TEST(PrecisionConversion, Fp32MasterToPlainStrategiesRoundsAndStartsKahanAtZero) {
  const std::vector<float> master = {float(1 + p2(-7) + p2(-12)), float(1 + 3 * p2(-8))};
  const std::vector<float> m = {1e-3f, -2e-5f}, v = {3e-7f, 5e-9f};
  for (Precision to : {Precision::bf16, Precision::stochastic, Precision::kahan}) {
    SCOPED_TRACE(precision_name(to));
    const HostTrainingState out = convert_training_state(fp32_state(master, m, v), to);
    const auto out_m = values_of<bf16>(out, "m"), out_v = values_of<bf16>(out, "v");
    for (size_t i = 0; i < 2; i++) {
      EXPECT_EQ(value(out.params[i]), reference_bf16(master[i]));
      EXPECT_EQ(value(out_m[i]), reference_bf16(m[i]));
      EXPECT_EQ(value(out_v[i]), reference_bf16(v[i]));
    }
    std::vector<std::string> names;
    for (const auto& [name, bytes] : out.state) names.push_back(name);
    if (to == Precision::kahan) {
      EXPECT_EQ(names, (std::vector<std::string>{"compensation", "m", "v"}));
      for (uint8_t b : out.state.at("compensation")) EXPECT_EQ(b, 0);
    } else {
      EXPECT_EQ(names, (std::vector<std::string>{"m", "v"}));
    }
  }
}

HostTrainingState collage_state(Precision p, std::vector<double> theta, std::vector<double> dtheta,
                                std::vector<double> m, std::vector<double> v,
                                std::vector<double> dv) {
  HostTrainingState s;
  s.precision = p;
  auto to_bf16 = [](const std::vector<double>& x) {
    std::vector<bf16> out;
    for (double d : x) out.push_back(exact_bf16(d));
    return out;
  };
  s.params = to_bf16(theta);
  s.state = {{"m", bytes_of(to_bf16(m))},
             {"v", bytes_of(to_bf16(v))},
             {"dtheta", bytes_of(to_bf16(dtheta))}};
  if (p == Precision::collage_plus) s.state["dv"] = bytes_of(to_bf16(dv));
  return s;
}

TEST(PrecisionConversion, CollageToFp32MasterWidensTheSums) {
  // master = θ + δθ and v + δv, exact in fp32 here (at most 24 significant bits).
  const HostTrainingState plus =
      collage_state(Precision::collage_plus, {1 + p2(-7), -3}, {p2(-12), -p2(-14)}, {0.5, -p2(-20)},
                    {p2(-20), 3 * p2(-30)}, {p2(-30), -p2(-40)});
  const HostTrainingState out = convert_training_state(plus, Precision::fp32_master);
  const auto master = values_of<float>(out, "master");
  const auto m = values_of<float>(out, "m"), v = values_of<float>(out, "v");
  EXPECT_EQ(double(master[0]), 1 + p2(-7) + p2(-12));
  EXPECT_EQ(double(master[1]), -3 - p2(-14));
  EXPECT_EQ(double(m[0]), 0.5);
  EXPECT_EQ(double(m[1]), -p2(-20));
  EXPECT_EQ(double(v[0]), p2(-20) + p2(-30));
  EXPECT_EQ(double(v[1]), 3 * p2(-30) - p2(-40));
  // θ = rn(master), which is θ itself for a normalised pair.
  EXPECT_EQ(value(out.params[0]), 1 + p2(-7));
  EXPECT_EQ(value(out.params[1]), -3);

  HostTrainingState light = plus;
  light.precision = Precision::collage_light;
  light.state.erase("dv");
  const auto v_light = values_of<float>(convert_training_state(light, Precision::fp32_master), "v");
  EXPECT_EQ(double(v_light[0]), p2(-20));  // no δv: v widened as it is
}

TEST(PrecisionConversion, LightAndPlusAddOrDropTheSecondMomentsErrorTerm) {
  const HostTrainingState plus =
      collage_state(Precision::collage_plus, {1 + p2(-7), 2}, {p2(-12), -p2(-10)}, {0.25, 0.5},
                    {p2(-20), p2(-21)}, {p2(-29), -p2(-31)});
  const HostTrainingState light = convert_training_state(plus, Precision::collage_light);
  EXPECT_EQ(light.state.count("dv"), 0u);
  for (const char* name : {"m", "v", "dtheta"})
    EXPECT_EQ(light.state.at(name), plus.state.at(name));
  EXPECT_EQ(bytes_of(light.params), bytes_of(plus.params));

  const HostTrainingState back = convert_training_state(light, Precision::collage_plus);
  for (const char* name : {"m", "v", "dtheta"}) EXPECT_EQ(back.state.at(name), plus.state.at(name));
  for (uint8_t b : back.state.at("dv")) EXPECT_EQ(b, 0);
}

TEST(PrecisionConversion, KahanCompensationIsReadAsTheWeightsLowPart) {
  // θ + c = 1.5 + 2^-9 (a quarter of θ's ulp 2^-7) and -0.75 + 0.
  HostTrainingState kahan;
  kahan.precision = Precision::kahan;
  kahan.params = {exact_bf16(1.5), exact_bf16(-0.75)};
  kahan.state = {{"m", bytes_of(std::vector<bf16>{exact_bf16(0.125), exact_bf16(-1)})},
                 {"v", bytes_of(std::vector<bf16>{exact_bf16(p2(-10)), exact_bf16(p2(-11))})},
                 {"compensation", bytes_of(std::vector<bf16>{exact_bf16(p2(-9)), exact_bf16(0)})}};
  const HostTrainingState plus = convert_training_state(kahan, Precision::collage_plus);
  EXPECT_EQ(bytes_of(plus.params), bytes_of(kahan.params));
  EXPECT_EQ(plus.state.at("m"), kahan.state.at("m"));
  EXPECT_EQ(plus.state.at("v"), kahan.state.at("v"));
  const auto dtheta = values_of<bf16>(plus, "dtheta");
  EXPECT_EQ(value(dtheta[0]), p2(-9));
  EXPECT_EQ(value(dtheta[1]), 0.0);
  for (uint8_t b : plus.state.at("dv")) EXPECT_EQ(b, 0);
  const HostTrainingState wide = convert_training_state(kahan, Precision::fp32_master);
  EXPECT_EQ(values_of<float>(wide, "master"), (std::vector<float>{float(1.5 + p2(-9)), -0.75f}));
  EXPECT_EQ(values_of<float>(wide, "v"), (std::vector<float>{float(p2(-10)), float(p2(-11))}));
  // and back into kahan from collage: θ kept, the compensation restarts at 0
  const HostTrainingState again = convert_training_state(plus, Precision::kahan);
  EXPECT_EQ(bytes_of(again.params), bytes_of(kahan.params));
  for (uint8_t b : again.state.at("compensation")) EXPECT_EQ(b, 0);
}

TEST(PrecisionConversion, Bf16IntoCollageStartsWithZeroErrorTerms) {
  HostTrainingState bf;
  bf.precision = Precision::bf16;
  bf.params = {exact_bf16(1.5), exact_bf16(-0.75)};
  bf.state = {{"m", bytes_of(std::vector<bf16>{exact_bf16(0.125), exact_bf16(-1)})},
              {"v", bytes_of(std::vector<bf16>{exact_bf16(p2(-10)), exact_bf16(p2(-11))})}};
  for (Precision to : {Precision::collage_light, Precision::collage_plus, Precision::stochastic}) {
    SCOPED_TRACE(precision_name(to));
    const HostTrainingState out = convert_training_state(bf, to);
    EXPECT_EQ(bytes_of(out.params), bytes_of(bf.params));
    EXPECT_EQ(out.state.at("m"), bf.state.at("m"));
    EXPECT_EQ(out.state.at("v"), bf.state.at("v"));
    for (const char* name : {"dtheta", "dv"})
      if (out.state.count(name))
        for (uint8_t b : out.state.at(name)) EXPECT_EQ(b, 0) << name;
  }
}

// fp32-master -> collage-plus -> fp32-master gives back every master whose significand
// fits in θ + δθ (16 bits), and every moment exactly representable in v + δv.
TEST(PrecisionConversion, MasterSurvivesARoundTripThroughCollagePlus) {
  std::mt19937_64 gen(7);
  std::vector<float> master, m, v;
  for (int i = 0; i < 2000; i++) {
    const double significand = double(gen() % 65536 + 65536) / 65536.0;  // 17 bits, 1.xxxx
    const int exponent = int(gen() % 40) - 30;
    const double x = (gen() % 2 ? -1 : 1) * std::ldexp(significand, exponent);
    // 17 significant bits: θ = rn(x) takes the top 8, and x − θ, at most 2^-8 (relative)
    // and a multiple of 2^-16, fits in δθ's 8.
    master.push_back(float(x));
    m.push_back(float(x / 3));  // m is rounded to one bf16: only checked against rn below
    v.push_back(float(std::fabs(x)));
  }
  const HostTrainingState plus =
      convert_training_state(fp32_state(master, m, v), Precision::collage_plus);
  const HostTrainingState back = convert_training_state(plus, Precision::fp32_master);
  const auto master_back = values_of<float>(back, "master");
  const auto m_back = values_of<float>(back, "m"), v_back = values_of<float>(back, "v");
  for (size_t i = 0; i < master.size(); i++) {
    ASSERT_EQ(master_back[i], master[i]) << i;
    ASSERT_EQ(v_back[i], v[i]) << i;
    ASSERT_EQ(double(m_back[i]), reference_bf16(m[i])) << i;
  }
}

TEST(PrecisionConversion, DoubleToBf16RoundsOnceEvenWhereFloatLandsOnATie) {
  // 1 + 2^-8 + 2^-40 is above the tie between 1 and 1 + 2^-7, but as a float it IS the tie
  // (2^-40 is below float's precision): double -> float -> bf16 would give 1.
  EXPECT_EQ(value(double_to_bf16(1 + p2(-8) + p2(-40))), 1 + p2(-7));
  EXPECT_EQ(value(double_to_bf16(-(1 + p2(-8) + p2(-40)))), -(1 + p2(-7)));
  EXPECT_EQ(value(double_to_bf16(1 + 3 * p2(-8) - p2(-40))), 1 + p2(-7));
  EXPECT_EQ(value(double_to_bf16(1 + p2(-8))), 1.0);  // a real tie: even
  std::mt19937_64 gen(3);
  for (int i = 0; i < 100000; i++) {
    // Values near ties half the time, to exercise the case above.
    double x = std::ldexp(double(gen() % 256 + 256) / 256.0, int(gen() % 60) - 30);
    if (gen() % 2) x += std::ldexp(double(int64_t(gen() % 2001) - 1000), std::ilogb(x) - 48);
    if (gen() % 2) x = -x;
    ASSERT_EQ(value(double_to_bf16(x)), reference_bf16(x)) << std::hexfloat << x;
  }
}

TEST(PrecisionConversion, MissingOrMisSizedComponentsAreNamed) {
  HostTrainingState s = fp32_state({1.0f, 2.0f}, {0, 0}, {0, 0});
  s.state.erase("v");
  try {
    convert_training_state(s, Precision::bf16);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'v'"), std::string::npos) << e.what();
  }
  s = fp32_state({1.0f, 2.0f}, {0, 0}, {0, 0});
  s.state["m"].pop_back();
  EXPECT_THROW(convert_training_state(s, Precision::collage_light), Error);
  // Converting to the same strategy is the identity.
  s = fp32_state({1.0f, 2.0f}, {0.5f, 0}, {0, 0.25f});
  const HostTrainingState same = convert_training_state(s, Precision::fp32_master);
  EXPECT_EQ(same.state, s.state);
}

}  // namespace
}  // namespace collage
