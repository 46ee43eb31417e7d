// cross_entropy_forward / cross_entropy_backward of the cuda backend (kernels/cross_entropy.cu)
// under the host SIMT emulator against the cpu backend (src/backend/cpu/cross_entropy.cpp).
//
// Tolerances. Both compute lse = max + log(S), S = Σ_j exp_approx(x_j − max), in fp32 with the
// same exp_approx, but S is summed in a different order (the kernel: per thread, rescaled to
// the row max by an extra exp_approx factor, then a tree; the cpu: 512-column chunks), so S
// differs by a few fp32 rounding errors of the sum (~1e-7 relative, each term's exp_approx is
// 1-2 ulp) and lse by that plus an ulp or two of max + log S (on a GPU, CUDA's logf adds up to
// 2 ulp of log S against glibc's: far below the bound). So |Δloss| ≤ 1e-5·(1 + |lse|):
// the error is relative to lse (the logits' scale), not to the loss, which may be ~0 when the
// target dominates.
// The backward's per-element expressions are the cpu's; only lse differs, by the δ above, so
// the fp32 values before the one rounding differ by ≤ δ·p_j·|dloss| (the softmax changes by a
// factor e^δ; at the target p − 1 moves by the same δ·p). Two values that close round to bf16
// values at most |Δ| + one bf16 ulp apart: the check allows ulp + 2·δ·p_j·|dloss| per
// element. Padding columns (V ≤ j < Vp) and ignored rows must keep their prior bits.
//
// The vocab-parallel stages (cross_entropy_shard_*) are compared stage by stage, both backends
// given the same inputs at every stage (the cpu's all-reduced values), as the ranks of a
// tensor-parallel group would have them:
//  - the shard max is exact, the loss stage and the backward are elementwise (the same fp32
//    expressions, logf as std::log): bit-identical under the emulator (glibc's logf on both
//    sides). On a GPU logf is CUDA's, within 1 ulp of the exact log (CUDA C++ Programming
//    Guide, "Mathematical Functions"), as glibc's is (the GNU C Library manual, "Known Maximum
//    Errors in Math Functions"): L = log S differs by ≤ 2 ulp(L), lse = fl(max + L) by that
//    plus one ulp(lse), and the loss fl(lse − x[target]) by that plus one ulp(loss) (an H100
//    gave lse 7.8502893 where the cpu gives 7.8502889: one ulp). The backward reads the
//    cpu's lse on both sides, so it stays bit-identical there too;
//  - the Σ exp_approx(x − max) adds the same fp32 terms (exp_approx gives the same bits) in
//    another order (the cpu: 512-column chunks, each a 16-lane sum (storage.h's lane_sum); the
//    kernel: a strided sum per thread, then a warp butterfly and the warps in order). For positive
//    terms each order is within k·2^-24 of the exact sum, k the longest chain of additions (< 160
//    for these shapes in either order), so the two agree to 1e-5 of the sum; the target
//    logit is copied (bits).
//  - end to end (each backend all-reducing its own sums): losses within 1e-5·(1 + |lse|), as
//    the fused ops above.
//
// Shapes: V not a multiple of 8, 32 or 128, with the 128-bit path (Vp a multiple of 8, whose
// last group reaches into the padding) and without (odd Vp, and a 2-byte offset); V below a
// warp; V = 1; GPT-2's 50257 of 50304. Rows: a target far above the rest (loss ≈ 0, p ≈ 1 at
// the target), logits near 80 (lse ≈ 85), and logits of scale 30 (most exp terms at
// exp_approx's clamp).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cuda_test_util.h"

namespace collage::test {
namespace {

struct Shape {
  int N, V, Vp;
  int offset;  // elements from the aligned allocation (1: no 128-bit path)
};
const Shape kShapes[] = {{37, 1001, 1024, 0}, {16, 4099, 4104, 0}, {13, 333, 337, 0},
                         {11, 1000, 1024, 1}, {9, 31, 31, 0},      {5, 1, 8, 0},
                         {3, 50257, 50304, 0}};

std::string describe(const Shape& s) {
  return "N=" + std::to_string(s.N) + " V=" + std::to_string(s.V) + " Vp=" + std::to_string(s.Vp) +
         " offset=" + std::to_string(s.offset);
}

struct Inputs {
  std::vector<bf16> logits;  // (offset + N·Vp)
  std::vector<int32_t> targets;
};

Inputs make_inputs(Rng& rng, const Shape& s) {
  Inputs in{random_values<bf16>(rng, size_t(s.offset) + size_t(s.N) * s.Vp, 2.0),
            std::vector<int32_t>(size_t(s.N))};
  for (int n = 0; n < s.N; n++) {
    in.targets[n] = rng.uniform(0, 1) < 0.15 ? -1 : rng.integer(0, s.V - 1);
    bf16* x = in.logits.data() + s.offset + size_t(n) * s.Vp;
    if (n == 0) {  // a confident row: the target 20 above the rest
      in.targets[n] = s.V / 2;
      x[s.V / 2] = float_to_bf16(bf16_to_float(x[s.V / 2]) + 20.0f);
    } else if (n == 1) {  // large logits
      for (int j = 0; j < s.Vp; j++) x[j] = float_to_bf16(bf16_to_float(x[j]) + 80.0f);
    } else if (n == 2) {  // wide logits: most exps far below the largest
      for (int j = 0; j < s.Vp; j++) x[j] = float_to_bf16(bf16_to_float(x[j]) * 15.0f);
    }
  }
  return in;
}

// lse of row n in double, from the bf16 logits.
double reference_lse(const bf16* x, int V) {
  double m = -INFINITY;
  for (int j = 0; j < V; j++) m = std::max(m, double(bf16_to_float(x[j])));
  double total = 0;
  for (int j = 0; j < V; j++) total += std::exp(double(bf16_to_float(x[j])) - m);
  return m + std::log(total);
}

TEST(CudaCrossEntropy, ForwardAndBackwardMatchCpu) {
  BackendPair pair;
  Rng rng(41);
  const float dloss = 0.37f;
  double worst_loss_ratio = 0;  // |Δloss| / (1e-5·(1 + |lse|))
  int64_t worst_ulps = 0, differing = 0, compared = 0;
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(describe(s));
    const int o = s.offset;
    const Inputs in = make_inputs(rng, s);
    const Mirrored<bf16> logits(pair, in.logits);
    const Mirrored<int32_t> targets(pair, in.targets);
    const Mirrored<float> losses(pair, std::vector<float>(size_t(s.N), -1.0f));
    pair.cpu->cross_entropy_forward(losses.cpu(), logits.cpu() + o, targets.cpu(), s.N, s.V, s.Vp);
    pair.emulated->cross_entropy_forward(losses.emulated(), logits.emulated() + o,
                                         targets.emulated(), s.N, s.V, s.Vp);
    const auto loss_got = losses.from_emulated(), loss_want = losses.from_cpu();
    std::vector<double> lse(size_t(s.N));
    for (int n = 0; n < s.N; n++) {
      lse[n] = reference_lse(in.logits.data() + o + size_t(n) * s.Vp, s.V);
      if (in.targets[n] < 0) {
        EXPECT_EQ(loss_got[n], 0.0f) << "ignored row " << n;
        continue;
      }
      const double bound = 1e-5 * (1 + std::fabs(lse[n]));
      const double diff = std::fabs(double(loss_got[n]) - double(loss_want[n]));
      EXPECT_LE(diff, bound) << "row " << n << ": " << cuda_name() << " " << loss_got[n] << ", cpu "
                             << loss_want[n];
      worst_loss_ratio = std::max(worst_loss_ratio, diff / bound);
    }

    // Backward over prior values (written over, never read: backend.h); the elements before the
    // tensor stay as they were.
    const auto dlogits0 = random_values<bf16>(rng, in.logits.size(), 1e-3);
    const Mirrored<bf16> dlogits(pair, dlogits0);
    pair.cpu->cross_entropy_backward(dlogits.cpu() + o, logits.cpu() + o, targets.cpu(), s.N, s.V,
                                     s.Vp, dloss);
    pair.emulated->cross_entropy_backward(dlogits.emulated() + o, logits.emulated() + o,
                                          targets.emulated(), s.N, s.V, s.Vp, dloss);
    const auto got = dlogits.from_emulated(), want = dlogits.from_cpu();
    for (int k = 0; k < o; k++) EXPECT_EQ(got[k].bits, dlogits0[k].bits) << "before the tensor";
    int misses = 0;
    for (int n = 0; n < s.N; n++) {
      const double delta = 1e-5 * (1 + std::fabs(lse[n]));
      for (int j = 0; j < s.Vp; j++) {
        const size_t k = o + size_t(n) * s.Vp + j;
        if (j >= s.V || in.targets[n] < 0) {
          if ((got[k].bits != 0 || want[k].bits != 0) && ++misses <= 5)
            ADD_FAILURE() << "row " << n << " column " << j << " (padding or ignored) not +0";
          continue;
        }
        compared++;
        const int64_t ulps = bf16_ulps(got[k], want[k]);
        differing += ulps != 0;
        worst_ulps = std::max(worst_ulps, ulps);
        const double g = bf16_to_float(got[k]), w = bf16_to_float(want[k]);
        const double p = std::exp(double(bf16_to_float(in.logits[k])) - lse[n]);
        const double bound =
            bf16_spacing(std::max(std::fabs(g), std::fabs(w))) + 2 * delta * p * dloss;
        if (!(std::fabs(g - w) <= bound) && ++misses <= 5)
          ADD_FAILURE() << "dlogits row " << n << " column " << j << ": " << cuda_name() << " " << g
                        << ", cpu " << w << " (bound " << bound << ")";
      }
    }
    EXPECT_EQ(misses, 0);
  }
  std::printf(
      "cross-entropy: worst |Δloss| %.3g of the bound 1e-5·(1+|lse|); dlogits: %lld of "
      "%lld elements differ from the cpu's, by at most %lld bf16 ulp\n",
      worst_loss_ratio, static_cast<long long>(differing), static_cast<long long>(compared),
      static_cast<long long>(worst_ulps));
}

// The forward's saved lse (the models' path, src/model/vocab_parallel_loss.h) on the cuda
// backend: the same losses as without it, 0 for ignored rows, and the shard backward from it,
// written over any prior dlogits, is the fused backward onto zeros bit for bit (both take the
// lse of the same row_statistics); the lse itself agrees with the cpu's to the losses' bound.
TEST(CudaCrossEntropy, SavedLseGivesTheFusedBackwardBits) {
  BackendPair pair;
  Rng rng(44);
  const float dloss = 0.37f;
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(describe(s));
    const int o = s.offset;
    const Inputs in = make_inputs(rng, s);
    // Prior dlogits: zeros for the fused op, values at the gradient's scale for the shard op,
    // the filler before the tensor (offset) 0 in both (neither writes it).
    const std::vector<bf16> zeros(in.logits.size(), float_to_bf16(0.0f));
    auto prior = random_values<bf16>(rng, in.logits.size(), 1e-3);
    std::fill(prior.begin(), prior.begin() + o, float_to_bf16(0.0f));
    const Mirrored<bf16> logits(pair, in.logits), fused(pair, zeros), saved(pair, prior);
    const Mirrored<int32_t> targets(pair, in.targets);
    const Mirrored<float> plain(pair, std::vector<float>(size_t(s.N))),
        losses(pair, std::vector<float>(size_t(s.N))),
        lse(pair, std::vector<float>(size_t(s.N), -1.0f));
    Backend& cuda = *pair.emulated;
    cuda.cross_entropy_forward(plain.emulated(), logits.emulated() + o, targets.emulated(), s.N,
                               s.V, s.Vp);
    cuda.cross_entropy_forward(losses.emulated(), logits.emulated() + o, targets.emulated(), s.N,
                               s.V, s.Vp, lse.emulated());
    pair.cpu->cross_entropy_forward(losses.cpu(), logits.cpu() + o, targets.cpu(), s.N, s.V, s.Vp,
                                    lse.cpu());
    cuda.cross_entropy_backward(fused.emulated() + o, logits.emulated() + o, targets.emulated(),
                                s.N, s.V, s.Vp, dloss);
    cuda.cross_entropy_shard_backward(saved.emulated() + o, logits.emulated() + o,
                                      targets.emulated(), lse.emulated(), s.N, s.V, s.Vp, 0, dloss);
    expect_same_bits(losses.from_emulated(), plain.from_emulated(), "losses");
    const auto got = lse.from_emulated(), want = lse.from_cpu();
    for (int n = 0; n < s.N; n++) {
      if (in.targets[n] < 0) {
        EXPECT_EQ(got[n], 0.0f) << "ignored row " << n;
        continue;
      }
      EXPECT_NEAR(got[n], want[n], 1e-5 * (1 + std::fabs(want[n]))) << "row " << n;
    }
    expect_same_bits(saved.from_emulated(), fused.from_emulated(), "dlogits");
  }
}

// Targets ≥ V cannot be scored; the cpu backend throws, the kernel (which cannot) treats the
// row as ignored: loss 0, no gradient, and no read outside the row.
TEST(CudaCrossEntropy, TargetsOutsideTheVocabularyAreIgnored) {
  BackendPair pair;
  Rng rng(42);
  const int N = 4, V = 37, Vp = 40;
  const auto logits = random_values<bf16>(rng, size_t(N) * Vp);
  const std::vector<int32_t> targets = {V, 3, V + 1000000, -7};
  const auto dlogits0 = random_values<bf16>(rng, size_t(N) * Vp);
  const Mirrored<bf16> d_logits(pair, logits), d_dlogits(pair, dlogits0);
  const Mirrored<int32_t> d_targets(pair, targets);
  const Mirrored<float> losses(pair, std::vector<float>(N, -1.0f));
  pair.emulated->cross_entropy_forward(losses.emulated(), d_logits.emulated(), d_targets.emulated(),
                                       N, V, Vp);
  pair.emulated->cross_entropy_backward(d_dlogits.emulated(), d_logits.emulated(),
                                        d_targets.emulated(), N, V, Vp, 1.0f);
  const auto loss = losses.from_emulated();
  EXPECT_EQ(loss[0], 0.0f);
  EXPECT_GT(loss[1], 0.0f);
  EXPECT_EQ(loss[2], 0.0f);
  EXPECT_EQ(loss[3], 0.0f);
  const auto got = d_dlogits.from_emulated();
  for (int n : {0, 2, 3}) {  // ignored rows: zeros written over the old values
    for (int j = 0; j < Vp; j++)
      EXPECT_EQ(got[size_t(n) * Vp + j].bits, 0) << "row " << n << " column " << j;
  }
  EXPECT_NE(got[size_t(1) * Vp + 3].bits, dlogits0[size_t(1) * Vp + 3].bits);
}

// ---- vocab-parallel stages ----

struct ShardCase {
  int N, V, Vp, tp;
  int offset;  // elements from the aligned allocation (1: no 128-bit path)
};
// Vl = Vp / tp: 512 (the last shard's last group of 8 reaching into the padding); 128 with the
// last shard all padding; 85 (odd: no 128-bit path); 384 at a 2-byte offset; GPT-2's vocabulary
// on 4 ranks (12576 columns each).
const ShardCase kShardCases[] = {{13, 1001, 1024, 2, 0},
                                 {9, 300, 512, 4, 0},
                                 {7, 333, 340, 4, 0},
                                 {11, 700, 768, 2, 1},
                                 {3, 50257, 50304, 4, 0}};

std::string describe(const ShardCase& c) {
  return "N=" + std::to_string(c.N) + " V=" + std::to_string(c.V) + " Vp=" + std::to_string(c.Vp) +
         " tp=" + std::to_string(c.tp) + " offset=" + std::to_string(c.offset);
}

// Columns [shard·Vl, (shard+1)·Vl) of full (N, Vp), behind `offset` elements of filler.
std::vector<bf16> shard_columns(const std::vector<bf16>& full, int N, int Vp, int Vl, int shard,
                                int offset) {
  std::vector<bf16> part(size_t(offset) + size_t(N) * Vl, float_to_bf16(7.0f));
  for (int n = 0; n < N; n++) {
    for (int j = 0; j < Vl; j++)
      part[offset + size_t(n) * Vl + j] = full[size_t(n) * Vp + size_t(shard) * Vl + j];
  }
  return part;
}

TEST(CudaCrossEntropy, ShardStagesMatchCpu) {
  BackendPair pair;
  Rng rng(43);
  const float dloss = 0.37f;
  double worst_sum_ratio = 0, worst_loss_ratio = 0;  // |Δ| as fractions of their bounds
  for (const ShardCase& c : kShardCases) {
    SCOPED_TRACE(describe(c));
    const int Vl = c.Vp / c.tp, o = c.offset, N = c.N;
    // make_inputs' rows (confident, large, wide) over the whole padded vocabulary; targets in
    // every shard: row 3 the last token, row 4 the first column of shard 1.
    Inputs in = make_inputs(rng, Shape{N, c.V, c.Vp, 0});
    if (N > 3) in.targets[3] = c.V - 1;
    if (N > 4) in.targets[4] = Vl;
    const Mirrored<int32_t> targets(pair, in.targets);
    const auto dlogits0 = random_values<bf16>(rng, in.logits.size(), 1e-3);

    // 1. max: bits.
    std::vector<std::unique_ptr<Mirrored<bf16>>> logits;
    const Mirrored<float> row_max(pair, size_t(N)), sums(pair, size_t(2) * N);
    std::vector<float> global_max(size_t(N), -INFINITY);
    for (int shard = 0; shard < c.tp; shard++) {
      logits.push_back(
          std::make_unique<Mirrored<bf16>>(pair, shard_columns(in.logits, N, c.Vp, Vl, shard, o)));
      const int64_t begin = int64_t(shard) * Vl;
      pair.cpu->cross_entropy_shard_max(row_max.cpu(), logits[shard]->cpu() + o, N, c.V, Vl, begin);
      pair.emulated->cross_entropy_shard_max(row_max.emulated(), logits[shard]->emulated() + o, N,
                                             c.V, Vl, begin);
      const auto want = row_max.from_cpu();
      expect_same_bits(row_max.from_emulated(), want, "row_max of shard " + std::to_string(shard));
      for (int n = 0; n < N; n++) global_max[n] = std::max(global_max[n], want[n]);
    }
    const Mirrored<float> d_global_max(pair, global_max);

    // 2. Σ exp within 1e-5 of the sum, target logits: bits. Each backend's own all-reduce too.
    std::vector<float> cpu_sums(size_t(2) * N, 0.0f), emulated_sums(size_t(2) * N, 0.0f);
    for (int shard = 0; shard < c.tp; shard++) {
      const int64_t begin = int64_t(shard) * Vl;
      pair.cpu->cross_entropy_shard_sums(sums.cpu(), logits[shard]->cpu() + o, targets.cpu(),
                                         d_global_max.cpu(), N, c.V, Vl, begin);
      pair.emulated->cross_entropy_shard_sums(sums.emulated(), logits[shard]->emulated() + o,
                                              targets.emulated(), d_global_max.emulated(), N, c.V,
                                              Vl, begin);
      const auto got = sums.from_emulated(), want = sums.from_cpu();
      for (int n = 0; n < N; n++) {
        const double bound = 1e-5 * want[n];
        const double diff = std::fabs(double(got[n]) - double(want[n]));
        EXPECT_LE(diff, bound) << "shard " << shard << " row " << n << ": " << cuda_name() << " "
                               << got[n] << ", cpu " << want[n];
        if (want[n] > 0) worst_sum_ratio = std::max(worst_sum_ratio, diff / bound);
        EXPECT_EQ(got[N + n], want[N + n]) << "target logit, shard " << shard << " row " << n;
      }
      for (int i = 0; i < 2 * N; i++) cpu_sums[i] += want[i], emulated_sums[i] += got[i];
    }

    // 3. loss and lse from the same all-reduced values: bits.
    const Mirrored<float> d_sums(pair, cpu_sums), losses(pair, size_t(N)), lse(pair, size_t(N));
    pair.cpu->cross_entropy_shard_loss(losses.cpu(), lse.cpu(), d_global_max.cpu(), d_sums.cpu(),
                                       targets.cpu(), N);
    pair.emulated->cross_entropy_shard_loss(losses.emulated(), lse.emulated(),
                                            d_global_max.emulated(), d_sums.emulated(),
                                            targets.emulated(), N);
    if (!cuda_on_device()) {
      expect_same_bits(losses.from_emulated(), losses.from_cpu(), "losses");
      expect_same_bits(lse.from_emulated(), lse.from_cpu(), "lse");
    } else {  // logf: CUDA's and glibc's, 1 ulp each (the header)
      const auto got_loss = losses.from_emulated(), want_loss = losses.from_cpu();
      const auto got_lse = lse.from_emulated(), want_lse = lse.from_cpu();
      for (int n = 0; n < N; n++) {
        auto ulp = [](double a, double b) {
          return fp32_ulp(std::max(std::fabs(a), std::fabs(b)));
        };
        const double log_sum = double(want_lse[n]) - double(global_max[n]);
        const double lse_bound = 2 * ulp(log_sum, log_sum) + ulp(got_lse[n], want_lse[n]);
        EXPECT_LE(std::fabs(double(got_lse[n]) - double(want_lse[n])), lse_bound)
            << "lse row " << n << ": cuda " << got_lse[n] << ", cpu " << want_lse[n];
        EXPECT_LE(std::fabs(double(got_loss[n]) - double(want_loss[n])),
                  lse_bound + ulp(got_loss[n], want_loss[n]))
            << "loss row " << n << ": cuda " << got_loss[n] << ", cpu " << want_loss[n];
      }
    }
    // End to end: the emulated ranks' own sums.
    {
      const Mirrored<float> own_sums(pair, emulated_sums), own_losses(pair, size_t(N)),
          own_lse(pair, size_t(N));
      pair.emulated->cross_entropy_shard_loss(own_losses.emulated(), own_lse.emulated(),
                                              d_global_max.emulated(), own_sums.emulated(),
                                              targets.emulated(), N);
      const auto got = own_losses.from_emulated(), want = losses.from_cpu();
      const auto want_lse = lse.from_cpu();
      for (int n = 0; n < N; n++) {
        const double bound = 1e-5 * (1 + std::fabs(want_lse[n]));
        const double diff = std::fabs(double(got[n]) - double(want[n]));
        EXPECT_LE(diff, bound) << "end-to-end loss, row " << n;
        worst_loss_ratio = std::max(worst_loss_ratio, diff / bound);
      }
    }

    // Backward from the same lse (the cpu's, given to both) over the same prior values: bits;
    // padding columns and ignored rows are written 0, the filler before the tensor keeps its
    // prior bits.
    const Mirrored<float> saved_lse(pair, lse.from_cpu());
    for (int shard = 0; shard < c.tp; shard++) {
      const int64_t begin = int64_t(shard) * Vl;
      const auto prior = shard_columns(dlogits0, N, c.Vp, Vl, shard, o);
      const Mirrored<bf16> dlogits(pair, prior);
      pair.cpu->cross_entropy_shard_backward(dlogits.cpu() + o, logits[shard]->cpu() + o,
                                             targets.cpu(), saved_lse.cpu(), N, c.V, Vl, begin,
                                             dloss);
      pair.emulated->cross_entropy_shard_backward(dlogits.emulated() + o,
                                                  logits[shard]->emulated() + o, targets.emulated(),
                                                  saved_lse.emulated(), N, c.V, Vl, begin, dloss);
      const auto got = dlogits.from_emulated();
      expect_same_bits(got, dlogits.from_cpu(), "dlogits of shard " + std::to_string(shard));
      int misses = 0;
      for (size_t k = 0; k < got.size(); k++) {
        const bool before = k < size_t(o);
        const int n = before ? -1 : int((k - o) / Vl), j = before ? -1 : int((k - o) % Vl);
        const bool zero = !before && (begin + j >= c.V || in.targets[n] < 0);
        if (((before && got[k].bits != prior[k].bits) || (zero && got[k].bits != 0)) &&
            ++misses <= 5)
          ADD_FAILURE() << "shard " << shard << " element " << k
                        << (before ? " (filler) changed" : " (padding or ignored row) not 0");
      }
      EXPECT_EQ(misses, 0);
    }
  }
  std::printf(
      "cross-entropy shards: worst |ΔΣexp| %.3g of the bound 1e-5·Σ, worst end-to-end |Δloss| "
      "%.3g of the bound 1e-5·(1+|lse|); max, loss, lse and dlogits bit-identical\n",
      worst_sum_ratio, worst_loss_ratio);
}

// Targets ≥ V: the shard kernels read no target logit for them (even one in this shard's
// padding columns) and treat the row as ignored: zeros, as the fused kernels add nothing.
TEST(CudaCrossEntropy, ShardTargetsOutsideTheVocabularyAreIgnored) {
  BackendPair pair;
  Rng rng(44);
  const int N = 4, V = 13, Vl = 8, begin = 8;  // the second shard: columns 8..12 real, 13..15 not
  const auto logits = random_values<bf16>(rng, size_t(N) * Vl);
  const std::vector<int32_t> targets = {14, 9, V + 1000000, -7};
  const auto dlogits0 = random_values<bf16>(rng, size_t(N) * Vl);
  const Mirrored<bf16> d_logits(pair, logits), d_dlogits(pair, dlogits0);
  const Mirrored<int32_t> d_targets(pair, targets);
  const Mirrored<float> row_max(pair, std::vector<float>(N, 0.0f)), sums(pair, size_t(2) * N),
      lse(pair, std::vector<float>(N, 3.0f));
  pair.emulated->cross_entropy_shard_sums(sums.emulated(), d_logits.emulated(),
                                          d_targets.emulated(), row_max.emulated(), N, V, Vl,
                                          begin);
  pair.emulated->cross_entropy_shard_backward(d_dlogits.emulated(), d_logits.emulated(),
                                              d_targets.emulated(), lse.emulated(), N, V, Vl, begin,
                                              1.0f);
  const auto s = sums.from_emulated();
  EXPECT_EQ(s[N + 0], 0.0f);
  EXPECT_EQ(s[N + 1], bf16_to_float(logits[1 * Vl + 1]));
  EXPECT_EQ(s[N + 2], 0.0f);
  EXPECT_EQ(s[N + 3], 0.0f);
  const auto got = d_dlogits.from_emulated();
  for (int n : {0, 2, 3}) {
    for (int j = 0; j < Vl; j++)
      EXPECT_EQ(got[size_t(n) * Vl + j].bits, 0) << "row " << n << " column " << j;
  }
  EXPECT_NE(got[size_t(1) * Vl + 1].bits, dlogits0[size_t(1) * Vl + 1].bits);
}

}  // namespace
}  // namespace collage::test
