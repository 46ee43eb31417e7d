#pragma once
// The cpu backend's second GEMM engine: oneDNN matmuls (docs/ARCHITECTURE.md, "cpu GEMMs").
//
// The Backend's GEMM contract — bf16 operands, fp32 accumulation, one rounding on store,
// `+=` for gradients — is exactly what a oneDNN bf16 matmul with an fp32 accumulator and a
// `sum` post-op computes, and on CPUs with AVX512-BF16 (2.3× measured) or AMX-BF16 oneDNN runs
// it faster than widening to fp32 for OpenBLAS sgemm (matmul.cpp). Elsewhere oneDNN has no bf16
// matmul and the OpenBLAS path stays: parallel.cpu_gemm chooses (choose_cpu_gemm).
//
// One primitive is created per shape (and transposition, bias, accumulation, result type) and
// cached with its memory objects: creating one costs far more than running a small one, and a
// call then only points the cached objects at its operands. Operands are plain row-major memory
// described by strides, so a transposed operand (weightᵀ in the forward, doutᵀ for dweight) is
// only a different stride, never a copy.
//
// Threads. An OnednnGemm is used by one thread at a time and runs each matmul on its `threads`
// OpenMP threads. Attention multiplies per head inside its own OpenMP loop, so it takes one
// single-threaded OnednnGemm per thread of that loop (CpuContext::onednn_per_thread). That is
// safe because every OnednnGemm passes oneDNN its own scratchpad (scratchpad_mode::user): two
// OnednnGemm may hold the same primitive from oneDNN's global cache, which with its own
// scratchpad could not run in two threads at once.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>

#include "numerics/bf16.h"

namespace collage::cpu {

// What oneDNN can do on this CPU, probed once.
struct OnednnSupport {
  std::string isa;           // oneDNN's effective ISA: "avx2", "avx512_core_amx", ...
  bool bf16_matmul = false;  // a bf16 x bf16 -> bf16 matmul primitive can be created
};
const OnednnSupport& onednn_support();

// parallel.cpu_gemm resolved for a backend whose storage is bf16 (or fp32: the cpu-fp32
// reference backend, which keeps OpenBLAS under auto).
struct CpuGemmChoice {
  bool onednn = false;
  std::string reason;  // for the log and `collage bench`
};
// `setting`: auto | onednn | openblas. onednn where oneDNN cannot multiply the storage type is
// an Error naming parallel.cpu_gemm and the ISA.
CpuGemmChoice choose_cpu_gemm(const std::string& setting, bool bf16_storage);

// A row-major matrix operand: element (r, c) at data[r * row_stride + c * col_stride].
template <typename S>
struct Operand {
  S* data;
  int64_t row_stride, col_stride;
};

class OnednnGemm {
 public:
  explicit OnednnGemm(int threads);
  ~OnednnGemm();
  OnednnGemm(const OnednnGemm&) = delete;
  OnednnGemm& operator=(const OnednnGemm&) = delete;

  // c (M, N) = a (M, K) · b (K, N) [+ bias (N)] [+ c if accumulate], accumulated in fp32 and
  // rounded to D once. S: bf16 or float; D: S, or float for bf16 operands (attention's scores
  // and products, which stay fp32).
  template <typename S, typename D = S>
  void matmul(int64_t M, int64_t N, int64_t K, Operand<const S> a, Operand<const S> b,
              const S* bias, Operand<D> c, bool accumulate);

  int64_t primitives_created() const { return created_; }  // for tests of the cache

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int threads_;
  int64_t created_ = 0;
};

}  // namespace collage::cpu
