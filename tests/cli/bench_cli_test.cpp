// `collage bench`: one column per --shapes entry, the GEMM engine and its peak named, the
// optimizer loop and the lane kernels' compilation named (COLLAGE_CPU_OPTIMIZER and
// COLLAGE_CPU_KERNELS checked), the optimizer's bytes and rate, the
// step as the sum of the trainer's parts, and shapes that cannot run refused with the value
// named; encoders timed on a synthetic masked-LM batch; --profile's op families adding up to the
// step's launches, and on cpu to its ops.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>
#include <utility>

#include "run_collage.h"

namespace collage {
namespace {

const std::string kTiny = "configs/demo/gpt-tiny.yaml --set parallel.threads=1";

TEST(BenchCli, TimesEachShapeInAColumnAndNamesTheGemmEngine) {
  const CommandResult bench =
      run_collage("bench " + kTiny + " --shapes 2x16,1x32 --steps 1 --warmup 0");
  ASSERT_EQ(bench.exit_code, 0) << bench.output;
  EXPECT_NE(bench.output.find("| measure                      |       2 x 16 |       1 x 32 |"),
            std::string::npos)
      << bench.output;
  EXPECT_NE(bench.output.find("GEMMs: "), std::string::npos) << bench.output;
  for (const char* row : {"| optimizer GB moved", "| optimizer GB/s", "| tokens/s", "| MFU"})
    EXPECT_NE(bench.output.find(row), std::string::npos) << row << "\n" << bench.output;
}

// The optimizer's loop and the lane kernels: each compilation named, each variable checked.
TEST(BenchCli, NamesTheCompilationsThatRanAndRefusesAnUnknownOne) {
  const std::string bench = "bench " + kTiny + " --steps 1 --warmup 0";
  const CommandResult chosen = run_collage(bench);
  ASSERT_EQ(chosen.exit_code, 0) << chosen.output;
  const std::pair<std::string, std::string> choices[] = {
      {"COLLAGE_CPU_OPTIMIZER", "Optimizer loop: "},
      {"COLLAGE_CPU_KERNELS", "Elementwise, LayerNorm and cross-entropy kernels: "}};
  for (const auto& [variable, line] : choices) {
    SCOPED_TRACE(variable);
    EXPECT_NE(chosen.output.find(line), std::string::npos) << chosen.output;
    const CommandResult baseline = run_collage(bench, variable + "=baseline");
    ASSERT_EQ(baseline.exit_code, 0) << baseline.output;
    EXPECT_NE(baseline.output.find(line), std::string::npos) << baseline.output;
    EXPECT_NE(baseline.output.find("(" + variable + "=baseline)"), std::string::npos)
        << baseline.output;
    const CommandResult unknown = run_collage(bench, variable + "=sse");
    EXPECT_EQ(unknown.exit_code, 1) << unknown.output;
    EXPECT_NE(unknown.output.find(variable + "=sse: unknown value (valid: auto, avx512, baseline)"),
              std::string::npos)
        << unknown.output;
  }
}

// MFU is against the measured peak of the engine that multiplied (src/plan/model_flops.h): the
// footnote names the engine the "GEMMs:" line names, whichever parallel.cpu_gemm chose.
TEST(BenchCli, PeakIsTheRateOfTheGemmEngineThatRan) {
  for (const char* setting : {"auto", "openblas"}) {
    SCOPED_TRACE(setting);
    const CommandResult bench =
        run_collage("bench " + kTiny + " --set parallel.cpu_gemm=" + setting +
                    " --shapes 1x16 --steps 1 --warmup 0");
    ASSERT_EQ(bench.exit_code, 0) << bench.output;
    const bool onednn = bench.output.find("GEMMs: oneDNN bf16 matmul (") != std::string::npos;
    if (std::string(setting) == "openblas") EXPECT_FALSE(onednn) << bench.output;
    if (!onednn) EXPECT_NE(bench.output.find("GEMMs: OpenBLAS sgemm"), std::string::npos);
    EXPECT_NE(bench.output.find(onednn ? "\nPeak: cpu: oneDNN bf16 matmul measured at "
                                       : "\nPeak: cpu: OpenBLAS fp32 sgemm measured at "),
              std::string::npos)
        << bench.output;
  }
}

TEST(BenchCli, BadShapesAreRefusedNamingThem) {
  const CommandResult bad = run_collage("bench " + kTiny + " --shapes 2by16");
  EXPECT_EQ(bad.exit_code, 1) << bad.output;
  EXPECT_NE(bad.output.find("--shapes: '2by16' is not MICRO_BATCHxSEQ_LEN"), std::string::npos)
      << bad.output;
  const CommandResult long_one = run_collage("bench " + kTiny + " --shapes 1x100000");
  EXPECT_EQ(long_one.exit_code, 1) << long_one.output;
  EXPECT_NE(long_one.output.find("longer than model.max_position_embeddings"), std::string::npos)
      << long_one.output;
}

// The table row of `output` that starts with `row` ("| GEMMs ..."); empty without one.
std::string table_row(const std::string& output, const std::string& row) {
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);)
    if (line.rfind(row, 0) == 0) return line;
  return "";
}

// The number in the last column of the table row starting with `row`; -1 without one.
int64_t last_column(const std::string& output, const std::string& row) {
  const std::string line = table_row(output, row);
  if (line.empty()) return -1;
  const size_t end = line.find_last_not_of(" |");
  const size_t begin = line.find_last_of(" |", end) + 1;
  return std::stoll(line.substr(begin, end + 1 - begin));
}

// The number in column `column` (0: the first after the row's name) of the table row
// starting with `row`; NaN without one.
double table_number(const std::string& output, const std::string& row, int column) {
  const std::string line = table_row(output, row);
  if (line.empty()) return std::nan("");
  std::istringstream cells(line.substr(line.find('|', 1) + 1));
  std::string cell;
  for (int c = 0; c <= column; c++) std::getline(cells, cell, '|');
  return std::stod(cell);
}

// The step is what the trainer runs each step (src/train/trainer.cpp, train_step), part by part:
// zeroing the gradients, forward, backward, the gradient norm and the optimizer, each printed
// to 0.1 ms, their sum the step.
TEST(BenchCli, StepIsTheSumOfTheTrainersParts) {
  const CommandResult bench = run_collage("bench " + kTiny + " --shapes 2x16 --steps 2 --warmup 1");
  ASSERT_EQ(bench.exit_code, 0) << bench.output;
  double parts = 0;
  for (const char* row : {"| zero gradients ms", "| forward ms", "| backward ms",
                          "| gradient norm ms", "| optimizer ms"}) {
    const double ms = table_number(bench.output, row, 0);
    ASSERT_FALSE(std::isnan(ms)) << row << "\n" << bench.output;
    EXPECT_GE(ms, 0) << row << "\n" << bench.output;
    parts += ms;
  }
  EXPECT_NEAR(table_number(bench.output, "| step ms", 0), parts, 5 * 0.05 + 1e-9) << bench.output;
}

// --profile's families, and the last column (launches, or ops on cpu) of one's row.
constexpr const char* kFamilies[] = {
    "attention forward", "attention backward", "GEMMs", "layernorm", "GELU",
    "cross-entropy",     "optimizer",          "other"};
int64_t family_count(const std::string& output, const std::string& family) {
  std::string row = "| " + family;
  row.resize(30, ' ');  // the first column's width: not "| optimizer ms"
  return last_column(output, row + " |");
}

TEST(BenchCli, ProfileSplitsTheStepByOpFamily) {
  const CommandResult bench = run_collage(
      "bench " + kTiny +
      " --set parallel.backend=cuda-emulated --profile --steps 1 --warmup 0 --shapes 1x16");
  ASSERT_EQ(bench.exit_code, 0) << bench.output;
  EXPECT_NE(bench.output.find("Emulator time by op family, 1 x 16, per step"), std::string::npos)
      << bench.output;
  const int64_t launches = last_column(bench.output, "| kernel launches per step");
  ASSERT_GT(launches, 0) << bench.output;
  int64_t sum = 0;
  for (const char* family : kFamilies) {
    const int64_t n = family_count(bench.output, family);
    EXPECT_GT(n, 0) << family << "\n" << bench.output;  // the GPT step launches every family
    sum += n;
  }
  EXPECT_EQ(sum, launches) << bench.output;
  EXPECT_EQ(last_column(bench.output, "| total "), launches) << bench.output;
}

// On cpu every op is timed as it runs: gpt-tiny's 2 layers make known op counts per family,
// and the families' time lies inside the step's forward, backward and optimizer time.
TEST(BenchCli, ProfileOnCpuTimesEveryOpByFamily) {
  const CommandResult bench =
      run_collage("bench " + kTiny + " --profile --steps 1 --warmup 0 --shapes 2x16");
  ASSERT_EQ(bench.exit_code, 0) << bench.output;
  EXPECT_NE(bench.output.find("CPU time by op family, 2 x 16, per step"), std::string::npos)
      << bench.output;
  const auto ops = [&](const char* family) { return family_count(bench.output, family); };
  const int L = 2;  // gpt-tiny's n_layer
  // Forward and backward: qkv, projection, fc and fc projection per layer, and the LM head.
  EXPECT_EQ(ops("GEMMs"), 2 * (4 * L + 1)) << bench.output;
  EXPECT_EQ(ops("attention forward"), L) << bench.output;
  EXPECT_EQ(ops("attention backward"), L) << bench.output;
  EXPECT_EQ(ops("layernorm"), 2 * (2 * L + 1)) << bench.output;  // ln_1, ln_2 per layer; ln_f
  EXPECT_EQ(ops("GELU"), 2 * L) << bench.output;
  int64_t sum = 0;
  for (const char* family : kFamilies) {
    EXPECT_GT(ops(family), 0) << family << "\n" << bench.output;
    sum += ops(family);
  }
  EXPECT_EQ(last_column(bench.output, "| total "), sum) << bench.output;
  // Each op runs inside the timed forward, backward or optimizer: their total is at most the
  // step's (printed to 0.1 ms).
  const double step_ms = table_number(bench.output, "| step ms", 0);
  const double profiled_ms = table_number(bench.output, "| total ", 0);
  EXPECT_GT(profiled_ms, 0) << bench.output;
  EXPECT_LE(profiled_ms, step_ms + 0.1) << bench.output;
}

// BERT (and RoBERTa, the same model without NSP) on the cpu and through the cuda kernels.
TEST(BenchCli, TimesEncoderSteps) {
  const std::string bert =
      "bench configs/demo/bert-tiny.yaml --set parallel.threads=1 --steps 1 --warmup 0 "
      "--shapes 2x32";
  for (const std::string& backend : {"cpu", "cuda-emulated"}) {
    const CommandResult run = run_collage(bert + " --set parallel.backend=" + backend);
    ASSERT_EQ(run.exit_code, 0) << backend << "\n" << run.output;
    EXPECT_NE(run.output.find("BERT (masked LM + NSP, 20 labelled positions a sequence) L=2"),
              std::string::npos)
        << run.output;
    for (const char* row : {"| step ms", "| tokens/s", "| model GFLOP per step", "| MFU"})
      EXPECT_NE(run.output.find(row), std::string::npos) << row << "\n" << run.output;
    if (backend == "cuda-emulated")
      EXPECT_GT(last_column(run.output, "| kernel launches per step"), 0) << run.output;
  }
  const CommandResult roberta = run_collage(
      bert + " --set model.arch=roberta --set model.type_vocab_size=1 --set model.pad_token_id=1");
  ASSERT_EQ(roberta.exit_code, 0) << roberta.output;
  EXPECT_NE(roberta.output.find("RoBERTa (masked LM, 20 labelled positions a sequence)"),
            std::string::npos)
      << roberta.output;
}

}  // namespace
}  // namespace collage
