// embedding_forward / embedding_backward against float64 loops: a vocab-parallel shard
// [vocab_begin, vocab_end), tokens outside it, repeated tokens, optional position table.
#include "backend/cpu/cpu_backend.h"
#include "backend_test_util.h"

namespace collage::test {
namespace {

constexpr int B = 2, T = 5, C = 13;
constexpr int64_t kVocabBegin = 10, kVocabEnd = 47;  // this rank's 37 rows of the table
constexpr int kRows = int(kVocabEnd - kVocabBegin);

// Tokens of all kinds: inside the shard (with repeats), below and above it, and on both
// edges (9 | 10 ... 46 | 47).
std::vector<int32_t> test_tokens() {
  return {12, 3, 12, 46, 10, 47, 60, 12, 9, 30};  // (B, T)
}

template <typename S>
class EmbeddingTest : public ::testing::Test {};
TYPED_TEST_SUITE(EmbeddingTest, StorageTypes, StorageNames);

TYPED_TEST(EmbeddingTest, ForwardLooksUpOwnedRowsPlusPositions) {
  using S = TypeParam;
  auto backend = Storage<S>::make();
  Rng rng(1);
  const auto tokens = test_tokens();
  const auto wte = random_values<S>(rng, size_t(kRows) * C);
  const auto wpe = random_values<S>(rng, size_t(T) * C);
  // The table sits between two guard rows of 1000s: a lookup one row outside the shard
  // would show.
  std::vector<S> guarded(size_t(kRows + 2) * C, Storage<S>::from(1000.0));
  std::copy(wte.begin(), wte.end(), guarded.begin() + C);
  DeviceBuffer<int32_t, BackendT<S>> d_tokens(*backend, tokens);
  DeviceBuffer<S, BackendT<S>> d_wte(*backend, guarded), d_wpe(*backend, wpe),
      d_out(*backend, size_t(B) * T * C);
  for (bool with_positions : {true, false}) {
    backend->embedding_forward(d_out.get(), d_tokens.get(), d_wte.get() + C,
                               with_positions ? d_wpe.get() : nullptr, B, T, C, kVocabBegin,
                               kVocabEnd);
    const auto e = to_double(wte), p = to_double(wpe);
    std::vector<double> want(size_t(B) * T * C, 0.0);
    for (int row = 0; row < B * T; row++) {
      const int64_t token = tokens[row];
      for (int c = 0; c < C; c++) {
        double v = 0;
        if (token >= kVocabBegin && token < kVocabEnd) v += e[(token - kVocabBegin) * C + c];
        if (with_positions) v += p[(row % T) * C + c];
        want[size_t(row) * C + c] = v;
      }
    }
    // One rounding of a sum of two values.
    expect_close(to_double(d_out.download()), want, result_rel<S>(), 0.0, "out");
  }
}

TYPED_TEST(EmbeddingTest, BackwardAccumulatesPerTokenSums) {
  using S = TypeParam;
  auto backend = Storage<S>::make();
  Rng rng(2);
  const auto tokens = test_tokens();
  const auto dout = random_values<S>(rng, size_t(B) * T * C);
  const auto dwte0 = random_values<S>(rng, size_t(kRows) * C);
  const auto dwpe0 = random_values<S>(rng, size_t(T) * C);
  // Zero guard rows on both sides of the gradient table must stay zero.
  std::vector<S> guarded(size_t(kRows + 2) * C, Storage<S>::from(0.0));
  std::copy(dwte0.begin(), dwte0.end(), guarded.begin() + C);
  DeviceBuffer<int32_t, BackendT<S>> d_tokens(*backend, tokens);
  DeviceBuffer<S, BackendT<S>> d_dout(*backend, dout), d_guarded(*backend, guarded),
      d_dwpe(*backend, dwpe0);
  backend->embedding_backward(d_guarded.get() + C, d_dwpe.get(), d_dout.get(), d_tokens.get(), B, T,
                              C, kVocabBegin, kVocabEnd);
  const auto guarded_after = d_guarded.download();
  for (int c = 0; c < C; c++) {
    EXPECT_EQ(Storage<S>::to(guarded_after[c]), 0.0);
    EXPECT_EQ(Storage<S>::to(guarded_after[size_t(kRows + 1) * C + c]), 0.0);
  }
  const std::vector<S> got(guarded_after.begin() + C, guarded_after.end() - C);
  const auto g = to_double(dout);
  auto dwte = to_double(dwte0), dwpe = to_double(dwpe0);
  for (int row = 0; row < B * T; row++) {
    const int64_t token = tokens[row];
    for (int c = 0; c < C; c++) {
      if (token >= kVocabBegin && token < kVocabEnd)
        dwte[(token - kVocabBegin) * C + c] += g[row * C + c];
      dwpe[(row % T) * C + c] += g[row * C + c];
    }
  }
  // Rows of one token are summed in fp32 (exact for these ≤ 3 bf16 terms up to one fp32
  // rounding), then one rounding to storage.
  expect_close(to_double(got), dwte, result_rel<S>(), 1e-6, "dwte");
  expect_close(to_double(d_dwpe.download()), dwpe, result_rel<S>(), 1e-6, "dwpe");
  // Rows of tokens outside the shard and never-seen rows keep their old values exactly.
  for (int r = 0; r < kRows; r++) {
    bool seen = false;
    for (int32_t t : tokens) seen |= (t - kVocabBegin == r);
    if (seen) continue;
    for (int c = 0; c < C; c++) {
      EXPECT_EQ(Storage<S>::to(got[size_t(r) * C + c]), Storage<S>::to(dwte0[size_t(r) * C + c]));
    }
  }
}

TYPED_TEST(EmbeddingTest, NullGradientsAreSkipped) {
  using S = TypeParam;
  auto backend = Storage<S>::make();
  Rng rng(3);
  const auto tokens = test_tokens();
  const auto dout = random_values<S>(rng, size_t(B) * T * C);
  DeviceBuffer<int32_t, BackendT<S>> d_tokens(*backend, tokens);
  DeviceBuffer<S, BackendT<S>> d_dout(*backend, dout), both_wte(*backend, size_t(kRows) * C),
      both_wpe(*backend, size_t(T) * C), only_wte(*backend, size_t(kRows) * C),
      only_wpe(*backend, size_t(T) * C);
  backend->embedding_backward(both_wte.get(), both_wpe.get(), d_dout.get(), d_tokens.get(), B, T, C,
                              kVocabBegin, kVocabEnd);
  backend->embedding_backward(only_wte.get(), nullptr, d_dout.get(), d_tokens.get(), B, T, C,
                              kVocabBegin, kVocabEnd);
  backend->embedding_backward(nullptr, only_wpe.get(), d_dout.get(), d_tokens.get(), B, T, C,
                              kVocabBegin, kVocabEnd);
  EXPECT_TRUE(same_bits(only_wte.download(), both_wte.download()));
  EXPECT_TRUE(same_bits(only_wpe.download(), both_wpe.download()));
}

TEST(EmbeddingGradient, MatchesFiniteDifferencesAtFp32) {
  auto backend = make_cpu_backend_fp32(kFdThreads);
  Rng rng(4);
  const auto tokens = test_tokens();
  auto wte = random_values<float>(rng, size_t(kRows) * C);
  auto wpe = random_values<float>(rng, size_t(T) * C);
  const auto loss_weights = random_weights<float>(rng, size_t(B) * T * C);
  DeviceBuffer<int32_t, BackendT<float>> d_tokens(*backend, tokens);
  auto loss = [&](const std::vector<float>& e, const std::vector<float>& p) {
    DeviceBuffer<float, BackendT<float>> d_e(*backend, e), d_p(*backend, p),
        d_out(*backend, loss_weights.size());
    backend->embedding_forward(d_out.get(), d_tokens.get(), d_e.get(), d_p.get(), B, T, C,
                               kVocabBegin, kVocabEnd);
    return weighted_sum(d_out.download(), loss_weights);
  };
  DeviceBuffer<float, BackendT<float>> d_dout(*backend, from_double<float>(loss_weights)),
      dwte(*backend, wte.size()), dwpe(*backend, wpe.size());
  backend->embedding_backward(dwte.get(), dwpe.get(), d_dout.get(), d_tokens.get(), B, T, C,
                              kVocabBegin, kVocabEnd);
  expect_gradient_matches_differences([&](const auto& v) { return loss(v, wpe); }, wte,
                                      to_double(dwte.download()), "dwte");
  expect_gradient_matches_differences([&](const auto& v) { return loss(wte, v); }, wpe,
                                      to_double(dwpe.download()), "dwpe");
}

}  // namespace
}  // namespace collage::test
