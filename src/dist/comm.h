#pragma once
// Comm: the collectives the trainer needs, over one group of ranks (docs/ARCHITECTURE.md,
// "Comm" and "Rank layout": TP is the inner dimension, ranks [d·tp, d·tp + tp) form
// tensor-parallel group d). Implementations: `single` (one process, identities),
// `mpi` (src/dist/mpi_comm.h, host buffers) and `nccl` (src/dist/nccl_comm.h, GPU builds,
// device buffers queued on the training stream).
//
// Semantics, the same for every implementation, on buffers of that implementation's kind:
//  - Every rank of the group calls every collective, in the same order, with the same
//    counts (and the same root). Counts are elements unless the name says bytes.
//  - all_reduce_sum / all_reduce_max: in place; afterwards every rank holds, element by
//    element, the sum (max) over the ranks of their inputs.
//  - reduce_scatter_sum(send, receive, count_per_rank): `send` holds size()·count_per_rank
//    elements on every rank; rank r receives in `receive` (count_per_rank elements) the sum
//    over ranks of send[r·count_per_rank, (r+1)·count_per_rank). receive is either disjoint from
//    send or exactly send + r·count_per_rank (in place: ZeRO-1 reduces each rank's shard of the
//    gradient memory where it lies).
//  - all_gather(send, receive, bytes_per_rank): receive holds size()·bytes_per_rank bytes,
//    rank-ordered: rank r's `send` lands at receive + r·bytes_per_rank. send is either disjoint
//    from receive or exactly receive + r·bytes_per_rank (in place).
//  - broadcast(data, bytes, root): every rank's `data` becomes root's (root: rank in group).
//  - barrier(): returns on a rank once every rank of the group has called it.
//  - bf16 sums (all_reduce_sum, reduce_scatter_sum): each element is summed in fp32 over the
//    ranks and rounded to bf16 once — never pairwise in bf16 (a pairwise bf16 sum of
//    256 + 1 + 1 + 1 stays 256; the fp32 sum rounds once to 260). Exception: the NCCL Comm
//    sums bf16 as NCCL does (src/dist/nccl_comm.cpp).
//  - The order in which fp32/fp64 sums add the ranks is the implementation's (MPI, NCCL):
//    identical on every rank of one call, not necessarily rank order.
#include <cstdint>
#include <memory>

#include "numerics/bf16.h"

namespace collage {

class Comm {
 public:
  virtual ~Comm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual void all_reduce_sum(float* data, int64_t n) = 0;
  virtual void all_reduce_sum(double* data, int64_t n) = 0;
  virtual void all_reduce_sum(bf16* data, int64_t n) = 0;
  virtual void all_reduce_max(float* data, int64_t n) = 0;
  virtual void reduce_scatter_sum(const float* send, float* receive, int64_t count_per_rank) = 0;
  virtual void reduce_scatter_sum(const bf16* send, bf16* receive, int64_t count_per_rank) = 0;
  virtual void all_gather(const void* send, void* receive, int64_t bytes_per_rank) = 0;
  virtual void broadcast(void* data, int64_t bytes, int root) = 0;
  virtual void barrier() = 0;
};

// The group of one process: sums and maxima are identities, reduce-scatter and all-gather
// copy, broadcast (root 0) and barrier do nothing.
std::unique_ptr<Comm> make_single_comm();

}  // namespace collage
