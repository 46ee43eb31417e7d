#pragma once
// What a checkpoint says about itself, read from its header alone (checkpoint.h's layout: magic,
// version, the metadata JSON), without reading or verifying its tensors: the step and the config
// the run was trained with. For commands that use a trained model (eval, generate) to learn what
// to build before load_checkpoint_weights() reads and verifies the weights.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "config/config.h"

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

}  // namespace collage
