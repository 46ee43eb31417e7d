// `collage plan CONFIG.yaml [--set ...] [--tensor-parallel N] [--data-parallel N] [--memory SIZE]
//  [--kernels]`
// The per-rank memory of a config, computed from the same plans the trainer allocates by,
// without allocating anything: any model size can be planned on a laptop. --kernels adds the
// bytes, FLOPs and lower-bound GPU times of every kernel of one step (plan/kernel_costs.h).
#include <fmt/format.h>

#include <iostream>

#include "backend/backend.h"
#include "cli/commands.h"
#include "config/config.h"
#include "core/error.h"
#include "dist/backend_choice.h"
#include "model/model_family.h"
#include "model/trainable_model.h"
#include "optim/memory_report.h"
#include "plan/comm_plan.h"
#include "plan/kernel_costs.h"
#include "plan/memory_plan.h"
#include "plan/model_flops.h"

namespace collage {
namespace {

struct PlanOptions {
  std::string config_path;
  std::vector<std::string> overrides;
  std::string phase;
  int tensor_parallel = 0;  // 0: the config's parallel.tensor_parallel
  int data_parallel = 1;
  std::string memory;  // "": no fit search
  bool kernels = false;
};

int64_t parameter_count(const ModelConfig& model, int tp) {
  int64_t count = 0;
  for (const ParameterInfo& info : model_parameter_table(model, tp)) count += info.numel;
  return count;
}

std::string plan(const PlanOptions& o) {
  Config config = load_config(o.config_path, o.overrides, o.phase);
  std::string origin =
      o.phase.empty() ? o.config_path : fmt::format("{} (phase {})", o.config_path, o.phase);
  if (o.tensor_parallel > 0) {
    config.parallel.tensor_parallel = o.tensor_parallel;
    origin += fmt::format(" with --tensor-parallel {}", o.tensor_parallel);
  }
  if (o.data_parallel > 1) origin += fmt::format(" with --data-parallel {}", o.data_parallel);
  validate_config(config, origin, o.data_parallel);  // heads and ffn must split, batch divide
  const int tp = config.parallel.tensor_parallel, dp = o.data_parallel;
  const ModelConfig& m = config.model;
  // The kernel cost model describes the tensor-parallel-1 kernels (plan/kernel_costs.h).
  COLLAGE_CHECK(!o.kernels || tp == 1,
                "{}: --kernels models tensor-parallel 1 only; plan it without --tensor-parallel {} "
                "or without --kernels",
                origin, tp);
  const Architecture& arch = architecture(m);
  COLLAGE_CHECK(
      !o.kernels || arch.kernel_cost_model,
      "{}: --kernels models the GPT's kernels; model.arch {} has no kernel cost model yet", origin,
      m.arch);

  std::string out = fmt::format("{}: {} {}\n", o.config_path, arch.title,
                                model_family(m).describe(m, model_shape(config), tp));
  out += fmt::format("{} parameters ({:.2f} B); {} ranks = tensor-parallel {} x data-parallel {}\n",
                     parameter_count(m, 1), parameter_count(m, 1) / 1e9, tp * dp, tp, dp);
  const BackendChoice backend = choose_backend(config.parallel.backend);
  out += fmt::format("backend {} ({}); memory per {}\n", backend.name, backend.reason,
                     backend.name == "cpu" ? "process" : "device");
  const MemoryReport report = plan_memory(config, tp, dp, config.training.micro_batch_size);
  out += "\n" + format_memory_report(report);
  out +=
      "\nActivations: the trainer's activation arena for one micro-batch (every layer's saved\n"
      "activations and the backward's scratch, no recomputation); on cuda, the cuBLASLt\n"
      "workspace (32 MiB), NCCL's buffers and the kernels' scratch (a few MB) come on top.\n";
  if (dp > 1 && config.parallel.zero == 0)
    out += fmt::format(
        "Every data-parallel rank holds the whole optimizer state; --set parallel.zero=1 shards\n"
        "it over the {} data-parallel ranks (ZeRO-1).\n",
        dp);

  const CommPlan comm = plan_communication(config, tp, dp);
  out += fmt::format(
      "\nCommunication per training step and rank (payload handed to the collectives; a ring "
      "all-reduce\nmoves about 2(n-1)/n of it over the wire):\n"
      "  tensor-parallel group   {:>10}  in {} collectives\n"
      "  data-parallel group     {:>10}  in {} collectives{}\n",
      format_bytes(double(comm.tp_bytes)), comm.tp_calls, format_bytes(double(comm.dp_bytes)),
      comm.dp_calls,
      dp > 1 ? (config.parallel.zero == 1 ? " (ZeRO-1: reduce-scatter + all-gather)"
                                          : " (gradient all-reduce)")
             : "");

  // The trainer's MFU count (plan/model_flops.h), and what it means in time on the GPUs
  // collage knows: a step cannot be faster than at 100% MFU.
  const ModelFlops flops = model_flops(config);
  const double step_flops = flops.per_sequence() * config.training.global_batch_size;
  out += fmt::format(
      "\nModel FLOPs (6N + 12LTC, docs/ARCHITECTURE.md \"Model FLOPs and MFU\"): {:.4g} per "
      "token (N = {:.4g} M multiplied per token{}), {:.4g} per step of {} sequences\n",
      flops.per_token(), flops.body_parameters / 1e6,
      flops.masked_positions > 0
          ? fmt::format("; heads on {} masked positions and the [CLS] row apart",
                        flops.masked_positions)
          : "",
      step_flops, config.training.global_batch_size);
  for (const char* gpu : {"A100", "H100"}) {
    const DevicePeak peak = gpu_peak(gpu);
    const double ideal = step_flops / (peak.flops * tp * dp);
    out += fmt::format(
        "  on {} x {} ({:.0f} TFLOP/s bf16 each): at least {:.1f} ms per step, at most {:.0f} "
        "tokens/s (100% MFU; the step line's MFU says how far a run is from it)\n",
        tp * dp, gpu, peak.flops / 1e12, 1e3 * ideal,
        double(config.training.global_batch_size) * config.data.seq_len / ideal);
  }

  if (!o.memory.empty()) {
    const double budget = parse_bytes(o.memory);
    const int best = largest_micro_batch(config, tp, dp, budget);
    out += "\n";
    if (best == 0) {
      out += fmt::format("Does not fit in {} ({}): micro-batch 1 already needs {} per rank.\n",
                         o.memory, format_bytes(budget),
                         format_bytes(double(plan_memory(config, tp, dp, 1).total_bytes())));
    } else {
      out += fmt::format("Fits in {} ({}) up to micro-batch {} ({} per rank)", o.memory,
                         format_bytes(budget), best,
                         format_bytes(double(plan_memory(config, tp, dp, best).total_bytes())));
      // Training also needs global_batch_size to be a multiple of micro-batch x data-parallel.
      const int per_rank = config.training.global_batch_size / dp;
      int usable = 0;
      for (int b = std::min(best, per_rank); b >= 1 && usable == 0; b--)
        if (config.training.global_batch_size % (b * dp) == 0) usable = b;
      if (usable != best && usable > 0)
        out += fmt::format("; the largest dividing training.global_batch_size {} is {}",
                           config.training.global_batch_size, usable);
      out += fmt::format(".\nThe config's micro-batch {} {} ({} per rank).\n",
                         config.training.micro_batch_size,
                         double(report.total_bytes()) <= budget ? "fits" : "does NOT fit",
                         format_bytes(double(report.total_bytes())));
    }
  }
  if (o.kernels) {
    const int B = config.training.micro_batch_size, T = config.data.seq_len;
    const int micro_batches = config.training.global_batch_size / (B * dp);
    out += fmt::format(
        "\nKernels of one training step at micro-batch {} x seq_len {} ({} tokens), {} "
        "micro-batches per step (global batch {}{}), optimizer.precision {}:\n\n",
        B, T, int64_t{B} * T, micro_batches, config.training.global_batch_size,
        dp > 1 ? fmt::format(" over data-parallel {}; the optimizer over all parameters, the "
                             "gradient all-reduce not counted",
                             dp)
               : "",
        precision_name(config.optimizer.precision));
    out += format_kernel_costs(kernel_costs(m, B, T, config.optimizer.precision), int64_t{B} * T,
                               micro_batches, reference_gpus());
  }
  return out;
}

}  // namespace

void add_plan_command(CLI::App& root) {
  auto options = std::make_shared<PlanOptions>();
  auto* cmd = root.add_subcommand(
      "plan",
      "Print the memory one rank needs to train a config, without allocating it: parameters,\n"
      "gradients, optimizer state by component (m, v, δθ, δv, master, compensation) and\n"
      "activations of one micro-batch, each with its bytes per parameter, for the rank's\n"
      "tensor-parallel shard; optionally the largest micro-batch that fits in a memory size.\n"
      "The numbers are those `collage train` allocates and logs. Example (the 6.7B model on\n"
      "8 GPUs of 40 GB):\n"
      "  collage plan configs/gpt/6.7b.yaml --tensor-parallel 8 --memory 40GB");
  cmd->add_option("config", options->config_path, "YAML config file (see configs/)")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--set", options->overrides,
                  "Override a config key, e.g. --set optimizer.precision=bf16 --set "
                  "training.micro_batch_size=8 (repeatable; value parsed as YAML)");
  cmd->add_option("--phase", options->phase,
                  "Plan phase NAME of a config that defines `phases:` (e.g. --phase 2 of "
                  "configs/bert/base.yaml)");
  cmd->add_option("--tensor-parallel", options->tensor_parallel,
                  "Tensor-parallel size to plan for (must divide the heads and the ffn "
                  "width). Default: the config's parallel.tensor_parallel")
      ->check(at_least(1));
  cmd->add_option("--data-parallel", options->data_parallel,
                  "Data-parallel size: the global batch divides over it, and with --set "
                  "parallel.zero=1 so does the optimizer state (ZeRO-1)")
      ->capture_default_str()
      ->check(at_least(1));
  cmd->add_option("--memory", options->memory,
                  "Memory of one device, e.g. 40GB, 80GB or 39.5GiB (KB/MB/GB/TB are powers of "
                  "10, KiB/MiB/GiB/TiB powers of 2): also print the largest micro-batch that "
                  "fits. Default: none (no fit search)");
  cmd->add_flag("--kernels", options->kernels,
                "Also print every kernel of one training step (tensor-parallel 1): calls, the "
                "minimal bytes and the FLOPs, and lower-bound times on an A100 and an H100");
  cmd->callback([options] { std::cout << plan(*options); });
}

}  // namespace collage
