// CudaBackend: the Backend interface on a GPU (or on the host SIMT emulator: this file builds
// for both, see context.h). Memory is one device allocation per arena; every op queues its
// kernels (kernels/*.cu, declared in kernels/kernels.cuh) or GEMMs (gemm.h) on one stream and
// returns without waiting. The host waits only where a result comes back: sum() and
// sum_squares() (the loss and the gradient norm), copy_to_host(), and synchronize(), which
// also hands back the EDQ sums of the optimizer steps queued since the last one.
#include "backend/cuda/cuda_backend.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cuda/runtime/gemm.h"
#include "backend/cuda/runtime/runtime.h"
#include "core/error.h"
#include "kernels/kernels.cuh"

namespace collage::cuda {
COLLAGE_CUDA_VARIANT_BEGIN
namespace {

// The Backend's bf16 and the kernels' __nv_bfloat16 have the same layout (numerics/bf16.h).
bf16_t* dev(bf16* p) { return reinterpret_cast<bf16_t*>(p); }
const bf16_t* dev(const bf16* p) { return reinterpret_cast<const bf16_t*>(p); }

class CudaBackend final : public Backend {
 public:
  CudaBackend(std::string name, int device) : name_(std::move(name)) {
    open_context(cx_, device);
    result_ = static_cast<double*>(device_allocate(cx_, sizeof(double)));
  }
  ~CudaBackend() override {
    device_release(cx_, result_);
    device_release(cx_, edq_slots_.data);
    close_context(cx_);
  }
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  std::string name() const override { return name_; }
  // The stream every op queues on (the emulator's stream object under emulation).
  void* stream_handle() const override { return static_cast<void*>(cx_.stream); }

  // ---- memory ----
  void* allocate(size_t bytes) override {
    void* pointer = device_allocate(cx_, bytes);
    fill_bytes(cx_, pointer, 0, bytes);
    return pointer;
  }
  void release(void* pointer) override { device_release(cx_, pointer); }
  void copy_to_device(void* dst, const void* host_src, size_t bytes) override {
    upload(cx_, dst, host_src, bytes);
  }
  void copy_to_host(void* host_dst, const void* src, size_t bytes) override {
    download(cx_, host_dst, src, bytes);
  }
  void copy(void* dst, const void* src, size_t bytes) override {
    copy_on_device(cx_, dst, src, bytes);
  }
  void zero(void* dst, size_t bytes) override { fill_bytes(cx_, dst, 0, bytes); }
  void synchronize() override {
    if (pending_edq_.empty()) {
      cuda::synchronize(cx_);
      return;
    }
    std::vector<double> sums(4 * pending_edq_.size());
    download(cx_, sums.data(), edq_slots_.data, sums.size() * sizeof(double));
    for (size_t k = 0; k < pending_edq_.size(); k++) {
      *pending_edq_[k] += EdqSums{sums[4 * k], sums[4 * k + 1], std::llround(sums[4 * k + 2]),
                                  std::llround(sums[4 * k + 3])};  // counts: exact in a double
    }
    pending_edq_.clear();
  }
  Counters counters() const override { return {cx_.launches, cx_.synchronizations}; }
  bool start_profile() override {
    profile_start(cx_);
    return true;
  }
  std::vector<OpFamilyTime> stop_profile() override { return profile_stop(cx_); }

  // ---- ops ----
  void do_embedding_forward(bf16* out, const int32_t* tokens, const bf16* wte, const bf16* wpe,
                            int B, int T, int C, int64_t vocab_begin, int64_t vocab_end) override {
    cuda::embedding_forward(cx_, dev(out), tokens, dev(wte), dev(wpe), B, T, C, vocab_begin,
                            vocab_end);
  }
  void do_embedding_backward(bf16* dwte, bf16* dwpe, const bf16* dout, const int32_t* tokens, int B,
                             int T, int C, int64_t vocab_begin, int64_t vocab_end) override {
    cuda::embedding_backward(cx_, dev(dwte), dev(dwpe), dev(dout), tokens, B, T, C, vocab_begin,
                             vocab_end);
  }

  void do_layernorm_forward(bf16* out, float* mean, float* rstd, const bf16* inp,
                            const bf16* weight, const bf16* bias, int64_t N, int C,
                            float eps) override {
    cuda::layernorm_forward(cx_, dev(out), mean, rstd, dev(inp), dev(weight), dev(bias), N, C, eps);
  }
  void do_residual_layernorm_forward(bf16* residual, bf16* out, float* mean, float* rstd,
                                     const bf16* a, const bf16* b, const bf16* weight,
                                     const bf16* bias, int64_t N, int C, float eps) override {
    cuda::residual_layernorm_forward(cx_, dev(residual), dev(out), mean, rstd, dev(a), dev(b),
                                     dev(weight), dev(bias), N, C, eps);
  }
  void do_layernorm_backward(bf16* dinp, bf16* dweight, bf16* dbias, const bf16* dout,
                             const bf16* inp, const bf16* weight, const float* mean,
                             const float* rstd, int64_t N, int C, bf16* dinp_sums) override {
    cuda::layernorm_backward(cx_, dev(dinp), dev(dweight), dev(dbias), dev(dout), dev(inp),
                             dev(weight), mean, rstd, N, C, dev(dinp_sums));
  }

  // out (N, OC) = inp (N, C) · weight (OC, C)ᵀ + bias: one GEMM, the bias as its epilogue.
  void do_matmul_forward(bf16* out, const bf16* inp, const bf16* weight, const bf16* bias,
                         int64_t N, int C, int OC) override {
    GemmCall g;
    g.a = dev(inp), g.lda = C;
    g.b = dev(weight), g.ldb = C, g.transpose_b = true;
    g.d = dev(out), g.ldd = OC;
    g.M = N, g.N = OC, g.K = C;
    g.bias = dev(bias);
    gemm(cx_, g);
  }
  // dinp (N, C) = dout (N, OC) · weight (OC, C), written (beta = 0: the old dinp is not read);
  // dweight (OC, C) += doutᵀ · inp (N, C) with beta = 1 (one rounding); dbias (OC) += Σ_rows
  // dout.
  void do_matmul_backward(bf16* dinp, bf16* dweight, bf16* dbias, const bf16* dout, const bf16* inp,
                          const bf16* weight, int64_t N, int C, int OC) override {
    if (dinp) {
      GemmCall g;
      g.a = dev(dout), g.lda = OC;
      g.b = dev(weight), g.ldb = C;
      g.d = dev(dinp), g.ldd = C;
      g.M = N, g.N = C, g.K = OC;
      g.accumulate = false;
      gemm(cx_, g);
    }
    if (dweight) {
      GemmCall g;
      g.a = dev(dout), g.lda = OC, g.transpose_a = true;
      g.b = dev(inp), g.ldb = C;
      g.d = dev(dweight), g.ldd = C;
      g.M = OC, g.N = C, g.K = N;
      g.accumulate = true;
      gemm(cx_, g);
    }
    if (dbias) bias_backward(cx_, dev(dbias), dev(dout), N, OC);
  }

  void do_gelu_forward(bf16* out, const bf16* inp, int64_t n) override {
    cuda::gelu_forward(cx_, dev(out), dev(inp), n);
  }
  void do_gelu_backward(bf16* dinp, const bf16* inp, const bf16* dout, int64_t n) override {
    cuda::gelu_backward(cx_, dev(dinp), dev(inp), dev(dout), n);
  }
  // One pass over the rows for dinp and the bias gradient's column partials (elementwise.cu).
  void do_gelu_backward_bias(bf16* dinp, bf16* dbias, const bf16* inp, const bf16* dout, int64_t N,
                             int C, bool exact) override {
    if (!dinp) return;  // null gradient: not computed (nor, then, dbias)
    if (!dbias) {
      if (exact) return cuda::gelu_erf_backward(cx_, dev(dinp), dev(inp), dev(dout), N * C);
      return cuda::gelu_backward(cx_, dev(dinp), dev(inp), dev(dout), N * C);
    }
    cuda::gelu_backward_bias(cx_, dev(dinp), dev(dbias), dev(inp), dev(dout), N, C, exact);
  }
  void do_add(bf16* out, const bf16* a, const bf16* b, int64_t n) override {
    cuda::add(cx_, dev(out), dev(a), dev(b), n);
  }
  void do_accumulate(bf16* dst, const bf16* src, int64_t n) override {
    cuda::accumulate(cx_, dev(dst), dev(src), n);
  }

  void do_gelu_erf_forward(bf16* out, const bf16* inp, int64_t n) override {
    cuda::gelu_erf_forward(cx_, dev(out), dev(inp), n);
  }
  void do_gelu_erf_backward(bf16* dinp, const bf16* inp, const bf16* dout, int64_t n) override {
    cuda::gelu_erf_backward(cx_, dev(dinp), dev(inp), dev(dout), n);
  }
  void do_tanh_forward(bf16* out, const bf16* inp, int64_t n) override {
    cuda::tanh_forward(cx_, dev(out), dev(inp), n);
  }
  void do_tanh_backward(bf16* dinp, const bf16* out, const bf16* dout, int64_t n) override {
    cuda::tanh_backward(cx_, dev(dinp), dev(out), dev(dout), n);
  }
  void do_dropout_forward(bf16* out, const bf16* inp, int64_t n, float p, uint64_t seed,
                          uint64_t offset) override {
    cuda::dropout_forward(cx_, dev(out), dev(inp), n, p, seed, offset);
  }
  void do_dropout_backward(bf16* dinp, const bf16* dout, int64_t n, float p, uint64_t seed,
                           uint64_t offset) override {
    cuda::dropout_backward(cx_, dev(dinp), dev(dout), n, p, seed, offset);
  }
  void do_attention_forward_dropout(bf16* out, float* lse, const bf16* qkv, const int32_t* key_mask,
                                    bool causal, int B, int T, int NH, int HS, float p,
                                    uint64_t seed, uint64_t offset) override {
    cuda::attention_forward_dropout(cx_, dev(out), lse, dev(qkv), key_mask, causal, B, T, NH, HS, p,
                                    seed, offset);
  }
  void do_attention_backward_dropout(bf16* dqkv, const bf16* dout, const bf16* out, const bf16* qkv,
                                     const float* lse, const int32_t* key_mask, bool causal, int B,
                                     int T, int NH, int HS, float p, uint64_t seed,
                                     uint64_t offset) override {
    cuda::attention_backward_dropout(cx_, dev(dqkv), dev(dout), dev(out), dev(qkv), lse, key_mask,
                                     causal, B, T, NH, HS, p, seed, offset);
  }
  void do_gather_rows(bf16* out, const bf16* inp, const int32_t* rows, int64_t count,
                      int C) override {
    cuda::gather_rows(cx_, dev(out), dev(inp), rows, count, C);
  }
  void do_scatter_add_rows(bf16* dinp, const bf16* dout, const int32_t* rows, int64_t count,
                           int C) override {
    cuda::scatter_add_rows(cx_, dev(dinp), dev(dout), rows, count, C);
  }

  void do_rope_forward(bf16* out, const bf16* qkv, int B, int T, int NH, int HS,
                       float base) override {
    cuda::rope_forward(cx_, dev(out), dev(qkv), B, T, NH, HS, base);
  }
  void do_rope_backward(bf16* dqkv, const bf16* dout, int B, int T, int NH, int HS,
                        float base) override {
    cuda::rope_backward(cx_, dev(dqkv), dev(dout), B, T, NH, HS, base);
  }

  void do_attention_forward(bf16* out, float* lse, const bf16* qkv, const int32_t* key_mask,
                            bool causal, int B, int T, int NH, int HS) override {
    cuda::attention_forward(cx_, dev(out), lse, dev(qkv), key_mask, causal, B, T, NH, HS);
  }
  void do_attention_backward(bf16* dqkv, const bf16* dout, const bf16* out, const bf16* qkv,
                             const float* lse, const int32_t* key_mask, bool causal, int B, int T,
                             int NH, int HS, bf16* dqkv_sums) override {
    cuda::attention_backward(cx_, dev(dqkv), dev(dout), dev(out), dev(qkv), lse, key_mask, causal,
                             B, T, NH, HS, dev(dqkv_sums));
  }

  void do_cross_entropy_forward(float* losses, const bf16* logits, const int32_t* targets,
                                int64_t N, int V, int Vp, float* row_lse) override {
    cuda::cross_entropy_forward(cx_, losses, dev(logits), targets, N, V, Vp, row_lse);
  }
  void do_cross_entropy_backward(bf16* dlogits, const bf16* logits, const int32_t* targets,
                                 int64_t N, int V, int Vp, float dloss) override {
    cuda::cross_entropy_backward(cx_, dev(dlogits), dev(logits), targets, N, V, Vp, dloss);
  }
  void do_cross_entropy_shard_max(float* row_max, const bf16* logits, int64_t N, int V, int Vl,
                                  int64_t vocab_begin) override {
    cuda::cross_entropy_shard_max(cx_, row_max, dev(logits), N, V, Vl, vocab_begin);
  }
  void do_cross_entropy_shard_sums(float* sums, const bf16* logits, const int32_t* targets,
                                   const float* row_max, int64_t N, int V, int Vl,
                                   int64_t vocab_begin) override {
    cuda::cross_entropy_shard_sums(cx_, sums, dev(logits), targets, row_max, N, V, Vl, vocab_begin);
  }
  void do_cross_entropy_shard_loss(float* losses, float* lse, const float* row_max,
                                   const float* sums, const int32_t* targets, int64_t N) override {
    cuda::cross_entropy_shard_loss(cx_, losses, lse, row_max, sums, targets, N);
  }
  void do_cross_entropy_shard_backward(bf16* dlogits, const bf16* logits, const int32_t* targets,
                                       const float* lse, int64_t N, int V, int Vl,
                                       int64_t vocab_begin, float dloss) override {
    cuda::cross_entropy_shard_backward(cx_, dev(dlogits), dev(logits), targets, lse, N, V, Vl,
                                       vocab_begin, dloss);
  }

  // The two reads of a training step (the loss and the gradient norm): the host waits here.
  double do_sum(const float* x, int64_t n) override {
    cuda::sum(cx_, result_, x, n);
    return read_result();
  }
  double do_sum_squares(const bf16* x, int64_t n) override {
    cuda::sum_squares(cx_, result_, dev(x), n);
    return read_result();
  }
  void do_scale(bf16* x, float factor, int64_t n) override { cuda::scale(cx_, dev(x), factor, n); }

  void do_optimizer_step(const OptimizerStep& step) override { do_optimizer_steps({&step, 1}); }
  // The steps are queued, one launch for all (kernels/optimizer.cu); each step's EDQ sums land
  // in a device slot of their own and reach step.edq at the next synchronize().
  void do_optimizer_steps(std::span<const OptimizerStep> steps) override {
    constexpr size_t kSlotBytes = 4 * sizeof(double);
    size_t new_slots = 0;
    for (const OptimizerStep& step : steps) new_slots += step.edq != nullptr;
    if ((pending_edq_.size() + new_slots) * kSlotBytes > edq_slots_.bytes) {
      synchronize();  // hands back what is pending, so the slots can move
      grow(cx_, edq_slots_,
           std::max({2 * edq_slots_.bytes, new_slots * kSlotBytes, 64 * kSlotBytes}));
    }
    std::vector<double*> slots(steps.size(), nullptr);
    for (size_t k = 0; k < steps.size(); k++) {
      if (!steps[k].edq) continue;
      if (pending_edq_.empty()) fill_bytes(cx_, edq_slots_.data, 0, edq_slots_.bytes);
      slots[k] = static_cast<double*>(edq_slots_.data) + 4 * pending_edq_.size();
      pending_edq_.push_back(steps[k].edq);
    }
    cuda::optimizer_steps(cx_, steps.data(), slots.data(), steps.size());
  }

 private:
  double read_result() {
    double value = 0;
    download(cx_, &value, result_, sizeof value);
    return value;
  }

  std::string name_;
  CudaContext cx_;
  double* result_ = nullptr;           // device: sum() and sum_squares() land here
  DeviceBuffer edq_slots_;             // device: 4 doubles per pending optimizer step
  std::vector<EdqSums*> pending_edq_;  // where each slot goes at synchronize()
};

}  // namespace

std::unique_ptr<Backend> make_backend(const std::string& name, int device) {
  return std::make_unique<CudaBackend>(name, device);
}

COLLAGE_CUDA_VARIANT_END
}  // namespace collage::cuda
