// test_mpi_watchdog: ranks doing all-reduces in a loop under the rank watchdog
// (src/dist/rank_watchdog.h), with one chosen rank misbehaving. tests/mpi/run_watchdog.sh starts
// it under mpirun and checks how the job ends (tests/CMakeLists.txt, Dist.MpiWatchdog*).
//
//   test_mpi_watchdog SCENARIO CHOSEN_RANK TIMEOUT_SECONDS
//
// stall       the chosen rank stops itself (SIGSTOP) at iteration 3: the watchdog must end the
//             job, naming it.
// kill        the chosen rank kills itself (SIGKILL) at iteration 3: mpirun (or the watchdog)
//             must end the job, naming it.
// throw       the chosen rank throws collage::Error at iteration 3, the way a failing trainer
//             does: MpiSession skips MPI_Finalize and the rank exits 1, so mpirun ends the job.
// late        nobody misbehaves, but ranks finish at different times: the chosen rank computes
//             for timeout + 3 s before the last all-reduce (the others wait in it), and the next
//             rank sleeps timeout + 3 s after it (the others wait in the watchdog's closing
//             handshake). Busy is not stalled: the job must end with status 0.
// stall-after-stop
//             every rank stops the watchdog, then the chosen rank stops itself before
//             MPI_Finalize: the rendezvous before MPI_Finalize (MpiSession, src/dist/mpi_comm.h)
//             must end the job, naming it (rank 0 names any other rank; the others name rank 0).
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "dist/mpi_comm.h"
#include "dist/rank_watchdog.h"

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kIterations = 6;
constexpr int kMisbehaveAt = 3;

// Keeps this rank's core busy for `seconds`, as a long GEMM would; returns something that
// depends on every step so the compiler keeps the loop.
float compute_for(double seconds) {
  const Clock::time_point end = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                   std::chrono::duration<double>(seconds));
  float x = 1.0f;
  while (Clock::now() < end) {
    for (int k = 0; k < 100000; ++k) x = x * 0.999999f + 1e-6f;
  }
  return x;
}

// One iteration's all-reduce, checked: rank r contributes r + 1 everywhere. (n)
void all_reduce_and_check(collage::Comm& world, int iteration) {
  const int n = 1000;
  std::vector<float> values(n, float(world.rank() + 1));
  world.all_reduce_sum(values.data(), n);
  const float expected = float(world.size() * (world.size() + 1) / 2);
  for (int k = 0; k < n; ++k) {
    COLLAGE_CHECK(values[size_t(k)] == expected,
                  "iteration {}: all-reduce gave {} at {}, expected {}", iteration,
                  values[size_t(k)], k, expected);
  }
}

int run(const std::string& scenario, int chosen, double timeout_seconds) {
  const std::vector<std::string> scenarios = {"stall", "kill", "throw", "late", "stall-after-stop"};
  COLLAGE_CHECK(std::find(scenarios.begin(), scenarios.end(), scenario) != scenarios.end(),
                "unknown scenario '{}'", scenario);
  int rank = 0, size = 1;
  {
    collage::MpiSession session;
    if (!session.active()) {
      std::fprintf(stderr, "test_mpi_watchdog: start it with mpirun (tests/mpi/run_watchdog.sh)\n");
      return 1;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    COLLAGE_CHECK(chosen >= 0 && chosen < size, "chosen rank {} is not one of {} ranks", chosen,
                  size);
    collage::start_rank_watchdog(timeout_seconds);
    const std::unique_ptr<collage::Comm> world = collage::make_mpi_comm_groups(1).world;
    const bool chosen_one = rank == chosen;
    for (int iteration = 0; iteration < kIterations; ++iteration) {
      if (chosen_one && iteration == kMisbehaveAt) {
        if (scenario == "stall") {
          std::fprintf(stderr, "test_mpi_watchdog: rank %d stops itself (SIGSTOP)\n", rank);
          std::raise(SIGSTOP);
        } else if (scenario == "kill") {
          std::fprintf(stderr, "test_mpi_watchdog: rank %d kills itself (SIGKILL)\n", rank);
          std::raise(SIGKILL);
        } else if (scenario == "throw") {
          collage::fail("rank {}: chosen to fail at iteration {}", rank, iteration);
        }
      }
      if (scenario == "late" && chosen_one && iteration == kIterations - 1) {
        std::fprintf(stderr, "test_mpi_watchdog: rank %d computes for %.1f s (%g)\n", rank,
                     timeout_seconds + 3, compute_for(timeout_seconds + 3));
      }
      all_reduce_and_check(*world, iteration);
    }
    if (scenario == "late" && rank == (chosen + 1) % size) {
      std::fprintf(stderr, "test_mpi_watchdog: rank %d finishes %.1f s after the others\n", rank,
                   timeout_seconds + 3);
      std::this_thread::sleep_for(std::chrono::duration<double>(timeout_seconds + 3));
    }
    if (scenario == "stall-after-stop") {
      collage::stop_rank_watchdog();
      if (chosen_one) {
        std::fprintf(stderr, "test_mpi_watchdog: rank %d stops itself before MPI_Finalize\n", rank);
        std::raise(SIGSTOP);
      }
    }
  }  // MPI_Finalize (MpiSession), after stopping the watchdog
  if (rank == 0)
    std::printf("test_mpi_watchdog: %s: all %d ranks finished\n", scenario.c_str(), size);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr,
                 "usage: test_mpi_watchdog stall|kill|throw|late|stall-after-stop CHOSEN_RANK "
                 "TIMEOUT_SECONDS\n");
    return 2;
  }
  try {
    return run(argv[1], std::atoi(argv[2]), std::atof(argv[3]));
  } catch (const collage::Error& e) {
    std::fprintf(stderr, "collage: error: %s\n", e.what());
    return 1;
  }
}
