#pragma once
// The GPT's activation buffers: what the forward saves for the backward, and the backward's
// activation gradients. All pointers point into one activation arena, sized for the largest
// micro-batch (N = micro_batch · seq_len rows). Shapes per tensor-parallel rank:
// C hidden, Cl = C/tp attention width, C3 = 3C/tp, Fl = F/tp, Vl = Vp/tp, NHl = NH/tp.
#include <cstdint>
#include <vector>

namespace collage {

template <typename Storage>
struct GptLayerActivations {
  Storage* ln1;        // (N, C) layernorm 1 output
  float* ln1_mean;     // (N)
  float* ln1_rstd;     // (N)
  Storage* qkv;        // (N, C3) fused projection
  Storage* qkv_rope;   // (N, C3) q, k rotated (rope only, else null)
  Storage* atty;       // (N, Cl) attention output, heads concatenated
  float* att_lse;      // (B, NHl, T) log-sum-exp of each query's scores
  Storage* residual2;  // (N, C) input + attention branch
  Storage* ln2;        // (N, C)
  float* ln2_mean;     // (N)
  float* ln2_rstd;     // (N)
  Storage* fch;        // (N, Fl) fc1 output (pre-GELU)
  Storage* fch_gelu;   // (N, Fl)
  Storage* residual3;  // (N, C) the layer's output: residual2 + MLP branch
};

// The gradients one layer's backward computes, in the order it computes them. Every layer
// reuses them (the backward runs from the last layer to the first); each op writes its
// gradient whole, so none is zeroed (backend.h).
template <typename Storage>
struct GptLayerGradients {
  Storage* dfch_gelu;  // (N, Fl) of fc2's input
  Storage* dfch;       // (N, Fl) of fc1's output (through the GELU)
  Storage* dln2;       // (N, C) of ln2's output
  Storage* datty;      // (N, Cl) of the attention output
  Storage* dqkv_rope;  // (N, C3) of the rotated q, k (and v) the attention read; rope only
  Storage* dqkv;       // (N, C3) of the QKV projection's output
  Storage* dln1;       // (N, C) of ln1's output
};

template <typename Storage>
struct GptActivations {
  int32_t* tokens = nullptr;   // (N) device copy of the inputs
  int32_t* targets = nullptr;  // (N)
  Storage* encoded = nullptr;  // (N, C) token (+ position) embedding: layer 0's input
  std::vector<GptLayerActivations<Storage>> layers;
  Storage* branch_out = nullptr;  // (N, C) attn-proj / fc2 output before the residual add
  Storage* lnf = nullptr;         // (N, C) final layernorm output
  float* lnf_mean = nullptr;      // (N)
  float* lnf_rstd = nullptr;      // (N)
  Storage* logits = nullptr;      // (N, Vl)
  float* losses = nullptr;        // (N) per-token loss, 0 for ignored targets
  // vocab-parallel loss (tp > 1 only, else null): the row statistics all-reduced between stages
  float* row_max = nullptr;   // (N) max logit of the row over the whole vocabulary
  float* row_sums = nullptr;  // (2N) Σ exp(logit − max) | the target's logit
  float* row_lse = nullptr;   // (N) log-sum-exp, saved for the backward

  // ---- backward: activation gradients (written by the ops; dresidual is added into) ----
  Storage* dlogits = nullptr;  // (N, Vl) of the logits; the head's backward only
  Storage* dlnf = nullptr;     // (N, C) of the final layernorm's output; the head's backward only
  // (N, C) of the residual stream: of the last layer's output after the final layernorm's
  // backward, then of each layer's input as the layers' backwards add their branches into it.
  Storage* dresidual = nullptr;
  GptLayerGradients<Storage> layer_grads{};  // one layer's, reused by every layer
};

}  // namespace collage
