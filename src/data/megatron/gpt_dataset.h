#pragma once
// Megatron / NeMo r1.22 GPTDataset: turns the sequences of an indexed dataset into training
// samples of seq_len+1 tokens (inputs = [0, seq_len), labels = [1, seq_len]) in exactly the
// order NeMo and Megatron-core produce them (docs/DATA.md §4):
//   doc_idx     the split's sequence ids, tiled over `num_epochs` and shuffled
//   sample_idx  (position in doc_idx, token offset) where each sample starts; consecutive
//               samples overlap by one token
//   shuffle_idx a permutation of the samples
// All three come from one numpy-compatible RandomState(seed), in that order.
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/megatron/indexed_dataset.h"

namespace collage {

// Megatron's get_train_valid_test_split_: "980,10,10" (or "98/1/1", fewer than 3 values are
// padded with 0) over `num_sequences` sequences -> bounds {0, b1, b2, num_sequences}; split k
// is sequences [bounds[k], bounds[k+1]). Each bound adds round-half-even(w_k * N) and the
// rounding drift is taken off bounds 1..3 so the last one is exactly N. Throws Error naming
// the string if it is malformed, has more than 3 values, a negative or non-finite weight, a
// zero sum, or leads to decreasing bounds.
std::array<int64_t, 4> split_bounds(const std::string& splits, int64_t num_sequences);

// "train" -> 0, "valid" / "validation" -> 1, "test" -> 2; anything else throws Error.
int split_index(const std::string& split_name);

// Anything that serves fixed-length GPT samples by index: GPTDataset or BlendedDataset.
class GptSamples {
 public:
  virtual ~GptSamples() = default;
  virtual int64_t size() const = 0;     // number of samples
  virtual int64_t seq_len() const = 0;  // each sample is seq_len + 1 tokens
  // Copies sample i into out[0 .. seq_len+1). Throws Error if i is out of range.
  virtual void get(int64_t i, int32_t* out) const = 0;
};

class GPTDataset : public GptSamples {
 public:
  // Samples over sequences [first_sequence, end_sequence) of `dataset` (each sequence is a
  // document, as in NeMo/mcore). Builds enough epochs for `num_samples` samples;
  // size() may be larger (the sampler stops at num_samples). `seed` is numpy's seed,
  // 0 .. 2^32-1. Only drop_last=True (the training default) is implemented.
  GPTDataset(std::shared_ptr<const IndexedDataset> dataset, int64_t first_sequence,
             int64_t end_sequence, int64_t num_samples, int64_t seq_len, int64_t seed);

  int64_t size() const override { return static_cast<int64_t>(shuffle_idx_.size()); }
  int64_t seq_len() const override { return seq_len_; }
  void get(int64_t i, int32_t* out) const override;

  const IndexedDataset& indexed_dataset() const { return *dataset_; }
  int64_t tokens_per_epoch() const { return tokens_per_epoch_; }
  int64_t num_epochs() const { return num_epochs_; }
  bool separate_last_epoch() const { return separate_last_epoch_; }
  // [num_epochs * num_sequences_in_split] sequence ids, in reading order.
  const std::vector<int32_t>& doc_idx() const { return doc_idx_; }
  // [(size()+1) * 2] row-major (index into doc_idx, token offset) pairs.
  const std::vector<int64_t>& sample_idx() const { return sample_idx_; }
  // [size()] which sample_idx row dataset index i reads.
  const std::vector<int64_t>& shuffle_idx() const { return shuffle_idx_; }

 private:
  void build_sample_idx();

  std::shared_ptr<const IndexedDataset> dataset_;
  int64_t seq_len_;
  int64_t tokens_per_epoch_ = 0;
  int64_t num_epochs_ = 0;
  bool separate_last_epoch_ = false;
  std::vector<int32_t> doc_idx_;
  std::vector<int64_t> sample_idx_;
  std::vector<int64_t> shuffle_idx_;
};

}  // namespace collage
