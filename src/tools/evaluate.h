#pragma once
// `collage eval`: a checkpoint's validation figures without training. The run is set up as
// training sets it up (the ParallelRun of the config under mpirun, its backend, the task of
// model.arch with its data), the checkpoint's weights are loaded (any saved layout; no optimizer
// state) and the task's validation runs: the same batches training validates on, so a
// checkpoint of step N gives the val_loss training logged at step N (at the same layout and
// backend, bit for bit).
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "config/config.h"

namespace collage {

struct EvalOptions {
  // A checkpoint file, a set's manifest, a directory (its newest valid checkpoint), or
  // "latest": the newest valid one in the config's checkpoint.dir (as `train --resume`).
  std::string checkpoint;
  // Validation micro-batches (of training.micro_batch_size sequences); 0: training.eval_iters.
  int iters = 0;
};

struct EvalResult {
  std::string checkpoint;  // the file evaluated
  int64_t step = 0;        // its training step
  int iters = 0;           // validation micro-batches evaluated
  double loss = 0;         // what training logs as val_loss (BERT: MLM + NSP)
  // exp of the loss per predicted token: of val_loss (GPT), of val_mlm_loss (encoders)
  double perplexity = 0;
  // One record for scripts: checkpoint, step, iters, micro_batch_size, seq_len, val_loss and the
  // task's other val_* figures (as in metrics.jsonl), val_perplexity or val_mlm_perplexity,
  // backend, world_size, seconds.
  nlohmann::json record;
  std::string text;  // the same as one line: "step 200 | val loss 6.4418 | perplexity 627.57 ..."
  bool lead = true;  // world rank 0 (under mpirun every rank returns the same figures)
};

// Evaluates; under mpirun every rank calls it with the same arguments. Logs go to stderr
// (rank 0; the other ranks' errors only). An error on any rank ends the whole job.
EvalResult evaluate(const Config& config, const EvalOptions& options);

}  // namespace collage
