#pragma once
// Each `collage` subcommand lives in its own cmd_<name>.cpp and adds itself to the root
// app: its options (with defaults shown in --help) and a callback that runs it. Errors are
// thrown as collage::Error; run_cli() turns them into one message and exit code 1, and a
// command line it cannot parse into `collage: error: ...` and exit code 2.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <charconv>
#include <string>

#include "cli/run_cli.h"

namespace collage {

// An integer option's lower bound, with a short message ("must be >= 1, got 0"; CLI11's own
// number checks print the whole range of a double).
inline CLI::Validator at_least(long long minimum) {
  return CLI::Validator(
      [minimum](std::string& value) -> std::string {
        long long n = 0;
        const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), n);
        if (error != std::errc() || end != value.data() + value.size())
          return fmt::format("expected an integer, got '{}'", value);
        if (n < minimum) return fmt::format("must be >= {}, got {}", minimum, value);
        return "";
      },
      minimum == 1   ? std::string("POSITIVE")
      : minimum == 0 ? std::string("NONNEGATIVE")
                     : fmt::format(">= {}", minimum));
}

void add_train_command(CLI::App& root);
void add_prepare_gpt_command(CLI::App& root);
void add_prepare_bert_command(CLI::App& root);
void add_inspect_command(CLI::App& root);
void add_bench_command(CLI::App& root);
void add_plan_command(CLI::App& root);
void add_tokenize_command(CLI::App& root);
void add_eval_command(CLI::App& root);
void add_generate_command(CLI::App& root);
void add_export_command(CLI::App& root);
void add_import_command(CLI::App& root);

}  // namespace collage
