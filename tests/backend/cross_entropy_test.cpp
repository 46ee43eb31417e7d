// cross_entropy_forward / cross_entropy_backward against float64: padding columns, ignored
// targets, rows longer than the kernel's chunk, invalid targets, finite differences.
// The vocab-parallel stages (cross_entropy_shard_*): at tp = 1 against the fused ops, and on 2
// and 4 column shards, all-reduced here on the host, against float64.
#include <cstdio>
#include <limits>

#include "backend/cpu/cpu_backend.h"
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

// Checks losses, and dlogits written over `dlogits0`, whose old contents must not be read:
// padding columns and ignored rows exactly zero, everything else the gradient rounded once.
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
  const S zero = Storage<S>::from(0.0);
  for (int n = 0; n < N; n++) {
    for (int j = 0; j < Vp; j++) {
      const size_t k = size_t(n) * Vp + j;
      if (j >= V || targets[n] < 0) {
        ASSERT_TRUE(same_bits(std::vector<S>{got[k]}, std::vector<S>{zero}))
            << "row " << n << " column " << j << " should be +0";
        continue;
      }
      // One rounding of (p - onehot)·dloss; p from fp32 exp_approx of x - lse, whose fp32 error
      // is ~1e-7·|x - lse| relative.
      const double want = r.dlogits[k];
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
  check<S>(*backend, logits, targets, N, V, Vp, nan_values<S>(logits.size()));
  check<S>(*backend, logits, targets, N, V, Vp, random_values<S>(rng, logits.size()));
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

// ---- vocab-parallel cross-entropy ----

// What the staged ops gave on `tp` column shards of a (N, Vp) logits matrix.
template <typename S>
struct Sharded {
  std::vector<std::vector<float>> shard_row_max, shard_sums;  // per shard, before the all-reduce
  std::vector<float> row_max, sums;                           // all-reduced: (N), (2N)
  std::vector<float> losses, lse;                             // (N)
  std::vector<S> dlogits;                                     // (N, Vp), the shards put together
};

// Runs the vocab-parallel stages on tp shards of logits (N, Vp), shard s holding columns
// [s·Vl, (s+1)·Vl) with Vl = Vp / tp, as tp ranks would; the all-reduces are done here (max;
// sum in shard order in fp32). dlogits0 (N, Vp): dlogits before the backward, which writes
// every element.
template <typename S>
Sharded<S> run_sharded(BackendT<S>& backend, const std::vector<S>& logits,
                       const std::vector<int32_t>& targets, int N, int V, int Vp, int tp,
                       const std::vector<S>& dlogits0, float dloss) {
  const int Vl = Vp / tp;
  auto columns = [&](const std::vector<S>& full, int shard) {  // (N, Vp) -> (N, Vl)
    std::vector<S> part(size_t(N) * Vl);
    for (int n = 0; n < N; n++) {
      for (int j = 0; j < Vl; j++) part[size_t(n) * Vl + j] = full[size_t(n) * Vp + shard * Vl + j];
    }
    return part;
  };
  using Floats = DeviceBuffer<float, BackendT<S>>;
  std::vector<std::unique_ptr<DeviceBuffer<S, BackendT<S>>>> d_logits;
  for (int shard = 0; shard < tp; shard++) {
    d_logits.push_back(
        std::make_unique<DeviceBuffer<S, BackendT<S>>>(backend, columns(logits, shard)));
  }
  DeviceBuffer<int32_t, BackendT<S>> d_targets(backend, targets);
  Floats d_row_max(backend, size_t(N)), d_sums(backend, size_t(2) * N);
  Sharded<S> out;

  // 1. each rank's max, then all_reduce_max
  out.row_max.assign(size_t(N), -std::numeric_limits<float>::infinity());
  for (int shard = 0; shard < tp; shard++) {
    backend.cross_entropy_shard_max(d_row_max.get(), d_logits[shard]->get(), N, V, Vl,
                                    int64_t(shard) * Vl);
    out.shard_row_max.push_back(d_row_max.download());
    for (int n = 0; n < N; n++)
      out.row_max[n] = std::max(out.row_max[n], out.shard_row_max.back()[n]);
  }
  d_row_max.upload(out.row_max);

  // 2. each rank's Σ exp and target logit, then all_reduce_sum
  out.sums.assign(size_t(2) * N, 0.0f);
  for (int shard = 0; shard < tp; shard++) {
    backend.cross_entropy_shard_sums(d_sums.get(), d_logits[shard]->get(), d_targets.get(),
                                     d_row_max.get(), N, V, Vl, int64_t(shard) * Vl);
    out.shard_sums.push_back(d_sums.download());
    for (int i = 0; i < 2 * N; i++) out.sums[i] += out.shard_sums.back()[i];
  }
  d_sums.upload(out.sums);

  // 3. lse and the losses (every rank computes the same)
  Floats d_losses(backend, size_t(N)), d_lse(backend, size_t(N));
  backend.cross_entropy_shard_loss(d_losses.get(), d_lse.get(), d_row_max.get(), d_sums.get(),
                                   d_targets.get(), N);
  out.losses = d_losses.download();
  out.lse = d_lse.download();

  // Backward, each rank on its columns.
  out.dlogits = dlogits0;
  for (int shard = 0; shard < tp; shard++) {
    DeviceBuffer<S, BackendT<S>> d_dlogits(backend, columns(dlogits0, shard));
    backend.cross_entropy_shard_backward(d_dlogits.get(), d_logits[shard]->get(), d_targets.get(),
                                         d_lse.get(), N, V, Vl, int64_t(shard) * Vl, dloss);
    const auto part = d_dlogits.download();
    for (int n = 0; n < N; n++) {
      for (int j = 0; j < Vl; j++)
        out.dlogits[size_t(n) * Vp + shard * Vl + j] = part[size_t(n) * Vl + j];
    }
  }
  return out;
}

// Logits (N, Vp) of scale 3 with padding columns NaN (they must never be used); row 1 shifted
// by +80 (lse ≈ 85) and row 2 scaled by 10 (most exp terms far below the largest).
template <typename S>
std::vector<S> shard_test_logits(Rng& rng, int N, int V, int Vp) {
  auto logits = random_values<S>(rng, size_t(N) * Vp, 3.0);
  for (int n = 0; n < N; n++) {
    for (int j = 0; j < Vp; j++) {
      S& x = logits[size_t(n) * Vp + j];
      if (j >= V)
        x = Storage<S>::from(std::numeric_limits<double>::quiet_NaN());
      else if (n == 1)
        x = Storage<S>::from(Storage<S>::to(x) + 80.0);
      else if (n == 2)
        x = Storage<S>::from(Storage<S>::to(x) * 10.0);
    }
  }
  return logits;
}

// The spacing of storage values at |x|: a bf16 or fp32 ulp (normal range).
template <typename S>
double storage_spacing(double x) {
  const double a = std::max(std::fabs(x), 0x1p-126);
  return std::ldexp(1.0, std::ilogb(a) - (std::is_same_v<S, bf16> ? 7 : 23));
}

struct ShardShape {
  int N, V, Vp;
  std::vector<int32_t> targets;  // (N)
};

// Vp a multiple of 128·4, V < Vp: with 4 shards the last one holds no real column. Targets at
// shard boundaries (127 | 128, 255 | 256, 511 | 512, 1023 | 1024), the last token, ignored.
const ShardShape kShardShapes[] = {
    {9, 300, 512, {0, 127, 128, 255, 256, 299, -1, 200, -100}},
    {6, 1500, 2048, {1499, 0, 1024, -1, 511, 700}},
};

template <typename S>
class CrossEntropyShardTest : public ::testing::Test {};
TYPED_TEST_SUITE(CrossEntropyShardTest, StorageTypes, StorageNames);

// (a) tp = 1 (vocab_begin 0, Vl = Vp): the staged ops against the fused ones.
//
// Tolerance. Both form lse = max + log S in fp32 with the same exp_approx terms, but the fused
// op sums each 512-column chunk relative to the running max and rescales the running sum by
// exp_approx(old − new max) whenever the max grows, while the staged op sums every term
// relative to the final max. Where the max is in the first chunk the operations are the same;
// otherwise S differs by a few fp32 roundings (each rescale is 1-2 ulp): a few 1e-7 relative,
// so |Δlse| ≤ 1e-6·(1 + |lse|) (measured: printed below). The loss subtracts the same x[target]
// and adds one ulp. The backward evaluates the fused op's expression with an lse δ away, so
// each element before its one rounding moves by ≤ δ·p·|dloss| (p = the softmax); the rounded
// results are at most one storage ulp + 2·δ·p·|dloss| apart.
TYPED_TEST(CrossEntropyShardTest, TpOneMatchesFusedOps) {
  using S = TypeParam;
  auto backend = Storage<S>::make();
  Rng rng(11);
  const float dloss = 0.37f;
  double worst_loss = 0;  // |Δloss| / (1 + |lse|)
  int64_t differing = 0, compared = 0;
  double worst_dlogits = 0;  // |Δ| in storage ulps
  struct Shape {
    int N, V, Vp;
  };
  for (const Shape s : {Shape{9, 300, 512}, Shape{6, 1500, 2048}, Shape{4, 37, 40}}) {
    SCOPED_TRACE("N=" + std::to_string(s.N) + " V=" + std::to_string(s.V) +
                 " Vp=" + std::to_string(s.Vp));
    auto logits = shard_test_logits<S>(rng, s.N, s.V, s.Vp);
    // Rows whose max is in the last chunk, so the fused op rescales (increasing logits).
    for (int j = 0; j < s.V; j++) logits[j] = Storage<S>::from(j * 0.01);
    std::vector<int32_t> targets(size_t(s.N));
    for (int n = 0; n < s.N; n++) targets[n] = n == 3 ? -1 : rng.integer(0, s.V - 1);
    // Both write over whatever dlogits held.
    const auto dlogits0 = random_values<S>(rng, logits.size(), 1e-3);

    DeviceBuffer<S, BackendT<S>> d_logits(*backend, logits), d_dlogits(*backend, dlogits0);
    DeviceBuffer<int32_t, BackendT<S>> d_targets(*backend, targets);
    DeviceBuffer<float, BackendT<S>> d_losses(*backend, size_t(s.N));
    backend->cross_entropy_forward(d_losses.get(), d_logits.get(), d_targets.get(), s.N, s.V, s.Vp);
    backend->cross_entropy_backward(d_dlogits.get(), d_logits.get(), d_targets.get(), s.N, s.V,
                                    s.Vp, dloss);
    const auto fused_losses = d_losses.download();
    const auto fused_dlogits = d_dlogits.download();
    const Sharded<S> staged =
        run_sharded(*backend, logits, targets, s.N, s.V, s.Vp, 1, dlogits0, dloss);

    for (int n = 0; n < s.N; n++) {
      const double delta = 1e-6 * (1 + std::fabs(staged.lse[n]));
      const double diff = std::fabs(double(staged.losses[n]) - double(fused_losses[n]));
      EXPECT_LE(diff, delta) << "row " << n << ": staged " << staged.losses[n] << ", fused "
                             << fused_losses[n];
      worst_loss = std::max(worst_loss, diff / (1 + std::fabs(staged.lse[n])));
      int misses = 0;
      for (int j = 0; j < s.Vp; j++) {
        const size_t k = size_t(n) * s.Vp + j;
        if (j >= s.V || targets[n] < 0) {  // zeros from both
          const std::vector<S> zero{Storage<S>::from(0.0)};
          if ((!same_bits(std::vector<S>{staged.dlogits[k]}, zero) ||
               !same_bits(std::vector<S>{fused_dlogits[k]}, zero)) &&
              ++misses <= 5)
            ADD_FAILURE() << "row " << n << " column " << j << " (padding or ignored) not 0";
          continue;
        }
        const double g = Storage<S>::to(staged.dlogits[k]), w = Storage<S>::to(fused_dlogits[k]);
        const double p = std::exp(Storage<S>::to(logits[k]) - staged.lse[n]);
        const double ulp = storage_spacing<S>(std::max(std::fabs(g), std::fabs(w)));
        compared++, differing += g != w;
        worst_dlogits = std::max(worst_dlogits, std::fabs(g - w) / ulp);
        if (!(std::fabs(g - w) <= ulp + 2 * delta * p * dloss) && ++misses <= 5)
          ADD_FAILURE() << "dlogits row " << n << " column " << j << ": staged " << g << ", fused "
                        << w;
      }
      EXPECT_EQ(misses, 0) << "row " << n;
    }
  }
  std::printf(
      "tp=1 staged vs fused: worst |Δloss|/(1+|lse|) %.3g; dlogits: %lld of %lld differ, "
      "by at most %.3g ulp\n",
      worst_loss, static_cast<long long>(differing), static_cast<long long>(compared),
      worst_dlogits);
}

// (c) The forward's saved lse (the models' path at any tp, src/model/vocab_parallel_loss.h):
// the losses are those of the forward without it, an ignored row's lse is 0, and
// cross_entropy_shard_backward from it (vocab_begin 0, Vl = Vp), written over any prior
// dlogits, is cross_entropy_backward onto zeros bit for bit, since the forward's lse is the
// value the fused backward recomputes.
TYPED_TEST(CrossEntropyShardTest, SavedLseGivesTheFusedBackwardBits) {
  using S = TypeParam;
  auto backend = Storage<S>::make();
  Rng rng(13);
  const float dloss = 0.37f;
  for (const ShardShape& s : kShardShapes) {
    SCOPED_TRACE("N=" + std::to_string(s.N) + " V=" + std::to_string(s.V));
    const auto logits = shard_test_logits<S>(rng, s.N, s.V, s.Vp);
    const auto dlogits0 = random_values<S>(rng, logits.size(), 1e-3);
    const std::vector<S> zeros(logits.size(), Storage<S>::from(0.0));
    DeviceBuffer<S, BackendT<S>> d_logits(*backend, logits), d_fused(*backend, zeros),
        d_saved(*backend, dlogits0);
    DeviceBuffer<int32_t, BackendT<S>> d_targets(*backend, s.targets);
    DeviceBuffer<float, BackendT<S>> d_plain(*backend, size_t(s.N)),
        d_losses(*backend, size_t(s.N)), d_lse(*backend, std::vector<float>(size_t(s.N), -1.0f));
    backend->cross_entropy_forward(d_plain.get(), d_logits.get(), d_targets.get(), s.N, s.V, s.Vp);
    backend->cross_entropy_forward(d_losses.get(), d_logits.get(), d_targets.get(), s.N, s.V, s.Vp,
                                   d_lse.get());
    backend->cross_entropy_backward(d_fused.get(), d_logits.get(), d_targets.get(), s.N, s.V, s.Vp,
                                    dloss);
    backend->cross_entropy_shard_backward(d_saved.get(), d_logits.get(), d_targets.get(),
                                          d_lse.get(), s.N, s.V, s.Vp, 0, dloss);
    EXPECT_TRUE(same_bits(d_losses.download(), d_plain.download()));
    const auto lse = d_lse.download();
    for (int n = 0; n < s.N; n++) {
      if (s.targets[n] < 0) EXPECT_EQ(lse[n], 0.0f) << "ignored row " << n;
    }
    EXPECT_TRUE(same_bits(d_saved.download(), d_fused.download()));
  }
}

// (b) 2 and 4 shards, all-reduced on the host, against float64 computed here.
TYPED_TEST(CrossEntropyShardTest, ShardsMatchFloat64) {
  using S = TypeParam;
  auto backend = Storage<S>::make();
  Rng rng(12);
  const float dloss = 0.37f;
  double worst_loss = 0, worst_dlogits = 0;  // as fractions of their bounds
  for (const ShardShape& s : kShardShapes) {
    const auto logits = shard_test_logits<S>(rng, s.N, s.V, s.Vp);
    const auto dlogits0 = random_values<S>(rng, logits.size(), 1e-3);
    const Reference r = reference(to_double(logits), s.targets, s.N, s.V, s.Vp, dloss);
    for (int tp : {2, 4}) {
      SCOPED_TRACE("N=" + std::to_string(s.N) + " V=" + std::to_string(s.V) +
                   " Vp=" + std::to_string(s.Vp) + " tp=" + std::to_string(tp));
      const int Vl = s.Vp / tp;
      const Sharded<S> got =
          run_sharded(*backend, logits, s.targets, s.N, s.V, s.Vp, tp, dlogits0, dloss);

      for (int n = 0; n < s.N; n++) {
        const S* x = logits.data() + size_t(n) * s.Vp;
        // The all-reduced max is the row's max (exact), the target logit the target's (one
        // shard gives it, the others exactly 0).
        double max = -INFINITY;
        for (int j = 0; j < s.V; j++) max = std::max(max, Storage<S>::to(x[j]));
        EXPECT_EQ(got.row_max[n], max) << "row " << n;
        EXPECT_EQ(got.sums[s.N + n], s.targets[n] >= 0 ? Storage<S>::to(x[s.targets[n]]) : 0.0)
            << "row " << n;
        for (int shard = 0; shard < tp; shard++) {
          if (int64_t(shard) * Vl < s.V) continue;
          // A shard of padding alone: −inf and nothing summed.
          EXPECT_EQ(got.shard_row_max[shard][n], -INFINITY) << "shard " << shard << " row " << n;
          EXPECT_EQ(got.shard_sums[shard][n], 0.0f) << "shard " << shard << " row " << n;
          EXPECT_EQ(got.shard_sums[shard][s.N + n], 0.0f) << "shard " << shard << " row " << n;
        }
        if (s.targets[n] < 0) {
          EXPECT_EQ(got.losses[n], 0.0f) << "ignored row " << n;
          EXPECT_EQ(got.lse[n], 0.0f) << "ignored row " << n;
        }
      }
      // As the fused op's check above: fp32 sums of exp_approx terms (~1e-7 each) relative to
      // the global max, plus tp − 1 fp32 additions of the shards' sums.
      const double loss_bound = 1e-5 * (r.loss_scale + 1);
      expect_close(to_double(got.losses), r.losses, 0.0, loss_bound, "losses");
      for (int n = 0; n < s.N; n++)
        worst_loss = std::max(worst_loss, std::fabs(got.losses[n] - r.losses[n]) / loss_bound);

      int misses = 0;
      for (int n = 0; n < s.N; n++) {
        for (int j = 0; j < s.Vp; j++) {
          const size_t k = size_t(n) * s.Vp + j;
          if (j >= s.V || s.targets[n] < 0) {
            if (Storage<S>::to(got.dlogits[k]) != 0.0 && ++misses <= 5)
              ADD_FAILURE() << "row " << n << " column " << j << " (padding or ignored) not 0";
            continue;
          }
          const double want = r.dlogits[k];  // written, not added to dlogits0
          const double bound =
              result_rel<S>() * std::fabs(want) + 1e-6 * dloss * (r.loss_scale + 1);
          const double diff = std::fabs(Storage<S>::to(got.dlogits[k]) - want);
          worst_dlogits = std::max(worst_dlogits, diff / bound);
          if (!(diff <= bound) && ++misses <= 5)
            ADD_FAILURE() << "dlogits row " << n << " column " << j << ": got "
                          << Storage<S>::to(got.dlogits[k]) << ", want " << want;
        }
      }
      EXPECT_EQ(misses, 0);
    }
  }
  std::printf(
      "sharded vs float64: worst |Δloss| %.3g of its bound, worst dlogits error %.3g of "
      "its bound\n",
      worst_loss, worst_dlogits);
}

// A target ≥ V is an error on the cpu, in the stages that see V: here in this shard's padding.
TYPED_TEST(CrossEntropyShardTest, TargetOutsideVocabularyIsAnError) {
  using S = TypeParam;
  auto backend = Storage<S>::make();
  const int N = 2, V = 13, Vl = 8;  // the second shard: columns [8, 16), 8..12 real
  DeviceBuffer<S, BackendT<S>> logits(*backend, size_t(N) * Vl), dlogits(*backend, size_t(N) * Vl);
  DeviceBuffer<int32_t, BackendT<S>> targets(*backend, std::vector<int32_t>{9, 14});
  DeviceBuffer<float, BackendT<S>> row_max(*backend, size_t(N)), sums(*backend, size_t(2) * N),
      lse(*backend, size_t(N));
  EXPECT_THROW(backend->cross_entropy_shard_sums(sums.get(), logits.get(), targets.get(),
                                                 row_max.get(), N, V, Vl, 8),
               Error);
  EXPECT_THROW(backend->cross_entropy_shard_backward(dlogits.get(), logits.get(), targets.get(),
                                                     lse.get(), N, V, Vl, 8, 1.0f),
               Error);
}

}  // namespace
}  // namespace collage::test
