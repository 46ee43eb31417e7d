// The MPI Comm (src/dist/mpi_comm.h) with real ranks: ctest starts this binary under mpirun
// (tests/CMakeLists.txt, Dist.MpiRanks*). Every rank runs every test; data are rank-valued and
// exact in bf16 (small integers), so every expectation is exact. Semantics: src/dist/comm.h.
#include "dist/mpi_comm.h"

#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "numerics/bf16.h"

namespace collage {
namespace {

int world_rank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}
int world_size() {
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}
std::unique_ptr<Comm> world() { return make_mpi_comm_groups(1).world; }

// Σ_{q < W} (q + 1)
int64_t rank_sum(int W) { return int64_t(W) * (W + 1) / 2; }

TEST(MpiComm, WorldMatchesMpiCommWorld) {
  auto comm = world();
  EXPECT_EQ(comm->rank(), world_rank());
  EXPECT_EQ(comm->size(), world_size());
}

TEST(MpiComm, AllReduceSumEveryType) {
  auto comm = world();
  const int r = comm->rank(), W = comm->size();
  const int n = 37;  // not a multiple of anything convenient
  std::vector<float> f(n);
  std::vector<double> d(n);
  std::vector<bf16> b(n);
  for (int k = 0; k < n; ++k) {
    f[k] = float((r + 1) * (k + 1));
    d[k] = double((r + 1) * (k + 1)) * 0.5;
    // (r + 1)·(k mod 16 + 1) ≤ 64 and the sum ≤ 10·16 = 160: exact in bf16 up to 4 ranks
    b[k] = float_to_bf16(float((r + 1) * (k % 16 + 1)));
  }
  comm->all_reduce_sum(f.data(), n);
  comm->all_reduce_sum(d.data(), n);
  comm->all_reduce_sum(b.data(), n);
  for (int k = 0; k < n; ++k) {
    EXPECT_EQ(f[k], float(rank_sum(W) * (k + 1))) << k;
    EXPECT_EQ(d[k], double(rank_sum(W) * (k + 1)) * 0.5) << k;
    EXPECT_EQ(bf16_to_float(b[k]), float(rank_sum(W) * (k % 16 + 1))) << k;
  }
}

// 256 on rank 0 and 1 on every other rank: in fp32 the sum is 256 + (W - 1), rounded once.
// Pairwise bf16 sums cannot reach it: 256 + 1 = 257 rounds (to even) back to 256, so any
// order gives 256 or 258 at 4 ranks, where one rounding of 259 gives 260. (With 2 ranks there
// is only one addition, and both agree.)
TEST(MpiComm, Bf16SumsInFp32AndRoundsOnce) {
  auto comm = world();
  const int r = comm->rank(), W = comm->size();
  std::vector<bf16> b = {float_to_bf16(r == 0 ? 256.0f : 1.0f),
                         float_to_bf16(r == 0 ? -256.0f : -1.0f)};
  comm->all_reduce_sum(b.data(), int64_t(b.size()));
  const float expected = round_to_bf16(256.0f + float(W - 1));
  EXPECT_EQ(bf16_to_float(b[0]), expected);
  EXPECT_EQ(bf16_to_float(b[1]), -expected);
  if (W == 4) EXPECT_EQ(bf16_to_float(b[0]), 260.0f);

  // The same through reduce-scatter: element 0 of every rank's slice.
  const int64_t count = 3;
  std::vector<bf16> send(size_t(count * W));
  for (int64_t i = 0; i < count * W; ++i) {
    send[size_t(i)] = float_to_bf16(i % count == 0 ? (r == 0 ? 256.0f : 1.0f) : float(r));
  }
  std::vector<bf16> receive(static_cast<size_t>(count));
  comm->reduce_scatter_sum(send.data(), receive.data(), count);
  EXPECT_EQ(bf16_to_float(receive[0]), expected);
  EXPECT_EQ(bf16_to_float(receive[1]), float(rank_sum(W) - W));
}

TEST(MpiComm, AllReduceMax) {
  auto comm = world();
  const int r = comm->rank(), W = comm->size();
  auto value = [](int rank, int k) { return float((rank * 7 + k * 3) % 11) - 5.0f; };
  const int n = 13;
  std::vector<float> x(n);
  for (int k = 0; k < n; ++k) x[k] = value(r, k);
  comm->all_reduce_max(x.data(), n);
  for (int k = 0; k < n; ++k) {
    float expected = value(0, k);
    for (int q = 1; q < W; ++q) expected = std::max(expected, value(q, k));
    EXPECT_EQ(x[k], expected) << k;
  }
}

// Rank r receives Σ_q send_q[r·count, (r+1)·count): send_q[i] = (q + 1)·(i + 1) sums to
// W(W+1)/2 · (i + 1).
TEST(MpiComm, ReduceScatterGivesEachRankItsSlice) {
  auto comm = world();
  const int r = comm->rank(), W = comm->size();
  const int64_t count = 5;
  std::vector<float> f_send(size_t(count * W));
  std::vector<bf16> b_send(size_t(count * W));
  for (int64_t i = 0; i < count * W; ++i) {
    f_send[size_t(i)] = float((r + 1) * (i + 1));
    b_send[size_t(i)] = float_to_bf16(float((r + 1) * (i + 1)));  // sum ≤ 10·20: exact
  }
  std::vector<float> f_receive(size_t(count), -1.0f);
  std::vector<bf16> b_receive(static_cast<size_t>(count));
  comm->reduce_scatter_sum(f_send.data(), f_receive.data(), count);
  comm->reduce_scatter_sum(b_send.data(), b_receive.data(), count);
  for (int64_t j = 0; j < count; ++j) {
    const float expected = float(rank_sum(W) * (r * count + j + 1));
    EXPECT_EQ(f_receive[size_t(j)], expected) << j;
    EXPECT_EQ(bf16_to_float(b_receive[size_t(j)]), expected) << j;
  }
}

TEST(MpiComm, AllGatherIsRankOrdered) {
  auto comm = world();
  const int r = comm->rank(), W = comm->size();
  const char send[3] = {char('a' + r), char('A' + r), char('0' + r)};  // 3 bytes: odd size
  std::vector<char> receive(size_t(3 * W), '?');
  comm->all_gather(send, receive.data(), 3);
  for (int q = 0; q < W; ++q) {
    EXPECT_EQ(receive[size_t(3 * q)], char('a' + q));
    EXPECT_EQ(receive[size_t(3 * q + 1)], char('A' + q));
    EXPECT_EQ(receive[size_t(3 * q + 2)], char('0' + q));
  }
}

// ZeRO-1's use (comm.h): each rank's slice reduced where it lies in the whole buffer, and the
// updated slices gathered in place.
TEST(MpiComm, ReduceScatterAndAllGatherInPlace) {
  auto comm = world();
  const int W = comm->size(), r = comm->rank();
  const int64_t per_rank = 5;
  std::vector<float> f(size_t(per_rank * W));
  std::vector<bf16> b(f.size());
  for (size_t i = 0; i < f.size(); i++) {
    f[i] = float(i + 1) * float(r + 1);
    b[i] = float_to_bf16(float(i % 7 + r));
  }
  comm->reduce_scatter_sum(f.data(), f.data() + per_rank * r, per_rank);
  comm->reduce_scatter_sum(b.data(), b.data() + per_rank * r, per_rank);
  for (int64_t k = 0; k < per_rank; k++) {
    const int64_t i = per_rank * r + k;
    EXPECT_EQ(f[size_t(i)], float(i + 1) * float(rank_sum(W)));
    float want = 0;
    for (int q = 0; q < W; q++) want += float(i % 7 + q);
    EXPECT_EQ(bf16_to_float(b[size_t(i)]), want);
  }
  // In-place all-gather: every rank's slice (here: its rank) everywhere.
  std::vector<int32_t> gathered(size_t(per_rank * W), -1);
  std::fill_n(gathered.begin() + per_rank * r, per_rank, r);
  comm->all_gather(gathered.data() + per_rank * r, gathered.data(),
                   per_rank * int64_t(sizeof(int32_t)));
  for (size_t i = 0; i < gathered.size(); i++) EXPECT_EQ(gathered[i], int32_t(i / per_rank));
}

TEST(MpiComm, BroadcastFromTheLastRank) {
  auto comm = world();
  const int r = comm->rank(), W = comm->size();
  const int root = W - 1;  // non-zero whenever W > 1
  std::vector<double> data(9, 0.0);
  if (r == root) {
    for (size_t i = 0; i < data.size(); ++i) data[i] = 100.0 * root + double(i);
  }
  comm->broadcast(data.data(), int64_t(data.size() * sizeof(double)), root);
  for (size_t i = 0; i < data.size(); ++i) EXPECT_EQ(data[i], 100.0 * root + double(i)) << i;
  EXPECT_THROW(comm->broadcast(data.data(), 8, W), Error);  // not a rank: checked before MPI
}

// Rank 0 arrives 300 ms late; no other rank may leave the barrier before it arrives. The
// margin (100 ms required) absorbs the skew with which ranks leave the aligning MPI_Barrier.
TEST(MpiComm, BarrierWaitsForTheLastRank) {
  auto comm = world();
  MPI_Barrier(MPI_COMM_WORLD);
  const double start = MPI_Wtime();
  if (comm->rank() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(300));
  comm->barrier();
  if (comm->rank() != 0) EXPECT_GE(MPI_Wtime() - start, 0.1);
}

// TP inner (docs/ARCHITECTURE.md, "Rank layout"): at tp = 2, world rank r's tensor-parallel
// group is {2⌊r/2⌋, 2⌊r/2⌋ + 1} and its data-parallel group {r mod 2, r mod 2 + 2, ...}.
TEST(MpiCommGroups, TensorParallelInnerLayout) {
  const int r = world_rank(), W = world_size();
  ASSERT_EQ(W % 2, 0) << "run with an even number of ranks";
  CommGroups groups = make_mpi_comm_groups(2);
  ASSERT_EQ(groups.tensor_parallel->size(), 2);
  ASSERT_EQ(groups.data_parallel->size(), W / 2);
  EXPECT_EQ(groups.world->rank(), r);
  EXPECT_EQ(groups.tensor_parallel->rank(), r % 2);
  EXPECT_EQ(groups.data_parallel->rank(), r / 2);

  int me = r;
  std::vector<int> tp_members(2, -1), dp_members(size_t(W / 2), -1);
  groups.tensor_parallel->all_gather(&me, tp_members.data(), sizeof me);
  groups.data_parallel->all_gather(&me, dp_members.data(), sizeof me);
  EXPECT_EQ(tp_members, (std::vector<int>{2 * (r / 2), 2 * (r / 2) + 1}));
  std::vector<int> expected_dp;
  for (int q = r % 2; q < W; q += 2) expected_dp.push_back(q);
  EXPECT_EQ(dp_members, expected_dp);
  if (W == 4) EXPECT_EQ(dp_members, (std::vector<int>{r % 2, r % 2 + 2}));

  // A collective stays inside its group: the sum of the members' world ranks.
  double tp_sum = r, dp_sum = r;
  groups.tensor_parallel->all_reduce_sum(&tp_sum, 1);
  groups.data_parallel->all_reduce_sum(&dp_sum, 1);
  EXPECT_EQ(tp_sum, double(4 * (r / 2) + 1));
  double expected_dp_sum = 0;
  for (int q : expected_dp) expected_dp_sum += q;
  EXPECT_EQ(dp_sum, expected_dp_sum);
}

TEST(MpiCommGroups, TrivialSplits) {
  const int r = world_rank(), W = world_size();
  CommGroups all_data = make_mpi_comm_groups(1);  // every rank its own TP group
  EXPECT_EQ(all_data.tensor_parallel->size(), 1);
  EXPECT_EQ(all_data.data_parallel->size(), W);
  EXPECT_EQ(all_data.data_parallel->rank(), r);
  CommGroups all_tensor = make_mpi_comm_groups(W);  // one TP group of everyone
  EXPECT_EQ(all_tensor.tensor_parallel->size(), W);
  EXPECT_EQ(all_tensor.tensor_parallel->rank(), r);
  EXPECT_EQ(all_tensor.data_parallel->size(), 1);
}

TEST(MpiCommGroups, TensorParallelMustDivideTheWorld) {
  const int W = world_size();
  for (int tp : {0, W + 1, 3}) {
    if (tp == 3 && W % 3 == 0) continue;
    try {
      make_mpi_comm_groups(tp);
      ADD_FAILURE() << "tensor_parallel = " << tp << " accepted on " << W << " ranks";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("parallel.tensor_parallel"), std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace collage
