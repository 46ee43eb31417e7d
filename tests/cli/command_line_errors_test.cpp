// Command lines collage cannot parse end like every other error: `collage: error: ...` on
// stderr, exit status 2, and a hint (the closest command, the command's --help).
#include <gtest/gtest.h>

#include <string>

#include "run_collage.h"

namespace collage {
namespace {

void expect_usage_error(const std::string& args, const std::string& message) {
  const CommandResult run = run_collage(args);
  EXPECT_EQ(run.exit_code, 2) << args << "\n" << run.output;
  EXPECT_EQ(run.output, "collage: error: " + message + "\n") << args;
}

TEST(CommandLineErrors, UseTheErrorFormatExitTwoAndHint) {
  const std::string commands =
      "commands: train, prepare-gpt, prepare-bert, inspect, bench, plan, tokenize, eval, generate, "
      "export, import";
  expect_usage_error("tran x.yaml",
                     "unknown command 'tran' (did you mean 'train'?) (" + commands + ")");
  expect_usage_error("", "no command given (" + commands + "; collage --help)");
  expect_usage_error("plan configs/demo/gpt-tiny.yaml --tensor-parallel 0",
                     "--tensor-parallel: must be >= 1, got 0 (collage plan --help)");
  expect_usage_error("bench configs/demo/gpt-tiny.yaml --steps x",
                     "--steps: expected an integer, got 'x' (collage bench --help)");
  expect_usage_error("train configs/demo/gpt-tiny.yaml --bogus",
                     "The following argument was not expected: --bogus (collage train --help)");
  // Help and version still print and succeed.
  EXPECT_EQ(run_collage("--version").exit_code, 0);
  EXPECT_EQ(run_collage("train --help").exit_code, 0);
}

TEST(CommandLineErrors, EveryCommandsHelpDocumentsItsExitStatuses) {
  for (const char* command : {"train", "prepare-gpt", "prepare-bert", "inspect", "bench", "plan",
                              "tokenize", "eval", "generate", "export", "import"}) {
    const CommandResult help = run_collage(std::string(command) + " --help");
    EXPECT_EQ(help.exit_code, 0) << command;
    EXPECT_NE(help.output.find("Exit status: 0 done, "), std::string::npos) << command;
    EXPECT_NE(help.output.find("2 a command line"), std::string::npos) << command << "\n"
                                                                       << help.output;
  }
}

}  // namespace
}  // namespace collage
