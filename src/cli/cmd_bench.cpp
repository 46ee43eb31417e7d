// `collage bench CONFIG.yaml [--set key=value ...] [--steps N] [--warmup N] [--shapes BxT,...]`
#include <charconv>
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
    std::vector<std::string> shapes;
  };
  auto options = std::make_shared<Options>();
  auto* cmd = root.add_subcommand(
      "bench",
      "Time one training step of a config on synthetic tokens (no data needed): forward,\n"
      "backward and optimizer ms, the optimizer's bytes moved and GB/s, tokens/s, model\n"
      "GFLOP/s and MFU (the trainer's count, docs/ARCHITECTURE.md \"Model FLOPs and MFU\") on\n"
      "the backend of parallel.backend (auto, cpu, cuda, cuda-emulated). On cpu: which GEMM\n"
      "engine ran and why (parallel.cpu_gemm), beside the same step's matrix products run as\n"
      "plain fp32 sgemm on the same threads; on cuda and cuda-emulated, with the kernel\n"
      "launches and host waits per step. The step uses training.micro_batch_size sequences of\n"
      "data.seq_len tokens, or each of --shapes (a column each). Example (GPT-2 124M, a small\n"
      "step and a GEMM-dominated one):\n"
      "  collage bench configs/gpt/125m.yaml --set parallel.threads=2 --shapes 4x64,8x512");
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
  cmd->add_option("--shapes", options->shapes,
                  "Micro-batch x sequence length of each step to time, e.g. 4x64,8x512 "
                  "(default: training.micro_batch_size x data.seq_len)")
      ->delimiter(',');
  cmd->callback([options] {
    Config config = load_config(options->config_path, options->overrides);
    COLLAGE_CHECK(config.model.arch == "gpt",
                  "{}: collage bench times the GPT's step against sgemm; model.arch {} has no "
                  "benchmark yet (collage train logs tokens/s and ms/step of every step)",
                  options->config_path, config.model.arch);
    std::vector<BenchResult> results;
    if (options->shapes.empty()) results.push_back(run_bench(config, options->bench));
    for (const std::string& shape : options->shapes) {
      int B = 0, T = 0;
      const size_t x = shape.find('x');
      const bool parsed =
          x != std::string::npos &&
          std::from_chars(shape.data(), shape.data() + x, B).ptr == shape.data() + x &&
          std::from_chars(shape.data() + x + 1, shape.data() + shape.size(), T).ptr ==
              shape.data() + shape.size();
      COLLAGE_CHECK(parsed && B > 0 && T > 0,
                    "--shapes: '{}' is not MICRO_BATCHxSEQ_LEN with both > 0, e.g. 8x512", shape);
      COLLAGE_CHECK(T <= config.model.max_position_embeddings,
                    "--shapes: {}: sequence length {} is longer than model.max_position_embeddings "
                    "{}",
                    shape, T, config.model.max_position_embeddings);
      Config shaped = config;
      shaped.training.micro_batch_size = B;
      shaped.data.seq_len = T;
      std::cerr << fmt::format("bench: {} x {} ...\n", B, T);
      results.push_back(run_bench(shaped, options->bench));
    }
    std::cout << format_bench(config, results);
  });
}

}  // namespace collage
