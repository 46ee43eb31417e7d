#pragma once
// Helpers for the cuda backend's tests: every op of the cuda backend, run by the host SIMT
// emulator (cuda-emulated), against the same op of the cpu backend on the same inputs.
// Elementwise ops must agree bit for bit (they evaluate the same fp32 operations: see
// src/backend/elementwise_math.h); reductions and GEMMs sum in a different order and agree
// within the tolerances each test states.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "../backend/backend_test_util.h"
#include "backend/backend.h"

namespace collage::test {

// The two backends a test compares.
struct BackendPair {
  std::unique_ptr<Backend> cpu = make_cpu_backend(kThreads);
  std::unique_ptr<Backend> emulated = make_cuda_emulated_backend();
};

// One tensor in both backends, uploaded from the same host values (or zeroed).
template <typename T>
class Mirrored {
 public:
  Mirrored(BackendPair& pair, const std::vector<T>& host)
      : cpu_(*pair.cpu, host), emulated_(*pair.emulated, host) {}
  Mirrored(BackendPair& pair, size_t count)
      : cpu_(*pair.cpu, count), emulated_(*pair.emulated, count) {}

  T* cpu() const { return cpu_.get(); }
  T* emulated() const { return emulated_.get(); }
  std::vector<T> from_cpu() const { return cpu_.download(); }
  std::vector<T> from_emulated() const { return emulated_.download(); }

 private:
  DeviceBuffer<T, Backend> cpu_, emulated_;
};

// Bit-for-bit equality of two downloads, naming the first few differing elements.
template <typename T>
void expect_same_bits(const std::vector<T>& got, const std::vector<T>& want,
                      const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int misses = 0;
  for (size_t i = 0; i < got.size(); i++) {
    if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0 && ++misses <= 5) {
      if constexpr (std::is_same_v<T, bf16>) {
        ADD_FAILURE() << what << "[" << i << "]: emulated " << bf16_to_float(got[i]) << " (0x"
                      << std::hex << got[i].bits << "), cpu " << bf16_to_float(want[i]) << " (0x"
                      << want[i].bits << std::dec << ")";
      } else {
        ADD_FAILURE() << what << "[" << i << "]: emulated " << got[i] << ", cpu " << want[i];
      }
    }
  }
  EXPECT_EQ(misses, 0) << what << ": " << misses << " of " << got.size() << " elements differ";
}

// Distance in bf16 units in the last place (for finite values of the same sign; 0 = equal).
inline int64_t bf16_ulps(bf16 a, bf16 b) {
  auto ordered = [](bf16 x) {  // bf16 bits mapped to integers that order like the values
    const int32_t bits = x.bits;
    return (bits & 0x8000) ? -(bits & 0x7fff) : bits;
  };
  return std::llabs(int64_t(ordered(a)) - int64_t(ordered(b)));
}

// Every element within `ulps` bf16 ulps of the cpu's, reporting the worst.
inline void expect_within_ulps(const std::vector<bf16>& got, const std::vector<bf16>& want,
                               int64_t ulps, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int64_t worst = 0;
  size_t worst_at = 0;
  for (size_t i = 0; i < got.size(); i++) {
    const int64_t d = bf16_ulps(got[i], want[i]);
    if (d > worst) worst = d, worst_at = i;
  }
  EXPECT_LE(worst, ulps) << what << "[" << worst_at << "]: emulated "
                         << bf16_to_float(got[worst_at]) << ", cpu "
                         << bf16_to_float(want[worst_at]) << " (" << worst << " ulps apart)";
}

}  // namespace collage::test
