#pragma once
// A Comm on a backend's device memory built from a Comm on host memory: every collective
// copies its buffers to the host, runs there, and copies the result back. It lets the MPI
// Comm serve backends whose memory the host cannot read directly, such as the emulated cuda
// backend (its device memory is protected from host access outside kernels). A GPU build uses
// NCCL on device memory instead (src/dist/nccl_comm.h); on the cpu backend device memory is
// host memory and the MPI Comm is used as it is.
#include <memory>

#include "backend/backend.h"
#include "dist/comm.h"

namespace collage {

// `host` and `backend` must outlive the returned Comm; it has host's rank and size.
std::unique_ptr<Comm> make_staged_comm(Comm& host, Backend& backend);

}  // namespace collage
