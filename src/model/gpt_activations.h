#pragma once
// The GPT's activation buffers: what the forward saves for the backward, and the backward's
// gradient scratch. All pointers point into one activation arena, sized for the largest
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

  // ---- backward scratch (ops accumulate: zeroed before use) ----
  Storage* dresidual = nullptr;  // (N, C) gradient of the residual stream, layer by layer
  Storage* dlogits = nullptr;    // (N, Vl)
  // Per-layer gradients, reused by every layer and zeroed together before each layer:
  // they are one contiguous region [layer_scratch, layer_scratch + layer_scratch_bytes).
  Storage* dln1 = nullptr;       // (N, C) also the final layernorm's output gradient
  Storage* dqkv = nullptr;       // (N, C3)
  Storage* dqkv_rope = nullptr;  // (N, C3) rope only
  Storage* datty = nullptr;      // (N, Cl)
  Storage* dln2 = nullptr;       // (N, C)
  Storage* dfch = nullptr;       // (N, Fl)
  Storage* dfch_gelu = nullptr;  // (N, Fl)
  char* layer_scratch = nullptr;
  size_t layer_scratch_bytes = 0;
};

}  // namespace collage
