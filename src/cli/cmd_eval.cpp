// `collage eval CONFIG.yaml --checkpoint PATH [--set key=value ...] [--phase NAME] [--iters N]
//  [--json]`
#include <cstdio>
#include <iostream>

#include "cli/commands.h"
#include "config/config.h"
#include "tools/evaluate.h"

namespace collage {

void add_eval_command(CLI::App& root) {
  struct Options {
    std::string config_path;
    std::vector<std::string> overrides;
    std::string phase;
    EvalOptions eval;
    bool json = false;
  };
  auto options = std::make_shared<Options>();
  auto* cmd = root.add_subcommand(
      "eval",
      "Validation loss and perplexity of a checkpoint, without training: the run is set up as\n"
      "`collage train CONFIG` sets it up (backend, data, model; under mpirun the same\n"
      "tensor/data-parallel layout), the checkpoint's weights are loaded (saved at any layout;\n"
      "no optimizer state needed) and training's validation runs on them: the same batches, so\n"
      "the checkpoint of step N gives the val loss training logged at step N. GPT: val loss and\n"
      "perplexity = exp(val loss); BERT/RoBERTa: val loss, MLM loss, accuracy and perplexity\n"
      "(and BERT's NSP loss and accuracy). Prints one line (or, with --json, one JSON record)\n"
      "on stdout; logs on stderr. Examples:\n"
      "  collage eval configs/demo/gpt-demo.yaml --checkpoint runs/demo/checkpoints\n"
      "  mpirun -np 2 collage eval configs/demo/gpt-demo.yaml --set parallel.tensor_parallel=2 \\\n"
      "      --checkpoint runs/demo/checkpoints/step_00000200.ckpt --iters 20 --json\n"
      "Exit status: 0 done, 1 an error (the message names the file or key), 2 a command line\n"
      "that does not parse.");
  cmd->add_option("config", options->config_path,
                  "YAML config of the run (its data, validation batches, backend and layout)")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--checkpoint", options->eval.checkpoint,
                  "A checkpoint file, a multi-rank set's manifest (step_N.ckpt), a checkpoint "
                  "directory (its newest valid checkpoint), or 'latest' (the newest in the "
                  "config's checkpoint.dir)")
      ->required();
  cmd->add_option("--set", options->overrides,
                  "Override a config key, as for train (repeatable; value parsed as YAML)");
  cmd->add_option("--phase", options->phase, "Use phase NAME of a config with `phases:`");
  cmd->add_option("--iters", options->eval.iters,
                  "Validation micro-batches to evaluate (default: training.eval_iters; fewer "
                  "evaluate the first of training's)")
      ->check(at_least(1));
  cmd->add_flag("--json", options->json,
                "Print one JSON record (checkpoint, step, iters, val_loss, val_perplexity or the "
                "encoder's val_mlm_* and val_nsp_* figures, backend, seconds) instead of the line");
  cmd->callback([options] {
    const Config config = load_config(options->config_path, options->overrides, options->phase);
    const EvalResult result = evaluate(config, options->eval);
    if (!result.lead) return;
    std::cout << (options->json ? result.record.dump() : result.text) << std::endl;
  });
}

}  // namespace collage
