// NcclComm: one NCCL communicator over a group of ranks (nccl_comm.h).
#include "dist/nccl_comm.h"

#include <mpi.h>
#include <nccl.h>

#include <cstdint>

#include "core/error.h"

namespace collage {
namespace {

void check(ncclResult_t status, const char* what) {
  if (status != ncclSuccess) fail("NCCL: {} failed: {}", what, ncclGetErrorString(status));
}
void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) fail("NCCL Comm: {} failed: {}", what, cudaGetErrorString(status));
}

class NcclComm final : public Comm {
 public:
  // Collective over the ranks of `group` (an MPI communicator with the same members).
  NcclComm(MPI_Comm group, cudaStream_t stream) : stream_(stream) {
    check_mpi(MPI_Comm_rank(group, &rank_), "MPI_Comm_rank");
    check_mpi(MPI_Comm_size(group, &size_), "MPI_Comm_size");
    ncclUniqueId id{};
    if (rank_ == 0) check(ncclGetUniqueId(&id), "ncclGetUniqueId");
    check_mpi(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, group), "MPI_Bcast of the NCCL unique id");
    check(ncclCommInitRank(&comm_, size_, id, rank_), "ncclCommInitRank");
    check(cudaMalloc(&barrier_word_, sizeof(float)), "cudaMalloc");
  }
  ~NcclComm() override {
    cudaFree(barrier_word_);
    ncclCommDestroy(comm_);
  }
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  // In place, on device buffers. bf16 sums as NCCL sums bf16: each hop of the ring adds in
  // fp32 and rounds to bf16, so this is the one Comm whose bf16 sums may round more than once
  // (src/dist/comm.h); a single rounding needs a device widen/round pass first.
  void all_reduce_sum(float* data, int64_t n) override {
    all_reduce(data, n, ncclFloat32, ncclSum);
  }
  void all_reduce_sum(double* data, int64_t n) override {
    all_reduce(data, n, ncclFloat64, ncclSum);
  }
  void all_reduce_sum(bf16* data, int64_t n) override {
    all_reduce(data, n, ncclBfloat16, ncclSum);
  }
  void all_reduce_max(float* data, int64_t n) override {
    all_reduce(data, n, ncclFloat32, ncclMax);
  }
  void broadcast(void* data, int64_t bytes, int root) override {
    check(ncclBroadcast(data, data, size_t(bytes), ncclUint8, root, comm_, stream_),
          "ncclBroadcast");
  }
  // Every rank's stream reaches this point: a one-element all-reduce, then wait for it.
  void barrier() override {
    all_reduce(barrier_word_, 1, ncclFloat32, ncclSum);
    check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }

  // ZeRO-1's pair: each rank gets the sum of its 1/size slice, and the
  // slices are gathered back. count_per_rank elements per rank.
  void reduce_scatter_sum(const float* send, float* receive, int64_t count_per_rank) override {
    reduce_scatter(send, receive, count_per_rank, ncclFloat32);
  }
  void reduce_scatter_sum(const bf16* send, bf16* receive, int64_t count_per_rank) override {
    reduce_scatter(send, receive, count_per_rank, ncclBfloat16);
  }
  void all_gather(const void* send, void* receive, int64_t bytes_per_rank) override {
    check(ncclAllGather(send, receive, size_t(bytes_per_rank), ncclUint8, comm_, stream_),
          "ncclAllGather");
  }

 private:
  void all_reduce(void* data, int64_t n, ncclDataType_t type, ncclRedOp_t op) {
    check(ncclAllReduce(data, data, size_t(n), type, op, comm_, stream_), "ncclAllReduce");
  }
  void reduce_scatter(const void* send, void* receive, int64_t count_per_rank,
                      ncclDataType_t type) {
    check(ncclReduceScatter(send, receive, size_t(count_per_rank), type, ncclSum, comm_, stream_),
          "ncclReduceScatter");
  }

  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_;
  int rank_ = 0, size_ = 1;
  float* barrier_word_ = nullptr;
};

}  // namespace

CommGroups make_nccl_comms(int tensor_parallel, cudaStream_t stream) {
  MpiGroups split = split_rank_groups(tensor_parallel, "NCCL Comm");
  CommGroups comms;
  comms.world = std::make_unique<NcclComm>(split.world, stream);
  comms.tensor_parallel = std::make_unique<NcclComm>(split.tensor_parallel, stream);
  comms.data_parallel = std::make_unique<NcclComm>(split.data_parallel, stream);
  // The NCCL communicators need MPI only to share their unique ids.
  MPI_Comm_free(&split.world);
  MPI_Comm_free(&split.tensor_parallel);
  MPI_Comm_free(&split.data_parallel);
  return comms;
}

}  // namespace collage
