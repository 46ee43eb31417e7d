#pragma once
// The MPI Comm: collectives over an MPI communicator, on host buffers (semantics:
// src/dist/comm.h; rank layout: docs/ARCHITECTURE.md, "Rank layout").
#include <mpi.h>

#include <memory>

#include "dist/comm.h"

namespace collage {

// True when this process was started by mpirun/mpiexec (Open MPI, PMI or PMIx put the job
// size or rank in the environment). A single-process run never initialises MPI.
bool launched_by_mpirun();
// How many ranks the launcher started (OMPI_COMM_WORLD_SIZE or PMI_SIZE), without initialising
// MPI; 1 when not launched by mpirun.
int launched_world_size();

// MPI's lifetime, when launched_by_mpirun(); otherwise does nothing, and active() is false.
// Construction: MPI_Init_thread asking for MPI_THREAD_MULTIPLE (the rank watchdog's heartbeat
// thread calls MPI beside the main thread, src/dist/rank_watchdog.h); fails below
// MPI_THREAD_FUNNELED, which is all the rest needs.
// Destruction, normally: stop_rank_watchdog() (collective), then MPI_Finalize, which waits for
// every rank; while the watchdog ran, that wait is bounded by its timeout (past it this rank
// exits with status 1, and mpirun ends the job).
// Destruction during an exception (this rank is failing): no MPI_Finalize, which would wait
// for ranks that are waiting for this one in a collective. The watchdog thread is abandoned and
// the process exits non-zero after printing its error; mpirun then ends the job.
class MpiSession {
 public:
  MpiSession();
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
  bool active() const { return active_; }

 private:
  bool active_ = false;
  int uncaught_exceptions_ = 0;  // at construction: more at destruction means unwinding
};

// Throws collage::Error naming `what` and MPI's message when status is not MPI_SUCCESS.
void check_mpi(int status, const char* what);

// This rank's groups as MPI communicators, for the Comms built on top (MPI here, NCCL in
// nccl_comm.cpp). Every rank of MPI_COMM_WORLD calls it with the same tensor_parallel, after MPI
// is initialised. TP inner: ranks [d·tp, d·tp + tp) form tensor-parallel group d, ranks with the
// same rank mod tp form a data-parallel group; ranks within a group are ordered by world rank.
// `world` is a duplicate of MPI_COMM_WORLD; the caller owns all three. Fails (collage::Error
// naming parallel.tensor_parallel) when tp does not divide the ranks.
struct MpiGroups {
  MPI_Comm world, tensor_parallel, data_parallel;
};
MpiGroups split_rank_groups(int tensor_parallel, const char* who);

struct CommGroups {
  std::unique_ptr<Comm> world, tensor_parallel, data_parallel;
};

// MpiComms over split_rank_groups(tensor_parallel).
CommGroups make_mpi_comm_groups(int tensor_parallel);

}  // namespace collage
