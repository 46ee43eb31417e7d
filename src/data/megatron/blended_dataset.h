#pragma once
// Several GPT sample sources mixed by weight, with NeMo r1.22 / legacy Megatron semantics
// (BlendableDataset + helpers.cpp build_blending_indices), and the function that builds a
// training/validation/test dataset from "weight prefix" pairs the way NeMo does.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/megatron/gpt_dataset.h"

namespace collage {

// numpy's np.sum over a float64 array (pairwise summation, blocks of 8), so weight
// normalisation rounds exactly like numpy's.
double numpy_sum(const std::vector<double>& values);

// Per-dataset sample counts NeMo requests for a blend (get_datasets_weights_and_num_samples):
// weights normalised by a left-to-right sum, then ceil(num_samples * w * 1.005) each; the
// 0.5% margin keeps every dataset from running out before the blend does.
std::vector<int64_t> blend_num_samples(const std::vector<double>& weights, int64_t num_samples);

class BlendedDataset : public GptSamples {
 public:
  // Sample i of the blend is sample dataset_sample_index[i] of datasets[dataset_index[i]].
  // Weights are normalised (numpy sum); for each i the dataset with the largest
  // w_d * max(i, 1) - (samples drawn from d so far) wins, ties to the lowest d. (Megatron
  // uses max(i, 1), not i + 1, so samples 0 and 1 both use the factor 1.)
  BlendedDataset(std::vector<std::shared_ptr<const GptSamples>> datasets,
                 const std::vector<double>& weights, int64_t size);

  int64_t size() const override { return static_cast<int64_t>(dataset_index_.size()); }
  int64_t seq_len() const override { return datasets_[0]->seq_len(); }
  void get(int64_t i, int32_t* out) const override;

  const std::vector<uint8_t>& dataset_index() const { return dataset_index_; }
  const std::vector<int64_t>& dataset_sample_index() const { return dataset_sample_index_; }

 private:
  std::vector<std::shared_ptr<const GptSamples>> datasets_;
  std::vector<uint8_t> dataset_index_;         // [size]
  std::vector<int64_t> dataset_sample_index_;  // [size]
};

struct WeightedPrefix {
  double weight = 1.0;
  std::string prefix;  // path without .bin/.idx
};

// What NeMo's build_train_valid_test_datasets does for one split:
//  * one prefix: GPTDataset over that split of its sequences with num_samples;
//  * several: each prefix gets its own split and a GPTDataset of blend_num_samples()[d]
//    samples (same seed for all), blended into a BlendedDataset whose size is the sum of
//    those counts.
// split_name is train / valid / test. Throws Error naming the prefix if its split is empty.
std::shared_ptr<const GptSamples> build_gpt_samples(const std::vector<WeightedPrefix>& prefixes,
                                                    const std::string& splits,
                                                    const std::string& split_name,
                                                    int64_t num_samples, int64_t seq_len,
                                                    int64_t seed);

}  // namespace collage
