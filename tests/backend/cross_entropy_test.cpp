// cross_entropy_forward / cross_entropy_backward against float64: padding columns, ignored
// targets, rows longer than the kernel's chunk, invalid targets, finite differences.
#include "backend_test_util.h"

namespace collage::test {
namespace {

struct Reference {
  std::vector<double> losses, dlogits;  // dlogits: the gradient alone
  double loss_scale = 0;                // largest |lse| + |logit[target]|
};

Reference reference(const std::vector<double>& logits, const std::vector<int32_t>& targets, int N,
                    int V, int Vp, double dloss) {
  Reference r{std::vector<double>(N, 0.0), std::vector<double>(logits.size(), 0.0)};
  for (int n = 0; n < N; n++) {
    if (targets[n] < 0) continue;
    const double* x = logits.data() + size_t(n) * Vp;
    double m = x[0];
    for (int j = 0; j < V; j++) m = std::max(m, x[j]);
    double total = 0;
    for (int j = 0; j < V; j++) total += std::exp(x[j] - m);
    const double lse = m + std::log(total);
    r.losses[n] = lse - x[targets[n]];
    r.loss_scale = std::max(r.loss_scale, std::fabs(lse) + std::fabs(x[targets[n]]));
    for (int j = 0; j < V; j++) {
      r.dlogits[size_t(n) * Vp + j] =
          (std::exp(x[j] - lse) - (j == targets[n] ? 1.0 : 0.0)) * dloss;
    }
  }
  return r;
}

template <typename S>
class CrossEntropyTest : public ::testing::Test {};
TYPED_TEST_SUITE(CrossEntropyTest, StorageTypes, StorageNames);

// Checks losses, and dlogits accumulated onto `dlogits0`: padding columns and ignored rows
// keep their old bits, everything else is old + gradient rounded once.
template <typename S>
void check(BackendT<S>& backend, const std::vector<S>& logits, const std::vector<int32_t>& targets,
           int N, int V, int Vp, const std::vector<S>& dlogits0) {
  const float dloss = 0.37f;
  DeviceBuffer<S, BackendT<S>> d_logits(backend, logits), d_dlogits(backend, dlogits0);
  DeviceBuffer<int32_t, BackendT<S>> d_targets(backend, targets);
  DeviceBuffer<float, BackendT<S>> d_losses(backend, size_t(N));
  backend.cross_entropy_forward(d_losses.get(), d_logits.get(), d_targets.get(), N, V, Vp);
  backend.cross_entropy_backward(d_dlogits.get(), d_logits.get(), d_targets.get(), N, V, Vp, dloss);
  const Reference r = reference(to_double(logits), targets, N, V, Vp, dloss);
  // Losses are fp32 results of fp32 sums of exp_approx (~1e-7 each): 1e-5 of the terms.
  expect_close(to_double(d_losses.download()), r.losses, 0.0, 1e-5 * (r.loss_scale + 1), "losses");
  const auto got = d_dlogits.download();
  const auto old = to_double(dlogits0);
  for (int n = 0; n < N; n++) {
    for (int j = 0; j < Vp; j++) {
      const size_t k = size_t(n) * Vp + j;
      if (j >= V || targets[n] < 0) {
        ASSERT_TRUE(same_bits(std::vector<S>{got[k]}, std::vector<S>{dlogits0[k]}))
            << "row " << n << " column " << j << " should be untouched";
        continue;
      }
      // One rounding of old + (p - onehot)·dloss; p from fp32 exp_approx of x - lse, whose
      // fp32 error is ~1e-7·|x - lse| relative.
      const double want = old[k] + r.dlogits[k];
      ASSERT_NEAR(Storage<S>::to(got[k]), want,
                  result_rel<S>() * std::fabs(want) + 1e-6 * dloss * (r.loss_scale + 1))
          << "row " << n << " column " << j;
    }
  }
}

TYPED_TEST(CrossEntropyTest, PaddedVocabularyWithIgnoredTargets) {
  using S = TypeParam;
  auto backend = Storage<S>::make();
  Rng rng(1);
  const int N = 7, V = 37, Vp = 128;
  auto logits = random_values<S>(rng, size_t(N) * Vp, 3.0);
  // Padding columns hold large values: they must not enter the softmax.
  for (int n = 0; n < N; n++) {
    for (int j = V; j < Vp; j++) logits[size_t(n) * Vp + j] = Storage<S>::from(50.0);
  }
  const std::vector<int32_t> targets = {3, -1, 36, 0, -100, 17, 3};
  check<S>(*backend, logits, targets, N, V, Vp, random_values<S>(rng, logits.size()));
  // From a zeroed buffer, padding columns and ignored rows stay exactly zero.
  check<S>(*backend, logits, targets, N, V, Vp, std::vector<S>(logits.size()));
}

// Rows longer than the kernel's 512-column chunk, with the maximum in the last chunk, in the
// first chunk, and large magnitudes (the online max/sum rescaling).
TYPED_TEST(CrossEntropyTest, LongRowsAcrossChunks) {
  using S = TypeParam;
  auto backend = Storage<S>::make();
  Rng rng(2);
  const int N = 3, V = 1500, Vp = 1536;
  std::vector<S> logits(size_t(N) * Vp);
  for (int j = 0; j < Vp; j++) {
    logits[j] = Storage<S>::from(j * 0.01);                            // increasing
    logits[size_t(Vp) + j] = Storage<S>::from(-j * 0.01);              // decreasing
    logits[size_t(2) * Vp + j] = Storage<S>::from(30 * rng.normal());  // wide
  }
  check<S>(*backend, logits, {1499, 0, 700}, N, V, Vp, random_values<S>(rng, logits.size(), 1e-3));
}

TYPED_TEST(CrossEntropyTest, TargetOutsideVocabularyIsAnError) {
  using S = TypeParam;
  auto backend = Storage<S>::make();
  const int N = 2, V = 5, Vp = 8;
  DeviceBuffer<S, BackendT<S>> logits(*backend, size_t(N) * Vp), dlogits(*backend, size_t(N) * Vp);
  DeviceBuffer<int32_t, BackendT<S>> targets(*backend, std::vector<int32_t>{1, 5});
  DeviceBuffer<float, BackendT<S>> losses(*backend, size_t(N));
  EXPECT_THROW(backend->cross_entropy_forward(losses.get(), logits.get(), targets.get(), N, V, Vp),
               Error);
  EXPECT_THROW(
      backend->cross_entropy_backward(dlogits.get(), logits.get(), targets.get(), N, V, Vp, 1.0f),
      Error);
}

TEST(CrossEntropyGradient, MatchesFiniteDifferencesAtFp32) {
  auto backend = make_cpu_backend_fp32(kFdThreads);
  Rng rng(3);
  const int N = 3, V = 6, Vp = 8;
  const float dloss = 0.7f;  // loss = dloss · Σ losses
  auto logits = random_values<float>(rng, size_t(N) * Vp, 2.0);
  DeviceBuffer<int32_t, BackendT<float>> d_targets(*backend, std::vector<int32_t>{2, -1, 5});
  auto loss = [&](const std::vector<float>& x) {
    DeviceBuffer<float, BackendT<float>> d_x(*backend, x), d_losses(*backend, size_t(N));
    backend->cross_entropy_forward(d_losses.get(), d_x.get(), d_targets.get(), N, V, Vp);
    double total = 0;
    for (float l : d_losses.download()) total += dloss * l;
    return total;
  };
  DeviceBuffer<float, BackendT<float>> d_x(*backend, logits), dx(*backend, logits.size());
  backend->cross_entropy_backward(dx.get(), d_x.get(), d_targets.get(), N, V, Vp, dloss);
  // Includes the padding columns and the ignored row, whose differences are exactly 0.
  expect_gradient_matches_differences(loss, logits, to_double(dx.download()), "dlogits");
}

}  // namespace
}  // namespace collage::test
