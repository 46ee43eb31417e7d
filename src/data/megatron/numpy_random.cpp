// numpy's masked-rejection bounded integer (legacy RandomState, numpy/random/src/
// distributions/distributions.c `random_interval`), written from its description.
#include "data/megatron/numpy_random.h"

namespace collage {

uint64_t NumpyRandomState::random_interval(uint64_t max) {
  if (max == 0) return 0;
  // Smallest 2^k - 1 that is >= max.
  uint64_t mask = max;
  mask |= mask >> 1;
  mask |= mask >> 2;
  mask |= mask >> 4;
  mask |= mask >> 8;
  mask |= mask >> 16;
  mask |= mask >> 32;
  uint64_t value;
  if (max <= 0xffffffffULL) {
    while ((value = (next_uint32() & mask)) > max) {
    }
  } else {
    while ((value = (next_uint64() & mask)) > max) {
    }
  }
  return value;
}

}  // namespace collage
