// gather_rows and scatter_add_rows (backend.h, "encoder ops") against float64, with repeated
// rows: scatter_add_rows sums a row's dout rows in fp32 in ascending k, then rounds once, so
// the result is deterministic (same bits on any thread count).
#include "backend/cpu/cpu_backend.h"
#include "backend_test_util.h"

namespace collage::test {
namespace {

template <typename S>
class GatherTest : public ::testing::Test {};
TYPED_TEST_SUITE(GatherTest, StorageTypes, StorageNames);

// count rows of [0, R), with repeats (count > R) and some rows never picked.
std::vector<int32_t> random_rows(Rng& rng, int count, int R) {
  std::vector<int32_t> rows(static_cast<size_t>(count));
  for (auto& r : rows) r = 2 * rng.integer(0, (R - 1) / 2);  // even rows: odd ones stay untouched
  return rows;
}

TYPED_TEST(GatherTest, GatherCopiesTheRows) {
  using S = TypeParam;
  auto backend = Storage<S>::make();
  Rng rng(1);
  for (const int C : {1, 13, 64}) {
    const int R = 20, count = 37;
    const auto inp = random_values<S>(rng, size_t(R) * C);
    const auto rows = random_rows(rng, count, R);
    DeviceBuffer<S, BackendT<S>> d_inp(*backend, inp), d_out(*backend, size_t(count) * C);
    DeviceBuffer<int32_t, BackendT<S>> d_rows(*backend, rows);
    backend->gather_rows(d_out.get(), d_inp.get(), d_rows.get(), count, C);
    const auto out = d_out.download();
    for (int k = 0; k < count; k++) {
      for (int c = 0; c < C; c++) {
        ASSERT_TRUE(same_bits(std::vector<S>{out[size_t(k) * C + c]},
                              std::vector<S>{inp[size_t(rows[k]) * C + c]}))
            << "C=" << C << " k=" << k << " c=" << c;
      }
    }
  }
}

TYPED_TEST(GatherTest, ScatterAddSumsRepeatedRowsThenRoundsOnce) {
  using S = TypeParam;
  auto backend = Storage<S>::make();
  Rng rng(2);
  for (const int C : {1, 13, 64}) {
    const int R = 20, count = 61;
    const auto dout = random_values<S>(rng, size_t(count) * C);
    const auto dinp0 = random_values<S>(rng, size_t(R) * C);
    const auto rows = random_rows(rng, count, R);
    DeviceBuffer<S, BackendT<S>> d_dout(*backend, dout), d_dinp(*backend, dinp0);
    DeviceBuffer<int32_t, BackendT<S>> d_rows(*backend, rows);
    backend->scatter_add_rows(d_dinp.get(), d_dout.get(), d_rows.get(), count, C);
    auto want = to_double(dinp0);
    std::vector<double> magnitude(want.size(), 0.0);  // Σ|terms| of each entry
    const auto g = to_double(dout);
    for (int k = 0; k < count; k++) {
      for (int c = 0; c < C; c++) {
        want[size_t(rows[k]) * C + c] += g[size_t(k) * C + c];
        magnitude[size_t(rows[k]) * C + c] += std::fabs(g[size_t(k) * C + c]);
      }
    }
    const auto got = to_double(d_dinp.download());
    for (size_t i = 0; i < got.size(); i++) {
      // The fp32 sum of m terms errs by ≤ m·2^-24·Σ|terms| (61 rows over 11 destinations:
      // m ≲ 20), so 2e-6·Σ|terms|; then one rounding of old + sum.
      ASSERT_NEAR(got[i], want[i], result_rel<S>() * std::fabs(want[i]) + 2e-6 * magnitude[i])
          << "C=" << C << " dinp[" << i << "]";
      if ((i / C) % 2 == 1) ASSERT_EQ(got[i], Storage<S>::to(dinp0[i])) << "untouched row";
    }
  }
}

// The same bits on 1 and 3 threads (each row's terms are summed by one thread, in k order).
TEST(Gather, ScatterAddIsDeterministicAcrossThreadCounts) {
  Rng rng(3);
  const int R = 50, count = 4000, C = 24;
  const auto dout = random_values<bf16>(rng, size_t(count) * C);
  const auto dinp0 = random_values<bf16>(rng, size_t(R) * C);
  const auto rows = random_rows(rng, count, R);
  std::vector<std::vector<bf16>> results;
  for (int threads : {1, 3}) {
    auto backend = make_cpu_backend(threads);
    DeviceBuffer<bf16, Backend> d_dout(*backend, dout), d_dinp(*backend, dinp0);
    DeviceBuffer<int32_t, Backend> d_rows(*backend, rows);
    backend->scatter_add_rows(d_dinp.get(), d_dout.get(), d_rows.get(), count, C);
    results.push_back(d_dinp.download());
  }
  EXPECT_TRUE(same_bits(results[0], results[1]));
}

TEST(Gather, RejectsNegativeRows) {
  auto backend = make_cpu_backend(1);
  const std::vector<int32_t> rows = {0, -1};
  DeviceBuffer<bf16, Backend> a(*backend, size_t(16)), b(*backend, size_t(16));
  DeviceBuffer<int32_t, Backend> d_rows(*backend, rows);
  EXPECT_THROW(backend->gather_rows(a.get(), b.get(), d_rows.get(), 2, 4), Error);
  EXPECT_THROW(backend->scatter_add_rows(a.get(), b.get(), d_rows.get(), 2, 4), Error);
  backend->scatter_add_rows(nullptr, b.get(), d_rows.get(), 2, 4);  // null gradient: skipped
}

}  // namespace
}  // namespace collage::test
