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
// Destruction, normally: stop_rank_watchdog() (collective), then MPI_Finalize. MPI_Finalize waits
// for every rank, and a rank that stalls after the watchdog's handshake would hold the others
// there forever; so when the watchdog ran, the ranks first meet at a rendezvous bounded by its
// timeout, over MPI: each tells rank 0 it has reached MPI_Finalize, rank 0 answers once all have.
// Past the timeout, rank 0 prints
//   collage: error: MPI_Finalize has waited T s for the other ranks: rank R (of N) has not
//   reached it: it died or stalled after the rank watchdog stopped; ending the job
// and calls MPI_Abort, which ends every rank, stopped ones too (if rank 0 is the one missing,
// rank 1 names it after twice the timeout and exits with status 1, and mpirun ends the rest;
// the others do the same 3 s later should rank 1 be gone too: see rendezvous_before_finalize
// for why not MPI_Abort). Only then MPI_Finalize; a rank stopped in the few instructions
// between the rendezvous and MPI_Finalize's own wait is left to a last guard (this rank exits
// with status 1 after the timeout), which Open MPI 4.1 does not always turn into the end of the
// job (see finalize_within in mpi_comm.cpp).
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
  // A duplicate of MPI_COMM_WORLD for the rendezvous before MPI_Finalize, made at start: a
  // collective like MPI_Comm_dup cannot be called at the end, when a rank may be stalled.
  MPI_Comm finalize_comm_ = MPI_COMM_NULL;
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
