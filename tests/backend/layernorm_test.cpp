// layernorm_forward / layernorm_backward against float64 loops, and by finite differences.
#include "backend/cpu/cpu_backend.h"
#include "backend_test_util.h"

namespace collage::test {
namespace {

struct Shape {
  int N, C;
};
// Odd sizes, and one spanning several of the backward's 64-column blocks.
const Shape kShapes[] = {{7, 13}, {70, 130}};
constexpr float kEps = 1e-5f;

// Inputs with an offset, so a one-pass E[x²] - E[x]² variance would lose digits.
template <typename S>
std::vector<S> offset_inputs(Rng& rng, size_t n) {
  std::vector<S> v(n);
  for (auto& x : v) x = Storage<S>::from(3.0 + rng.normal());
  return v;
}

struct Stats {
  std::vector<double> mean, rstd;
};

Stats reference_stats(const std::vector<double>& x, int N, int C) {
  Stats s{std::vector<double>(N), std::vector<double>(N)};
  for (int n = 0; n < N; n++) {
    double m = 0, v = 0;
    for (int c = 0; c < C; c++) m += x[size_t(n) * C + c];
    m /= C;
    for (int c = 0; c < C; c++) v += (x[size_t(n) * C + c] - m) * (x[size_t(n) * C + c] - m);
    s.mean[n] = m;
    s.rstd[n] = 1.0 / std::sqrt(v / C + kEps);
  }
  return s;
}

template <typename S>
class LayernormTest : public ::testing::Test {};
TYPED_TEST_SUITE(LayernormTest, StorageTypes, StorageNames);

TYPED_TEST(LayernormTest, ForwardMatchesFloat64) {
  using S = TypeParam;
  auto backend = Storage<S>::make();
  Rng rng(1);
  for (const Shape& s : kShapes) {
    const auto inp = offset_inputs<S>(rng, size_t(s.N) * s.C);
    const auto weight = random_values<S>(rng, s.C), bias = random_values<S>(rng, s.C);
    DeviceBuffer<S, BackendT<S>> d_inp(*backend, inp), d_w(*backend, weight), d_b(*backend, bias),
        d_out(*backend, inp.size());
    DeviceBuffer<float, BackendT<S>> d_mean(*backend, size_t(s.N)), d_rstd(*backend, size_t(s.N));
    backend->layernorm_forward(d_out.get(), d_mean.get(), d_rstd.get(), d_inp.get(), d_w.get(),
                               d_b.get(), s.N, s.C, kEps);

    const auto x = to_double(inp), w = to_double(weight), b = to_double(bias);
    const Stats st = reference_stats(x, s.N, s.C);
    std::vector<double> want(x.size());
    double scale = 0;  // largest |x̂·w| + |b|
    for (int n = 0; n < s.N; n++) {
      for (int c = 0; c < s.C; c++) {
        const double xhat = (x[size_t(n) * s.C + c] - st.mean[n]) * st.rstd[n];
        want[size_t(n) * s.C + c] = xhat * w[c] + b[c];
        scale = std::max(scale, std::fabs(xhat * w[c]) + std::fabs(b[c]));
      }
    }
    // Statistics are fp32 sums of C values: ~1e-6 relative.
    expect_close(to_double(d_mean.download()), st.mean, 1e-5, 0.0, "mean");
    expect_close(to_double(d_rstd.download()), st.rstd, 1e-5, 0.0, "rstd");
    // One rounding; fp32 error of x̂ (via mean and rstd) is ~1e-6 of |x|·rstd ~ 3 here.
    expect_close(to_double(d_out.download()), want, result_rel<S>(), 1e-5 * (scale + 3.0), "out");
  }
}

TYPED_TEST(LayernormTest, BackwardAccumulatesFloat64Gradients) {
  using S = TypeParam;
  auto backend = Storage<S>::make();
  Rng rng(2);
  for (const Shape& s : kShapes) {
    const auto inp = offset_inputs<S>(rng, size_t(s.N) * s.C);
    const auto weight = random_values<S>(rng, s.C);
    const auto dout = random_values<S>(rng, inp.size());
    const auto dinp0 = random_values<S>(rng, inp.size());
    const auto dweight0 = random_values<S>(rng, s.C), dbias0 = random_values<S>(rng, s.C);
    const auto x = to_double(inp), w = to_double(weight), g = to_double(dout);
    // The statistics the backward is given: the float64 ones, stored as fp32.
    const Stats st = reference_stats(x, s.N, s.C);
    std::vector<float> mean(s.N), rstd(s.N);
    for (int n = 0; n < s.N; n++) mean[n] = float(st.mean[n]), rstd[n] = float(st.rstd[n]);
    DeviceBuffer<S, BackendT<S>> d_inp(*backend, inp), d_w(*backend, weight),
        d_dout(*backend, dout), d_dinp(*backend, dinp0), d_dw(*backend, dweight0),
        d_db(*backend, dbias0);
    DeviceBuffer<float, BackendT<S>> d_mean(*backend, mean), d_rstd(*backend, rstd);
    backend->layernorm_backward(d_dinp.get(), d_dw.get(), d_db.get(), d_dout.get(), d_inp.get(),
                                d_w.get(), d_mean.get(), d_rstd.get(), s.N, s.C);

    auto dx = to_double(dinp0), dw = to_double(dweight0), db = to_double(dbias0);
    double dx_scale = 0, dw_terms = 0;
    for (int n = 0; n < s.N; n++) {
      const double m = mean[n], r = rstd[n];
      double g_mean = 0, gx_mean = 0;
      for (int c = 0; c < s.C; c++) {
        const double xhat = (x[size_t(n) * s.C + c] - m) * r, gn = g[size_t(n) * s.C + c] * w[c];
        g_mean += gn / s.C;
        gx_mean += gn * xhat / s.C;
      }
      for (int c = 0; c < s.C; c++) {
        const double xhat = (x[size_t(n) * s.C + c] - m) * r, gn = g[size_t(n) * s.C + c] * w[c];
        dx[size_t(n) * s.C + c] += r * (gn - g_mean - xhat * gx_mean);
        dx_scale =
            std::max(dx_scale, r * (std::fabs(gn) + std::fabs(g_mean) + std::fabs(xhat * gx_mean)));
        dw[c] += g[size_t(n) * s.C + c] * xhat;
        db[c] += g[size_t(n) * s.C + c];
        dw_terms += std::fabs(g[size_t(n) * s.C + c] * xhat);
      }
    }
    // One rounding each; fp32 arithmetic: dinp's terms are O(dx_scale) after sums of C
    // values, dweight/dbias are sums of N values (dw_terms bounds the largest).
    expect_close(to_double(d_dinp.download()), dx, result_rel<S>(), 1e-5 * dx_scale, "dinp");
    expect_close(to_double(d_dw.download()), dw, result_rel<S>(), 1e-5 * dw_terms / s.C, "dweight");
    expect_close(to_double(d_db.download()), db, result_rel<S>(), 1e-5 * dw_terms / s.C, "dbias");

    // Null pointers skip gradients: each alone equals its share of the full call.
    for (int mask = 0; mask < 8; mask++) {
      DeviceBuffer<S, BackendT<S>> a(*backend, dinp0), bw(*backend, dweight0), bb(*backend, dbias0);
      backend->layernorm_backward((mask & 1) ? a.get() : nullptr, (mask & 2) ? bw.get() : nullptr,
                                  (mask & 4) ? bb.get() : nullptr, d_dout.get(), d_inp.get(),
                                  d_w.get(), d_mean.get(), d_rstd.get(), s.N, s.C);
      EXPECT_TRUE(same_bits(a.download(), (mask & 1) ? d_dinp.download() : dinp0));
      EXPECT_TRUE(same_bits(bw.download(), (mask & 2) ? d_dw.download() : dweight0));
      EXPECT_TRUE(same_bits(bb.download(), (mask & 4) ? d_db.download() : dbias0));
    }
  }
}

TEST(LayernormGradient, MatchesFiniteDifferencesAtFp32) {
  auto backend = make_cpu_backend_fp32(kFdThreads);
  Rng rng(3);
  const int N = 3, C = 7;
  auto inp = random_values<float>(rng, size_t(N) * C);
  auto weight = random_values<float>(rng, C), bias = random_values<float>(rng, C);
  const auto loss_weights = random_weights<float>(rng, inp.size());
  auto loss = [&](const std::vector<float>& x, const std::vector<float>& w,
                  const std::vector<float>& b) {
    DeviceBuffer<float, BackendT<float>> d_x(*backend, x), d_w(*backend, w), d_b(*backend, b),
        d_out(*backend, x.size()), d_mean(*backend, size_t(N)), d_rstd(*backend, size_t(N));
    backend->layernorm_forward(d_out.get(), d_mean.get(), d_rstd.get(), d_x.get(), d_w.get(),
                               d_b.get(), N, C, kEps);
    return weighted_sum(d_out.download(), loss_weights);
  };
  DeviceBuffer<float, BackendT<float>> d_x(*backend, inp), d_w(*backend, weight),
      d_b(*backend, bias), d_out(*backend, inp.size()), d_mean(*backend, size_t(N)),
      d_rstd(*backend, size_t(N)), d_dout(*backend, from_double<float>(loss_weights)),
      dx(*backend, inp.size()), dw(*backend, size_t(C)), db(*backend, size_t(C));
  backend->layernorm_forward(d_out.get(), d_mean.get(), d_rstd.get(), d_x.get(), d_w.get(),
                             d_b.get(), N, C, kEps);
  backend->layernorm_backward(dx.get(), dw.get(), db.get(), d_dout.get(), d_x.get(), d_w.get(),
                              d_mean.get(), d_rstd.get(), N, C);
  expect_gradient_matches_differences([&](const auto& v) { return loss(v, weight, bias); }, inp,
                                      to_double(dx.download()), "dinp");
  expect_gradient_matches_differences([&](const auto& v) { return loss(inp, v, bias); }, weight,
                                      to_double(dw.download()), "dweight");
  expect_gradient_matches_differences([&](const auto& v) { return loss(inp, weight, v); }, bias,
                                      to_double(db.download()), "dbias");
}

}  // namespace
}  // namespace collage::test
