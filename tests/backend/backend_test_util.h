#pragma once
// Helpers for the cpu backend tests: both storage types behind one typed-test interface,
// device buffers, random inputs, float64 comparisons and a finite-difference gradient check.
//
// Tolerances. The bf16 backend computes in fp32 and rounds each stored result once to
// nearest-even with 8 significant bits, so |got - exact| ≤ 2^-8·|exact| (half an ulp of
// 2^-7 relative) plus the fp32 arithmetic error before the rounding. The fp32 backend has
// no storage rounding: only fp32 arithmetic error, checked at ~1e-5. The float64 references
// take the very values the backend stored (bf16 inputs are exact in double), so input
// rounding is not part of the error.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/onednn_gemm.h"
#include "core/error.h"
#include "numerics/bf16.h"

namespace collage::test {

constexpr int kThreads = 2;
// Finite-difference checks run the forward thousands of times on tiny tensors: one thread,
// so that they check the math without paying for thread wake-ups on a busy machine.
constexpr int kFdThreads = 1;

template <typename S>
struct Storage;

template <>
struct Storage<bf16> {
  static std::unique_ptr<BackendT<bf16>> make(int threads = kThreads) {
    return make_cpu_backend(threads);
  }
  static constexpr double kRoundRel = 1.0 / 256;  // one RNE rounding to bf16: 2^-8 relative
  static constexpr double kArithRel = 1e-5;       // fp32 arithmetic ahead of that rounding
  static bf16 from(double x) { return float_to_bf16(static_cast<float>(x)); }
  static double to(bf16 x) { return bf16_to_float(x); }
};

template <>
struct Storage<float> {
  static std::unique_ptr<BackendT<float>> make(int threads = kThreads) {
    return make_cpu_backend_fp32(threads);
  }
  static constexpr double kRoundRel = 0.0;
  static constexpr double kArithRel = 1e-5;
  static float from(double x) { return static_cast<float>(x); }
  static double to(float x) { return x; }
};

// Relative tolerance of one stored result: the rounding plus fp32 arithmetic.
template <typename S>
constexpr double result_rel() {
  return Storage<S>::kRoundRel + Storage<S>::kArithRel;
}

struct StorageNames {
  template <typename S>
  static std::string GetName(int) {
    return std::is_same_v<S, bf16> ? "bf16" : "fp32";
  }
};
using StorageTypes = ::testing::Types<bf16, float>;

// A cpu backend of storage S with the GEMM engine parallel.cpu_gemm names: OpenBLAS on widened
// tiles or oneDNN (docs/ARCHITECTURE.md, "cpu GEMMs"). Where oneDNN has no bf16 matmul its bf16
// backend cannot be made: unavailable() says why, for GTEST_SKIP.
template <typename S, bool kOnednn>
struct GemmEngine {
  using Storage = S;
  static constexpr bool onednn = kOnednn;
  static std::unique_ptr<BackendT<S>> make(int threads = kThreads) {
    const char* gemm = kOnednn ? "onednn" : "openblas";
    if constexpr (std::is_same_v<S, bf16>) {
      return make_cpu_backend(threads, gemm);
    } else {
      return make_cpu_backend_fp32(threads, gemm);
    }
  }
  // Empty when this engine runs here, else why not.
  static std::string unavailable() {
    const cpu::OnednnSupport& support = cpu::onednn_support();
    if (!kOnednn || !std::is_same_v<S, bf16> || support.bf16_matmul) return "";
    return "oneDNN has no bf16 matmul on this CPU (its ISA is " + support.isa +
           "): the oneDNN bf16 engine is not tested here";
  }
};
struct GemmEngineNames {
  template <typename E>
  static std::string GetName(int) {
    return std::string(std::is_same_v<typename E::Storage, bf16> ? "bf16" : "fp32") +
           (E::onednn ? "_onednn" : "_openblas");
  }
};

// Device memory for `count` elements of T, released with the backend.
template <typename T, typename B>
class DeviceBuffer {
 public:
  DeviceBuffer(B& backend, size_t count) : backend_(&backend), count_(count) {
    ptr_ = static_cast<T*>(backend.allocate(count * sizeof(T)));
  }
  DeviceBuffer(B& backend, const std::vector<T>& host) : DeviceBuffer(backend, host.size()) {
    upload(host);
  }
  ~DeviceBuffer() { backend_->release(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  T* get() const { return ptr_; }
  void upload(const std::vector<T>& host) {
    EXPECT_EQ(host.size(), count_);
    backend_->copy_to_device(ptr_, host.data(), count_ * sizeof(T));
  }
  std::vector<T> download() const {
    std::vector<T> host(count_);
    backend_->copy_to_host(host.data(), ptr_, count_ * sizeof(T));
    return host;
  }

 private:
  B* backend_;
  size_t count_;
  T* ptr_;
};

class Rng {
 public:
  explicit Rng(uint64_t seed) : engine_(seed) {}
  double normal() { return std::normal_distribution<double>(0.0, 1.0)(engine_); }
  double uniform(double lo, double hi) {
    return std::uniform_real_distribution<double>(lo, hi)(engine_);
  }
  int integer(int lo, int hi) {
    return std::uniform_int_distribution<int>(lo, hi)(engine_);
  }  // [lo, hi]

 private:
  std::mt19937_64 engine_;
};

// Random weights for a loss Σ w_i·out_i, exactly representable in S (they also serve as dout).
template <typename S>
std::vector<double> random_weights(Rng& rng, size_t n) {
  std::vector<double> w(n);
  for (auto& x : w) x = Storage<S>::to(Storage<S>::from(rng.normal()));
  return w;
}

// n values ~ N(0, scale²) in storage S.
template <typename S>
std::vector<S> random_values(Rng& rng, size_t n, double scale = 1.0) {
  std::vector<S> v(n);
  for (auto& x : v) x = Storage<S>::from(scale * rng.normal());
  return v;
}

// n quiet NaNs in storage S: the old contents of a gradient that an op must write whole
// (backend.h). An op that read them would pass NaN on; one that writes every element leaves
// none.
template <typename S>
std::vector<S> nan_values(size_t n) {
  return std::vector<S>(n, Storage<S>::from(std::numeric_limits<double>::quiet_NaN()));
}

template <typename S>
std::vector<double> to_double(const std::vector<S>& v) {
  std::vector<double> out(v.size());
  for (size_t i = 0; i < v.size(); i++) out[i] = Storage<S>::to(v[i]);
  return out;
}

template <typename S>
std::vector<S> from_double(const std::vector<double>& v) {
  std::vector<S> out(v.size());
  for (size_t i = 0; i < v.size(); i++) out[i] = Storage<S>::from(v[i]);
  return out;
}

inline double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

// Every |got[i] - want[i]| ≤ rel·|want[i]| + abs; reports the first few misses.
inline void expect_close(const std::vector<double>& got, const std::vector<double>& want,
                         double rel, double abs, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int misses = 0;
  for (size_t i = 0; i < got.size(); i++) {
    const double bound = rel * std::fabs(want[i]) + abs;
    if (!(std::fabs(got[i] - want[i]) <= bound)) {
      if (++misses <= 5) {
        ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", want " << want[i]
                      << " (|diff| " << std::fabs(got[i] - want[i]) << " > " << bound << ")";
      }
    }
  }
  EXPECT_EQ(misses, 0) << what << ": " << misses << " of " << got.size() << " values off";
}

template <typename T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

// Central differences of a scalar loss(x) against an analytic gradient. loss runs the op's
// forward on the fp32 backend and returns Σ_i w_i·out_i in double. With inputs O(1) and
// h = 1e-2: truncation O(h²·f''') ≲ 1e-4; fp32 rounding of the outputs over 2h ≲ 1e-5·Σ|w·out|
// / h. So the check allows 2e-3 of the gradient's scale.
inline void expect_gradient_matches_differences(
    const std::function<double(const std::vector<float>&)>& loss, std::vector<float> x,
    const std::vector<double>& analytic, const std::string& what, double h = 1e-2,
    double rel = 2e-3) {
  ASSERT_EQ(x.size(), analytic.size()) << what;
  std::vector<double> numeric(x.size());
  for (size_t i = 0; i < x.size(); i++) {
    const float saved = x[i];
    const float x_up = static_cast<float>(saved + h), x_down = static_cast<float>(saved - h);
    x[i] = x_up;
    const double up = loss(x);
    x[i] = x_down;
    const double down = loss(x);
    x[i] = saved;
    numeric[i] = (up - down) / (double(x_up) - double(x_down));  // the step really taken
  }
  expect_close(analytic, numeric, rel, rel * std::max(max_abs(numeric), 1e-3),
               what + " vs finite differences");
}

// Σ_i w_i · out_i in double.
template <typename S>
double weighted_sum(const std::vector<S>& out, const std::vector<double>& weights) {
  double s = 0;
  for (size_t i = 0; i < out.size(); i++) s += weights[i] * Storage<S>::to(out[i]);
  return s;
}

// The finite-difference check of an elementwise op on the fp32 backend: forward(out, inp, n)
// and backward(dinp, inp, dout, n) writing dloss/dinp, for 40 inputs of scale 2.
template <typename Forward, typename Backward>
void expect_elementwise_gradient_matches_differences(Forward forward, Backward backward) {
  auto backend = make_cpu_backend_fp32(kFdThreads);
  Rng rng(3);
  const int n = 40;
  auto inp = random_values<float>(rng, n, 2.0);
  const auto loss_weights = random_weights<float>(rng, n);
  auto loss = [&](const std::vector<float>& x) {
    DeviceBuffer<float, BackendT<float>> d_x(*backend, x), d_out(*backend, size_t(n));
    forward(*backend, d_out.get(), d_x.get(), n);
    return weighted_sum(d_out.download(), loss_weights);
  };
  DeviceBuffer<float, BackendT<float>> d_x(*backend, inp),
      d_dout(*backend, from_double<float>(loss_weights)), dx(*backend, size_t(n));
  backward(*backend, dx.get(), d_x.get(), d_dout.get(), n);
  expect_gradient_matches_differences(loss, inp, to_double(dx.download()), "dinp");
}

}  // namespace collage::test
