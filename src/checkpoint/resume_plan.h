#pragma once
// Where a training run starts: fresh, from another run's weights (--init-from), or continuing
// a checkpoint (--resume). The plan is settled from the checkpoint directory and the chosen
// checkpoint's header before any data is loaded or prepared (which may take long), so a refused
// resume or fresh run costs nothing; the weights and state are loaded from it once the model
// and optimizer are built.
#include <cstdint>
#include <map>
#include <string>

#include "backend/backend.h"
#include "checkpoint/training_checkpoint.h"
#include "config/config.h"
#include "dist/comm.h"
#include "model/trainable_model.h"
#include "optim/optimizer.h"

namespace collage {

// What the command line asks for (collage train's options of the same names).
struct ResumeRequest {
  std::string resume;  // "", "latest", "auto", or a checkpoint path or directory
  // "", a checkpoint (file, manifest or directory) whose weights start the run, or "hf:DIR", a
  // Hugging Face directory (checkpoint/hf_weights.h)
  std::string init_from;
  bool overwrite = false;            // a fresh run may delete the checkpoints of an earlier run
  bool convert_precision = false;    // see restore_training_checkpoint()
  bool allow_config_change = false;  // see restore_training_checkpoint()
};

struct ResumePlan {
  std::string resume_path;  // the checkpoint the run continues; "": a fresh run
  std::string init_path;    // the checkpoint (or "hf:DIR") whose weights start a fresh run
  // A fresh run with --overwrite: the earlier run's checkpoints (step -> path), deleted once
  // the run is ready to train.
  std::map<int64_t, std::string> earlier_checkpoints;
  bool convert_precision = false;
  bool allow_config_change = false;

  bool resuming() const { return !resume_path.empty(); }
};

// Resolves the request against checkpoint_dir(config): --resume auto continues the latest
// checkpoint when there is one, else starts fresh (logged). Throws Error for --resume with
// --init-from, for a fresh run into a directory holding an earlier run's checkpoints without
// --overwrite, and for a resume that restore_training_checkpoint() would refuse
// (check_resume_allowed(): the header alone is read).
ResumePlan plan_resume(const Config& config, const ResumeRequest& request);

// --init-from: the plan's weights into the (initialised) model, logged; nothing otherwise.
// Before the optimizer is constructed: fp32-master's master copy starts as the weights.
void load_initial_weights(const ResumePlan& plan, const Config& config, Backend& backend,
                          TrainableModel& model);

// Once the data, model and optimizer are ready: --overwrite deletes the earlier run's
// checkpoints (world rank 0, once every rank has seen them), and a resumed run restores its
// state. Returns the progress the run continues from (zero for a fresh run).
TrainingProgress start_training_state(const ResumePlan& plan, const Config& config,
                                      Backend& backend, TrainableModel& model, Optimizer& optimizer,
                                      Comm& world);

}  // namespace collage
