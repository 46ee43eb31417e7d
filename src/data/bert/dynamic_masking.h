#pragma once
// RoBERTa's dynamic masking: a sample's masked-LM positions are drawn anew each time it is read
// (each epoch), instead of the fixed masks the HDF5 file holds. The file's masks are undone
// first (the original token put back at each labelled position), then, as fairseq's RoBERTa
// does: ⌊0.15·n + u⌋ of the n maskable tokens (u uniform in [0, 1): the expected count is
// exactly 15%), chosen uniformly without replacement, at most max_predictions of them; each
// chosen token becomes the mask token with probability 0.8, a uniformly random token with 0.1,
// and stays with 0.1. Maskable: real tokens (input_mask 1) that are not special tokens.
//
// The random numbers come from a stream keyed by (seed, epoch, sample index) only, so a
// sample's masks do not depend on which rank reads it or where a resumed run restarts.
#include <cstdint>
#include <vector>

#include "data/bert/bert_hdf5.h"

namespace collage {

struct DynamicMasking {
  double probability = 0.15;     // share of the maskable tokens
  int32_t mask_token = 0;        // <mask> (RoBERTa: 50264) or [MASK] (BERT: 103)
  int32_t vocab_size = 0;        // random replacements are drawn from [0, vocab_size)
  std::vector<int32_t> special;  // never masked: <s>, </s>, <pad>, ... ([CLS], [SEP], [PAD])
  uint64_t seed = 0;
};

// Re-masks row b of `batch` in place: input_ids, masked_positions, masked_ids, masked_counts.
// epoch and sample_index select the random stream.
void remask_row(BertBatch& batch, int64_t b, const DynamicMasking& masking, int64_t epoch,
                int64_t sample_index);

}  // namespace collage
