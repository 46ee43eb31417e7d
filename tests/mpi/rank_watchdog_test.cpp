// The rank watchdog (src/dist/rank_watchdog.h) in a healthy job, with real ranks (part of
// test_mpi_comm, every rank runs every test): it starts and stops collectively, and a rank that
// is only slow, in compute or in finishing, is not taken for a stalled one. A false alarm ends
// the whole job with the watchdog's message, which fails Dist.MpiRanks*. Ranks that do stall or
// die end their job, so those run as jobs of their own (watchdog_main.cpp, run_watchdog.sh).
#include "dist/rank_watchdog.h"

#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <cmath>
#include <thread>

#include "core/error.h"
#include "dist/mpi_comm.h"

namespace collage {
namespace {

void sleep_seconds(double seconds) {
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
}

// The heartbeat thread calls MPI beside the main thread.
TEST(RankWatchdog, SessionGivesThreadMultiple) {
  int level = MPI_THREAD_SINGLE;
  MPI_Query_thread(&level);
  EXPECT_EQ(level, MPI_THREAD_MULTIPLE);
}

// Silent for 1.5 timeouts on the main thread, twice: the last rank before a barrier (the others
// wait in it), then rank 0 before stopping (the others wait in the closing handshake).
TEST(RankWatchdog, SlowRanksAreNotStalledOnes) {
  const double timeout = 1.0;
  auto world = make_mpi_comm_groups(1).world;
  const int r = world->rank(), W = world->size();
  start_rank_watchdog(timeout);
  EXPECT_TRUE(rank_watchdog_running());
  EXPECT_EQ(rank_watchdog_timeout(), timeout);
  if (r == W - 1) sleep_seconds(1.5 * timeout);
  world->barrier();
  if (r == 0) sleep_seconds(1.5 * timeout);
  stop_rank_watchdog();
  EXPECT_FALSE(rank_watchdog_running());
  // It starts again after stopping.
  start_rank_watchdog(timeout);
  EXPECT_TRUE(rank_watchdog_running());
  stop_rank_watchdog();
  EXPECT_FALSE(rank_watchdog_running());
}

TEST(RankWatchdog, ZeroTurnsItOffAndBadTimeoutsFail) {
  EXPECT_THROW(start_rank_watchdog(-1), Error);
  EXPECT_THROW(start_rank_watchdog(0.5), Error);  // would wake every 0.1 s
  EXPECT_THROW(start_rank_watchdog(std::nan("")), Error);
  start_rank_watchdog(0);
  EXPECT_FALSE(rank_watchdog_running());
  stop_rank_watchdog();  // nothing to stop
  start_rank_watchdog(30);
  EXPECT_THROW(start_rank_watchdog(30), Error);  // already running
  EXPECT_TRUE(rank_watchdog_running());
  stop_rank_watchdog();
  EXPECT_FALSE(rank_watchdog_running());
}

}  // namespace
}  // namespace collage
