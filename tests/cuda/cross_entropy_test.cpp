// cross_entropy_forward / cross_entropy_backward of the cuda backend (kernels/cross_entropy.cu)
// under the host SIMT emulator against the cpu backend (src/backend/cpu/cross_entropy.cpp).
//
// Tolerances. Both compute lse = max + log(S), S = Σ_j exp_approx(x_j − max), in fp32 with the
// same exp_approx, but S is summed in a different order (the kernel: per thread, rescaled to
// the row max by an extra exp_approx factor, then a tree; the cpu: 512-column chunks), so S
// differs by a few fp32 rounding errors of the sum (~1e-7 relative, each term's exp_approx is
// 1-2 ulp) and lse by that plus an ulp or two of max + log S. So |Δloss| ≤ 1e-5·(1 + |lse|):
// the error is relative to lse (the logits' scale), not to the loss, which may be ~0 when the
// target dominates.
// The backward's per-element expressions are the cpu's; only lse differs, by the δ above, so
// the fp32 values before the one rounding differ by ≤ δ·p_j·|dloss| (the softmax changes by a
// factor e^δ; at the target p − 1 moves by the same δ·p). Two values that close round to bf16
// values at most |Δ| + one bf16 ulp apart: the check allows ulp + 2·δ·p_j·|dloss| per
// element. Padding columns (V ≤ j < Vp) and ignored rows must keep their prior bits.
//
// Shapes: V not a multiple of 8, 32 or 128, with the 128-bit path (Vp a multiple of 8, whose
// last group reaches into the padding) and without (odd Vp, and a 2-byte offset); V below a
// warp; V = 1; GPT-2's 50257 of 50304. Rows: a target far above the rest (loss ≈ 0, p ≈ 1 at
// the target), logits near 80 (lse ≈ 85), and logits of scale 30 (most exp terms at
// exp_approx's clamp).
#include <algorithm>
#include <cmath>
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

// The spacing of bf16 values at |x| (normal range; the subnormal spacing below).
double bf16_spacing(double x) {
  const double a = std::max(std::fabs(x), 0x1p-126);
  return std::ldexp(1.0, std::ilogb(a) - 7);
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
      EXPECT_LE(diff, bound) << "row " << n << ": emulated " << loss_got[n] << ", cpu "
                             << loss_want[n];
      worst_loss_ratio = std::max(worst_loss_ratio, diff / bound);
    }

    // Backward onto prior values at the gradient's scale, so the sum's rounding matters.
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
          if (got[k].bits != dlogits0[k].bits && ++misses <= 5)
            ADD_FAILURE() << "row " << n << " column " << j << " (padding or ignored) changed";
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
          ADD_FAILURE() << "dlogits row " << n << " column " << j << ": emulated " << g << ", cpu "
                        << w << " (bound " << bound << ")";
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
  for (int n : {0, 2, 3}) {
    for (int j = 0; j < Vp; j++)
      EXPECT_EQ(got[size_t(n) * Vp + j].bits, dlogits0[size_t(n) * Vp + j].bits)
          << "row " << n << " column " << j;
  }
  EXPECT_NE(got[size_t(1) * Vp + 3].bits, dlogits0[size_t(1) * Vp + 3].bits);
}

}  // namespace
}  // namespace collage::test
