// The emulator's device functions are the exact host operations (so an emulated kernel and
// the cpu backend compute the same bits): math intrinsics, bit casts and counts, and CUDA's
// min/max overload set with its result types.
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "simt_test_util.h"

namespace {

uint32_t bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}

TEST(DeviceFunctions, MathIsExact) {
  const float inputs[] = {1e-30f, 0.1f, 0.5f, 1.0f, 2.0f, 3.0f, 7.25f, 1e10f, 123456.7f};
  for (const float x : inputs) {
    EXPECT_EQ(bits(rsqrtf(x)), bits(1.0f / std::sqrt(x))) << x;
    EXPECT_EQ(bits(__expf(x * 0.01f)), bits(std::exp(x * 0.01f))) << x;
    EXPECT_EQ(bits(__logf(x)), bits(std::log(x))) << x;
    EXPECT_EQ(bits(__fdividef(1.0f, x)), bits(1.0f / x)) << x;
    EXPECT_EQ(bits(__powf(x, 0.3f)), bits(std::pow(x, 0.3f))) << x;
  }
  EXPECT_EQ(__saturatef(-1.0f), 0.0f);
  EXPECT_EQ(__saturatef(0.25f), 0.25f);
  EXPECT_EQ(__saturatef(3.0f), 1.0f);
  EXPECT_EQ(__saturatef(std::numeric_limits<float>::quiet_NaN()), 0.0f);
}

TEST(DeviceFunctions, BitCastsAndCounts) {
  EXPECT_EQ(__float_as_uint(1.0f), 0x3f800000u);
  EXPECT_EQ(__float_as_int(-2.0f), int(0xc0000000u));
  EXPECT_EQ(__uint_as_float(0x40490fdbu), 3.14159274f);
  EXPECT_EQ(__int_as_float(0x3f000000), 0.5f);
  EXPECT_EQ(__popc(0xf0f0f0f1u), 17);
  EXPECT_EQ(__popcll(~0ull), 64);
  EXPECT_EQ(__clz(0), 32);
  EXPECT_EQ(__clz(1), 31);
  EXPECT_EQ(__clz(-1), 0);
  EXPECT_EQ(__clzll(1), 63);
  EXPECT_EQ(__ffs(0), 0);
  EXPECT_EQ(__ffs(8), 4);
  EXPECT_EQ(__ffsll(1ll << 40), 41);
  EXPECT_EQ(__brev(1u), 0x80000000u);
  EXPECT_EQ(__brev(0x12345678u), 0x1e6a2c48u);
}

TEST(DeviceFunctions, MinMaxOverloads) {
  static_assert(std::is_same_v<decltype(min(1, 2)), int>);
  static_assert(std::is_same_v<decltype(max(1u, 2)), unsigned>);
  static_assert(std::is_same_v<decltype(min(1ll, 2ll)), long long>);
  static_assert(std::is_same_v<decltype(max(1ull, 2ll)), unsigned long long>);
  static_assert(std::is_same_v<decltype(min(1.0f, 2.0f)), float>);
  static_assert(std::is_same_v<decltype(max(1.0, 2.0f)), double>);
  static_assert(std::is_same_v<decltype(min(int64_t(1), int64_t(2))), int64_t>);
  EXPECT_EQ(min(-3, 2), -3);
  EXPECT_EQ(max(-3, 2), 2);
  EXPECT_EQ(min(5u, 7u), 5u);
  EXPECT_EQ(max(-1, 1u), 0xffffffffu);  // as CUDA: the int converts to unsigned
  EXPECT_EQ(min(1ll << 40, 3ll), 3ll);
  EXPECT_EQ(max(1ull << 63, 2ull), 1ull << 63);
  EXPECT_EQ(min(2.5f, -1.0f), -1.0f);
  EXPECT_EQ(max(std::numeric_limits<float>::quiet_NaN(), 1.0f), 1.0f);  // fmaxf
}

TEST(DeviceFunctions, CacheHintedLoadsAndStores) {
  float x = 1.5f, y = 0.0f;
  EXPECT_EQ(__ldg(&x), 1.5f);
  EXPECT_EQ(__ldcs(&x), 1.5f);
  EXPECT_EQ(__ldcg(&x), 1.5f);
  __stcs(&y, 2.5f);
  EXPECT_EQ(y, 2.5f);
  __stcg(&y, 3.5f);
  EXPECT_EQ(y, 3.5f);
}

}  // namespace
