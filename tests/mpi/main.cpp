// main for test_mpi_comm: every rank runs every test under one MpiSession (MPI initialised
// before RUN_ALL_TESTS); rank 0 prints gtest's report, the other ranks print only their own
// failures, and the exit code is non-zero on every rank when any rank failed.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>

#include "dist/mpi_comm.h"

namespace {

// Non-zero ranks: each failed assertion, prefixed with the rank, and nothing else.
class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_,
                 result.file_name() ? result.file_name() : "?", result.line_number(),
                 result.message());
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  int exit_code = 1;
  {
    collage::MpiSession session;
    if (!session.active()) {
      std::fprintf(stderr, "test_mpi_comm: start it with mpirun (see tests/CMakeLists.txt)\n");
      return 1;
    }
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    if (rank != 0) {
      delete listeners.Release(listeners.default_result_printer());
      listeners.Append(new RankFailurePrinter(rank));
    }
    int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
    int ranks_failed = 0;
    MPI_Allreduce(&failed, &ranks_failed, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0 && ranks_failed > 0) {
      std::fprintf(stderr, "test_mpi_comm: tests failed on %d rank(s)\n", ranks_failed);
    }
    exit_code = ranks_failed > 0 ? 1 : 0;
  }  // MPI_Finalize
  return exit_code;
}
