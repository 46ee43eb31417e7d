#pragma once
// Each `collage` subcommand lives in its own cmd_<name>.cpp and adds itself to the root
// app: its options (with defaults shown in --help) and a callback that runs it. Errors are
// thrown as collage::Error; run_cli() turns them into one message and exit code 1.
#include <CLI/CLI.hpp>

namespace collage {

void add_train_command(CLI::App& root);
void add_prepare_gpt_command(CLI::App& root);
void add_prepare_bert_command(CLI::App& root);
void add_inspect_command(CLI::App& root);
void add_bench_command(CLI::App& root);
void add_plan_command(CLI::App& root);
void add_tokenize_command(CLI::App& root);

int run_cli(int argc, char** argv);

}  // namespace collage
