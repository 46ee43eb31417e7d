#pragma once
// The trainer's view of its data: the train and validation splits as indexable sets of
// (seq_len + 1)-token windows, built from config.data (Megatron indexed datasets, split,
// GPTDataset sampling, blending), after preparing the corpus from raw text if the config
// asks for it and it is not cached yet.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "config/config.h"

namespace collage {

struct SampleSet {
  int64_t size = 0;
  // window: seq_len + 1 token ids of sample i (i < size)
  std::function<void(int64_t i, int32_t* window)> get;
};

struct TrainingData {
  SampleSet train, valid;
  std::string summary;          // one line for the log
  std::shared_ptr<void> owner;  // keeps the datasets (and their mmaps) alive
};

// train_samples / valid_samples: how many samples each split must provide.
TrainingData load_training_data(const Config& config, int64_t train_samples, int64_t valid_samples);

}  // namespace collage
