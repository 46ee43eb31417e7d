#pragma once
// splitmix64's output function (Steele, Lea, Flood 2014): a bijective mix of a 64-bit word
// after adding the golden-ratio increment. Derives independent stream seeds from a run seed
// and an index (weight init per tensor, data shuffles per epoch) without any RNG state.
#include <cstdint>

namespace collage {

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace collage
