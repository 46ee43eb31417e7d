#pragma once
// One micro-batch on the host, row-major: the named fields every training task and model
// share. A task fills the fields its objective reads (config/architecture.h) and leaves the
// others null:
//   next_token  input_ids, targets
//   masked_lm   input_ids, input_mask, segment_ids, masked_lm_positions, masked_lm_ids, and
//               next_sentence_labels when the architecture has a next-sentence head
// B (rows) and T (the model's seq_len) travel beside it; P is data.max_predictions.
#include <cstdint>

namespace collage {

struct Batch {
  const int32_t* input_ids = nullptr;             // (B, T) token ids
  const int32_t* input_mask = nullptr;            // (B, T) 1 real token, 0 padding
  const int32_t* segment_ids = nullptr;           // (B, T) token types (RoBERTa: all 0)
  const int32_t* masked_lm_positions = nullptr;   // (B, P) zero-padded: a row's labels end at
  const int32_t* masked_lm_ids = nullptr;         // (B, P) its first zero position
  const int32_t* next_sentence_labels = nullptr;  // (B) 0 is next, 1 random
  const int32_t* targets = nullptr;  // (B, T) each token's successor; < 0 ignored; null: no loss
};

}  // namespace collage
