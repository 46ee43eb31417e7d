// The encoder's exact GELU and tanh (backend.h, "encoder ops") against float64.
//
// Tolerances. Each stored value is one rounding of an fp32 evaluation: result_rel<S>() (2^-8
// for bf16 plus 1e-5 of fp32 error; see backend_test_util.h) relative. GELU's fp32 form
// 0.5·x·(1 + erff(x/√2)) also carries an ABSOLUTE error: 1 + erff(..) is a value in [0, 2]
// computed with an error of a few ulps of 1 (erff's own ~1 ulp, the rounding of x/√2 and of
// the sum), ≲ 3e-7, so the product errs by ≲ 0.5·|x|·3e-7. For x ≪ 0, where 1 + erf cancels,
// that is all the accuracy fp32 has (PyTorch's fp32 GELU has the same cancellation); the test
// allows 2e-7·|x| absolute. The derivative has the same 1.5e-7 absolute in its cdf term, times
// |dout|: 1e-6·|dout| absolute.
#include <cmath>
#include <cstdio>

#include "backend/cpu/cpu_backend.h"
#include "backend_test_util.h"

namespace collage::test {
namespace {

const int64_t kLengths[] = {1, 1001, 100003};

// 0.5·x·(1 + erf(x/√2)) as 0.5·x·erfc(-x/√2): no cancellation for x ≪ 0 in double either.
double gelu_erf(double x) { return 0.5 * x * std::erfc(-x / std::sqrt(2.0)); }
double gelu_erf_derivative(double x) {
  return 0.5 * std::erfc(-x / std::sqrt(2.0)) + x * std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI);
}

// N(0, 3²) plus fixed values in the tails and at 0.
template <typename S>
std::vector<S> inputs(Rng& rng, int64_t n) {
  auto v = random_values<S>(rng, size_t(n), 3.0);
  const double fixed[] = {0.0, -0.5, 0.5, -3.0, 3.0, -6.0, 6.0, -10.0, 10.0, -30.0};
  for (size_t i = 0; i < std::size(fixed) && i < v.size(); i++) v[i] = Storage<S>::from(fixed[i]);
  return v;
}

template <typename S>
class EncoderElementwiseTest : public ::testing::Test {};
TYPED_TEST_SUITE(EncoderElementwiseTest, StorageTypes, StorageNames);

TYPED_TEST(EncoderElementwiseTest, GeluErfForwardMatchesErfFormula) {
  using S = TypeParam;
  auto backend = Storage<S>::make();
  Rng rng(1);
  for (int64_t n : kLengths) {
    const auto inp = inputs<S>(rng, n);
    DeviceBuffer<S, BackendT<S>> d_inp(*backend, inp), d_out(*backend, size_t(n));
    backend->gelu_erf_forward(d_out.get(), d_inp.get(), n);
    const auto x = to_double(inp), got = to_double(d_out.download());
    int misses = 0;
    double worst_abs_per_x = 0;  // the absolute part of the error, in units of |x|
    for (int64_t i = 0; i < n; i++) {
      const double want = gelu_erf(x[i]);
      const double diff = std::fabs(got[i] - want);
      const double bound = result_rel<S>() * std::fabs(want) + 2e-7 * std::fabs(x[i]) + 1e-38;
      if (diff > result_rel<S>() * std::fabs(want) && x[i] != 0)
        worst_abs_per_x = std::max(worst_abs_per_x, diff / std::fabs(x[i]));
      if (!(diff <= bound) && ++misses <= 5)
        ADD_FAILURE() << "gelu_erf(" << x[i] << "): got " << got[i] << ", want " << want;
    }
    EXPECT_EQ(misses, 0);
    std::printf("  gelu_erf n=%lld: error beyond the relative bound, per |x|: %.2e\n",
                static_cast<long long>(n), worst_abs_per_x);
  }
}

// dinp is written over NaNs, which must not be read (backend.h).
TYPED_TEST(EncoderElementwiseTest, GeluErfBackwardWritesDerivativeTimesDout) {
  using S = TypeParam;
  auto backend = Storage<S>::make();
  Rng rng(2);
  for (int64_t n : kLengths) {
    const auto inp = inputs<S>(rng, n);
    const auto dout = random_values<S>(rng, size_t(n));
    DeviceBuffer<S, BackendT<S>> d_inp(*backend, inp), d_dout(*backend, dout),
        d_dinp(*backend, nan_values<S>(size_t(n)));
    backend->gelu_erf_backward(d_dinp.get(), d_inp.get(), d_dout.get(), n);
    const auto x = to_double(inp), g = to_double(dout);
    const auto got = to_double(d_dinp.download());
    int misses = 0;
    for (int64_t i = 0; i < n; i++) {
      const double want = gelu_erf_derivative(x[i]) * g[i];
      const double bound = result_rel<S>() * std::fabs(want) + 1e-6 * std::fabs(g[i]);
      if (!(std::fabs(got[i] - want) <= bound) && ++misses <= 5)
        ADD_FAILURE() << "dinp at x = " << x[i] << ": got " << got[i] << ", want " << want;
    }
    EXPECT_EQ(misses, 0);
  }
  backend->gelu_erf_backward(nullptr, nullptr, nullptr, 10);  // null gradient: skipped
}

TEST(GeluErfGradient, MatchesFiniteDifferencesAtFp32) {
  expect_elementwise_gradient_matches_differences(
      [](BackendT<float>& b, float* out, const float* inp, int64_t n) {
        b.gelu_erf_forward(out, inp, n);
      },
      [](BackendT<float>& b, float* dinp, const float* inp, const float* dout, int64_t n) {
        b.gelu_erf_backward(dinp, inp, dout, n);
      });
}

// The erf form and the tanh approximation are different functions: they differ by up to
// ~1e-3 around |x| ≈ 2 (so a model using the wrong one would be caught by the fixtures), and
// agree to ~1e-3 relative elsewhere.
TEST(GeluErf, DiffersFromTheTanhApproximation) {
  auto backend = make_cpu_backend_fp32(1);
  const std::vector<float> x = {-3.0f, -2.0f, -1.0f, 1.0f, 2.0f, 3.0f};
  DeviceBuffer<float, BackendT<float>> d_x(*backend, x), exact(*backend, x.size()),
      approx(*backend, x.size());
  backend->gelu_erf_forward(exact.get(), d_x.get(), int64_t(x.size()));
  backend->gelu_forward(approx.get(), d_x.get(), int64_t(x.size()));
  const auto e = exact.download(), a = approx.download();
  double largest = 0;
  for (size_t i = 0; i < x.size(); i++) largest = std::max(largest, std::fabs(double(e[i]) - a[i]));
  EXPECT_GT(largest, 1e-4);
  EXPECT_LT(largest, 2e-3);
}

TYPED_TEST(EncoderElementwiseTest, TanhForwardAndBackwardFromOutput) {
  using S = TypeParam;
  auto backend = Storage<S>::make();
  Rng rng(4);
  for (int64_t n : kLengths) {
    const auto inp = inputs<S>(rng, n);
    const auto dout = random_values<S>(rng, size_t(n));
    DeviceBuffer<S, BackendT<S>> d_inp(*backend, inp), d_out(*backend, size_t(n)),
        d_dout(*backend, dout), d_dinp(*backend, nan_values<S>(size_t(n)));
    backend->tanh_forward(d_out.get(), d_inp.get(), n);
    const auto out = d_out.download();
    const auto x = to_double(inp), y = to_double(out), g = to_double(dout);
    std::vector<double> want(n);
    for (int64_t i = 0; i < n; i++) want[i] = std::tanh(x[i]);
    // tanhf is within ~2 ulp: one rounding plus fp32 error.
    expect_close(y, want, result_rel<S>(), 1e-38, "tanh");

    // dinp = (1 - y²)·dout with y the STORED output (what the pooler keeps), in double, written
    // over NaNs.
    backend->tanh_backward(d_dinp.get(), d_out.get(), d_dout.get(), n);
    std::vector<double> want_grad(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; i++) want_grad[i] = (1.0 - y[i] * y[i]) * g[i];
    // y² and 1 - y² are exact in fp32 for bf16 y; the product rounds once.
    expect_close(to_double(d_dinp.download()), want_grad, result_rel<S>(), 1e-7 * max_abs(g),
                 "dinp");
  }
}

}  // namespace
}  // namespace collage::test
