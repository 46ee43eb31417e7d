// Philox-4x32-10 (src/numerics/elementwise_math.h) against Random123's known answers and an
// independent implementation (philox_reference.h), and dropout_forward/backward against
// float64 with the masks that numbering defines: keep fraction, forward/backward masks, p = 0,
// offsets and seeds.
#include <cmath>
#include <cstdio>

#include "backend/cpu/cpu_backend.h"
#include "backend_test_util.h"
#include "numerics/elementwise_math.h"
#include "philox_reference.h"

namespace collage::test {
namespace {

// Random123's kat_vectors for philox4x32_10: {counter, key, output}.
struct KnownAnswer {
  std::array<uint32_t, 4> counter;
  std::array<uint32_t, 2> key;
  std::array<uint32_t, 4> output;
};
const KnownAnswer kKnownAnswers[] = {
    {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
    {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
     {0xffffffff, 0xffffffff},
     {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
    {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
     {0xa4093822, 0x299f31d0},
     {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
};

std::array<uint32_t, 4> philox(const std::array<uint32_t, 4>& c, const std::array<uint32_t, 2>& k) {
  const math::Philox4x32 out =
      math::philox4x32_10(math::Philox4x32{{c[0], c[1], c[2], c[3]}}, k[0], k[1]);
  return {out.v[0], out.v[1], out.v[2], out.v[3]};
}

TEST(Philox, MatchesRandom123KnownAnswers) {
  for (const KnownAnswer& kat : kKnownAnswers) {
    EXPECT_EQ(philox(kat.counter, kat.key), kat.output);
    EXPECT_EQ(philox_reference(kat.counter, kat.key), kat.output);
  }
}

TEST(Philox, MatchesIndependentImplementationOnRandomInputs) {
  Rng rng(1);
  auto word = [&] {
    return uint32_t(rng.integer(0, 0xffff)) << 16 | uint32_t(rng.integer(0, 0xffff));
  };
  for (int trial = 0; trial < 10000; trial++) {
    const std::array<uint32_t, 4> c = {word(), word(), word(), word()};
    const std::array<uint32_t, 2> k = {word(), word()};
    ASSERT_EQ(philox(c, k), philox_reference(c, k)) << "trial " << trial;
  }
}

// The numbering of backend.h: element e = word e % 4 at counter e / 4, both counter halves
// used (elements past 2^34 reach the high word), the seed's high half in the key's.
TEST(Philox, DropoutUniformFollowsTheDocumentedNumbering) {
  const uint64_t seeds[] = {0, 1, 0x123456789abcdefull};
  const uint64_t elements[] = {
      0, 1, 2, 3, 4, 5, 1000003, (uint64_t(1) << 34) + 7, 0xfffffffffffffff0ull};
  for (uint64_t seed : seeds) {
    for (uint64_t e : elements) {
      const float u = math::dropout_uniform(seed, e);
      EXPECT_EQ(double(u), dropout_uniform_reference(seed, e)) << "seed " << seed << " e " << e;
      EXPECT_GE(u, 0.0f);
      EXPECT_LT(u, 1.0f);
    }
  }
}

// Which of n elements dropout keeps at (p, seed, offset): forward over ones, kept iff nonzero.
template <typename S>
std::vector<uint8_t> kept_mask(BackendT<S>& backend, int64_t n, float p, uint64_t seed,
                               uint64_t offset) {
  DeviceBuffer<S, BackendT<S>> ones(backend, std::vector<S>(size_t(n), Storage<S>::from(1.0)));
  DeviceBuffer<S, BackendT<S>> out(backend, size_t(n));
  backend.dropout_forward(out.get(), ones.get(), n, p, seed, offset);
  const auto values = out.download();
  std::vector<uint8_t> kept(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; i++) kept[i] = Storage<S>::to(values[i]) != 0.0;
  return kept;
}

// Nonzero inputs (so kept ⇔ output nonzero): ±[0.5, 2].
template <typename S>
std::vector<S> nonzero_values(Rng& rng, int64_t n) {
  std::vector<S> v(static_cast<size_t>(n));
  for (auto& x : v) x = Storage<S>::from((rng.integer(0, 1) ? 1 : -1) * rng.uniform(0.5, 2.0));
  return v;
}

template <typename S>
class DropoutTest : public ::testing::Test {};
TYPED_TEST_SUITE(DropoutTest, StorageTypes, StorageNames);

// Kept exactly where the reference numbering says, scaled by 1/(1 - p) with one rounding.
TYPED_TEST(DropoutTest, ForwardKeepsTheReferenceMaskAndScales) {
  using S = TypeParam;
  auto backend = Storage<S>::make();
  Rng rng(2);
  const int64_t n = 100003;
  const uint64_t seed = 0xfeedbeef12345ull, offset = 77;
  for (float p : {0.1f, 0.5f}) {
    const auto inp = nonzero_values<S>(rng, n);
    DeviceBuffer<S, BackendT<S>> d_inp(*backend, inp), d_out(*backend, size_t(n));
    backend->dropout_forward(d_out.get(), d_inp.get(), n, p, seed, offset);
    const auto got = to_double(d_out.download());
    const auto x = to_double(inp);
    int misses = 0;
    for (int64_t i = 0; i < n; i++) {
      const bool kept = dropout_kept_reference(seed, offset + uint64_t(i), p);
      const double want = kept ? x[i] / (1.0 - p) : 0.0;
      // kept: x·fp32(1/(1 - p)) rounded once (fp32's 1/(1 - p) is within 2^-24 relative).
      const bool ok =
          kept ? std::fabs(got[i] - want) <= result_rel<S>() * std::fabs(want) : got[i] == 0.0;
      if (!ok && ++misses <= 5)
        ADD_FAILURE() << "p=" << p << " out[" << i << "] = " << got[i] << ", want " << want;
    }
    EXPECT_EQ(misses, 0);
  }
}

// Over 10^6 elements the kept count is Binomial(n, 1 - p): within 6 standard deviations.
TEST(Dropout, KeepFractionIsOneMinusP) {
  auto backend = make_cpu_backend(kThreads);
  const int64_t n = 1000000;
  for (float p : {0.1f, 0.5f, 0.9f}) {
    const auto kept = kept_mask(*backend, n, p, 42, 0);
    int64_t count = 0;
    for (uint8_t k : kept) count += k;
    const double expected = n * (1.0 - p), sd = std::sqrt(n * double(p) * (1.0 - p));
    std::printf("  p=%.1f: kept %lld of %lld (expected %.0f, %.2f sd off)\n", p,
                static_cast<long long>(count), static_cast<long long>(n), expected,
                (count - expected) / sd);
    EXPECT_LE(std::fabs(count - expected), 6 * sd) << "p = " << p;
  }
}

// The backward draws the forward's mask: dinp = dout·factor.
TYPED_TEST(DropoutTest, BackwardRecomputesTheForwardMask) {
  using S = TypeParam;
  auto backend = Storage<S>::make();
  Rng rng(3);
  const int64_t n = 50021;
  const float p = 0.3f;
  const uint64_t seed = 9, offset = 1234567;
  const auto forward_kept = kept_mask(*backend, n, p, seed, offset);

  const auto dout = nonzero_values<S>(rng, n);
  // Written over NaNs, which must not be read (backend.h): dout·factor, one rounding.
  DeviceBuffer<S, BackendT<S>> d_dout(*backend, dout), d_dinp(*backend, nan_values<S>(size_t(n)));
  backend->dropout_backward(d_dinp.get(), d_dout.get(), n, p, seed, offset);
  const auto got = to_double(d_dinp.download());
  for (int64_t i = 0; i < n; i++) {
    ASSERT_EQ(got[i] != 0.0, bool(forward_kept[i])) << "element " << i;
  }
  std::vector<double> want(static_cast<size_t>(n));
  const auto g = to_double(dout);
  for (int64_t i = 0; i < n; i++) want[i] = forward_kept[i] ? g[i] / (1.0 - p) : 0.0;
  expect_close(got, want, result_rel<S>(), 1e-7 * max_abs(g), "dinp");
  backend->dropout_backward(nullptr, d_dout.get(), n, p, seed, offset);  // null: skipped
}

// p = 0: the forward and the backward copy their input bit for bit.
TYPED_TEST(DropoutTest, ZeroProbabilityIsTheIdentity) {
  using S = TypeParam;
  auto backend = Storage<S>::make();
  Rng rng(4);
  const int64_t n = 40009;
  const auto inp = random_values<S>(rng, size_t(n));
  DeviceBuffer<S, BackendT<S>> d_inp(*backend, inp), d_out(*backend, size_t(n)),
      d_dinp(*backend, nan_values<S>(size_t(n)));
  backend->dropout_forward(d_out.get(), d_inp.get(), n, 0.0f, 5, 6);
  EXPECT_TRUE(same_bits(d_out.download(), inp));
  backend->dropout_forward(d_inp.get(), d_inp.get(), n, 0.0f, 5, 6);  // in place
  EXPECT_TRUE(same_bits(d_inp.download(), inp));
  backend->dropout_backward(d_dinp.get(), d_inp.get(), n, 0.0f, 5, 6);
  EXPECT_TRUE(same_bits(d_dinp.download(), inp));
}

// A call at offset o draws elements o, o + 1, ...: the same numbers as a call at offset 0
// from its element o on. Disjoint offset ranges, and different seeds (the high half too), give
// independent masks: at p = 0.5 two independent masks agree on Binomial(n, 1/2) elements.
TEST(Dropout, OffsetsShiftTheNumberingAndDisjointRangesAreIndependent) {
  auto backend = make_cpu_backend(kThreads);
  const int64_t n = 200000;
  const float p = 0.5f;
  const auto base = kept_mask(*backend, 2 * n + 5, p, 7, 0);
  for (uint64_t shift : {1ull, 3ull, 5ull}) {
    const auto shifted = kept_mask(*backend, n, p, 7, shift);
    for (int64_t i = 0; i < n; i++) {
      ASSERT_EQ(shifted[i], base[shift + i]) << "offset " << shift << " element " << i;
    }
  }
  auto agreement = [&](const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
    int64_t same = 0;
    for (int64_t i = 0; i < n; i++) same += a[i] == b[i];
    return same;
  };
  const double sd = std::sqrt(n * 0.25);
  const std::vector<uint8_t> first(base.begin(), base.begin() + n),
      next(base.begin() + n, base.begin() + 2 * n);
  const auto other_seed = kept_mask(*backend, n, p, 8, 0);
  const auto high_seed = kept_mask(*backend, n, p, 7 + (uint64_t(1) << 32), 0);
  for (const auto* other : {&next, &other_seed, &high_seed}) {
    const int64_t same = agreement(first, *other);
    EXPECT_LE(std::fabs(same - n / 2.0), 6 * sd) << same << " of " << n << " agree";
    EXPECT_NE(same, n);
  }
}

TEST(Dropout, RejectsProbabilitiesOutsideZeroToOne) {
  auto backend = make_cpu_backend(1);
  DeviceBuffer<bf16, Backend> x(*backend, size_t(4));
  for (float p : {-0.1f, 1.0f, 1.5f, std::nanf("")}) {
    EXPECT_THROW(backend->dropout_forward(x.get(), x.get(), 4, p, 0, 0), Error) << p;
    EXPECT_THROW(backend->dropout_backward(x.get(), x.get(), 4, p, 0, 0), Error) << p;
  }
}

}  // namespace
}  // namespace collage::test
