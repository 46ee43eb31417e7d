// parallel.backend from the command line: the four names train, bench and plan accept; `auto`
// saying what it chose and why; `cuda` on a machine without a usable GPU failing with a message
// that says so and what to use instead (not a bare CUDA error code).
#include <gtest/gtest.h>

#include <string>

#include "backend/backend.h"
#include "dist/backend_choice.h"
#include "run_collage.h"

namespace collage {
namespace {

const std::string kTiny = "configs/demo/gpt-tiny.yaml";

bool gpu_usable() { return choose_backend("auto").name == "cuda"; }

TEST(BackendCli, AutoSaysWhichBackendItChoseAndWhy) {
  const CommandResult plan = run_collage("plan " + kTiny + " --set parallel.backend=auto");
  ASSERT_EQ(plan.exit_code, 0) << plan.output;
  if (gpu_usable()) {
    EXPECT_NE(plan.output.find("backend cuda (auto: found "), std::string::npos) << plan.output;
  } else {
    EXPECT_NE(plan.output.find("backend cpu (auto: "), std::string::npos) << plan.output;
  }
}

TEST(BackendCli, CudaWithoutAGpuFailsWithAnExplanation) {
  if (gpu_usable()) GTEST_SKIP() << "a GPU is present";
  const CommandResult bench =
      run_collage("bench " + kTiny + " --set parallel.backend=cuda --steps 1 --warmup 0");
  EXPECT_NE(bench.exit_code, 0);
  EXPECT_NE(bench.output.find("collage: error: "), std::string::npos) << bench.output;
  const std::string why =
      cuda_built() ? "parallel.backend: cuda needs a GPU, but " : "built without CUDA";
  EXPECT_NE(bench.output.find(why), std::string::npos) << bench.output;
  EXPECT_NE(bench.output.find("'cuda-emulated'"), std::string::npos) << bench.output;
}

TEST(BackendCli, EmulatedBackendRunsBenchAndCountsLaunches) {
  const CommandResult bench = run_collage("bench " + kTiny +
                                          " --set parallel.backend=cuda-emulated --set "
                                          "model.vocab_size=500 --steps 1 --warmup 1");
  ASSERT_EQ(bench.exit_code, 0) << bench.output;
  EXPECT_NE(bench.output.find("backend cuda-emulated (as configured)"), std::string::npos)
      << bench.output;
  EXPECT_NE(bench.output.find("kernel launches per step"), std::string::npos) << bench.output;
}

TEST(BackendCli, UnknownBackendNamesTheChoices) {
  const CommandResult plan = run_collage("plan " + kTiny + " --set parallel.backend=gpu");
  EXPECT_NE(plan.exit_code, 0);
  EXPECT_NE(plan.output.find("parallel.backend"), std::string::npos) << plan.output;
  EXPECT_NE(plan.output.find("cuda-emulated"), std::string::npos) << plan.output;
}

}  // namespace
}  // namespace collage
