#pragma once
// Comm: the collectives the trainer needs. `single` (one process, no-ops) now; MPI and
// NCCL implementations come with the parallelism issue. Rank layout: TP is the inner
// dimension (ranks [dp·tp, dp·tp + tp) form one TP group).
#include <cstdint>
#include <memory>

#include "core/bf16.h"

namespace collage {

class Comm {
 public:
  virtual ~Comm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual void all_reduce_sum(float* data, int64_t n) = 0;
  virtual void all_reduce_sum(double* data, int64_t n) = 0;
  virtual void all_reduce_sum(bf16* data, int64_t n) = 0;
  virtual void broadcast(void* data, int64_t bytes, int root) = 0;
  virtual void barrier() = 0;
};

std::unique_ptr<Comm> make_single_comm();

}  // namespace collage
