#pragma once
// The NCCL Comm (GPU builds only: src/dist/nccl_comm.cpp needs NCCL, MPI and the CUDA runtime).
// Collectives run on device buffers, queued on the training stream. Each group — the whole
// world, the tensor-parallel group and the data-parallel group of this rank — has its own
// NCCL communicator; the NCCL unique id of a group travels from its first rank to the others
// over MPI (docs/ARCHITECTURE.md, "Rank layout": TP is the inner dimension, ranks
// [d·tp, d·tp + tp) form tensor-parallel group d).
#include <cuda_runtime_api.h>

#include <memory>

#include "dist/comm.h"
#include "dist/mpi_comm.h"

namespace collage {

// Every rank of MPI_COMM_WORLD calls this with the same tensor_parallel (which divides the
// world size), after MPI_Init and after selecting its GPU. `stream`: where collectives queue.
CommGroups make_nccl_comms(int tensor_parallel, cudaStream_t stream);

}  // namespace collage
