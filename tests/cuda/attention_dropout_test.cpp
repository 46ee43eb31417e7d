// attention_forward_dropout / attention_backward_dropout (kernels/attention.cu) under the host
// emulator against the cpu backend, with the mask of the same (seed, offset): both draw it from
// numerics/elementwise_math.h's Philox, so it is the same mask, and the results differ only by
// summation order (against the cpu's OpenBLAS engine, whose probabilities are fp32 as these
// kernels' are: tests/cuda/attention_test.cpp). Tolerances and their reasons as there: lse 1e-5
// absolute; out 1 bf16 ulp, or 1e-6·max|v| where out ≈ 0 from cancellation; each gradient
// element |got - want| ≤ 1e-5·G + 2^-7·max(|got|, |want|), G the largest gradient of its part.
// A different mask would be far outside these (a dropped probability is a 1/(1 - p)-sized
// change of its term). And p = 0 through the dropout entries gives the plain ops' bits.
#include <cstdio>
#include <limits>

#include "cuda_test_util.h"

namespace collage::test {
namespace {

struct Case {
  int B, T, NH, HS;
};
// Head sizes 64 and 128 run on the tensor-core kernels (tests/cuda/flash_attention_test.cpp);
// these are the SIMT kernels' sizes.
const Case kCases[] = {{1, 1, 1, 8}, {2, 13, 3, 24}, {1, 70, 2, 96}, {2, 33, 1, 40}};

std::vector<int32_t> make_mask(Rng& rng, const Case& c) {
  std::vector<int32_t> mask(size_t(c.B) * c.T);
  for (auto& m : mask) m = rng.integer(0, 3) != 0;
  mask[0] = 1;
  return mask;
}

void check_lse(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); i++) {
    if (std::isinf(want[i])) {
      EXPECT_EQ(got[i], want[i]) << "lse[" << i << "]";
    } else {
      EXPECT_NEAR(got[i], want[i], 1e-5) << "lse[" << i << "]";
    }
  }
}

int64_t check_out(const std::vector<bf16>& got, const std::vector<bf16>& want, double v_scale) {
  int64_t worst = 0;
  int misses = 0;
  for (size_t i = 0; i < got.size(); i++) {
    const int64_t ulps = bf16_ulps(got[i], want[i]);
    worst = std::max(worst, ulps);
    const double diff = std::fabs(double(bf16_to_float(got[i])) - bf16_to_float(want[i]));
    if (ulps > 1 && diff > 1e-6 * v_scale && ++misses <= 5) {
      ADD_FAILURE() << "out[" << i << "]: emulated " << bf16_to_float(got[i]) << ", cpu "
                    << bf16_to_float(want[i]);
    }
  }
  EXPECT_EQ(misses, 0);
  return worst;
}

// One part (q, k or v) of dqkv; returns the largest ulp distance.
int64_t check_gradient(const Case& c, const std::vector<bf16>& got, const std::vector<bf16>& want,
                       int part, const char* what) {
  const int C = c.NH * c.HS;
  std::vector<size_t> indices;
  for (size_t row = 0; row < size_t(c.B) * c.T; row++) {
    for (int e = 0; e < C; e++) indices.push_back(row * 3 * C + size_t(part) * C + e);
  }
  double scale = 0;
  for (size_t i : indices) scale = std::max(scale, std::fabs(double(bf16_to_float(want[i]))));
  int64_t worst = 0;
  int misses = 0;
  for (size_t i : indices) {
    const double g = bf16_to_float(got[i]), w = bf16_to_float(want[i]);
    worst = std::max(worst, bf16_ulps(got[i], want[i]));
    const double bound = 1e-5 * scale + std::ldexp(std::max(std::fabs(g), std::fabs(w)), -7);
    if (!(std::fabs(g - w) <= bound) && ++misses <= 5)
      ADD_FAILURE() << what << "[" << i << "]: emulated " << g << ", cpu " << w;
  }
  EXPECT_EQ(misses, 0) << what;
  return worst;
}

TEST(CudaAttentionDropout, ForwardAndBackwardMatchCpu) {
  BackendPair pair("openblas");  // fp32 probabilities, as these kernels (top of file)
  Rng rng(5);
  for (const Case& c : kCases) {
    for (const bool causal : {false, true}) {
      for (const float p : {0.1f, 0.5f}) {
        SCOPED_TRACE(::testing::Message() << "B=" << c.B << " T=" << c.T << " NH=" << c.NH
                                          << " HS=" << c.HS << " causal=" << causal << " p=" << p);
        const int C = c.NH * c.HS;
        const size_t qkv_count = size_t(c.B) * c.T * 3 * C, out_count = size_t(c.B) * c.T * C;
        const auto qkv = random_values<bf16>(rng, qkv_count, 1.5);
        // NaNs, which the backward writes over without reading them (backend.h).
        const std::vector<bf16> dqkv0(qkv_count,
                                      float_to_bf16(std::numeric_limits<float>::quiet_NaN()));
        const uint64_t seed = 0x5eed0000000000ffull, offset = uint64_t(rng.integer(0, 1 << 30));
        Mirrored<bf16> x(pair, qkv), out(pair, out_count), dx(pair, dqkv0);
        Mirrored<bf16> dy(pair, random_values<bf16>(rng, out_count));
        Mirrored<float> lse(pair, size_t(c.B) * c.NH * c.T);
        Mirrored<int32_t> key_mask(pair, make_mask(rng, c));
        pair.cpu->attention_forward_dropout(out.cpu(), lse.cpu(), x.cpu(), key_mask.cpu(), causal,
                                            c.B, c.T, c.NH, c.HS, p, seed, offset);
        pair.cpu->attention_backward_dropout(dx.cpu(), dy.cpu(), out.cpu(), x.cpu(), lse.cpu(),
                                             key_mask.cpu(), causal, c.B, c.T, c.NH, c.HS, p, seed,
                                             offset);
        pair.emulated->attention_forward_dropout(out.emulated(), lse.emulated(), x.emulated(),
                                                 key_mask.emulated(), causal, c.B, c.T, c.NH, c.HS,
                                                 p, seed, offset);
        pair.emulated->attention_backward_dropout(dx.emulated(), dy.emulated(), out.emulated(),
                                                  x.emulated(), lse.emulated(), key_mask.emulated(),
                                                  causal, c.B, c.T, c.NH, c.HS, p, seed, offset);

        check_lse(lse.from_emulated(), lse.from_cpu());
        double v_scale = 0;
        for (size_t row = 0; row < size_t(c.B) * c.T; row++) {
          for (int e = 0; e < C; e++) {
            v_scale =
                std::max(v_scale, std::fabs(double(bf16_to_float(qkv[row * 3 * C + 2 * C + e]))));
          }
        }
        const int64_t out_ulps = check_out(out.from_emulated(), out.from_cpu(), v_scale);
        const auto got = dx.from_emulated(), want = dx.from_cpu();
        const int64_t dq = check_gradient(c, got, want, 0, "dq");
        const int64_t dk = check_gradient(c, got, want, 1, "dk");
        const int64_t dv = check_gradient(c, got, want, 2, "dv");
        std::printf(
            "  B=%d T=%d NH=%d HS=%d causal=%d p=%.1f: out %lld ulp, dq %lld, dk %lld, "
            "dv %lld ulp\n",
            c.B, c.T, c.NH, c.HS, int(causal), p, static_cast<long long>(out_ulps),
            static_cast<long long>(dq), static_cast<long long>(dk), static_cast<long long>(dv));
      }
    }
  }
}

// p = 0 through the dropout entries: the plain kernels' bits (the factor is 1, never drawn).
TEST(CudaAttentionDropout, ZeroProbabilityGivesThePlainOpsBits) {
  BackendPair pair("openblas");  // fp32 probabilities, as these kernels (top of file)
  Rng rng(6);
  const Case c{2, 33, 2, 24};
  const int C = c.NH * c.HS;
  const size_t qkv_count = size_t(c.B) * c.T * 3 * C, out_count = size_t(c.B) * c.T * C;
  Backend& be = *pair.emulated;
  const Mirrored<bf16> x(pair, random_values<bf16>(rng, qkv_count)),
      dy(pair, random_values<bf16>(rng, out_count));
  const Mirrored<bf16> out_a(pair, out_count), out_b(pair, out_count), dx_a(pair, qkv_count),
      dx_b(pair, qkv_count);
  const Mirrored<float> lse_a(pair, size_t(c.B) * c.NH * c.T),
      lse_b(pair, size_t(c.B) * c.NH * c.T);
  be.attention_forward(out_a.emulated(), lse_a.emulated(), x.emulated(), nullptr, true, c.B, c.T,
                       c.NH, c.HS);
  be.attention_backward(dx_a.emulated(), dy.emulated(), out_a.emulated(), x.emulated(),
                        lse_a.emulated(), nullptr, true, c.B, c.T, c.NH, c.HS);
  be.attention_forward_dropout(out_b.emulated(), lse_b.emulated(), x.emulated(), nullptr, true, c.B,
                               c.T, c.NH, c.HS, 0.0f, 1, 2);
  be.attention_backward_dropout(dx_b.emulated(), dy.emulated(), out_b.emulated(), x.emulated(),
                                lse_b.emulated(), nullptr, true, c.B, c.T, c.NH, c.HS, 0.0f, 1, 2);
  expect_same_bits(out_b.from_emulated(), out_a.from_emulated(), "out");
  expect_same_bits(lse_b.from_emulated(), lse_a.from_emulated(), "lse");
  expect_same_bits(dx_b.from_emulated(), dx_a.from_emulated(), "dqkv");
}

}  // namespace
}  // namespace collage::test
