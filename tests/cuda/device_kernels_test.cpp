// The kernel tests on a GPU under one name: `test_cuda --gtest_filter='*Device*'` selects this
// test and the other real-device ones (the training runs' DeviceRunFollowsTheCpuRun, ...), so
// that one filter checks every kernel on a GPU node. It reruns this executable with
// COLLAGE_TEST_CUDA=device (tests/cuda/cuda_test_util.h) on the kernel tests, and fails with
// their output when any of them fails. Skipped without a usable GPU, and where this process
// itself already runs every kernel test on the GPU (a plain `test_cuda` on a GPU node).
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "cuda_test_util.h"
#include "dist/backend_choice.h"

namespace collage::test {
namespace {

// Whether a test of this executable is a kernel test: an op of the cuda backend under test
// (BackendPair) against the cpu's. The others stay on the emulator on purpose (launch(), the
// step structure, simt specifics: "Emulated" in their names), have a Device twin of their own
// (the model and training runs), or use no backend (GemmLayout).
bool is_kernel_test(const std::string& full_name) {
  for (const char* other :
       {"Device", "Emulated", "Training", "CudaStepStructure.", "CudaLaunch.", "GemmLayout."}) {
    if (full_name.find(other) != std::string::npos) return false;
  }
  return true;
}

TEST(CudaKernelsOnDevice, EveryKernelTestMatchesTheCpu) {
  if (choose_backend("auto").name != "cuda") GTEST_SKIP() << "no usable GPU";
  const ::testing::UnitTest& unit = *::testing::UnitTest::GetInstance();
  std::string filter;
  int count = 0;
  bool all_run_here = true;
  for (int i = 0; i < unit.total_test_suite_count(); i++) {
    const ::testing::TestSuite& suite = *unit.GetTestSuite(i);
    for (int j = 0; j < suite.total_test_count(); j++) {
      const ::testing::TestInfo& test = *suite.GetTestInfo(j);
      const std::string name = std::string(suite.name()) + "." + test.name();
      if (!is_kernel_test(name)) continue;
      filter += (count++ ? ":" : "") + name;
      all_run_here = all_run_here && test.should_run();
    }
  }
  ASSERT_GT(count, 0);
  if (all_run_here && cuda_on_device())
    GTEST_SKIP() << "this process runs the " << count << " kernel tests on the GPU itself";
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  const std::string command =
      "COLLAGE_TEST_CUDA=device '" + self + "' --gtest_filter='" + filter + "' 2>&1";
  std::printf("[ kernels  ] %d kernel tests on the GPU: COLLAGE_TEST_CUDA=device %s\n", count,
              self.c_str());
  std::fflush(stdout);
  FILE* child = popen(command.c_str(), "r");
  ASSERT_NE(child, nullptr) << command;
  std::string output;
  char line[4096];
  while (std::fgets(line, sizeof line, child)) {
    output += line;
    std::fputs(line, stdout);  // the kernel tests' own report, as they run
  }
  const int status = pclose(child);
  EXPECT_EQ(status, 0) << "kernel tests failed on the GPU (their report is above); rerun with\n"
                       << "  COLLAGE_TEST_CUDA=device " << self << "\n";
}

}  // namespace
}  // namespace collage::test
