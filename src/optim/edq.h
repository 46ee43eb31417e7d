#pragma once
// Effective descent quality (docs/PRECISION.md §7): how much of the intended update u the stored
// weights actually received. The backend accumulates EdqSums (optimizer_step.h) per tensor;
// this file turns sums into the logged figures, names the per-layer groups and keeps the
// run's cumulative ratio.
#include <string>
#include <vector>

#include "numerics/precision.h"

namespace collage {

// The figures of one step (or of any sum of steps/tensors):
//   edq       = ⟨Δ, u⟩ / ‖u‖    length of the effective step along the intended one
//   edq_ratio = ⟨Δ, u⟩ / ‖u‖²   1 = nothing lost
//   lost_frac = lost / updated  share of elements whose nonzero update vanished
// With no update at all (‖u‖ = 0) nothing was lost: edq 0, edq_ratio 1, lost_frac 0.
struct EdqFigures {
  double edq = 0;
  double edq_ratio = 1;
  double lost_frac = 0;
};
EdqFigures edq_figures(const EdqSums& sums);

// The EDQ group of a parameter, by name prefix: "wte.*", "wpe.*" -> "embeddings" (the tied
// head included), "h.<N>.*" -> "h.<N>", "ln_f.*", "lm_head.*" -> "head"; any other name
// -> its first dotted component.
std::string edq_group_of(const std::string& parameter_name);

// Groups of a parameter list in order of first appearance: names[k] is group k, and
// index[i] the group of parameter i.
struct EdqGroups {
  std::vector<std::string> names;
  std::vector<int> index;
};
EdqGroups edq_groups_of(const std::vector<std::string>& parameter_names);

// Σ_t ⟨Δ_t, u_t⟩ / Σ_t ‖u_t‖² over a run; kept in checkpoints so that a resumed run
// continues the same sums.
struct EdqCumulative {
  double dot = 0;
  double u_squared = 0;
  void add(const EdqSums& step) { dot += step.dot, u_squared += step.u_squared; }
  double ratio() const { return u_squared > 0 ? dot / u_squared : 1.0; }
};

}  // namespace collage
