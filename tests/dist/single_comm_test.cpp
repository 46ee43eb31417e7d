// The one-process Comm (src/dist/comm.h): a group of one, where sums and maxima are the
// identity and reduce-scatter / all-gather copy the one rank's slice.
#include <gtest/gtest.h>
#include <mpi.h>
#include <stdlib.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "dist/comm.h"
#include "dist/mpi_comm.h"
#include "numerics/bf16.h"

namespace collage {
namespace {

TEST(SingleComm, IsRankZeroOfOne) {
  auto comm = make_single_comm();
  EXPECT_EQ(comm->rank(), 0);
  EXPECT_EQ(comm->size(), 1);
  comm->barrier();
}

TEST(SingleComm, ReductionsLeaveDataUnchanged) {
  auto comm = make_single_comm();
  std::vector<float> f = {1.5f, -2.0f, 3.25f};
  std::vector<double> d = {1e300, -0.5};
  std::vector<bf16> b = {float_to_bf16(256.0f), float_to_bf16(-1.0f)};
  comm->all_reduce_sum(f.data(), int64_t(f.size()));
  comm->all_reduce_sum(d.data(), int64_t(d.size()));
  comm->all_reduce_sum(b.data(), int64_t(b.size()));
  EXPECT_EQ(f, (std::vector<float>{1.5f, -2.0f, 3.25f}));
  EXPECT_EQ(d, (std::vector<double>{1e300, -0.5}));
  EXPECT_EQ(bf16_to_float(b[0]), 256.0f);
  EXPECT_EQ(bf16_to_float(b[1]), -1.0f);
  comm->all_reduce_max(f.data(), int64_t(f.size()));
  EXPECT_EQ(f, (std::vector<float>{1.5f, -2.0f, 3.25f}));
}

TEST(SingleComm, ReduceScatterAndAllGatherCopy) {
  auto comm = make_single_comm();
  const std::vector<float> f = {1.0f, 2.0f, 3.0f, 4.0f};
  std::vector<float> f_out(4, 0.0f);
  comm->reduce_scatter_sum(f.data(), f_out.data(), 4);
  EXPECT_EQ(f_out, f);

  const std::vector<bf16> b = {float_to_bf16(7.0f), float_to_bf16(-3.0f)};
  std::vector<bf16> b_out(2, bf16{0});
  comm->reduce_scatter_sum(b.data(), b_out.data(), 2);
  EXPECT_EQ(bf16_to_float(b_out[0]), 7.0f);
  EXPECT_EQ(bf16_to_float(b_out[1]), -3.0f);

  const char message[] = "rank-ordered";
  char gathered[sizeof message] = {};
  comm->all_gather(message, gathered, int64_t(sizeof message));
  EXPECT_STREQ(gathered, message);
}

TEST(SingleComm, BroadcastFromRootZeroOnly) {
  auto comm = make_single_comm();
  int value = 42;
  comm->broadcast(&value, sizeof value, 0);
  EXPECT_EQ(value, 42);
  EXPECT_THROW(comm->broadcast(&value, sizeof value, 1), Error);
}

// A test process is not started by mpirun (ctest runs it directly), so the session must leave
// MPI alone: single-process runs never initialise MPI.
TEST(MpiSession, DoesNothingOutsideMpirun) {
  if (launched_by_mpirun()) GTEST_SKIP() << "this test binary was started by mpirun";
  {
    MpiSession session;
    EXPECT_FALSE(session.active());
  }
  int initialized = 1;
  MPI_Initialized(&initialized);
  EXPECT_EQ(initialized, 0);
}

// Each of the launchers' variables on its own marks a process started by mpirun.
TEST(MpiSession, LaunchedByMpirunReadsTheLauncherVariables) {
  const char* names[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"};
  for (const char* name : names) {
    if (getenv(name) != nullptr) GTEST_SKIP() << name << " is set in this environment";
  }
  EXPECT_FALSE(launched_by_mpirun());
  for (const char* name : names) {
    setenv(name, "4", 1);
    EXPECT_TRUE(launched_by_mpirun()) << name;
    unsetenv(name);
  }
  EXPECT_FALSE(launched_by_mpirun());
}

}  // namespace
}  // namespace collage
