// attention_forward / attention_backward of the cuda backend (kernels/attention.cu) under the
// host SIMT emulator against the cpu backend, causal or not, with and without a key mask
// (including a batch row whose keys are all hidden, and key 0 hidden so causal query 0 sees
// nothing), on head sizes that are and are not multiples of 32 and sequences of one, part of
// one, and several 32-key tiles.
//
// The cpu runs its OpenBLAS engine (cpu_gemm openblas): like these kernels it keeps the
// probabilities and dS in fp32, where its oneDNN engine rounds them to bf16 as the tensor-core
// kernels do (tests/cuda/flash_attention_test.cpp compares those with both engines).
//
// Tolerances. Both backends compute the same fp32 quantities but sum them in different orders
// (the cpu: sgemm blocks and one softmax over all keys; the kernels: per-lane sums over head
// dims, per-tile warp sums and an online softmax rescaled by exp(m - m') per key tile).
//  - lse = m + log Σ exp(S - m): the sums differ by a few fp32 ulps, log turns that into an
//    absolute difference of ~1e-7 at |lse| ≲ 10: checked at 1e-5 absolute.
//  - out: the fp32 values differ by ~1e-7 relative before the one rounding to bf16, so the
//    stored values are equal or, when the fp32 values straddle a rounding boundary, one ulp
//    apart: checked at 1 bf16 ulp. Except where out ≈ 0 from cancellation in Σ_j p_j·v_j:
//    there the fp32 error (≲ T·2^-24·max|v| worst case) can exceed the value's bf16 ulp, so a
//    value more than 1 ulp off must be within 1e-6·max|v|.
//  - gradients: dqkv = rn(old + g). The fp32 g of the two backends differ by δ, then each
//    rounds to nearest: |got - want| ≤ δ + ulp ≤ δ + 2^-7·max(|got|, |want|). δ is fp32
//    summation error: each g sums T terms P·(dP - D)·q (or P·dout) whose factors are sums of
//    HS (dP, S) or T (D) products, so δ ≲ (T + 2·HS)·2^-24 ≈ 1e-5 of Σ|terms| in the worst
//    case (the errors are random in sign: typically ~1e-6). Σ|terms| of an entry is within a
//    small factor of the largest gradient entry of its part (q, k or v), G; the test allows
//    δ = 1e-5·G.
// Measured (printed per case): |Δlse| ≤ 4.8e-7; out ≤ 1 ulp but for one value 2 ulps apart at
// |out| = 2e-6 (Δ = 3e-8, within the floor); every gradient element ≤ 1 ulp from the cpu's.
#include <cstdio>
#include <limits>
#include <utility>

#include "attention_cases.h"
#include "cuda_test_util.h"

namespace collage::test {
namespace {

using Case = AttentionShape;
// Head sizes 64 and 128 run on the tensor-core kernels (tests/cuda/flash_attention_test.cpp);
// these are the SIMT kernels' sizes.
const Case kCases[] = {{1, 1, 1, 8}, {2, 13, 3, 24}, {1, 70, 2, 96}, {2, 33, 1, 40}};

// lse: equal infinities, else |got - want| ≤ 1e-5. Returns the largest finite difference.
double check_lse(const std::vector<float>& got, const std::vector<float>& want) {
  double worst = 0;
  int misses = 0;
  for (size_t i = 0; i < got.size(); i++) {
    const bool ok =
        std::isinf(want[i]) ? got[i] == want[i] : std::fabs(double(got[i]) - want[i]) <= 1e-5;
    if (!std::isinf(want[i])) worst = std::max(worst, std::fabs(double(got[i]) - want[i]));
    if (!ok && ++misses <= 5) {
      ADD_FAILURE() << "lse[" << i << "]: emulated " << got[i] << ", cpu " << want[i];
    }
  }
  EXPECT_EQ(misses, 0) << "lse: " << misses << " of " << got.size() << " off";
  return worst;
}

// out: within 1 bf16 ulp of the cpu, or, where the output is so close to 0 that fp32
// cancellation in Σ_j p_j·v_j exceeds its ulp (|out| ≲ 1e-4·max|v|), within that fp32 error:
// ≤ T·2^-24·max|v| worst case, allowed as 1e-6·max|v|. Returns the largest ulp distance and
// how many values needed the floor.
std::pair<int64_t, int> check_out(const std::vector<bf16>& got, const std::vector<bf16>& want,
                                  const std::vector<bf16>& qkv, const Case& c) {
  const int C = c.NH * c.HS;
  double v_scale = 0;
  for (size_t row = 0; row < size_t(c.B) * c.T; row++) {
    for (int e = 0; e < C; e++) {
      v_scale = std::max(v_scale, std::fabs(double(bf16_to_float(qkv[row * 3 * C + 2 * C + e]))));
    }
  }
  int64_t worst = 0;
  int floored = 0, misses = 0;
  for (size_t i = 0; i < got.size(); i++) {
    const int64_t ulps = bf16_ulps(got[i], want[i]);
    const double diff = std::fabs(double(bf16_to_float(got[i])) - bf16_to_float(want[i]));
    worst = std::max(worst, ulps);
    if (ulps <= 1) continue;
    if (diff <= 1e-6 * v_scale) {
      floored++;
    } else if (++misses <= 5) {
      ADD_FAILURE() << "out[" << i << "]: emulated " << bf16_to_float(got[i]) << ", cpu "
                    << bf16_to_float(want[i]) << " (" << ulps << " ulps)";
    }
  }
  EXPECT_EQ(misses, 0) << "out: " << misses << " of " << got.size() << " values off";
  return {worst, floored};
}

struct GradientError {
  int64_t ulps = 0;       // largest bf16 ulp distance
  double relative = 0.0;  // largest |got - want| / G
};

// One part (q, k or v) of dqkv: |got - want| ≤ δ + 2^-7·max(|got|, |want|) with δ = 1e-5·G,
// G = max |want| over the part (the gradient's scale).
GradientError check_gradient(const Case& c, const std::vector<bf16>& got,
                             const std::vector<bf16>& want, int part, const char* what) {
  const int C = c.NH * c.HS;
  auto each = [&](auto&& visit) {
    for (size_t row = 0; row < size_t(c.B) * c.T; row++) {
      for (int e = 0; e < C; e++) visit(row * 3 * C + size_t(part) * C + e);
    }
  };
  double scale = 0;
  each([&](size_t i) { scale = std::max(scale, std::fabs(double(bf16_to_float(want[i])))); });
  const double delta = 1e-5 * scale;
  GradientError error;
  int misses = 0;
  each([&](size_t i) {
    const double g = bf16_to_float(got[i]), w = bf16_to_float(want[i]);
    const double rounding = std::ldexp(std::max(std::fabs(g), std::fabs(w)), -7);
    const double diff = std::fabs(g - w);
    error.ulps = std::max(error.ulps, bf16_ulps(got[i], want[i]));
    if (scale > 0) error.relative = std::max(error.relative, diff / scale);
    if (!(diff <= delta + rounding) && ++misses <= 5) {
      ADD_FAILURE() << what << "[" << i << "]: emulated " << g << ", cpu " << w << " (gradient"
                    << " scale " << scale << ")";
    }
  });
  EXPECT_EQ(misses, 0) << what << ": " << misses << " values off";
  return error;
}

TEST(CudaAttention, ForwardAndBackwardMatchCpu) {
  BackendPair pair("openblas");  // fp32 probabilities, as these kernels (top of file)
  Rng rng(3);
  for (const Case& c : kCases) {
    for (const bool causal : {false, true}) {
      for (const bool masked : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "B=" << c.B << " T=" << c.T << " NH=" << c.NH << " HS="
                                          << c.HS << " causal=" << causal << " masked=" << masked);
        const AttentionInputs in(pair, rng, c, masked);
        pair.cpu->attention_forward(in.out.cpu(), in.lse.cpu(), in.x.cpu(), in.mask_cpu, causal,
                                    c.B, c.T, c.NH, c.HS);
        pair.cpu->attention_backward(in.dx.cpu(), in.dy.cpu(), in.out.cpu(), in.x.cpu(),
                                     in.lse.cpu(), in.mask_cpu, causal, c.B, c.T, c.NH, c.HS);
        pair.emulated->attention_forward(in.out.emulated(), in.lse.emulated(), in.x.emulated(),
                                         in.mask_emulated, causal, c.B, c.T, c.NH, c.HS);
        pair.emulated->attention_backward(in.dx.emulated(), in.dy.emulated(), in.out.emulated(),
                                          in.x.emulated(), in.lse.emulated(), in.mask_emulated,
                                          causal, c.B, c.T, c.NH, c.HS);

        const auto got_out = in.out.from_emulated();
        const auto got_lse = in.lse.from_emulated();
        const auto got_dx = in.dx.from_emulated();
        const double lse_diff = check_lse(got_lse, in.lse.from_cpu());
        const auto [out_ulps, out_floor] = check_out(got_out, in.out.from_cpu(), in.qkv, c);
        const auto want_dx = in.dx.from_cpu();
        const GradientError dq = check_gradient(c, got_dx, want_dx, 0, "dq");
        const GradientError dk = check_gradient(c, got_dx, want_dx, 1, "dk");
        const GradientError dv = check_gradient(c, got_dx, want_dx, 2, "dv");
        std::printf(
            "  B=%d T=%d NH=%d HS=%d causal=%d masked=%d: |dlse| %.1e; out %lld ulp (%d past 1 "
            "ulp, within the floor); dq %lld ulp, %.1e of G; dk %lld ulp, %.1e; dv %lld ulp, "
            "%.1e\n",
            c.B, c.T, c.NH, c.HS, int(causal), int(masked), lse_diff,
            static_cast<long long>(out_ulps), out_floor, static_cast<long long>(dq.ulps),
            dq.relative, static_cast<long long>(dk.ulps), dk.relative,
            static_cast<long long>(dv.ulps), dv.relative);

        expect_unseen_rows_zero(c, in, causal, got_out, got_lse, got_dx);
      }
    }
  }
}

TEST(CudaAttention, NullGradientIsSkipped) {
  BackendPair pair("openblas");  // fp32 probabilities, as these kernels (top of file)
  Rng rng(5);
  const Case c{1, 5, 1, 8};
  const size_t qkv_count = size_t(c.T) * 3 * c.HS;
  Mirrored<bf16> x(pair, random_values<bf16>(rng, qkv_count)), out(pair, size_t(c.T) * c.HS),
      dy(pair, random_values<bf16>(rng, size_t(c.T) * c.HS));
  Mirrored<float> lse(pair, size_t(c.T));
  pair.emulated->attention_forward(out.emulated(), lse.emulated(), x.emulated(), nullptr, true, c.B,
                                   c.T, c.NH, c.HS);
  const auto launches = pair.emulated->counters().launches;
  pair.emulated->attention_backward(nullptr, dy.emulated(), out.emulated(), x.emulated(),
                                    lse.emulated(), nullptr, true, c.B, c.T, c.NH, c.HS);
  EXPECT_EQ(pair.emulated->counters().launches, launches);
}

TEST(CudaAttention, RejectsHeadSizeBeyondLimit) {
  BackendPair pair("openblas");  // fp32 probabilities, as these kernels (top of file)
  const Case c{1, 2, 1, 264};
  Mirrored<bf16> x(pair, size_t(c.T) * 3 * c.HS), out(pair, size_t(c.T) * c.HS);
  Mirrored<float> lse(pair, size_t(c.T));
  EXPECT_THROW(pair.emulated->attention_forward(out.emulated(), lse.emulated(), x.emulated(),
                                                nullptr, false, c.B, c.T, c.NH, c.HS),
               Error);
}

}  // namespace
}  // namespace collage::test
