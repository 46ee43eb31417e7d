// matmul_forward / matmul_backward against float64 loops, and by finite differences, for both
// of the cpu backend's GEMM engines (parallel.cpu_gemm): OpenBLAS on widened tiles and oneDNN.
// oneDNN 2.6 has bf16 matmuls only on AVX-512 CPUs: elsewhere its bf16 cases skip, saying
// so, and its fp32 cases still run the same primitive, stride and accumulation code.
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/onednn_gemm.h"
#include "backend_test_util.h"

namespace collage::test {
namespace {

struct Shape {
  int N, C, OC;
};
// Sizes that are multiples of nothing (K = C not a multiple of 32), one output channel, and
// one with OC large enough for several channel tiles per thread (the tiles are ~512 wide).
const Shape kShapes[] = {{7, 13, 19}, {1, 5, 3}, {33, 45, 1}, {9, 21, 1100}};

// Every GEMM engine with both storage types (backend_test_util.h).
using Engines = ::testing::Types<GemmEngine<bf16, false>, GemmEngine<float, false>,
                                 GemmEngine<bf16, true>, GemmEngine<float, true>>;

template <typename E>
class MatmulTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = E::unavailable(); !why.empty()) GTEST_SKIP() << why;
  }
};
TYPED_TEST_SUITE(MatmulTest, Engines, GemmEngineNames);

TYPED_TEST(MatmulTest, ForwardMatchesFloat64) {
  using S = typename TypeParam::Storage;
  auto backend = TypeParam::make();
  Rng rng(1);
  for (const Shape& s : kShapes) {
    for (bool with_bias : {true, false}) {
      const auto inp = random_values<S>(rng, size_t(s.N) * s.C);
      const auto weight = random_values<S>(rng, size_t(s.OC) * s.C);
      const auto bias = random_values<S>(rng, s.OC);
      DeviceBuffer<S, BackendT<S>> d_inp(*backend, inp), d_weight(*backend, weight),
          d_bias(*backend, bias), d_out(*backend, size_t(s.N) * s.OC);
      backend->matmul_forward(d_out.get(), d_inp.get(), d_weight.get(),
                              with_bias ? d_bias.get() : nullptr, s.N, s.C, s.OC);

      const auto x = to_double(inp), w = to_double(weight), b = to_double(bias);
      std::vector<double> want(size_t(s.N) * s.OC);
      double magnitude = 0;  // largest Σ|terms| of one output: scale of the fp32 sum's error
      for (int n = 0; n < s.N; n++) {
        for (int o = 0; o < s.OC; o++) {
          double acc = with_bias ? b[o] : 0, terms = std::fabs(acc);
          for (int c = 0; c < s.C; c++) {
            acc += x[n * s.C + c] * w[size_t(o) * s.C + c];
            terms += std::fabs(x[n * s.C + c] * w[size_t(o) * s.C + c]);
          }
          want[size_t(n) * s.OC + o] = acc;
          magnitude = std::max(magnitude, terms);
        }
      }
      // One rounding of the result; the fp32 sum of C ≤ 21 terms errs by far less than
      // 1e-5·Σ|terms|.
      expect_close(to_double(d_out.download()), want, result_rel<S>(), 1e-5 * magnitude, "out");
    }
  }
}

// dweight and dbias accumulate into buffers that already hold values (+=, one rounding); dinp
// is written over a buffer of NaNs, which must not be read.
TYPED_TEST(MatmulTest, BackwardWritesDinpAndAccumulatesParameterGradients) {
  using S = typename TypeParam::Storage;
  auto backend = TypeParam::make();
  Rng rng(2);
  for (const Shape& s : kShapes) {
    const auto inp = random_values<S>(rng, size_t(s.N) * s.C);
    const auto weight = random_values<S>(rng, size_t(s.OC) * s.C);
    const auto dout = random_values<S>(rng, size_t(s.N) * s.OC);
    const auto dinp0 = nan_values<S>(inp.size());
    const auto dweight0 = random_values<S>(rng, weight.size());
    const auto dbias0 = random_values<S>(rng, s.OC);
    DeviceBuffer<S, BackendT<S>> d_inp(*backend, inp), d_weight(*backend, weight),
        d_dout(*backend, dout), d_dinp(*backend, dinp0), d_dweight(*backend, dweight0),
        d_dbias(*backend, dbias0);
    backend->matmul_backward(d_dinp.get(), d_dweight.get(), d_dbias.get(), d_dout.get(),
                             d_inp.get(), d_weight.get(), s.N, s.C, s.OC);

    const auto x = to_double(inp), w = to_double(weight), g = to_double(dout);
    std::vector<double> dx(inp.size(), 0.0);
    auto dw = to_double(dweight0), db = to_double(dbias0);
    // Σ|terms| of each gradient entry: the scale of its fp32 sum's error.
    std::vector<double> dx_terms(dx.size()), dw_terms(dw.size()), db_terms(db.size());
    for (int n = 0; n < s.N; n++) {
      for (int o = 0; o < s.OC; o++) {
        const double go = g[size_t(n) * s.OC + o];
        db[o] += go;
        db_terms[o] += std::fabs(go);
        for (int c = 0; c < s.C; c++) {
          const double wv = w[size_t(o) * s.C + c], xv = x[size_t(n) * s.C + c];
          dx[size_t(n) * s.C + c] += go * wv;
          dx_terms[size_t(n) * s.C + c] += std::fabs(go * wv);
          dw[size_t(o) * s.C + c] += go * xv;
          dw_terms[size_t(o) * s.C + c] += std::fabs(go * xv);
        }
      }
    }
    // One rounding of Σ (dinp) or old + Σ; an fp32 sum of K ≤ 1100 terms errs by
    // ~√K·2^-24·Σ|terms|, well inside 1e-5·Σ|terms|.
    expect_close(to_double(d_dinp.download()), dx, result_rel<S>(), 1e-5 * max_abs(dx_terms),
                 "dinp");
    expect_close(to_double(d_dweight.download()), dw, result_rel<S>(), 1e-5 * max_abs(dw_terms),
                 "dweight");
    expect_close(to_double(d_dbias.download()), db, result_rel<S>(), 1e-5 * max_abs(db_terms),
                 "dbias");
  }
}

// A null gradient pointer skips that gradient; the others are unaffected.
TYPED_TEST(MatmulTest, NullGradientsAreSkipped) {
  using S = typename TypeParam::Storage;
  auto backend = TypeParam::make();
  Rng rng(3);
  const Shape s{6, 11, 17};
  const auto inp = random_values<S>(rng, size_t(s.N) * s.C);
  const auto weight = random_values<S>(rng, size_t(s.OC) * s.C);
  const auto dout = random_values<S>(rng, size_t(s.N) * s.OC);
  DeviceBuffer<S, BackendT<S>> d_inp(*backend, inp), d_weight(*backend, weight),
      d_dout(*backend, dout);
  // All three at once, as the reference for each alone.
  DeviceBuffer<S, BackendT<S>> all_dx(*backend, inp.size()), all_dw(*backend, weight.size()),
      all_db(*backend, size_t(s.OC));
  backend->matmul_backward(all_dx.get(), all_dw.get(), all_db.get(), d_dout.get(), d_inp.get(),
                           d_weight.get(), s.N, s.C, s.OC);
  for (int mask = 0; mask < 8; mask++) {
    DeviceBuffer<S, BackendT<S>> dx(*backend, inp.size()), dw(*backend, weight.size()),
        db(*backend, size_t(s.OC));
    backend->matmul_backward((mask & 1) ? dx.get() : nullptr, (mask & 2) ? dw.get() : nullptr,
                             (mask & 4) ? db.get() : nullptr, d_dout.get(), d_inp.get(),
                             d_weight.get(), s.N, s.C, s.OC);
    // A skipped gradient stays zero; a computed one equals the all-at-once result.
    EXPECT_TRUE(
        same_bits(dx.download(), (mask & 1) ? all_dx.download() : std::vector<S>(inp.size())));
    EXPECT_TRUE(
        same_bits(dw.download(), (mask & 2) ? all_dw.download() : std::vector<S>(weight.size())));
    EXPECT_TRUE(same_bits(db.download(), (mask & 4) ? all_db.download() : std::vector<S>(s.OC)));
  }
}

TEST(MatmulGradient, MatchesFiniteDifferencesAtFp32) {
  auto backend = make_cpu_backend_fp32(kFdThreads);
  Rng rng(4);
  const Shape s{5, 7, 9};
  auto inp = random_values<float>(rng, size_t(s.N) * s.C);
  auto weight = random_values<float>(rng, size_t(s.OC) * s.C);
  auto bias = random_values<float>(rng, s.OC);
  const auto loss_weights = random_weights<float>(rng, size_t(s.N) * s.OC);
  auto loss = [&](const std::vector<float>& x, const std::vector<float>& w,
                  const std::vector<float>& b) {
    DeviceBuffer<float, BackendT<float>> d_x(*backend, x), d_w(*backend, w), d_b(*backend, b),
        d_out(*backend, loss_weights.size());
    backend->matmul_forward(d_out.get(), d_x.get(), d_w.get(), d_b.get(), s.N, s.C, s.OC);
    return weighted_sum(d_out.download(), loss_weights);
  };
  DeviceBuffer<float, BackendT<float>> d_x(*backend, inp), d_w(*backend, weight),
      d_dout(*backend, from_double<float>(loss_weights)), dx(*backend, inp.size()),
      dw(*backend, weight.size()), db(*backend, bias.size());
  backend->matmul_backward(dx.get(), dw.get(), db.get(), d_dout.get(), d_x.get(), d_w.get(), s.N,
                           s.C, s.OC);
  expect_gradient_matches_differences([&](const auto& v) { return loss(v, weight, bias); }, inp,
                                      to_double(dx.download()), "dinp");
  expect_gradient_matches_differences([&](const auto& v) { return loss(inp, v, bias); }, weight,
                                      to_double(dw.download()), "dweight");
  expect_gradient_matches_differences([&](const auto& v) { return loss(inp, weight, v); }, bias,
                                      to_double(db.download()), "dbias");
}

// One oneDNN primitive per shape, created once and reused; the same call gives the same bits.
TEST(OnednnGemm, CachesOnePrimitivePerShapeAndRepeatsBitForBit) {
  cpu::OnednnGemm gemm(kThreads);
  Rng rng(5);
  const auto a = random_values<float>(rng, 7 * 13), b = random_values<float>(rng, 13 * 5);
  std::vector<float> c1(7 * 5), c2(7 * 5);
  auto run = [&](std::vector<float>& c, int64_t M) {
    gemm.matmul<float>(M, 5, 13, {a.data(), 13, 1}, {b.data(), 5, 1}, nullptr, {c.data(), 5, 1},
                       /*accumulate=*/false);
  };
  run(c1, 7);
  run(c2, 7);
  EXPECT_EQ(gemm.primitives_created(), 1);
  EXPECT_TRUE(same_bits(c1, c2));
  run(c2, 6);  // another shape: another primitive
  EXPECT_EQ(gemm.primitives_created(), 2);
}

TEST(CpuGemmChoice, AutoPicksOnednnOnlyWhereItMultipliesBf16) {
  const cpu::OnednnSupport& support = cpu::onednn_support();
  EXPECT_FALSE(support.isa.empty());
  EXPECT_EQ(cpu::choose_cpu_gemm("auto", true).onednn, support.bf16_matmul);
  EXPECT_FALSE(cpu::choose_cpu_gemm("auto", false).onednn);  // the fp32 reference stays
  EXPECT_FALSE(cpu::choose_cpu_gemm("openblas", true).onednn);
  EXPECT_TRUE(cpu::choose_cpu_gemm("onednn", false).onednn);  // oneDNN's f32 runs anywhere
  EXPECT_EQ(make_cpu_backend_fp32(1, "onednn")->gemm_engine().find("oneDNN f32 matmul"), 0u);
  EXPECT_EQ(make_cpu_backend(1, "openblas")->gemm_engine().find("OpenBLAS sgemm"), 0u);
  if (support.bf16_matmul) {
    EXPECT_TRUE(cpu::choose_cpu_gemm("onednn", true).onednn);
  } else {
    try {
      cpu::choose_cpu_gemm("onednn", true);
      FAIL() << "expected parallel.cpu_gemm: onednn to be refused on a CPU without bf16 matmul";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("parallel.cpu_gemm: onednn"), std::string::npos);
      EXPECT_NE(std::string(e.what()).find(support.isa), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace collage::test
