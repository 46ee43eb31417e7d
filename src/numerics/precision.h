#pragma once
// The optimizer's precision strategies and Adam orderings, named once for the config, the
// optimizer, both backends and the kernels (docs/PRECISION.md), and the EDQ sums a step
// accumulates (docs/PRECISION.md §7).
#include <cstdint>

namespace collage {

// optimizer.precision in YAML. State components, in this order (state[0..3]):
//   fp32_master   {master f32, m f32, v f32}        16 bytes/parameter with θ and g
//   bf16          {m bf16, v bf16}                   8
//   collage_light {m, v, δθ} bf16                   10
//   collage_plus  {m, v, δθ, δv} bf16               12
//   kahan         {m, v, compensation} bf16         10
//   stochastic    {m, v} bf16; θ stochastically rounded from fp32   8
enum class Precision { fp32_master, bf16, collage_light, collage_plus, kahan, stochastic };

// How many state components a strategy keeps (the table above).
inline int state_count(Precision precision) {
  switch (precision) {
    case Precision::bf16:
    case Precision::stochastic:
      return 2;
    case Precision::fp32_master:
    case Precision::collage_light:
    case Precision::kahan:
      return 3;
    case Precision::collage_plus:
      return 4;
  }
  return 0;
}

// The YAML spelling of a precision ("collage-plus"), for configs, logs and messages.
inline const char* precision_name(Precision precision) {
  switch (precision) {
    case Precision::fp32_master:
      return "fp32-master";
    case Precision::bf16:
      return "bf16";
    case Precision::collage_light:
      return "collage-light";
    case Precision::collage_plus:
      return "collage-plus";
    case Precision::kahan:
      return "kahan";
    case Precision::stochastic:
      return "stochastic";
  }
  return "unknown";
}

// optimizer.adam_order: where bias correction and eps enter (docs/PRECISION.md §4.3).
// torch: denom = sqrt(v)/sqrt(bc2) + eps, m·(−lr/bc1) (GPT configs, NeMo/PyTorch AdamW);
// hf: denom = sqrt(v) + eps, m·(−lr·sqrt(bc2)/bc1) (HF AdamW; BERT/RoBERTa configs).
enum class AdamOrder { torch, hf };

// Effective descent quality sums of one step (docs/PRECISION.md §7), accumulated over elements:
// u is the intended update, Δ = θ_new − θ_old what the stored weights received (fp32-master:
// the master's change).
struct EdqSums {
  double dot = 0;        // Σ Δ·u
  double u_squared = 0;  // Σ u²
  int64_t updated = 0;   // #{u ≠ 0}
  int64_t lost = 0;      // #{u ≠ 0 and θ_new == θ_old}
  EdqSums& operator+=(const EdqSums& o) {
    dot += o.dot, u_squared += o.u_squared, updated += o.updated, lost += o.lost;
    return *this;
  }
};

}  // namespace collage
