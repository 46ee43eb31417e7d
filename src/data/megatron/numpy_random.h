#pragma once
// NumpyRandomState: the parts of numpy's legacy `np.random.RandomState(seed)` that
// Megatron's GPTDataset uses (shuffle / permutation), reproduced bit for bit so collage
// visits training samples in exactly the order NeMo / Megatron do.
//
// numpy seeds its MT19937 with `init_genrand(seed)`: key[0] = seed,
// key[i] = 1812433253 * (key[i-1] ^ (key[i-1] >> 30)) + i, which is exactly how
// std::mt19937(seed) initialises its state for any 32-bit seed; both then draw the same
// 32-bit words. tests/data/numpy_random_test.cpp checks this against numpy's own output.
#include <cstdint>
#include <random>
#include <span>
#include <utility>

namespace collage {

class NumpyRandomState {
 public:
  explicit NumpyRandomState(uint32_t seed) : gen_(seed) {}

  // One 32-bit word (numpy's next_uint32).
  uint32_t next_uint32() { return static_cast<uint32_t>(gen_()); }
  // numpy's next_uint64 for MT19937: the first word is the high half.
  uint64_t next_uint64() {
    const uint64_t hi = next_uint32();
    return (hi << 32) | next_uint32();
  }

  // Uniform integer in [0, max] by masked rejection (numpy's `random_interval`): draw
  // words, keep the low bits covered by the smallest all-ones mask >= max, retry while the
  // value exceeds max. 64-bit draws only when max does not fit 32 bits.
  uint64_t random_interval(uint64_t max);

  // In-place Fisher-Yates from the end, exactly like RandomState.shuffle on a 1-d array:
  // for i = n-1 .. 1: swap(a[i], a[random_interval(i)]).
  template <typename T>
  void shuffle(std::span<T> a) {
    for (size_t i = a.size(); i-- > 1;) {
      const uint64_t j = random_interval(i);
      std::swap(a[i], a[j]);
    }
  }

 private:
  std::mt19937 gen_;
};

}  // namespace collage
