// ParallelRun: the rank layout, MPI's lifetime and the trainer's Comms (parallel_run.h).
#include "dist/parallel_run.h"

#include <spdlog/spdlog.h>

#include <cstdlib>

#include "core/error.h"
#include "core/error_lines.h"
#include "dist/rank_watchdog.h"
#include "dist/staged_comm.h"
#if defined(COLLAGE_HAVE_CUDA)
#include "dist/nccl_comm.h"
#endif

namespace collage {

RankLayout rank_layout(const Config& config, int world_size, int world_rank) {
  const int tp = config.parallel.tensor_parallel;
  COLLAGE_CHECK(tp >= 1 && world_size % tp == 0,
                "parallel.tensor_parallel: {} does not divide the {} ranks of the job (mpirun -np "
                "{}): start a multiple of {} ranks, or change parallel.tensor_parallel",
                tp, world_size, world_size, tp);
  RankLayout layout;
  layout.world_size = world_size;
  layout.world_rank = world_rank;
  layout.tp = tp;
  layout.tp_rank = world_rank % tp;
  layout.dp = world_size / tp;
  layout.dp_rank = world_rank / tp;
  layout.zero = config.parallel.zero == 1;
  // The batch checks with the real data-parallel size (micro-batches must cut the global batch
  // evenly over the replicas); the model checks (heads, ffn over tp) run with the config.
  validate_config(config,
                  fmt::format("the config at {} ranks = tensor-parallel {} x data-parallel {}",
                              world_size, tp, layout.dp),
                  layout.dp);
  return layout;
}

int node_local_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"}) {
    if (const char* value = std::getenv(name)) return std::max(0, std::atoi(value));
  }
  return 0;
}

ParallelRun::ParallelRun(const Config& config) {
  if (!launched_by_mpirun()) {
    layout_ = rank_layout(config, 1, 0);
    host_.world = make_single_comm();
    host_.tensor_parallel = make_single_comm();
    host_.data_parallel = make_single_comm();
    return;
  }
  session_ = std::make_unique<MpiSession>();
  int world_size = 1, world_rank = 0;
  check_mpi(MPI_Comm_size(MPI_COMM_WORLD, &world_size), "MPI_Comm_size");
  check_mpi(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank), "MPI_Comm_rank");
  layout_.world_size = world_size;
  layout_.world_rank = world_rank;
  try {
    layout_ = rank_layout(config, world_size, world_rank);
  } catch (const Error& e) {
    abort_job(e.what());  // every rank fails alike; the first to abort ends the job
    throw;
  }
  host_ = make_mpi_comm_groups(layout_.tp);
  start_rank_watchdog(config.parallel.comm_timeout);  // stopped by ~MpiSession
}

ParallelRun::~ParallelRun() = default;

void ParallelRun::attach_backend(Backend& backend) {
  const std::string name = backend.name();
  if (name.starts_with("cpu")) {
    // cpu: device memory is host memory, the MPI Comms read it directly
  } else if (name == "cuda-emulated") {
    device_tp_ = make_staged_comm(*host_.tensor_parallel, backend);
    device_dp_ = make_staged_comm(*host_.data_parallel, backend);
  } else {
#if defined(COLLAGE_HAVE_CUDA)
    if (multi_rank()) {
      nccl_ = make_nccl_comms(layout_.tp, static_cast<cudaStream_t>(backend.stream_handle()));
    } else {
      device_tp_ = make_single_comm();
      device_dp_ = make_single_comm();
    }
#else
    fail("backend {}: no Comm for its memory in this build", name);
#endif
  }
  Comm& tp = nccl_.tensor_parallel ? *nccl_.tensor_parallel
             : device_tp_          ? *device_tp_
                                   : *host_.tensor_parallel;
  Comm& dp = nccl_.data_parallel ? *nccl_.data_parallel
             : device_dp_        ? *device_dp_
                                 : *host_.data_parallel;
  counted_tp_ = make_counting_comm(tp, tp_traffic);
  counted_dp_ = make_counting_comm(dp, dp_traffic);
}

void ParallelRun::lead_rank_first(const std::function<void()>& work) {
  if (layout_.world_rank == 0) work();
  host_world().barrier();
  if (layout_.world_rank != 0) work();
}

void ParallelRun::abort_job(const std::string& message) {
  if (!multi_rank() && !session_) return;
  // One write(2) for the whole line (core/error_lines.h): ranks failing together stay apart.
  write_to_stderr(error_lines(
      "collage: error: ", fmt::format("rank {} of {}: ", layout_.world_rank, layout_.world_size),
      message));
  if (auto logger = spdlog::default_logger()) {
    logger->error("rank {}: {}", layout_.world_rank, message);
    logger->flush();
  }
  if (session_ && session_->active()) MPI_Abort(MPI_COMM_WORLD, 1);
}

}  // namespace collage
