#pragma once
// The cross-entropy of rows of logits whose padded vocabulary may be split over the
// tensor-parallel group (Megatron's vocab-parallel loss), shared by the GPT's head and the
// encoders' MLM head. At tp = 1 one op; at tp > 1 in stages: the row max over every rank's
// columns, then Σ exp(x − max) and the target's logit (owned by one rank, 0 on the others)
// summed over the ranks. Either way the log-sum-exp stays in row_lse, so that the backward
// (cross_entropy_shard_backward) reads the logits once instead of twice.
#include <cstdint>

#include "backend/backend.h"
#include "dist/comm.h"

namespace collage {

// losses (N); logits (N, Vl) this rank's columns [vocab_begin, vocab_begin + Vl) of the padded
// vocabulary; V the real vocabulary. row_lse (N): the rows' log-sum-exp, for the backward;
// row_max (N), row_sums (2N): scratch used at tp > 1 only.
template <typename Storage>
void vocab_parallel_cross_entropy(BackendT<Storage>& be, Comm* tp_comm, int tp, float* losses,
                                  float* row_lse, float* row_max, float* row_sums,
                                  const Storage* logits, const int32_t* targets, int64_t N, int V,
                                  int Vl, int64_t vocab_begin) {
  if (tp == 1) {
    be.cross_entropy_forward(losses, logits, targets, N, V, Vl, row_lse);
    return;
  }
  be.cross_entropy_shard_max(row_max, logits, N, V, Vl, vocab_begin);
  tp_comm->all_reduce_max(row_max, N);
  be.cross_entropy_shard_sums(row_sums, logits, targets, row_max, N, V, Vl, vocab_begin);
  tp_comm->all_reduce_sum(row_sums, 2 * N);
  be.cross_entropy_shard_loss(losses, row_lse, row_max, row_sums, targets, N);
}

}  // namespace collage
