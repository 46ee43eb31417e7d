// `collage export` on the command line: its help teaches, and what it refuses ends as every
// command's errors do (exit 1 naming the file, or exit 2 for a command line that does not
// parse). The export itself: tests/train/export_test.cpp and tests/export/.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "run_collage.h"

namespace collage {
namespace {

namespace fs = std::filesystem;

TEST(ExportCli, HelpTeachesFormatNamesAndAnExample) {
  const CommandResult run = run_collage("export --help");
  EXPECT_EQ(run.exit_code, 0) << run.output;
  for (const char* fragment :
       {"model.safetensors", "GPT2LMHeadModel", "GPTNeoXForCausalLM", "BertForPreTraining",
        "RobertaForMaskedLM", "config.json", "collage's own parameter", "--names", "--dtype",
        "bfloat16", "float32", "--force", "collage export runs/demo/checkpoints --output",
        "Exit status"})
    EXPECT_NE(run.output.find(fragment), std::string::npos) << fragment << "\n" << run.output;
}

TEST(ExportCli, BadCommandLinesExitTwoAndErrorsNameTheFile) {
  const fs::path dir =
      fs::temp_directory_path() / ("collage_export_cli_" + std::to_string(getpid()));
  fs::remove_all(dir);
  const std::string out = (dir / "out").string();

  CommandResult run = run_collage("export missing.ckpt");
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_EQ(run.output, "collage: error: --output is required (collage export --help)\n");
  run = run_collage("export missing.ckpt --output " + out + " --dtype float16");
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_NE(run.output.find("collage: error: --dtype: float16 not in {bfloat16,float32}"),
            std::string::npos)
      << run.output;

  run = run_collage("export /nonexistent/step_00000001.ckpt --output " + out);
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_EQ(run.output,
            "collage: error: /nonexistent/step_00000001.ckpt: no such checkpoint file or "
            "directory\n");
  EXPECT_FALSE(fs::exists(out));  // nothing left behind
  fs::remove_all(dir);
}

}  // namespace
}  // namespace collage
