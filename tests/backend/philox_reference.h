#pragma once
// An independent Philox-4x32-10 for the tests (Salmon et al., SC 2011, as Random123's
// philox4x32_10): the ten round keys computed up front, 64-bit products split by hand. It shares
// no code with src/numerics/elementwise_math.h, which the tests check against it and against
// Random123's known-answer vectors; and the dropout numbering of backend.h on top of it.
#include <array>
#include <cstdint>

namespace collage::test {

inline std::array<uint32_t, 4> philox_reference(std::array<uint32_t, 4> x,
                                                std::array<uint32_t, 2> key) {
  uint64_t round_keys[10][2];
  for (uint64_t r = 0; r < 10; r++) {
    round_keys[r][0] = (key[0] + r * 0x9E3779B9ull) & 0xffffffffull;
    round_keys[r][1] = (key[1] + r * 0xBB67AE85ull) & 0xffffffffull;
  }
  for (int r = 0; r < 10; r++) {
    const uint64_t p0 = 0xD2511F53ull * x[0], p1 = 0xCD9E8D57ull * x[2];
    x = {uint32_t((p1 >> 32) ^ x[1] ^ round_keys[r][0]), uint32_t(p1 & 0xffffffffull),
         uint32_t((p0 >> 32) ^ x[3] ^ round_keys[r][1]), uint32_t(p0 & 0xffffffffull)};
  }
  return x;
}

// backend.h's dropout numbers: element e is word e % 4 of Philox at counter (e/4 low, e/4 high,
// 0, 0) under key (seed low, seed high), as a uniform in [0, 1) from its top 24 bits.
inline double dropout_uniform_reference(uint64_t seed, uint64_t element) {
  const uint64_t group = element / 4;
  const auto words = philox_reference({uint32_t(group), uint32_t(group >> 32), 0, 0},
                                      {uint32_t(seed), uint32_t(seed >> 32)});
  return double(words[element % 4] >> 8) / 16777216.0;
}

inline bool dropout_kept_reference(uint64_t seed, uint64_t element, float p) {
  return dropout_uniform_reference(seed, element) >= double(p);
}

}  // namespace collage::test
