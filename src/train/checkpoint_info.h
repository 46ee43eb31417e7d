#pragma once
// What a checkpoint says about itself, read from its header alone (checkpoint.h's layout: magic,
// version, the metadata JSON), without reading or verifying its tensors: the step and the config
// the run was trained with. For commands that use a trained model (eval, generate) to learn what
// to build before load_checkpoint_weights() reads and verifies the weights.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "backend/backend.h"
#include "config/config.h"
#include "model/trainable_model.h"

namespace collage {

struct CheckpointInfo {
  std::string path;
  int64_t step = 0;
  nlohmann::json meta;  // the caller's metadata (training_checkpoint.cpp): "config", "precision"...
  Config config;        // the resolved config saved in the checkpoint ("config")
};

// Reads the header of the checkpoint file or set manifest `path`. Throws Error naming the file
// when it is not a collage checkpoint, its header is corrupt, or it holds no saved config.
CheckpointInfo read_checkpoint_info(const std::string& path);

// load_checkpoint_weights() (training_checkpoint.h: any saved layout into this model) without
// the log line it writes for `train --init-from`: for eval and generate, which say themselves
// what they loaded.
void load_weights_for_inference(const std::string& path, const Config& config, Backend& backend,
                                TrainableModel& model);

}  // namespace collage
