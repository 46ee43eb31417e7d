// The checks of backend_contract.h: what each op of backend.h refuses, the same on every backend
// (docs/ARCHITECTURE.md, "The Backend contract").
#include "backend/backend_contract.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <utility>
#include <vector>

#include "core/error.h"
#include "numerics/precision.h"

namespace collage::contract {
namespace {

// The checks of one call; every message starts with the op's name.
class Call {
 public:
  explicit Call(const char* op) : op_(op) {}

  template <typename... Args>
  void require(bool ok, fmt::format_string<Args...> reason, Args&&... args) const {
    if (!ok) fail("{}: {}", op_, fmt::format(reason, std::forward<Args>(args)...));
  }
  void at_least(int64_t value, int64_t least, const char* name) const {
    require(value >= least, "{} = {} must be >= {}", name, value, least);
  }
  // A row count that kernels index with int32.
  void rows(int64_t value, const char* name) const {
    require(value >= 0 && value <= INT32_MAX, "{} = {} must be in [0, 2^31)", name, value);
  }
  // `pointer` must be set when `needed` (the op has elements to touch through it).
  void set(const void* pointer, const char* name, bool needed = true) const {
    require(!needed || pointer != nullptr, "{} is null", name);
  }
  void probability(float p) const {
    require(p >= 0.0f && p < 1.0f, "dropout probability p = {} must be in [0, 1)", p);
  }

 private:
  const char* op_;
};

void embedding_shape(const Call& call, int B, int T, int C, int64_t vocab_begin,
                     int64_t vocab_end) {
  call.at_least(B, 0, "B"), call.at_least(T, 0, "T"), call.at_least(C, 0, "C");
  call.rows(int64_t(B) * T, "B·T");
  call.require(vocab_begin >= 0 && vocab_begin <= vocab_end && vocab_end - vocab_begin <= INT32_MAX,
               "owned vocabulary [{}, {}) must be a range of at most 2^31 - 1 rows from 0 up",
               vocab_begin, vocab_end);
}

void layernorm_shape(const Call& call, int64_t N, int C) {
  call.at_least(N, 0, "N"), call.at_least(C, 1, "C");
}

void matmul_shape(const Call& call, int64_t N, int C, int OC) {
  call.at_least(N, 0, "N"), call.at_least(C, 0, "C"), call.at_least(OC, 0, "OC");
}

void attention_shape(const Call& call, int B, int T, int NH, int HS, float p) {
  call.probability(p);
  call.at_least(B, 1, "B"), call.at_least(T, 1, "T"), call.at_least(NH, 1, "NH");
  call.at_least(HS, 1, "HS");
}

void rows_shape(const Call& call, int64_t count, int C) {
  call.rows(count, "count"), call.at_least(C, 1, "C");
}

void cross_entropy_shape(const Call& call, int64_t N, int V, int Vp) {
  call.rows(N, "N"), call.at_least(V, 1, "V");
  call.require(Vp >= V, "padded vocabulary Vp = {} must be >= V = {}", Vp, V);
}

void shard_shape(const Call& call, int64_t N, int V, int Vl, int64_t vocab_begin) {
  call.rows(N, "N"), call.at_least(V, 1, "V"), call.at_least(Vl, 0, "Vl");
  call.at_least(vocab_begin, 0, "vocab_begin");
}

}  // namespace

void embedding_forward(Tensor out, const int32_t* tokens, Tensor wte, int B, int T, int C,
                       int64_t vocab_begin, int64_t vocab_end) {
  const Call call("embedding_forward");
  embedding_shape(call, B, T, C, vocab_begin, vocab_end);
  const bool work = B > 0 && T > 0 && C > 0;
  call.set(out, "out", work), call.set(tokens, "tokens", work);
  call.set(wte, "wte", work && vocab_end > vocab_begin);
}

void embedding_backward(Tensor dwte, Tensor dwpe, Tensor dout, const int32_t* tokens, int B, int T,
                        int C, int64_t vocab_begin, int64_t vocab_end) {
  const Call call("embedding_backward");
  embedding_shape(call, B, T, C, vocab_begin, vocab_end);
  const bool work = B > 0 && T > 0 && C > 0;
  call.set(dout, "dout", work && (dwte || dwpe));
  call.set(tokens, "tokens", work && dwte);
}

void layernorm_forward(Tensor out, Tensor inp, Tensor weight, int64_t N, int C, float eps) {
  const Call call("layernorm_forward");
  layernorm_shape(call, N, C);
  call.require(eps >= 0.0f, "eps = {} must be >= 0", eps);
  call.set(out, "out", N > 0), call.set(inp, "inp", N > 0), call.set(weight, "weight", N > 0);
}

void residual_layernorm_forward(Tensor residual, Tensor out, Tensor a, Tensor b, Tensor weight,
                                int64_t N, int C, float eps) {
  const Call call("residual_layernorm_forward");
  layernorm_shape(call, N, C);
  call.require(eps >= 0.0f, "eps = {} must be >= 0", eps);
  call.set(residual, "residual", N > 0), call.set(out, "out", N > 0);
  call.set(a, "a", N > 0), call.set(b, "b", N > 0), call.set(weight, "weight", N > 0);
}

void layernorm_backward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp,
                        Tensor weight, const float* mean, const float* rstd, int64_t N, int C) {
  const Call call("layernorm_backward");
  layernorm_shape(call, N, C);
  const bool work = N > 0 && (dinp || dweight || dbias);
  call.set(dout, "dout", work), call.set(inp, "inp", work);
  call.set(mean, "mean", work), call.set(rstd, "rstd", work);
  call.set(weight, "weight", work && dinp);
}

void matmul_forward(Tensor out, Tensor inp, Tensor weight, int64_t N, int C, int OC) {
  const Call call("matmul_forward");
  matmul_shape(call, N, C, OC);
  const bool work = N > 0 && OC > 0;
  call.set(out, "out", work);
  call.set(inp, "inp", work && C > 0), call.set(weight, "weight", work && C > 0);
}

void matmul_backward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp,
                     Tensor weight, int64_t N, int C, int OC) {
  const Call call("matmul_backward");
  matmul_shape(call, N, C, OC);
  const bool products = N > 0 && C > 0 && OC > 0;
  call.set(dout, "dout", N > 0 && OC > 0 && (dinp || dweight || dbias));
  call.set(weight, "weight", products && dinp), call.set(inp, "inp", products && dweight);
}

void elementwise(const char* op, int64_t n, std::initializer_list<Tensor> tensors) {
  const Call call(op);
  call.at_least(n, 0, "n");
  for (Tensor tensor : tensors) call.require(n == 0 || tensor, "a tensor is null (n = {})", n);
}

void elementwise_backward(const char* op, int64_t n, Tensor dinp,
                          std::initializer_list<Tensor> inputs) {
  const Call call(op);
  call.at_least(n, 0, "n");
  for (Tensor in : inputs) call.require(n == 0 || !dinp || in, "an input is null (n = {})", n);
}

void gelu_backward_bias(Tensor dinp, Tensor inp, Tensor dout, int64_t N, int C) {
  const Call call("gelu_backward_bias");
  call.rows(N, "N"), call.at_least(C, 0, "C");
  const bool work = N > 0 && C > 0 && dinp;
  call.set(inp, "inp", work), call.set(dout, "dout", work);
}

void dropout(const char* op, int64_t n, float p, Tensor out, Tensor in, bool backward) {
  const Call call(op);
  call.probability(p);
  call.at_least(n, 0, "n");
  const bool work = n > 0 && (out || !backward);
  call.set(out, "out", work), call.set(in, backward ? "dout" : "inp", work);
}

void attention(const char* op, Tensor out, const float* lse, Tensor qkv, int B, int T, int NH,
               int HS, float p) {
  const Call call(op);
  attention_shape(call, B, T, NH, HS, p);
  call.set(out, "out"), call.set(lse, "lse"), call.set(qkv, "qkv");
}

void attention_backward(const char* op, Tensor dqkv, Tensor dout, Tensor out, Tensor qkv,
                        const float* lse, int B, int T, int NH, int HS, float p) {
  const Call call(op);
  attention_shape(call, B, T, NH, HS, p);
  const bool work = dqkv != nullptr;
  call.set(dout, "dout", work), call.set(out, "out", work);
  call.set(qkv, "qkv", work), call.set(lse, "lse", work);
}

void sums_of_gradient(const char* op, Tensor sums, const char* sums_name, Tensor gradient,
                      const char* gradient_name) {
  const Call call(op);
  call.require(!sums || gradient, "{} is formed from {}, which is null", sums_name, gradient_name);
}

void gather_rows(Tensor out, Tensor inp, const int32_t* rows, int64_t count, int C) {
  const Call call("gather_rows");
  rows_shape(call, count, C);
  call.set(out, "out", count > 0), call.set(inp, "inp", count > 0);
  call.set(rows, "rows", count > 0);
}

void scatter_add_rows(Tensor dinp, Tensor dout, const int32_t* rows, int64_t count, int C) {
  const Call call("scatter_add_rows");
  rows_shape(call, count, C);
  call.set(dout, "dout", count > 0 && dinp), call.set(rows, "rows", count > 0 && dinp);
}

void rope(const char* op, Tensor out, Tensor in, int B, int T, int NH, int HS, float base,
          bool backward) {
  const Call call(op);
  call.at_least(B, 0, "B"), call.at_least(T, 0, "T"), call.at_least(NH, 0, "NH");
  call.at_least(HS, 1, "HS");
  call.require(HS % 2 == 0, "head size {} is odd; rotate-half needs pairs", HS);
  call.require(base > 0.0f, "base = {} must be > 0", base);
  const bool work = B > 0 && T > 0 && NH > 0 && (out || !backward);
  call.set(out, "out", work), call.set(in, backward ? "dout" : "qkv", work);
}

void cross_entropy_forward(const float* losses, Tensor logits, const int32_t* targets, int64_t N,
                           int V, int Vp) {
  const Call call("cross_entropy_forward");
  cross_entropy_shape(call, N, V, Vp);
  call.set(losses, "losses", N > 0), call.set(logits, "logits", N > 0);
  call.set(targets, "targets", N > 0);
}

void cross_entropy_backward(Tensor dlogits, Tensor logits, const int32_t* targets, int64_t N, int V,
                            int Vp) {
  const Call call("cross_entropy_backward");
  cross_entropy_shape(call, N, V, Vp);
  const bool work = N > 0 && dlogits;
  call.set(logits, "logits", work), call.set(targets, "targets", work);
}

void cross_entropy_shard_max(const float* row_max, Tensor logits, int64_t N, int V, int Vl,
                             int64_t vocab_begin) {
  const Call call("cross_entropy_shard_max");
  shard_shape(call, N, V, Vl, vocab_begin);
  call.set(row_max, "row_max", N > 0), call.set(logits, "logits", N > 0);
}

void cross_entropy_shard_sums(const float* sums, Tensor logits, const int32_t* targets,
                              const float* row_max, int64_t N, int V, int Vl, int64_t vocab_begin) {
  const Call call("cross_entropy_shard_sums");
  shard_shape(call, N, V, Vl, vocab_begin);
  call.set(sums, "sums", N > 0), call.set(logits, "logits", N > 0);
  call.set(targets, "targets", N > 0), call.set(row_max, "row_max", N > 0);
}

void cross_entropy_shard_loss(const float* losses, const float* lse, const float* row_max,
                              const float* sums, const int32_t* targets, int64_t N) {
  const Call call("cross_entropy_shard_loss");
  call.rows(N, "N");
  call.set(losses, "losses", N > 0), call.set(lse, "lse", N > 0);
  call.set(row_max, "row_max", N > 0), call.set(sums, "sums", N > 0);
  call.set(targets, "targets", N > 0);
}

void cross_entropy_shard_backward(Tensor dlogits, Tensor logits, const int32_t* targets,
                                  const float* lse, int64_t N, int V, int Vl, int64_t vocab_begin) {
  const Call call("cross_entropy_shard_backward");
  shard_shape(call, N, V, Vl, vocab_begin);
  const bool work = N > 0 && dlogits;
  call.set(logits, "logits", work), call.set(targets, "targets", work);
  call.set(lse, "lse", work);
}

// The precision names the state components; each must be set, even for n = 0 (a strategy
// without its state is a caller's bug whatever the tensor's size).
namespace {
void optimizer_step(const OptimizerStep& step, bool fp32_storage) {
  const std::string op = fmt::format("optimizer_step ({})", precision_name(step.precision));
  const Call call(op.c_str());
  call.require(!fp32_storage || step.precision == Precision::fp32_master,
               "this precision keeps bf16 state and needs the bf16 backend (the fp32 backend runs "
               "fp32-master only)");
  call.at_least(step.n, 0, "n");
  call.set(step.param, "param"), call.set(step.grad, "grad");
  const int states = state_count(step.precision);
  for (int c = 0; c < states; c++)
    call.require(step.state[c] != nullptr, "state[{}] is not set ({} state tensors)", c, states);
  call.at_least(step.t, 1, "step counter t");
  call.require(step.beta1 >= 0 && step.beta1 < 1 && step.beta2 >= 0 && step.beta2 < 1,
               "beta1 = {} and beta2 = {} must be in [0, 1)", step.beta1, step.beta2);
  call.require(std::isfinite(step.grad_scale) && step.grad_scale > 0,
               "grad_scale = {} must be finite and > 0", step.grad_scale);
}
}  // namespace

void optimizer_steps(std::span<const OptimizerStep> steps, bool fp32_storage) {
  for (const OptimizerStep& step : steps) optimizer_step(step, fp32_storage);
  // The weights' byte ranges, sorted by start: each must end before the next begins.
  const size_t element_bytes = fp32_storage ? 4 : 2;
  std::vector<std::pair<uintptr_t, uintptr_t>> ranges;
  for (const OptimizerStep& step : steps) {
    const auto begin = reinterpret_cast<uintptr_t>(step.param);
    if (step.n > 0) ranges.emplace_back(begin, begin + size_t(step.n) * element_bytes);
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t k = 1; k < ranges.size(); k++) {
    if (ranges[k].first < ranges[k - 1].second)
      fail(
          "optimizer_steps: two of the {} steps update overlapping weights ({} bytes in common); "
          "each tensor may be stepped once per call",
          steps.size(), std::min(ranges[k - 1].second, ranges[k].second) - ranges[k].first);
  }
}

}  // namespace collage::contract
