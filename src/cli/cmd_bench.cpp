// `collage bench CONFIG.yaml [--set key=value ...] [--steps N] [--warmup N]`
#include <iostream>

#include "cli/commands.h"
#include "config/config.h"
#include "core/error.h"
#include "train/bench.h"

namespace collage {

void add_bench_command(CLI::App& root) {
  struct Options {
    std::string config_path;
    std::vector<std::string> overrides;
    BenchOptions bench;
  };
  auto options = std::make_shared<Options>();
  auto* cmd = root.add_subcommand(
      "bench",
      "Time one training step of a config on synthetic tokens (no data needed): forward,\n"
      "backward and optimizer ms, tokens/s and achieved matmul GFLOP/s on the backend of\n"
      "parallel.backend (auto, cpu, cuda, cuda-emulated). On cpu, beside the same step's\n"
      "matrix products run as plain fp32 sgemm on the same threads; on cuda and\n"
      "cuda-emulated, with the kernel launches and host waits per step. The step uses\n"
      "training.micro_batch_size sequences of data.seq_len tokens. Example (GPT-2 124M):\n"
      "  collage bench configs/gpt/125m.yaml --set training.micro_batch_size=4 "
      "--set data.seq_len=64 --set parallel.threads=2");
  cmd->add_option("config", options->config_path, "YAML config file")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--set", options->overrides, "Override a config key (repeatable)");
  cmd->add_option("--steps", options->bench.steps, "Timed steps (averaged)")
      ->capture_default_str()
      ->check(at_least(1));
  cmd->add_option("--warmup", options->bench.warmup_steps, "Untimed steps first")
      ->capture_default_str()
      ->check(at_least(0));
  cmd->callback([options] {
    Config config = load_config(options->config_path, options->overrides);
    COLLAGE_CHECK(config.model.arch == "gpt",
                  "{}: collage bench times the GPT's step against sgemm; model.arch {} has no "
                  "benchmark yet (collage train logs tokens/s and ms/step of every step)",
                  options->config_path, config.model.arch);
    BenchResult result = run_bench(config, options->bench);
    std::cout << format_bench(config, result);
  });
}

}  // namespace collage
