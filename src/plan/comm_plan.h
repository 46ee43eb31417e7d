#pragma once
// The communication of one training step, per rank, computed from the shapes: the payload
// bytes the trainer hands to the tensor-parallel and the data-parallel group's collectives
// (what dist/counting_comm.h counts during a run, and the step line reports). Payload is the
// buffer of each collective in its element type; what a ring algorithm puts on the wire is
// about 2·(n−1)/n of it per all-reduce. docs/PARALLEL.md §7 lists the collectives.
#include <cstdint>

#include "config/config.h"

namespace collage {

struct CommPlan {
  int64_t tp_bytes = 0, tp_calls = 0;  // per rank and training step
  int64_t dp_bytes = 0, dp_calls = 0;
};

// One training step of `config` at tensor_parallel × data_parallel (parallel.zero from the
// config): micro-batches of training.micro_batch_size × data.seq_len tokens, as many per rank as
// the global batch gives each data-parallel rank. Validation steps add forward passes on top.
CommPlan plan_communication(const Config& config, int tensor_parallel, int data_parallel);

}  // namespace collage
