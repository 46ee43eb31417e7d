// `collage import` from the command line (src/cli/cmd_import.cpp): its help, and what a bad
// command line or directory does (exit status, the message naming the path, nothing written).
// The import itself: tests/train/import_test.cpp.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "run_collage.h"

namespace collage {
namespace {

namespace fs = std::filesystem;

TEST(ImportCli, HelpTeachesTheClassesTheRoundingAndAnExample) {
  const CommandResult run = run_collage("import --help");
  EXPECT_EQ(run.exit_code, 0) << run.output;
  for (const char* fragment :
       {"config.json", "model.safetensors.index.json", "GPT2LMHeadModel", "GPTNeoXForCausalLM",
        "BertForPreTraining", "RobertaForMaskedLM", "nearest-even", "--init-from hf:", "--config",
        "--force", "Exit status"})
    EXPECT_NE(run.output.find(fragment), std::string::npos) << fragment << "\n" << run.output;
  const CommandResult train = run_collage("train --help");
  EXPECT_NE(train.output.find("hf:DIR"), std::string::npos) << train.output;
}

TEST(ImportCli, BadCommandLinesAndDirectoriesAreRefusedWritingNothing) {
  const fs::path dir =
      fs::temp_directory_path() / ("collage_import_cli_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "empty");
  const std::string out = (dir / "out.ckpt").string();

  CommandResult run = run_collage("import " + (dir / "empty").string());
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_EQ(run.output, "collage: error: --output is required (collage import --help)\n");
  run = run_collage("import /nonexistent/hf --output " + out);
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_NE(run.output.find("/nonexistent/hf: not a directory"), std::string::npos) << run.output;
  run = run_collage("import hf:" + (dir / "empty").string() + " --output " + out);
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_NE(run.output.find((dir / "empty").string()), std::string::npos) << run.output;
  EXPECT_FALSE(fs::exists(out));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace collage
