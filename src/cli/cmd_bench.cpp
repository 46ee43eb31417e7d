// `collage bench CONFIG.yaml [--set key=value ...] [--steps N] [--warmup N] [--shapes BxT,...]
// [--profile]`
#include <charconv>
#include <iostream>

#include "cli/commands.h"
#include "config/config.h"
#include "core/error.h"
#include "tools/bench.h"

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
      "Time one training step of a config on synthetic data (none needed: GPT random tokens;\n"
      "BERT and RoBERTa a masked-LM batch of full rows, data.max_predictions labels each,\n"
      "dropout on), every part the trainer runs: zeroing the gradients, forward, backward,\n"
      "the gradient norm (with optimizer.grad_clip's factor) and optimizer ms, summed in step\n"
      "ms; the optimizer's bytes moved and GB/s, tokens/s, model GFLOP/s and MFU (the\n"
      "trainer's count, docs/ARCHITECTURE.md \"Model FLOPs and MFU\") on the backend of\n"
      "parallel.backend (auto, cpu, cuda, cuda-emulated). On cpu: which GEMM engine ran and\n"
      "why (parallel.cpu_gemm), MFU against that engine's best rate measured at start (a\n"
      "oneDNN bf16 matmul or OpenBLAS sgemm: the Peak: line says which), and the same step's\n"
      "matrix products run as plain fp32 sgemm on the same threads; on cuda and\n"
      "cuda-emulated, with the kernel launches and host waits per step. With --profile, the\n"
      "time and launches (cpu: ops) of each op family. The step uses\n"
      "training.micro_batch_size sequences of data.seq_len tokens, or each of --shapes (a\n"
      "column each). Example (GPT-2 124M, a small step and a GEMM-dominated one):\n"
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
  cmd->add_flag("--profile", options->bench.profile,
                "Also time the steps by op family (attention forward and backward, GEMMs,\n"
                "layernorm, GELU, cross-entropy, optimizer, other): ms, share and launches per\n"
                "step, from CUDA events around every launch on cuda, from the emulator's host\n"
                "time on cuda-emulated, and from the wall time of every op on cpu (ops there).\n"
                "Off, the step records nothing extra.");
  cmd->add_option("--shapes", options->shapes,
                  "Micro-batch x sequence length of each step to time, e.g. 4x64,8x512 "
                  "(default: training.micro_batch_size x data.seq_len)")
      ->delimiter(',');
  cmd->callback([options] {
    Config config = load_config(options->config_path, options->overrides);
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
    if (options->bench.profile)
      for (const BenchResult& r : results) std::cout << format_profile(r);
  });
}

}  // namespace collage
