#pragma once
// Writes one BERT pretraining HDF5 file in the layout and dtypes of NVIDIA DeepLearningExamples'
// create_pretraining_data.py (h5py create_dataset(..., dtype=..., compression='gzip')):
//
//   input_ids             [N, S]  int32 (i4)   [CLS] A [SEP] B [SEP] after masking, 0-padded
//   input_mask            [N, S]  int8  (i1)   1 up to the length L, then 0
//   segment_ids           [N, S]  int8  (i1)   0 up to the first [SEP], 1 to L, then 0
//   masked_lm_positions   [N, P]  int32 (i4)   sorted positions, then 0
//   masked_lm_ids         [N, P]  int32 (i4)   original ids at those positions, then 0
//   next_sentence_labels  [N]     int8  (i1)   1: B is a random next
//
// (the layout src/data/bert/bert_hdf5.h reads). Storage: gzip level 4 (h5py's default level) in
// chunks of whole rows, about 1 MB of input_ids each (h5py would split columns; whole rows let
// a reader decompress each row once), no timestamps (so equal content gives equal bytes).
#include <cstdint>
#include <span>
#include <string>

#include "data/bert/prepare_bert.h"

namespace collage {

// Writes instances[rows[0]], instances[rows[1]], ... as rows 0, 1, ... of `path`, padded to
// (seq_len, max_predictions); the file appears under `path` only when complete (it is written
// as a hidden temporary in the same directory, then renamed). Throws Error naming the file.
void write_bert_hdf5(const std::string& path, const BertInstances& instances,
                     std::span<const int64_t> rows, int seq_len, int max_predictions);

}  // namespace collage
