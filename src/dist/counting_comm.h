#pragma once
// A Comm that counts what passes through another: the payload bytes of every collective (the
// size of its buffer in the buffer's element type: n·size for an all-reduce, the whole send
// buffer of a reduce-scatter, the whole receive buffer of an all-gather) and the number of
// calls. The trainer wraps its tensor-parallel and data-parallel Comms in one each to report
// communication per step (docs/PARALLEL.md §7); `collage plan` computes
// the same figures from the shapes.
#include <cstdint>
#include <memory>

#include "dist/comm.h"

namespace collage {

struct CommTraffic {
  int64_t bytes = 0;
  int64_t calls = 0;
};

// `inner` and `traffic` must outlive the returned Comm. Several Comms may share one traffic.
std::unique_ptr<Comm> make_counting_comm(Comm& inner, CommTraffic& traffic);

}  // namespace collage
