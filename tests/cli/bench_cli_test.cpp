// `collage bench`: one column per --shapes entry, the GEMM engine named, the optimizer's bytes
// and rate, and shapes that cannot run refused with the value named.
#include <gtest/gtest.h>

#include <string>

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

}  // namespace
}  // namespace collage
