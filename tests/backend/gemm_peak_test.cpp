// The cpu backend's GEMM peak (src/backend/cpu/gemm_peak.h): which engine's rate is measured
// for each parallel.cpu_gemm setting and storage type (the one the backend multiplies with),
// and that each engine's measurement gives a rate and says how it was taken. No test here
// compares a rate with a time: only that the measurement ran and what it names.
#include "backend/cpu/gemm_peak.h"

#include <cmath>
#include <string>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/onednn_gemm.h"
#include "backend_test_util.h"

namespace collage::test {
namespace {

using cpu::GemmEngine;

GemmEngine engine_of(const std::string& setting, bool bf16_storage) {
  return cpu::gemm_engine(cpu::choose_cpu_gemm(setting, bf16_storage), bf16_storage);
}

// Why the oneDNN bf16 peak cannot be measured here; empty where it can.
std::string without_onednn_bf16() {
  const cpu::OnednnSupport& support = cpu::onednn_support();
  if (support.bf16_matmul) return "";
  return "oneDNN has no bf16 matmul on this CPU (its ISA is " + support.isa +
         "; AVX-512 needed): the cpu backend multiplies with OpenBLAS here";
}

// How the backend's gemm_engine() begins for `engine`.
std::string backend_line(GemmEngine engine) {
  return engine == GemmEngine::openblas_sgemm ? "OpenBLAS sgemm on fp32-widened tiles"
                                              : cpu::gemm_engine_name(engine);
}

void expect_measured(const cpu::GemmPeak& peak, GemmEngine engine) {
  EXPECT_EQ(peak.engine, engine);
  EXPECT_TRUE(std::isfinite(peak.flops)) << peak.flops;
  EXPECT_GT(peak.flops, 0.0);
}

// `measurement` is `prefix` and then the number of timed repetitions, 3 to 10.
void expect_prefix(const std::string& measurement, const std::string& prefix) {
  ASSERT_EQ(measurement.substr(0, prefix.size()), prefix);
  const int repetitions = std::stoi(measurement.substr(prefix.size()));
  EXPECT_GE(repetitions, 3) << measurement;
  EXPECT_LE(repetitions, 10) << measurement;
  EXPECT_EQ(measurement.substr(prefix.size()), std::to_string(repetitions)) << measurement;
}

TEST(GemmPeak, EngineIsTheOneTheBackendMultipliesWith) {
  const bool onednn_bf16 = cpu::onednn_support().bf16_matmul;
  EXPECT_EQ(engine_of("openblas", true), GemmEngine::openblas_sgemm);
  EXPECT_EQ(engine_of("openblas", false), GemmEngine::openblas_sgemm);
  EXPECT_EQ(engine_of("auto", true),
            onednn_bf16 ? GemmEngine::onednn_bf16 : GemmEngine::openblas_sgemm);
  EXPECT_EQ(engine_of("auto", false), GemmEngine::openblas_sgemm);  // the fp32 reference
  EXPECT_EQ(engine_of("onednn", false), GemmEngine::onednn_f32);
  if (onednn_bf16) EXPECT_EQ(engine_of("onednn", true), GemmEngine::onednn_bf16);
  // The backend's own "GEMMs:" line names the same engine.
  for (const char* setting : {"auto", "openblas", "onednn"}) {
    SCOPED_TRACE(setting);
    const std::string fp32 = make_cpu_backend_fp32(1, setting)->gemm_engine();
    EXPECT_EQ(fp32.find(backend_line(engine_of(setting, false))), 0u) << fp32;
    if (std::string(setting) == "onednn" && !onednn_bf16) continue;  // refused (matmul_test)
    const std::string bf16 = make_cpu_backend(1, setting)->gemm_engine();
    EXPECT_EQ(bf16.find(backend_line(engine_of(setting, true))), 0u) << bf16;
  }
}

TEST(GemmPeak, EnginesHaveDistinctNames) {
  EXPECT_STREQ(cpu::gemm_engine_name(GemmEngine::openblas_sgemm), "OpenBLAS fp32 sgemm");
  EXPECT_STREQ(cpu::gemm_engine_name(GemmEngine::onednn_bf16), "oneDNN bf16 matmul");
  EXPECT_STREQ(cpu::gemm_engine_name(GemmEngine::onednn_f32), "oneDNN f32 matmul");
}

TEST(GemmPeak, SgemmIsMeasuredPerThread) {
  const cpu::GemmPeak peak = cpu::measure_gemm_peak(GemmEngine::openblas_sgemm, 1);
  expect_measured(peak, GemmEngine::openblas_sgemm);
  expect_prefix(peak.measurement, "1024^3 per thread, 1 thread, best of ");
}

TEST(GemmPeak, OnednnBf16IsOneMatmulOverTheBackendsThreads) {
  if (const std::string why = without_onednn_bf16(); !why.empty()) GTEST_SKIP() << why;
  const cpu::GemmPeak peak = cpu::measure_gemm_peak(GemmEngine::onednn_bf16, 2);
  expect_measured(peak, GemmEngine::onednn_bf16);
  expect_prefix(peak.measurement, "2048x1024x1024, 1024^3 per thread, 2 threads, ISA " +
                                      cpu::onednn_support().isa + ", best of ");
}

// oneDNN's f32 matmul exists on every CPU oneDNN runs on: the fp32 reference backend with
// parallel.cpu_gemm onednn multiplies with it.
TEST(GemmPeak, OnednnF32IsMeasuredAnywhere) {
  const cpu::GemmPeak peak = cpu::measure_gemm_peak(GemmEngine::onednn_f32, 1);
  expect_measured(peak, GemmEngine::onednn_f32);
  expect_prefix(peak.measurement, "1024x1024x1024, 1024^3 per thread, 1 thread, ISA " +
                                      cpu::onednn_support().isa + ", best of ");
}

}  // namespace
}  // namespace collage::test
