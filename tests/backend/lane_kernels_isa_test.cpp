// The AVX-512 compilation of the cpu's lane kernels (src/backend/cpu/lane_kernels.h: elementwise,
// LayerNorm, cross-entropy) against the baseline one (AVX2 in Release), bit for bit, in both
// storage types, on 2 threads, with ragged tails and, for the elementwise ops and one LayerNorm
// row, NaN, ±inf, subnormals and ±0 among the inputs. The other backend tests check the kernels'
// values in whichever compilation the CPU chooses. Skips, saying why, where the CPU cannot run
// AVX-512 or the build has no AVX-512 compilation.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/cpu/lane_kernels.h"
#include "backend_test_util.h"

namespace collage::test {
namespace {

using cpu::CpuContext;
using cpu::CpuIsa;

// One run's outputs, as bytes.
using Outputs = std::vector<std::vector<uint8_t>>;

template <typename T>
std::vector<uint8_t> bytes_of(const std::vector<T>& v) {
  std::vector<uint8_t> out(v.size() * sizeof(T));
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

// Runs `op` with each compilation on 2 threads and expects the same bytes from both.
void expect_same_bits(const std::function<Outputs(CpuContext&)>& op) {
  Outputs results[2];
  const CpuIsa isas[2] = {CpuIsa::baseline, CpuIsa::avx512};
  for (int k = 0; k < 2; k++) {
    CpuContext cx;
    cx.threads = 2;
    cx.isa = isas[k];
    results[k] = op(cx);
  }
  ASSERT_EQ(results[0].size(), results[1].size());
  for (size_t b = 0; b < results[0].size(); b++) {
    const std::vector<uint8_t>&base = results[0][b], &wide = results[1][b];
    ASSERT_EQ(base.size(), wide.size()) << "output " << b;
    size_t first = 0;
    while (first < base.size() && base[first] == wide[first]) first++;
    EXPECT_EQ(first, base.size()) << "output " << b << ": the compilations part at byte " << first
                                  << " of " << base.size();
  }
}

// n values ~ N(0, scale²), every 97th one special (NaN, ±inf, a subnormal, ±0, huge).
template <typename S>
std::vector<S> values_with_specials(Rng& rng, size_t n, double scale) {
  std::vector<S> v = random_values<S>(rng, n, scale);
  const double specials[] = {std::numeric_limits<double>::quiet_NaN(),
                             INFINITY,
                             -INFINITY,
                             1e-40,
                             -1e-39,
                             0.0,
                             -0.0,
                             3e38};
  for (size_t i = 0, k = 0; i < n; i += 97, k++) v[i] = Storage<S>::from(specials[k % 8]);
  return v;
}

template <typename S>
class LaneKernelsIsa : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = cpu::why_no_avx512(); !why.empty()) GTEST_SKIP() << why;
  }
};
using StorageTypes = ::testing::Types<bf16, float>;
TYPED_TEST_SUITE(LaneKernelsIsa, StorageTypes);

// Above the ops' parallel threshold (2^15), with a tail that fills no lane register.
constexpr int64_t kElements = (1 << 15) + 1037;

TYPED_TEST(LaneKernelsIsa, ElementwiseOps) {
  using S = TypeParam;
  Rng rng(11);
  const auto a = values_with_specials<S>(rng, kElements, 3.0);
  const auto b = values_with_specials<S>(rng, kElements, 1.0);
  const auto y = random_values<S>(rng, kElements, 0.5);  // tanh outputs, |y| < 1 mostly
  expect_same_bits([&](CpuContext& cx) {
    Outputs outs;
    std::vector<S> out(kElements), acc = b, scaled = a;
    cpu::gelu_forward(cx, out.data(), a.data(), kElements);
    outs.push_back(bytes_of(out));
    cpu::gelu_backward(cx, out.data(), a.data(), b.data(), kElements);
    outs.push_back(bytes_of(out));
    cpu::gelu_erf_forward(cx, out.data(), a.data(), kElements);
    outs.push_back(bytes_of(out));
    cpu::gelu_erf_backward(cx, out.data(), a.data(), b.data(), kElements);
    outs.push_back(bytes_of(out));
    cpu::tanh_forward(cx, out.data(), a.data(), kElements);
    outs.push_back(bytes_of(out));
    cpu::tanh_backward(cx, out.data(), y.data(), b.data(), kElements);
    outs.push_back(bytes_of(out));
    cpu::add(cx, out.data(), a.data(), b.data(), kElements);
    outs.push_back(bytes_of(out));
    cpu::accumulate(cx, acc.data(), a.data(), kElements);
    outs.push_back(bytes_of(acc));
    cpu::scale(cx, scaled.data(), 0.37f, kElements);
    outs.push_back(bytes_of(scaled));
    return outs;
  });
}

TYPED_TEST(LaneKernelsIsa, LayerNorm) {
  using S = TypeParam;
  const int64_t N = 37;
  const int C = 777;  // 48 AVX-512 registers of fp32 and a tail of 9
  Rng rng(12);
  auto inp = random_values<S>(rng, size_t(N) * C, 2.0);
  for (int c = 0; c < C; c++) inp[c] = Storage<S>::from(Storage<S>::to(inp[c]) + 5.0);  // offset
  inp[size_t(3) * C + 100] = Storage<S>::from(std::numeric_limits<double>::quiet_NaN());
  inp[size_t(4) * C + 7] = Storage<S>::from(-INFINITY);
  const auto weight = random_values<S>(rng, C), bias = random_values<S>(rng, C, 0.1);
  const auto dout = random_values<S>(rng, size_t(N) * C);
  const auto dinp0 = random_values<S>(rng, size_t(N) * C, 0.1);
  const auto dweight0 = random_values<S>(rng, C, 0.1), dbias0 = random_values<S>(rng, C, 0.1);
  for (const bool with_bias : {true, false}) {
    SCOPED_TRACE(with_bias ? "with bias" : "without bias");
    expect_same_bits([&](CpuContext& cx) {
      std::vector<S> out(inp.size()), dinp = dinp0, dweight = dweight0, dbias = dbias0;
      std::vector<float> mean(N), rstd(N);
      cpu::layernorm_forward(cx, out.data(), mean.data(), rstd.data(), inp.data(), weight.data(),
                             with_bias ? bias.data() : nullptr, N, C, 1e-5f);
      cpu::layernorm_backward(cx, dinp.data(), dweight.data(), with_bias ? dbias.data() : nullptr,
                              dout.data(), inp.data(), weight.data(), mean.data(), rstd.data(), N,
                              C);
      return Outputs{bytes_of(out),  bytes_of(mean),    bytes_of(rstd),
                     bytes_of(dinp), bytes_of(dweight), bytes_of(dbias)};
    });
  }
}

TYPED_TEST(LaneKernelsIsa, CrossEntropy) {
  using S = TypeParam;
  const int64_t N = 9;
  const int V = 3001, Vp = 3072, Vl = Vp / 2;  // padding; two shards, the second ragged
  Rng rng(13);
  const auto logits = random_values<S>(rng, size_t(N) * Vp, 4.0);
  std::vector<int32_t> targets(N);
  for (int64_t n = 0; n < N; n++) targets[n] = n == 2 ? -1 : rng.integer(0, V - 1);
  targets[5] = V - 1;
  // Each shard's logits, (N, Vl).
  std::vector<std::vector<S>> shards(2, std::vector<S>(size_t(N) * Vl));
  for (int s = 0; s < 2; s++)
    for (int64_t n = 0; n < N; n++)
      std::memcpy(&shards[s][n * Vl], &logits[n * Vp + s * Vl], Vl * sizeof(S));
  expect_same_bits([&](CpuContext& cx) {
    std::vector<float> losses(N), lse(N);
    std::vector<S> dlogits(logits.size());
    cpu::cross_entropy_forward(cx, losses.data(), logits.data(), targets.data(), N, V, Vp,
                               lse.data());
    cpu::cross_entropy_backward(cx, dlogits.data(), logits.data(), targets.data(), N, V, Vp,
                                0.125f);
    Outputs outs{bytes_of(losses), bytes_of(lse), bytes_of(dlogits)};
    // The vocab-parallel stages, each shard's "all-reduce" a sum on the host.
    std::vector<float> row_max(N, -INFINITY), sums(2 * N, 0.0f);
    for (int s = 0; s < 2; s++) {
      std::vector<float> shard_max(N);
      cpu::cross_entropy_shard_max(cx, shard_max.data(), shards[s].data(), N, V, Vl,
                                   int64_t(s) * Vl);
      outs.push_back(bytes_of(shard_max));
      for (int64_t n = 0; n < N; n++) row_max[n] = std::max(row_max[n], shard_max[n]);
    }
    for (int s = 0; s < 2; s++) {
      std::vector<float> shard_sums(2 * N);
      cpu::cross_entropy_shard_sums(cx, shard_sums.data(), shards[s].data(), targets.data(),
                                    row_max.data(), N, V, Vl, int64_t(s) * Vl);
      outs.push_back(bytes_of(shard_sums));
      for (int64_t i = 0; i < 2 * N; i++) sums[i] += shard_sums[i];
    }
    std::vector<float> shard_losses(N), shard_lse(N);
    cpu::cross_entropy_shard_loss(cx, shard_losses.data(), shard_lse.data(), row_max.data(),
                                  sums.data(), targets.data(), N);
    outs.push_back(bytes_of(shard_losses));
    outs.push_back(bytes_of(shard_lse));
    for (int s = 0; s < 2; s++) {
      std::vector<S> dshard(shards[s].size());
      cpu::cross_entropy_shard_backward(cx, dshard.data(), shards[s].data(), targets.data(),
                                        shard_lse.data(), N, V, Vl, int64_t(s) * Vl, 0.125f);
      outs.push_back(bytes_of(dshard));
    }
    return outs;
  });
}

// The backend runs the compilation chosen for the process, and says which.
TEST(LaneKernelsChoice, NamesTheCompilationItRuns) {
  const cpu::IsaChoice& chosen = cpu::chosen_lane_kernels();
  const char* variable = std::getenv("COLLAGE_CPU_KERNELS");
  const std::string setting = variable && *variable ? variable : "auto";
  const bool avx512 = setting != "baseline" && cpu::why_no_avx512().empty();
  EXPECT_EQ(chosen.isa, avx512 ? CpuIsa::avx512 : CpuIsa::baseline);
  EXPECT_NE(chosen.description.find(avx512 ? "AVX-512" : cpu::baseline::lanes::lanes_isa()),
            std::string::npos)
      << chosen.description;
  EXPECT_NE(chosen.description.find(setting), std::string::npos) << chosen.description;
}

}  // namespace
}  // namespace collage::test
