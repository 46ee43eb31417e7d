// GELU, add, accumulate, scale, sum, sum_squares against float64.
#include "backend_test_util.h"

namespace collage::test {
namespace {

// Lengths below and above the kernels' parallel threshold, none a multiple of a vector width.
const int64_t kLengths[] = {1, 1001, 100003};

// GELU with the tanh approximation, 0.5·x·(1 + tanh(u)), u = √(2/π)(x + 0.044715x³). In the
// far negative tail 1 + tanh(u) cancels in double (x = -7 already loses every digit), so it is
// evaluated as 2 / (1 + e^(-2u)), the same quantity without the cancellation.
double one_plus_tanh(double u) { return 2.0 / (1.0 + std::exp(-2.0 * u)); }
double gelu(double x) {
  const double u = std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x);
  return 0.5 * x * one_plus_tanh(u);
}
double gelu_derivative(double x) {
  const double k = std::sqrt(2.0 / M_PI);
  const double u = k * (x + 0.044715 * x * x * x);
  const double sech2 = 1.0 / (std::cosh(u) * std::cosh(u));  // 1 - tanh²(u)
  return 0.5 * one_plus_tanh(u) + 0.5 * x * sech2 * k * (1.0 + 3 * 0.044715 * x * x);
}

// Inputs over GELU's whole range: N(0, 3²) plus fixed points in the tails and at 0.
template <typename S>
std::vector<S> gelu_inputs(Rng& rng, int64_t n) {
  auto v = random_values<S>(rng, size_t(n), 3.0);
  const double fixed[] = {0.0, -0.5, 0.5, -3.0, 3.0, -10.0, 10.0, -30.0};
  for (size_t i = 0; i < std::size(fixed) && i < v.size(); i++) v[i] = Storage<S>::from(fixed[i]);
  return v;
}

template <typename S>
class ElementwiseTest : public ::testing::Test {};
TYPED_TEST_SUITE(ElementwiseTest, StorageTypes, StorageNames);

TYPED_TEST(ElementwiseTest, GeluForwardMatchesTanhFormula) {
  using S = TypeParam;
  auto backend = Storage<S>::make();
  Rng rng(1);
  for (int64_t n : kLengths) {
    const auto inp = gelu_inputs<S>(rng, n);
    DeviceBuffer<S, BackendT<S>> d_inp(*backend, inp), d_out(*backend, size_t(n));
    backend->gelu_forward(d_out.get(), d_inp.get(), n);
    std::vector<double> want(n);
    const auto x = to_double(inp);
    for (int64_t i = 0; i < n; i++) want[i] = gelu(x[i]);
    // One rounding; fp32 evaluation (via x·sigmoid(2u)) is within a few ulp of the value,
    // and 1e-30 absolute covers the far negative tail where the value underflows.
    expect_close(to_double(d_out.download()), want, result_rel<S>(), 1e-30, "gelu");
  }
}

// dinp is written over NaNs, which must not be read (backend.h).
TYPED_TEST(ElementwiseTest, GeluBackwardWritesDerivativeTimesDout) {
  using S = TypeParam;
  auto backend = Storage<S>::make();
  Rng rng(2);
  for (int64_t n : kLengths) {
    const auto inp = gelu_inputs<S>(rng, n);
    const auto dout = random_values<S>(rng, size_t(n));
    DeviceBuffer<S, BackendT<S>> d_inp(*backend, inp), d_dout(*backend, dout),
        d_dinp(*backend, nan_values<S>(size_t(n)));
    backend->gelu_backward(d_dinp.get(), d_inp.get(), d_dout.get(), n);
    const auto x = to_double(inp), g = to_double(dout);
    std::vector<double> want(size_t(n), 0.0);
    double scale = 0;
    for (int64_t i = 0; i < n; i++) {
      want[i] += gelu_derivative(x[i]) * g[i];
      scale = std::max(scale, std::fabs(g[i]));
    }
    // One rounding of derivative·dout; the fp32 derivative (|d| ≤ 1.13) errs by a few
    // ulp of its terms, so 1e-6·|dout|.
    expect_close(to_double(d_dinp.download()), want, result_rel<S>(), 1e-6 * scale, "dinp");
  }
}

TEST(GeluGradient, MatchesFiniteDifferencesAtFp32) {
  expect_elementwise_gradient_matches_differences(
      [](BackendT<float>& b, float* out, const float* inp, int64_t n) {
        b.gelu_forward(out, inp, n);
      },
      [](BackendT<float>& b, float* dinp, const float* inp, const float* dout, int64_t n) {
        b.gelu_backward(dinp, inp, dout, n);
      });
}

TYPED_TEST(ElementwiseTest, AddAccumulateScaleRoundOnce) {
  using S = TypeParam;
  auto backend = Storage<S>::make();
  Rng rng(4);
  for (int64_t n : kLengths) {
    const auto a = random_values<S>(rng, size_t(n)), b = random_values<S>(rng, size_t(n));
    DeviceBuffer<S, BackendT<S>> d_a(*backend, a), d_b(*backend, b), d_out(*backend, size_t(n));
    const auto x = to_double(a), y = to_double(b);
    std::vector<double> sum(n), scaled(n);
    for (int64_t i = 0; i < n; i++) sum[i] = x[i] + y[i], scaled[i] = x[i] * -0.37;
    // The exact sum/product of two storage values, rounded once (fp32 rounds it first,
    // 2^-24 relative, hence the 1e-7).
    const double rel = Storage<S>::kRoundRel + 1e-7;

    backend->add(d_out.get(), d_a.get(), d_b.get(), n);
    expect_close(to_double(d_out.download()), sum, rel, 0.0, "add");
    backend->accumulate(d_a.get(), d_b.get(), n);  // a += b
    expect_close(to_double(d_a.download()), sum, rel, 0.0, "accumulate");
    d_a.upload(a);
    backend->scale(d_a.get(), -0.37f, n);
    std::vector<double> want(n);
    for (int64_t i = 0; i < n; i++) want[i] = x[i] * double(-0.37f);
    expect_close(to_double(d_a.download()), want, rel, 0.0, "scale");
  }
}

TYPED_TEST(ElementwiseTest, SumAndSumOfSquaresInDouble) {
  using S = TypeParam;
  auto backend = Storage<S>::make();
  Rng rng(5);
  for (int64_t n : kLengths) {
    const auto x = random_values<S>(rng, size_t(n), 10.0);
    std::vector<float> f(n);
    for (int64_t i = 0; i < n; i++) f[i] = float(3.0 + rng.normal());
    DeviceBuffer<S, BackendT<S>> d_x(*backend, x);
    DeviceBuffer<float, BackendT<S>> d_f(*backend, f);
    double want_squares = 0, want_sum = 0;
    for (int64_t i = 0; i < n; i++) {
      want_squares += Storage<S>::to(x[i]) * Storage<S>::to(x[i]);
      want_sum += f[i];
    }
    // Both accumulate in double: only double rounding differences (~n·1e-16 relative).
    EXPECT_NEAR(backend->sum_squares(d_x.get(), n), want_squares, 1e-11 * want_squares);
    EXPECT_NEAR(backend->sum(d_f.get(), n), want_sum, 1e-11 * std::fabs(want_sum));
  }
  EXPECT_EQ(backend->sum(nullptr, 0), 0.0);
}

}  // namespace
}  // namespace collage::test
