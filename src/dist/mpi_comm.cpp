// MpiComm: one MPI communicator, host buffers (mpi_comm.h; semantics in src/dist/comm.h).
#include "dist/mpi_comm.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "dist/launcher_watch.h"
#include "dist/rank_watchdog.h"

namespace collage {

void check_mpi(int status, const char* what) {
  if (status != MPI_SUCCESS) {
    char message[MPI_MAX_ERROR_STRING];
    int length = 0;
    MPI_Error_string(status, message, &length);
    fail("MPI: {} failed: {}", what, std::string(message, size_t(length)));
  }
}

namespace {

// MPI counts are int: larger buffers would need derived types, which nothing here needs yet.
int mpi_count(int64_t n, const char* what) {
  COLLAGE_CHECK(n >= 0 && n <= INT_MAX, "MPI Comm: {}: count {} is outside [0, {}]", what, n,
                INT_MAX);
  return int(n);
}

class MpiComm final : public Comm {
 public:
  // Takes ownership of `group`, freed on destruction (destroy every MpiComm before
  // MPI_Finalize; after it, the communicator is left to MPI).
  explicit MpiComm(MPI_Comm group) : group_(group) {
    check_mpi(MPI_Comm_rank(group_, &rank_), "MPI_Comm_rank");
    check_mpi(MPI_Comm_size(group_, &size_), "MPI_Comm_size");
  }
  ~MpiComm() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&group_);
  }
  MpiComm(const MpiComm&) = delete;
  MpiComm& operator=(const MpiComm&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void all_reduce_sum(float* data, int64_t n) override {
    all_reduce(data, n, MPI_FLOAT, MPI_SUM, "MPI_Allreduce (float sum)");
  }
  void all_reduce_sum(double* data, int64_t n) override {
    all_reduce(data, n, MPI_DOUBLE, MPI_SUM, "MPI_Allreduce (double sum)");
  }
  // fp32 over the ranks, one rounding (comm.h): widening is exact, MPI sums the fp32 copies.
  void all_reduce_sum(bf16* data, int64_t n) override {
    widened_.resize(size_t(n));
    bf16_to_float_array(data, widened_.data(), n);
    all_reduce(widened_.data(), n, MPI_FLOAT, MPI_SUM, "MPI_Allreduce (bf16 sum in fp32)");
    float_to_bf16_array(widened_.data(), data, n);
  }
  void all_reduce_max(float* data, int64_t n) override {
    all_reduce(data, n, MPI_FLOAT, MPI_MAX, "MPI_Allreduce (float max)");
  }

  void reduce_scatter_sum(const float* send, float* receive, int64_t count_per_rank) override {
    const int count = mpi_count(count_per_rank, "reduce_scatter_sum");
    if (receive == send + count_per_rank * rank_) {
      // In place (comm.h): MPI_IN_PLACE leaves the result at the start of the buffer.
      float* buffer = const_cast<float*>(send);
      check_mpi(MPI_Reduce_scatter_block(MPI_IN_PLACE, buffer, count, MPI_FLOAT, MPI_SUM, group_),
                "MPI_Reduce_scatter_block (float sum, in place)");
      if (rank_ != 0) std::memmove(receive, buffer, size_t(count_per_rank) * sizeof(float));
      return;
    }
    check_mpi(MPI_Reduce_scatter_block(send, receive, count, MPI_FLOAT, MPI_SUM, group_),
              "MPI_Reduce_scatter_block (float sum)");
  }
  void reduce_scatter_sum(const bf16* send, bf16* receive, int64_t count_per_rank) override {
    const int count = mpi_count(count_per_rank, "reduce_scatter_sum");
    const int64_t total = count_per_rank * size_;
    widened_.resize(size_t(total + count_per_rank));
    float* widened_send = widened_.data();
    float* widened_receive = widened_.data() + total;
    bf16_to_float_array(send, widened_send, total);
    check_mpi(
        MPI_Reduce_scatter_block(widened_send, widened_receive, count, MPI_FLOAT, MPI_SUM, group_),
        "MPI_Reduce_scatter_block (bf16 sum in fp32)");
    float_to_bf16_array(widened_receive, receive, count_per_rank);
  }

  void all_gather(const void* send, void* receive, int64_t bytes_per_rank) override {
    const int bytes = mpi_count(bytes_per_rank, "all_gather");
    // In place (comm.h): this rank's part already sits at its place in `receive`.
    const bool in_place = send == static_cast<const char*>(receive) + bytes_per_rank * rank_;
    check_mpi(MPI_Allgather(in_place ? MPI_IN_PLACE : send, bytes, MPI_BYTE, receive, bytes,
                            MPI_BYTE, group_),
              "MPI_Allgather");
  }
  void broadcast(void* data, int64_t bytes, int root) override {
    COLLAGE_CHECK(root >= 0 && root < size_, "broadcast: root {} is not a rank of a {}-rank group",
                  root, size_);
    check_mpi(MPI_Bcast(data, mpi_count(bytes, "broadcast"), MPI_BYTE, root, group_), "MPI_Bcast");
  }
  void barrier() override { check_mpi(MPI_Barrier(group_), "MPI_Barrier"); }

 private:
  void all_reduce(void* data, int64_t n, MPI_Datatype type, MPI_Op op, const char* what) {
    check_mpi(MPI_Allreduce(MPI_IN_PLACE, data, mpi_count(n, what), type, op, group_), what);
  }

  MPI_Comm group_;
  int rank_ = 0, size_ = 1;
  std::vector<float> widened_;  // fp32 copies of bf16 buffers, reused across calls
};

}  // namespace

bool launched_by_mpirun() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"}) {
    if (std::getenv(name) != nullptr) return true;
  }
  return false;
}

int launched_world_size() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}) {
    if (const char* value = std::getenv(name)) return std::max(1, std::atoi(value));
  }
  return 1;
}

MpiSession::MpiSession() {
  if (!launched_by_mpirun()) return;
  int initialized = 0;
  check_mpi(MPI_Initialized(&initialized), "MPI_Initialized");
  if (initialized) return;  // someone else owns MPI's lifetime
  int provided = 0;
  check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
  if (provided < MPI_THREAD_FUNNELED) {
    MPI_Finalize();
    fail("MPI: the library gives thread level {}, the trainer needs MPI_THREAD_FUNNELED", provided);
  }
  check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &finalize_comm_), "MPI_Comm_dup (finalize rendezvous)");
  start_launcher_watch();  // a rank ends with its launcher (launcher_watch.h)
  active_ = true;
  uncaught_exceptions_ = std::uncaught_exceptions();
}

namespace {

using Clock = std::chrono::steady_clock;

// "ranks 1, 3" / "rank 2"
std::string rank_list(const std::vector<int>& ranks) {
  std::string list = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t k = 0; k < ranks.size(); ++k) list += (k ? ", " : "") + std::to_string(ranks[k]);
  return list;
}

// The rendezvous before MPI_Finalize (mpi_comm.h): every rank tells rank 0 it has arrived, rank 0
// waits up to `timeout_seconds` for all of them and then tells each to go on. A rank missing at
// the deadline is named and the job ended with MPI_Abort, which (MPI not being finalized yet)
// ends every rank, stopped ones too. The other ranks wait twice as long for rank 0's answer, so
// that rank 0 is the one that names a missing rank; only a missing rank 0 is named by them, by
// rank 1 first (the others wait kLaterExitSeconds longer, in case rank 1 is gone as well), and
// they end the job by exiting with status 1, not by MPI_Abort: with rank 0 stopped, MPI_Abort
// from another rank made Open MPI 4.1.4's mpirun crash in PMIx_server_finalize (12 of 90 runs,
// 4 ranks on 2 loaded cores) or hang there with every rank gone (1 of 90, and once in CI). A
// rank that exits is mpirun's ordinary failure path, and it kills the others, stopped ones too
// (60 of 60 clean). Rank 0's MPI_Abort, with another rank stopped, was clean in 40 of 40.
// Every request is complete on return: nothing is left pending for MPI_Finalize.
void rendezvous_before_finalize(MPI_Comm comm, double timeout_seconds) {
  static const int kArrived = 1, kGoOn = 2;  // never change under MPI_Isend
  constexpr int kTag = 0;                    // the communicator carries nothing else
  int rank = 0, size = 1;
  check_mpi(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(comm, &size), "MPI_Comm_size");
  constexpr double kLaterExitSeconds = 3;
  const double wait_seconds = rank == 0   ? timeout_seconds
                              : rank == 1 ? 2 * timeout_seconds
                                          : 2 * timeout_seconds + kLaterExitSeconds;
  const Clock::time_point deadline =
      Clock::now() +
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(wait_seconds));
  // Rank 0: one receive per other rank (index r), then one send each. Others: one send to rank 0
  // and one receive from it.
  std::vector<int> received(size_t(size), 0);  // (N)
  std::vector<MPI_Request> requests;
  if (rank == 0) {
    requests.assign(size_t(size), MPI_REQUEST_NULL);
    for (int r = 1; r < size; ++r) {
      check_mpi(MPI_Irecv(&received[size_t(r)], 1, MPI_INT, r, kTag, comm, &requests[size_t(r)]),
                "MPI_Irecv (finalize rendezvous)");
    }
  } else {
    requests.assign(2, MPI_REQUEST_NULL);
    check_mpi(MPI_Isend(&kArrived, 1, MPI_INT, 0, kTag, comm, &requests[0]),
              "MPI_Isend (finalize rendezvous)");
    check_mpi(MPI_Irecv(&received[0], 1, MPI_INT, 0, kTag, comm, &requests[1]),
              "MPI_Irecv (finalize rendezvous)");
  }
  while (true) {
    int all_completed = 0;
    check_mpi(
        MPI_Testall(int(requests.size()), requests.data(), &all_completed, MPI_STATUSES_IGNORE),
        "MPI_Testall (finalize rendezvous)");
    if (all_completed) break;
    if (Clock::now() > deadline) {
      if (rank == 0) {
        std::vector<int> missing;  // ranks whose arrival is still awaited
        for (int r = 1; r < size; ++r) {
          int arrived = 0;
          check_mpi(MPI_Test(&requests[size_t(r)], &arrived, MPI_STATUS_IGNORE),
                    "MPI_Test (finalize rendezvous)");
          if (!arrived) missing.push_back(r);
        }
        if (missing.empty()) continue;  // the last ones arrived just now
        fmt::print(stderr,
                   "collage: error: MPI_Finalize has waited {} s for the other ranks: {} (of {}) "
                   "{} not reached it: {} or stalled after the rank watchdog stopped; ending the "
                   "job\n",
                   timeout_seconds, rank_list(missing), size, missing.size() == 1 ? "has" : "have",
                   missing.size() == 1 ? "it died" : "they died");
      } else {
        fmt::print(stderr,
                   "collage: error: rank {} (of {}): MPI_Finalize has waited {} s for rank 0 to "
                   "see every rank reach it: rank 0 died or stalled after the rank watchdog "
                   "stopped; ending the job\n",
                   rank, size, wait_seconds);
      }
      std::fflush(stderr);
      if (rank != 0) std::_Exit(1);  // mpirun ends the others and exits with status 1
      MPI_Abort(MPI_COMM_WORLD, 1);  // ends every rank; mpirun exits with status 1
      std::abort();                  // MPI_Abort does not return
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (rank == 0) {
    for (int r = 1; r < size; ++r) {
      check_mpi(MPI_Isend(&kGoOn, 1, MPI_INT, r, kTag, comm, &requests[size_t(r)]),
                "MPI_Isend (finalize rendezvous)");
    }
    // 4-byte sends complete eagerly, and every receiver is waiting for this one.
    check_mpi(MPI_Waitall(int(requests.size()), requests.data(), MPI_STATUSES_IGNORE),
              "MPI_Waitall (finalize rendezvous)");
  }
}

// MPI_Finalize waits for every rank (Open MPI 4.1 synchronises all ranks in it: measured, one
// rank 10 s late holds the others 10 s). After the rendezvous every rank is at its door, so the
// wait is short; a rank stopped in the instructions between the two would still hold the others
// forever: past `timeout_seconds`, end this rank with status 1 instead. This is a last resort:
// ranks that exit inside MPI_Finalize's wait sometimes leave mpirun (Open MPI 4.1.4, PMIx 4.2)
// deadlocked in its own PMIx_server_finalize with every rank gone (measured under load: 3 runs
// of 24), which is why the rendezvous above, ending the job with MPI_Abort before
// MPI_Finalize, is the bound that counts. timeout_seconds == 0: unbounded.
void finalize_within(double timeout_seconds) {
  if (timeout_seconds <= 0) {
    MPI_Finalize();
    return;
  }
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::mutex mutex;
  std::condition_variable finalized_changed;
  bool finalized = false;
  std::thread guard([&] {
    std::unique_lock<std::mutex> lock(mutex);
    const auto timeout = std::chrono::duration<double>(timeout_seconds);
    if (finalized_changed.wait_for(lock, timeout, [&] { return finalized; })) return;
    fmt::print(stderr,
               "collage: error: rank {} (of {}): MPI_Finalize has not returned {} s after every "
               "rank reached it: one of them died or stalled on the way in; ending this rank\n",
               rank, size, timeout_seconds);
    std::fflush(stderr);
    std::_Exit(1);
  });
  MPI_Finalize();
  {
    std::lock_guard<std::mutex> lock(mutex);
    finalized = true;
  }
  finalized_changed.notify_one();
  guard.join();
}

}  // namespace

MpiSession::~MpiSession() {
  if (!active_) return;
  if (std::uncaught_exceptions() > uncaught_exceptions_) {
    // This rank is failing; the others may be blocked in a collective waiting for it, and
    // MPI_Finalize would wait for them (see the class comment).
    abandon_rank_watchdog();
    return;
  }
  const double timeout_seconds = rank_watchdog_timeout();
  try {
    stop_rank_watchdog();
    if (timeout_seconds > 0) rendezvous_before_finalize(finalize_comm_, timeout_seconds);
    check_mpi(MPI_Comm_free(&finalize_comm_), "MPI_Comm_free (finalize rendezvous)");
  } catch (const Error& e) {
    // A destructor cannot throw; an MPI call failing here has no one left to tell but stderr.
    fmt::print(stderr, "collage: error: {}\n", e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  finalize_within(timeout_seconds);
}

MpiGroups split_rank_groups(int tensor_parallel, const char* who) {
  int initialized = 0;
  check_mpi(MPI_Initialized(&initialized), "MPI_Initialized");
  COLLAGE_CHECK(initialized, "{}: MPI must be initialised first (launch with mpirun)", who);
  int world_rank = 0, world_size = 1;
  check_mpi(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(MPI_COMM_WORLD, &world_size), "MPI_Comm_size");
  COLLAGE_CHECK(tensor_parallel >= 1 && world_size % tensor_parallel == 0,
                "parallel.tensor_parallel: {} does not divide the {} ranks of the job",
                tensor_parallel, world_size);
  // TP inner (docs/ARCHITECTURE.md, "Rank layout"); key = world rank keeps world order.
  MpiGroups groups;
  check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &groups.world), "MPI_Comm_dup");
  check_mpi(MPI_Comm_split(MPI_COMM_WORLD, world_rank / tensor_parallel, world_rank,
                           &groups.tensor_parallel),
            "MPI_Comm_split (tensor parallel)");
  check_mpi(MPI_Comm_split(MPI_COMM_WORLD, world_rank % tensor_parallel, world_rank,
                           &groups.data_parallel),
            "MPI_Comm_split (data parallel)");
  return groups;
}

CommGroups make_mpi_comm_groups(int tensor_parallel) {
  const MpiGroups split = split_rank_groups(tensor_parallel, "MPI Comm");
  CommGroups groups;
  groups.world = std::make_unique<MpiComm>(split.world);
  groups.tensor_parallel = std::make_unique<MpiComm>(split.tensor_parallel);
  groups.data_parallel = std::make_unique<MpiComm>(split.data_parallel);
  return groups;
}

}  // namespace collage
