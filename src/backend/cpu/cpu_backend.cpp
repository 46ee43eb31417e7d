// CpuBackend<S>: the Backend interface on the host, for bf16 storage (training) and float
// storage (finite-difference checks). Memory is plain host memory, 256-byte aligned (regions of
// 2 MiB or more on huge pages, allocate below); every op forwards to a kernel in this folder
// (kernels.h), which gets the thread count and the backend's scratch memory through the
// CpuContext.
//
// Threads: every parallel loop runs on `threads` OpenMP threads (num_threads clause, no global
// setting), and constructing a backend sets OpenBLAS to one thread for the whole process (see
// matmul.cpp for why). One backend serves one caller at a time: ops share its scratch memory.
#include "backend/cpu/cpu_backend.h"

#include <cblas.h>
#include <omp.h>
#include <sys/mman.h>

#include <cstdlib>
#include <cstring>

#include "backend/backend.h"
#include "backend/cpu/gemm_peak.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/lane_kernels.h"
#include "backend/cpu/op_profile.h"
#include "backend/cpu/optimizer_isa.h"
#include "backend/cpu/storage.h"
#include "core/error.h"

namespace collage {
namespace {

template <typename S>
class CpuBackend final : public BackendT<S> {
 public:
  CpuBackend(int threads, const std::string& cpu_gemm) {
    cx_.threads = threads > 0 ? threads : omp_get_max_threads();
    cx_.isa = cpu::chosen_lane_kernels().isa;
    // All parallelism is OpenMP's (see matmul.cpp): each thread calls a single-threaded sgemm.
    openblas_set_num_threads(1);
    gemm_ = cpu::choose_cpu_gemm(cpu_gemm, !cpu::is_fp32_storage<S>);
    if (gemm_.onednn) cx_.onednn = std::make_unique<cpu::OnednnGemm>(cx_.threads);
    if (gemm_.onednn && !cpu::is_fp32_storage<S>) {  // attention's (attention_onednn.cpp)
      for (int t = 0; t < cx_.threads; t++)
        cx_.onednn_per_thread.push_back(std::make_unique<cpu::OnednnGemm>(1));
    }
  }

  std::string name() const override { return cpu::is_fp32_storage<S> ? "cpu-fp32" : "cpu"; }
  std::string gemm_engine() const override {
    // The same resolution as the peak MFU is measured against (gemm_peak.h).
    const cpu::GemmEngine engine = cpu::gemm_engine(gemm_, !cpu::is_fp32_storage<S>);
    return fmt::format("{} ({})",
                       engine == cpu::GemmEngine::openblas_sgemm
                           ? "OpenBLAS sgemm on fp32-widened tiles"
                           : cpu::gemm_engine_name(engine),
                       gemm_.reason);
  }
  std::string optimizer_engine() const override { return cpu::optimizer_loop_description(); }
  std::string kernel_engine() const override { return cpu::chosen_lane_kernels().description; }
  // Every op's host time by family (op_profile.h); the memory calls are not ops and untimed.
  bool start_profile() override {
    profile_.start();
    return true;
  }
  std::vector<OpFamilyTime> stop_profile() override { return profile_.stop(); }

  void* allocate(size_t bytes) override {
    // A region of 2 MiB or more starts on a 2 MiB boundary and asks for transparent huge pages
    // before its first touch (the memset faults them in): the optimizer, the gradient norm and
    // zeroing stream hundreds of MB, and with 4 KB pages they cross a page, and may miss the
    // TLB, every 4 KB of each array (docs/ARCHITECTURE.md, "Huge pages"). Only a hint.
    constexpr size_t kHugePage = size_t(2) << 20;
    const size_t alignment = bytes >= kHugePage ? kHugePage : 256;
    size_t rounded = (bytes + alignment - 1) / alignment * alignment;
    if (rounded == 0) rounded = 256;  // a valid, distinct pointer even for empty tensors
    void* ptr = std::aligned_alloc(alignment, rounded);
    if (!ptr) fail("cpu backend: cannot allocate {} bytes", bytes);
#ifdef MADV_HUGEPAGE
    if (alignment == kHugePage) madvise(ptr, rounded, MADV_HUGEPAGE);
#endif
    std::memset(ptr, 0, rounded);
    return ptr;
  }
  void release(void* ptr) override { std::free(ptr); }
  void copy_to_device(void* dst, const void* host_src, size_t bytes) override {
    if (bytes) std::memcpy(dst, host_src, bytes);
  }
  void copy_to_host(void* host_dst, const void* src, size_t bytes) override {
    if (bytes) std::memcpy(host_dst, src, bytes);
  }
  void copy(void* dst, const void* src, size_t bytes) override {
    if (bytes) std::memmove(dst, src, bytes);
  }
  void zero(void* dst, size_t bytes) override {
    const auto timed = profile_.time(OpFamily::other);
    cpu::zero_bytes(cx_, dst, bytes);
  }

  void do_embedding_forward(S* out, const int32_t* tokens, const S* wte, const S* wpe, int B, int T,
                            int C, int64_t vocab_begin, int64_t vocab_end) override {
    const auto timed = profile_.time(OpFamily::other);
    cpu::embedding_forward(cx_, out, tokens, wte, wpe, B, T, C, vocab_begin, vocab_end);
  }
  void do_embedding_backward(S* dwte, S* dwpe, const S* dout, const int32_t* tokens, int B, int T,
                             int C, int64_t vocab_begin, int64_t vocab_end) override {
    const auto timed = profile_.time(OpFamily::other);
    cpu::embedding_backward(cx_, dwte, dwpe, dout, tokens, B, T, C, vocab_begin, vocab_end);
  }

  void do_layernorm_forward(S* out, float* mean, float* rstd, const S* inp, const S* weight,
                            const S* bias, int64_t N, int C, float eps) override {
    const auto timed = profile_.time(OpFamily::layernorm);
    cpu::layernorm_forward(cx_, out, mean, rstd, inp, weight, bias, N, C, eps);
  }
  void do_layernorm_backward(S* dinp, S* dweight, S* dbias, const S* dout, const S* inp,
                             const S* weight, const float* mean, const float* rstd, int64_t N,
                             int C, S* dinp_sums) override {
    const auto timed = profile_.time(OpFamily::layernorm);
    cpu::layernorm_backward(cx_, dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
    if (dinp_sums) cpu::bias_backward(cx_, dinp_sums, static_cast<const S*>(dinp), N, C);
  }

  void do_matmul_forward(S* out, const S* inp, const S* weight, const S* bias, int64_t N, int C,
                         int OC) override {
    const auto timed = profile_.time(OpFamily::gemm);
    cpu::matmul_forward(cx_, out, inp, weight, bias, N, C, OC);
  }
  void do_matmul_backward(S* dinp, S* dweight, S* dbias, const S* dout, const S* inp,
                          const S* weight, int64_t N, int C, int OC) override {
    const auto timed = profile_.time(OpFamily::gemm);
    cpu::matmul_backward(cx_, dinp, dweight, dbias, dout, inp, weight, N, C, OC);
  }

  void do_gelu_forward(S* out, const S* inp, int64_t n) override {
    const auto timed = profile_.time(OpFamily::gelu);
    cpu::gelu_forward(cx_, out, inp, n);
  }
  void do_gelu_backward(S* dinp, const S* inp, const S* dout, int64_t n) override {
    const auto timed = profile_.time(OpFamily::gelu);
    cpu::gelu_backward(cx_, dinp, inp, dout, n);
  }
  // The two ops (the Backend default's bits), timed as one GELU op.
  void do_gelu_backward_bias(S* dinp, S* dbias, const S* inp, const S* dout, int64_t N, int C,
                             bool exact) override {
    const auto timed = profile_.time(OpFamily::gelu);
    if (exact) {
      cpu::gelu_erf_backward(cx_, dinp, inp, dout, N * C);
    } else {
      cpu::gelu_backward(cx_, dinp, inp, dout, N * C);
    }
    if (dinp && dbias) cpu::bias_backward(cx_, dbias, static_cast<const S*>(dinp), N, C);
  }
  void do_add(S* out, const S* a, const S* b, int64_t n) override {
    const auto timed = profile_.time(OpFamily::other);
    cpu::add(cx_, out, a, b, n);
  }
  void do_accumulate(S* dst, const S* src, int64_t n) override {
    const auto timed = profile_.time(OpFamily::other);
    cpu::accumulate(cx_, dst, src, n);
  }

  void do_gelu_erf_forward(S* out, const S* inp, int64_t n) override {
    const auto timed = profile_.time(OpFamily::gelu);
    cpu::gelu_erf_forward(cx_, out, inp, n);
  }
  void do_gelu_erf_backward(S* dinp, const S* inp, const S* dout, int64_t n) override {
    const auto timed = profile_.time(OpFamily::gelu);
    cpu::gelu_erf_backward(cx_, dinp, inp, dout, n);
  }
  void do_tanh_forward(S* out, const S* inp, int64_t n) override {
    const auto timed = profile_.time(OpFamily::other);
    cpu::tanh_forward(cx_, out, inp, n);
  }
  void do_tanh_backward(S* dinp, const S* out, const S* dout, int64_t n) override {
    const auto timed = profile_.time(OpFamily::other);
    cpu::tanh_backward(cx_, dinp, out, dout, n);
  }
  void do_dropout_forward(S* out, const S* inp, int64_t n, float p, uint64_t seed,
                          uint64_t offset) override {
    const auto timed = profile_.time(OpFamily::other);
    cpu::dropout_forward(cx_, out, inp, n, p, seed, offset);
  }
  void do_dropout_backward(S* dinp, const S* dout, int64_t n, float p, uint64_t seed,
                           uint64_t offset) override {
    const auto timed = profile_.time(OpFamily::other);
    cpu::dropout_backward(cx_, dinp, dout, n, p, seed, offset);
  }
  void do_attention_forward_dropout(S* out, float* lse, const S* qkv, const int32_t* key_mask,
                                    bool causal, int B, int T, int NH, int HS, float p,
                                    uint64_t seed, uint64_t offset) override {
    const auto timed = profile_.time(OpFamily::attention_forward);
    cpu::attention_forward_dropout(cx_, out, lse, qkv, key_mask, causal, B, T, NH, HS, p, seed,
                                   offset);
  }
  void do_attention_backward_dropout(S* dqkv, const S* dout, const S* out, const S* qkv,
                                     const float* lse, const int32_t* key_mask, bool causal, int B,
                                     int T, int NH, int HS, float p, uint64_t seed,
                                     uint64_t offset) override {
    const auto timed = profile_.time(OpFamily::attention_backward);
    cpu::attention_backward_dropout(cx_, dqkv, dout, out, qkv, lse, key_mask, causal, B, T, NH, HS,
                                    p, seed, offset);
  }
  void do_gather_rows(S* out, const S* inp, const int32_t* rows, int64_t count, int C) override {
    const auto timed = profile_.time(OpFamily::other);
    cpu::gather_rows(cx_, out, inp, rows, count, C);
  }
  void do_scatter_add_rows(S* dinp, const S* dout, const int32_t* rows, int64_t count,
                           int C) override {
    const auto timed = profile_.time(OpFamily::other);
    cpu::scatter_add_rows(cx_, dinp, dout, rows, count, C);
  }

  void do_rope_forward(S* out, const S* qkv, int B, int T, int NH, int HS, float base) override {
    const auto timed = profile_.time(OpFamily::other);
    cpu::rope_forward(cx_, out, qkv, B, T, NH, HS, base);
  }
  void do_rope_backward(S* dqkv, const S* dout, int B, int T, int NH, int HS, float base) override {
    const auto timed = profile_.time(OpFamily::other);
    cpu::rope_backward(cx_, dqkv, dout, B, T, NH, HS, base);
  }

  void do_attention_forward(S* out, float* lse, const S* qkv, const int32_t* key_mask, bool causal,
                            int B, int T, int NH, int HS) override {
    const auto timed = profile_.time(OpFamily::attention_forward);
    cpu::attention_forward(cx_, out, lse, qkv, key_mask, causal, B, T, NH, HS);
  }
  // `out` is read by the oneDNN engine's backward only (D_i = dout_i·out_i, as the tensor-core
  // kernels); the OpenBLAS one sums D_i = Σ_j P_ij dP_ij from the recomputed probabilities.
  void do_attention_backward(S* dqkv, const S* dout, const S* out, const S* qkv, const float* lse,
                             const int32_t* key_mask, bool causal, int B, int T, int NH, int HS,
                             S* dqkv_sums) override {
    const auto timed = profile_.time(OpFamily::attention_backward);
    cpu::attention_backward(cx_, dqkv, dout, out, qkv, lse, key_mask, causal, B, T, NH, HS);
    if (dqkv && dqkv_sums)
      cpu::bias_backward(cx_, dqkv_sums, static_cast<const S*>(dqkv), int64_t(B) * T, 3 * NH * HS);
  }

  void do_cross_entropy_forward(float* losses, const S* logits, const int32_t* targets, int64_t N,
                                int V, int Vp, float* row_lse) override {
    const auto timed = profile_.time(OpFamily::cross_entropy);
    cpu::cross_entropy_forward(cx_, losses, logits, targets, N, V, Vp, row_lse);
  }
  void do_cross_entropy_backward(S* dlogits, const S* logits, const int32_t* targets, int64_t N,
                                 int V, int Vp, float dloss) override {
    const auto timed = profile_.time(OpFamily::cross_entropy);
    cpu::cross_entropy_backward(cx_, dlogits, logits, targets, N, V, Vp, dloss);
  }
  void do_cross_entropy_shard_max(float* row_max, const S* logits, int64_t N, int V, int Vl,
                                  int64_t vocab_begin) override {
    const auto timed = profile_.time(OpFamily::cross_entropy);
    cpu::cross_entropy_shard_max(cx_, row_max, logits, N, V, Vl, vocab_begin);
  }
  void do_cross_entropy_shard_sums(float* sums, const S* logits, const int32_t* targets,
                                   const float* row_max, int64_t N, int V, int Vl,
                                   int64_t vocab_begin) override {
    const auto timed = profile_.time(OpFamily::cross_entropy);
    cpu::cross_entropy_shard_sums(cx_, sums, logits, targets, row_max, N, V, Vl, vocab_begin);
  }
  void do_cross_entropy_shard_loss(float* losses, float* lse, const float* row_max,
                                   const float* sums, const int32_t* targets, int64_t N) override {
    const auto timed = profile_.time(OpFamily::cross_entropy);
    cpu::cross_entropy_shard_loss(cx_, losses, lse, row_max, sums, targets, N);
  }
  void do_cross_entropy_shard_backward(S* dlogits, const S* logits, const int32_t* targets,
                                       const float* lse, int64_t N, int V, int Vl,
                                       int64_t vocab_begin, float dloss) override {
    const auto timed = profile_.time(OpFamily::cross_entropy);
    cpu::cross_entropy_shard_backward(cx_, dlogits, logits, targets, lse, N, V, Vl, vocab_begin,
                                      dloss);
  }

  double do_sum(const float* x, int64_t n) override {
    const auto timed = profile_.time(OpFamily::other);
    return cpu::sum(cx_, x, n);
  }
  double do_sum_squares(const S* x, int64_t n) override {
    const auto timed = profile_.time(OpFamily::other);
    return cpu::sum_squares(cx_, x, n);
  }
  void do_scale(S* x, float factor, int64_t n) override {
    const auto timed = profile_.time(OpFamily::other);
    cpu::scale(cx_, x, factor, n);
  }

  void do_optimizer_step(const OptimizerStep& step) override {
    const auto timed = profile_.time(OpFamily::optimizer);
    cpu::optimizer_step<S>(cx_, step);
  }

 private:
  cpu::CpuContext cx_;
  cpu::CpuGemmChoice gemm_;
  cpu::OpProfile profile_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(int threads, const std::string& cpu_gemm) {
  return std::make_unique<CpuBackend<bf16>>(threads, cpu_gemm);
}

std::unique_ptr<BackendT<float>> make_cpu_backend_fp32(int threads, const std::string& cpu_gemm) {
  return std::make_unique<CpuBackend<float>>(threads, cpu_gemm);
}

}  // namespace collage
