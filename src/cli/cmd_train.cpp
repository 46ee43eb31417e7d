// `collage train CONFIG.yaml [--set key=value ...] [--phase NAME] [--resume [latest|PATH]]
//  [--convert-precision] [--init-from CHECKPOINT|hf:DIR] [--overwrite] [--wait-lock SECONDS]`
#include <spdlog/spdlog.h>

#include "cli/commands.h"
#include "config/config.h"
#include "core/error.h"
#include "train/stop_signal.h"
#include "train/trainer.h"

namespace collage {

void add_train_command(CLI::App& root) {
  struct Options {
    std::string config_path;
    std::vector<std::string> overrides;
    std::string phase;
    std::string resume;
    std::string init_from;
    bool convert_precision = false;
    bool allow_config_change = false;
    bool overwrite = false;
    double wait_lock_seconds = 0;
  };
  auto options = std::make_shared<Options>();
  auto* cmd = root.add_subcommand(
      "train",
      "Train a model from a YAML config, on the backend of parallel.backend: auto (cuda when\n"
      "a GPU can be used, else cpu; the log says which and why), cpu, cuda, or cuda-emulated\n"
      "(the CUDA kernels run on the CPU by the host SIMT emulator: slow, for checking them).\n"
      "Logs this rank's memory (parameters, gradients, optimizer state by component,\n"
      "activations, bytes/parameter) at the start, then a line per step (loss, lr, grad norm,\n"
      "EDQ ratio and share of lost updates, tokens/s, ms/step) to the console and\n"
      "<logging.dir>/train.log, metrics to <logging.dir>/metrics.jsonl, the resolved config\n"
      "to <logging.dir>/config.yaml, and checkpoints to <checkpoint.dir> (default\n"
      "<logging.dir>/checkpoints) every checkpoint.interval steps and at the end. Both\n"
      "directories are locked (collage.lock) for the run's life: a second run on either fails\n"
      "naming the first one's pid (or waits for it with --wait-lock).\n"
      "Parallel: `mpirun -np N collage train CONFIG` trains on N ranks, parallel.tensor_parallel\n"
      "per tensor-parallel group and N / tensor_parallel data-parallel replicas (parallel.zero: 1\n"
      "shards the optimizer state over them); rank 0 logs, step lines add each rank's TP/DP\n"
      "traffic, and checkpoints resume at any layout (docs/PARALLEL.md, scripts/launch/).\n"
      "Preemption: SIGTERM, SIGUSR1 or SIGINT finish the current step, write a checkpoint and\n"
      "exit with status 75 (every rank stops at the same step); a second SIGINT aborts at once.\n"
      "Under mpirun, signal the launcher script (scripts/launch/stop-signals.sh, which\n"
      "mpirun-p4d.sh uses), not mpirun: Open MPI kills the ranks on a SIGTERM of its own.\n"
      "Exit status: 0 done, 75 stopped by a signal with a checkpoint (resume with --resume),\n"
      "1 an error (the message names the file, key or step), 2 a command line that does not\n"
      "parse or an internal error.");
  cmd->add_option("config", options->config_path, "YAML config file (see configs/)")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--set", options->overrides,
                  "Override a config key before validation, e.g. --set training.max_steps=100 "
                  "--set optimizer.lr=3e-4 (repeatable; value parsed as YAML)");
  cmd->add_option("--phase", options->phase,
                  "Run phase NAME of a config that defines `phases:` (e.g. --phase 2 of "
                  "configs/bert/base.yaml: seq 512 from phase 1's weights with --init-from); its "
                  "keys apply on top of the file's, before --set");
  auto* resume = cmd->add_option("--resume", options->resume,
                                 "Continue from a checkpoint: 'latest' (newest valid checkpoint in "
                                 "checkpoint.dir), 'auto' (latest when there is a checkpoint, else "
                                 "start fresh: for jobs that are requeued) or a path to a .ckpt "
                                 "file. Default: start fresh")
                     ->expected(0, 1);
  cmd->add_option("--init-from", options->init_from,
                  "Start a new run from a checkpoint's weights (a .ckpt file, a set's manifest, or "
                  "a checkpoint directory for its latest), at any parallel layout, with a fresh "
                  "optimizer state, learning-rate schedule and data position: e.g. BERT's phase "
                  "2 from phase 1. hf:DIR starts from a Hugging Face directory (a class `collage "
                  "export` writes, or its output); its config.json must match the config's model "
                  "section")
      ->excludes(resume);
  cmd->add_flag("--convert-precision", options->convert_precision,
                "With --resume: accept a checkpoint of another optimizer.precision and convert "
                "its optimizer state to the config's (e.g. fp32-master -> collage-plus keeps the "
                "master's low bits in the error terms). Default: off, such a resume is refused")
      ->needs(resume);
  cmd->add_flag("--overwrite", options->overwrite,
                "Start a fresh run in a directory that holds an earlier run's checkpoints, "
                "deleting them (without it, such a run is refused: continue it with --resume)")
      ->excludes(resume);
  cmd->add_option("--wait-lock", options->wait_lock_seconds,
                  "When another collage run holds logging.dir or checkpoint.dir (their "
                  "collage.lock), wait up to SECONDS for it to end instead of failing at once: "
                  "for a requeued job whose previous run may still be stopping "
                  "(scripts/launch/ pass --wait-lock 120 with --auto-resume). Default 0")
      ->check(CLI::Range(0.0, 86400.0))
      ->option_text("SECONDS");
  cmd->add_flag("--allow-config-change", options->allow_config_change,
                "With --resume: continue although the config changes keys that make it another "
                "run (model shape, vocab, seeds, seq_len, batch sizes, datasets, split); "
                "without it such a resume is refused, listing each key with its old and new value")
      ->needs(resume);
  cmd->callback([options, resume] {
    if (resume->count() > 0 && options->resume.empty()) options->resume = "latest";
    Config config = load_config(options->config_path, options->overrides, options->phase);
    TrainOptions train_options;
    train_options.resume = options->resume;
    train_options.convert_precision = options->convert_precision;
    train_options.allow_config_change = options->allow_config_change;
    train_options.overwrite = options->overwrite;
    train_options.wait_lock_seconds = options->wait_lock_seconds;
    train_options.init_from = options->init_from;
    TrainResult result = train(config, train_options);
    if (result.stopped_by_signal) throw ExitStatus{kExitStopped};
    if (result.steps_run == 0) return;  // the trainer said why
    spdlog::info(
        "done: step {}, loss {:.4f}{}", result.last_step, result.last_loss,
        result.last_val_loss >= 0 ? fmt::format(", val loss {:.4f}", result.last_val_loss) : "");
  });
}

}  // namespace collage
