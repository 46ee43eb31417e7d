#pragma once
// Helpers for the cuda backend's tests: every op of the cuda backend against the same op of the
// cpu backend on the same inputs. The cuda backend under test is the host SIMT emulator
// (cuda-emulated) or, where a GPU is usable, the real device (cuda_on_device() below).
// Elementwise ops must agree bit for bit (they evaluate the same fp32 operations: see
// src/numerics/elementwise_math.h); reductions and GEMMs sum in a different order and agree
// within the tolerances each test states. The few ops that call a libm function (erff, tanhf,
// logf) get glibc's bits under the emulator and CUDA's on a GPU: there a test states the
// tolerance those functions' documented accuracy gives, and stays bit-exact under emulation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "../backend/backend_test_util.h"
#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "dist/backend_choice.h"

namespace collage::test {

// Whether the kernel tests run the cuda backend on the GPU rather than under the emulator:
// COLLAGE_TEST_CUDA=device forces the GPU (and fails where there is none), =emulated the
// emulator; unset, the GPU when the cuda runtime finds a usable one (choose_backend("auto"),
// as `parallel.backend: auto` decides). Decided once per process.
inline bool cuda_on_device() {
  static const bool device = [] {
    const char* value = std::getenv("COLLAGE_TEST_CUDA");
    const std::string mode = value ? value : "";
    if (mode == "device") return true;
    if (mode == "emulated") return false;
    if (!mode.empty())
      throw std::invalid_argument("COLLAGE_TEST_CUDA='" + mode +
                                  "': expected 'device' or 'emulated' (or unset: the GPU "
                                  "when there is one)");
    return choose_backend("auto").name == "cuda";
  }();
  return device;
}

// The backend name failure messages give: "cuda" (the GPU) or "cuda-emulated".
inline const char* cuda_name() { return cuda_on_device() ? "cuda" : "cuda-emulated"; }

// The cuda backend under test; the first one made says which it is, once per process.
inline std::unique_ptr<Backend> make_cuda_under_test() {
  static bool announced = false;
  std::unique_ptr<Backend> backend =
      cuda_on_device() ? make_cuda_backend(0) : make_cuda_emulated_backend();
  if (!announced) {
    announced = true;
    const char* mode = std::getenv("COLLAGE_TEST_CUDA");
    std::printf("[ kernels  ] the cuda kernel tests run on %s (COLLAGE_TEST_CUDA %s)\n",
                cuda_on_device() ? ("the GPU: " + cuda_device_name(0)).c_str()
                                 : "cuda-emulated, the host emulator",
                mode ? (std::string("= ") + mode).c_str() : "unset");
  }
  return backend;
}

// The two backends a test compares. `emulated` is the cuda backend under test, which is the
// GPU's when cuda_on_device() (the member keeps its name so every test reads the same).
// `cpu_gemm` picks the cpu's GEMM engine (parallel.cpu_gemm): both compute GEMMs alike, but the
// cpu's attention differs: OpenBLAS keeps its probabilities in fp32 as the SIMT attention
// kernels do, oneDNN rounds them to bf16 as the tensor-core ones do (docs/ARCHITECTURE.md, "cpu
// attention").
struct BackendPair {
  explicit BackendPair(const std::string& cpu_gemm = "auto")
      : cpu(make_cpu_backend(kThreads, cpu_gemm)), emulated(make_cuda_under_test()) {}
  std::unique_ptr<Backend> cpu;
  std::unique_ptr<Backend> emulated;
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
        ADD_FAILURE() << what << "[" << i << "]: " << cuda_name() << " " << bf16_to_float(got[i])
                      << " (0x" << std::hex << got[i].bits << "), cpu " << bf16_to_float(want[i])
                      << " (0x" << want[i].bits << std::dec << ")";
      } else {
        ADD_FAILURE() << what << "[" << i << "]: " << cuda_name() << " " << got[i] << ", cpu "
                      << want[i];
      }
    }
  }
  EXPECT_EQ(misses, 0) << what << ": " << misses << " of " << got.size() << " elements differ";
}

// The spacing of bf16 values at |x| (normal range; the subnormal spacing below).
inline double bf16_spacing(double x) {
  const double a = std::max(std::fabs(x), 0x1p-126);
  return std::ldexp(1.0, std::ilogb(a) - 7);
}
// The spacing of fp32 values at |x| (ulp; the subnormal spacing below).
inline double fp32_ulp(double x) {
  const double a = std::max(std::fabs(x), 0x1p-126);
  return std::ldexp(1.0, std::ilogb(a) - 23);
}

// For ops that call a libm function: got (the cuda backend's) against want (the cpu's), bit for
// bit under the emulator; on a GPU within bound(k) + one bf16 spacing of the larger, per element
// k, where bound(k) is the derived difference of the two fp32 results before their rounding to
// bf16 (encoder_elementwise_test.cpp derives those of erff and tanhf).
template <typename Bound>
void expect_close_on_device(const std::vector<bf16>& got, const std::vector<bf16>& want,
                            Bound bound, const std::string& what) {
  if (!cuda_on_device()) return expect_same_bits(got, want, what);
  ASSERT_EQ(got.size(), want.size()) << what;
  int misses = 0;
  for (size_t k = 0; k < got.size(); k++) {
    const double g = bf16_to_float(got[k]), w = bf16_to_float(want[k]);
    const double allowed = bound(k) + bf16_spacing(std::max(std::fabs(g), std::fabs(w)));
    if (!(std::fabs(g - w) <= allowed) && ++misses <= 5)
      ADD_FAILURE() << what << "[" << k << "]: cuda " << g << " (0x" << std::hex << got[k].bits
                    << "), cpu " << w << " (0x" << want[k].bits << std::dec << "), allowed "
                    << allowed;
  }
  EXPECT_EQ(misses, 0) << what << ": " << misses << " of " << got.size() << " elements too far";
}

// How far the exact GELU's backward dx = D·dy may be from the cpu's on a GPU before the bf16
// rounding, from CUDA's and glibc's erff (encoder_elementwise_test.cpp derives it): 4.5·2^-24·|dy|
// + ulp32(dx).
inline double gelu_erf_backward_bound(bf16 dy, bf16 dx) {
  return 4.5 * 0x1p-24 * std::fabs(double(bf16_to_float(dy))) + fp32_ulp(double(bf16_to_float(dx)));
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
  EXPECT_LE(worst, ulps) << what << "[" << worst_at << "]: " << cuda_name() << " "
                         << bf16_to_float(got[worst_at]) << ", cpu "
                         << bf16_to_float(want[worst_at]) << " (" << worst << " ulps apart)";
}

}  // namespace collage::test
