// rope_forward / rope_backward against float64 rotations, the inverse property, in-place use,
// and finite differences.
#include "backend/cpu/cpu_backend.h"
#include "backend_test_util.h"

namespace collage::test {
namespace {

struct Shape {
  int B, T, NH, HS;
};
// Odd sizes, and a long sequence where t·θ reaches ~1000 rad (an fp32 angle would be off by
// ~1e-4 there).
const Shape kShapes[] = {{2, 5, 3, 6}, {1, 1024, 1, 8}};
constexpr float kBase = 10000.0f;

// out = qkv with each (i, i + HS/2) pair of every q and k head rotated by t·base^(-2i/HS);
// sign = -1 rotates back (the transpose).
std::vector<double> rotate(const std::vector<double>& qkv, const Shape& s, double sign) {
  std::vector<double> out = qkv;
  const int C = s.NH * s.HS, half = s.HS / 2;
  for (int b = 0; b < s.B; b++) {
    for (int t = 0; t < s.T; t++) {
      for (int part = 0; part < 2; part++) {  // q, k
        for (int h = 0; h < s.NH; h++) {
          for (int i = 0; i < half; i++) {
            const double angle = sign * t * std::pow(double(kBase), -2.0 * i / s.HS);
            const size_t j =
                (size_t(b) * s.T + t) * 3 * C + size_t(part) * C + size_t(h) * s.HS + i;
            const double x1 = qkv[j], x2 = qkv[j + half];
            out[j] = x1 * std::cos(angle) - x2 * std::sin(angle);
            out[j + half] = x2 * std::cos(angle) + x1 * std::sin(angle);
          }
        }
      }
    }
  }
  return out;
}

// |x1| + |x2| of the pair each element belongs to (v: |x|): the scale of its fp32 error.
std::vector<double> pair_scale(const std::vector<double>& qkv, const Shape& s) {
  std::vector<double> scale(qkv.size());
  const int C = s.NH * s.HS, half = s.HS / 2;
  for (size_t j = 0; j < qkv.size(); j++) {
    const int within = int(j % (3 * C));
    if (within >= 2 * C) {
      scale[j] = std::fabs(qkv[j]);
      continue;
    }
    const int i = within % s.HS;
    const size_t partner = i < half ? j + half : j - half;
    scale[j] = std::fabs(qkv[j]) + std::fabs(qkv[partner]);
  }
  return scale;
}

size_t qkv_size(const Shape& s) { return size_t(s.B) * s.T * 3 * s.NH * s.HS; }

template <typename S>
class RopeTest : public ::testing::Test {};
TYPED_TEST_SUITE(RopeTest, StorageTypes, StorageNames);

TYPED_TEST(RopeTest, ForwardRotatesQAndKAndCopiesV) {
  using S = TypeParam;
  auto backend = Storage<S>::make();
  Rng rng(1);
  for (const Shape& s : kShapes) {
    const auto qkv = random_values<S>(rng, qkv_size(s));
    DeviceBuffer<S, BackendT<S>> d_qkv(*backend, qkv), d_out(*backend, qkv.size());
    backend->rope_forward(d_out.get(), d_qkv.get(), s.B, s.T, s.NH, s.HS, kBase);
    const auto x = to_double(qkv);
    const auto want = rotate(x, s, +1.0);
    const auto got = to_double(d_out.download());
    // One rounding; cos/sin rounded to fp32 and a 2-term fp32 sum: ~2^-23 of |x1| + |x2|.
    const auto scale = pair_scale(x, s);
    for (size_t j = 0; j < got.size(); j++) {
      ASSERT_NEAR(got[j], want[j], result_rel<S>() * std::fabs(want[j]) + 1e-6 * scale[j]) << j;
    }

    // In place (out == qkv) gives the same bits.
    backend->rope_forward(d_qkv.get(), d_qkv.get(), s.B, s.T, s.NH, s.HS, kBase);
    EXPECT_TRUE(same_bits(d_qkv.download(), d_out.download()));
  }
}

// dqkv is written over NaNs, which must not be read (backend.h).
TYPED_TEST(RopeTest, BackwardWritesTransposedRotation) {
  using S = TypeParam;
  auto backend = Storage<S>::make();
  Rng rng(2);
  for (const Shape& s : kShapes) {
    const auto dout = random_values<S>(rng, qkv_size(s));
    DeviceBuffer<S, BackendT<S>> d_dout(*backend, dout),
        d_dqkv(*backend, nan_values<S>(dout.size()));
    backend->rope_backward(d_dqkv.get(), d_dout.get(), s.B, s.T, s.NH, s.HS, kBase);
    const auto g = to_double(dout);
    const auto rotated_back = rotate(g, s, -1.0);  // Rᵀ = R(-angle); v passes through
    const auto& want = rotated_back;
    const auto got = to_double(d_dqkv.download());
    const auto scale = pair_scale(g, s);
    for (size_t j = 0; j < got.size(); j++) {
      ASSERT_NEAR(got[j], want[j], result_rel<S>() * std::fabs(want[j]) + 1e-6 * scale[j]) << j;
    }
  }
}

// Rᵀ R = I: the backward applied to the forward's output gives back the input.
TYPED_TEST(RopeTest, BackwardInvertsForward) {
  using S = TypeParam;
  auto backend = Storage<S>::make();
  Rng rng(3);
  for (const Shape& s : kShapes) {
    const auto qkv = random_values<S>(rng, qkv_size(s));
    DeviceBuffer<S, BackendT<S>> d_qkv(*backend, qkv), d_rotated(*backend, qkv.size()),
        d_back(*backend, qkv.size());
    backend->rope_forward(d_rotated.get(), d_qkv.get(), s.B, s.T, s.NH, s.HS, kBase);
    backend->rope_backward(d_back.get(), d_rotated.get(), s.B, s.T, s.NH, s.HS, kBase);
    const auto x = to_double(qkv);
    const auto got = to_double(d_back.download());
    // Two roundings (the rotated pair, then the result), each ≤ 2^-8 of the pair's size.
    const auto scale = pair_scale(x, s);
    for (size_t j = 0; j < got.size(); j++) {
      ASSERT_NEAR(got[j], x[j], 2 * result_rel<S>() * scale[j]) << j;
    }
  }
}

TEST(RopeGradient, MatchesFiniteDifferencesAtFp32) {
  auto backend = make_cpu_backend_fp32(kFdThreads);
  Rng rng(4);
  const Shape s{1, 3, 2, 4};
  auto qkv = random_values<float>(rng, qkv_size(s));
  const auto loss_weights = random_weights<float>(rng, qkv.size());
  auto loss = [&](const std::vector<float>& x) {
    DeviceBuffer<float, BackendT<float>> d_x(*backend, x), d_out(*backend, x.size());
    backend->rope_forward(d_out.get(), d_x.get(), s.B, s.T, s.NH, s.HS, kBase);
    return weighted_sum(d_out.download(), loss_weights);
  };
  DeviceBuffer<float, BackendT<float>> d_dout(*backend, from_double<float>(loss_weights)),
      dx(*backend, qkv.size());
  backend->rope_backward(dx.get(), d_dout.get(), s.B, s.T, s.NH, s.HS, kBase);
  expect_gradient_matches_differences(loss, qkv, to_double(dx.download()), "dqkv");
}

TEST(Rope, OddHeadSizeIsAnError) {
  auto backend = make_cpu_backend(kThreads);
  DeviceBuffer<bf16, Backend> qkv(*backend, size_t(3 * 5)), out(*backend, size_t(3 * 5));
  EXPECT_THROW(backend->rope_forward(out.get(), qkv.get(), 1, 1, 1, 5, kBase), Error);
}

}  // namespace
}  // namespace collage::test
