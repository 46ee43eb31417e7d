#pragma once
// A training process's place in its job and the Comms it trains with (docs/PARALLEL.md §1, §2).
//
// `mpirun -np N collage train CONFIG` starts N ranks; parallel.tensor_parallel = t splits them
// into N / t data-parallel replicas of t tensor-parallel ranks each, TP inner: world ranks
// [d·t, d·t + t) form tensor-parallel group d (data-parallel rank d), and the ranks with the
// same world rank mod t form a data-parallel group. A process not started by mpirun is a job of
// one rank and never touches MPI.
#include <functional>
#include <memory>
#include <string>

#include "backend/backend.h"
#include "config/config.h"
#include "dist/comm.h"
#include "dist/counting_comm.h"
#include "dist/mpi_comm.h"

namespace collage {

struct RankLayout {
  int world_size = 1, world_rank = 0;
  int tp = 1, tp_rank = 0;  // tensor-parallel group size and rank in it
  int dp = 1, dp_rank = 0;  // data-parallel size (replicas) and this replica
  bool zero = false;        // parallel.zero: 1 (ZeRO-1)
};

// The layout of world rank `world_rank` of `world_size` under `config`. Throws Error naming
// the keys when parallel.tensor_parallel does not divide the world, or the global batch does
// not cut into micro-batches of every data-parallel rank.
RankLayout rank_layout(const Config& config, int world_size, int world_rank);

// The GPU of this rank on its node: the launcher's node-local rank (Open MPI, MPICH, Slurm),
// 0 when there is none.
int node_local_rank();

class ParallelRun {
 public:
  // Initialises MPI when launched by mpirun, splits the ranks, starts the rank watchdog
  // (parallel.comm_timeout). A single process gets one-rank Comms and no MPI.
  explicit ParallelRun(const Config& config);
  ~ParallelRun();
  ParallelRun(const ParallelRun&) = delete;
  ParallelRun& operator=(const ParallelRun&) = delete;

  const RankLayout& layout() const { return layout_; }
  bool multi_rank() const { return layout_.world_size > 1; }

  // Comms on host memory, for scalars (loss, norms, EDQ) and checkpoint coordination.
  Comm& host_world() { return *host_.world; }
  Comm& host_tp() { return *host_.tensor_parallel; }
  Comm& host_dp() { return *host_.data_parallel; }

  // Comms on `backend`'s memory for the model's and the gradients' tensors, counted in
  // tp_traffic / dp_traffic: the MPI Comms themselves on the cpu backend, staged through the
  // host on cuda-emulated, NCCL on cuda. Call once, after the backend exists.
  void attach_backend(Backend& backend);
  Comm& tp() { return *counted_tp_; }
  Comm& dp() { return *counted_dp_; }
  CommTraffic tp_traffic, dp_traffic;

  // Runs `work` on world rank 0, then on the other ranks: rank 0 prepares what the others
  // then read (a corpus the config asks to be prepared once).
  void lead_rank_first(const std::function<void()>& work);

  // Ends the whole job: logs `message`, then MPI_Abort when multi-rank (other ranks may be
  // blocked in a collective), else returns so that the caller can throw.
  void abort_job(const std::string& message);

 private:
  std::unique_ptr<MpiSession> session_;  // first member: MPI outlives every Comm below
  RankLayout layout_;
  CommGroups host_;
  std::unique_ptr<Comm> device_tp_, device_dp_;  // staged or NCCL; null when host Comms serve
  CommGroups nccl_;
  std::unique_ptr<Comm> counted_tp_, counted_dp_;
};

}  // namespace collage
