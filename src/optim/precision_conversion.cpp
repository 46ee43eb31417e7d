// Conversion of the training state between precision strategies. Every element goes
// through three exact (double) values: the weight W the strategy represents, and the
// moments M and V. Reading them:
//
//   from            W                  M, V
//   fp32-master     master             m, v (fp32)
//   bf16            θ                  m, v
//   stochastic      θ                  m, v
//   collage-light   θ + δθ             m, v
//   collage-plus    θ + δθ             m, v + δv
//   kahan           θ + compensation   m, v
//
// and writing them (rn: nearest bf16 of the exact double, rounded once):
//
//   to              θ                  state
//   fp32-master     rn(master)         master = fp32(W), m = fp32(M), v = fp32(V)
//   bf16            rn(W)              m = rn(M), v = rn(V)
//   stochastic      rn(W)              m = rn(M), v = rn(V)
//   collage-light   rn(W)              δθ = rn(W − θ), m = rn(M), v = rn(V)
//   collage-plus    rn(W)              δθ = rn(W − θ), m = rn(M), v = rn(V), δv = rn(V − v)
//   kahan           rn(W)              m = rn(M), v = rn(V), compensation = 0
//
// So fp32-master -> collage-* keeps the master's low bits in δθ (and v's in δv);
// collage-* -> fp32-master widens θ + δθ (exact in fp32 unless δθ is over 2^-16 ulp(θ)
// below θ's last bit) and the moments; collage-light <-> collage-plus adds δv = 0 (v is a
// bf16 already) or drops δv (rn(v + δv) = v for a normalised pair). Kahan's compensation is
// what θ has not absorbed yet (collage_math.h: θ + c is the weight the updates asked for),
// so it is read like δθ; converting into kahan starts it at 0, the state of a fresh kahan
// run (it is not a normalised low part: right after an update it can hold the whole update,
// so there is no one value to derive), dropping at most half an ulp of θ, what bf16 rounding
// of θ loses anyway. Converting a strategy to itself returns the state unchanged.
#include "optim/precision_conversion.h"

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "optim/optimizer.h"

namespace collage {

bf16 double_to_bf16(double x) {
  const float f = static_cast<float>(x);  // nearest float
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  // Rounding f to bf16 differs from rounding x only when f landed exactly on a bf16 tie
  // that x is not on: then x's side of the tie decides.
  if ((u & 0xffffu) == 0x8000u && static_cast<double>(f) != x && std::isfinite(f)) {
    const bool away_from_zero = std::fabs(x) > std::fabs(static_cast<double>(f));
    return bf16{static_cast<uint16_t>((u >> 16) + (away_from_zero ? 1 : 0))};
  }
  return float_to_bf16(f);
}

namespace {

double widen(bf16 x) { return bf16_to_float(x); }

// One component's elements, typed, with its size checked.
template <typename T>
const T* component_of(const HostTrainingState& s, const std::string& name) {
  auto it = s.state.find(name);
  COLLAGE_CHECK(it != s.state.end(), "precision conversion: the {} state has no component '{}'",
                precision_name(s.precision), name);
  COLLAGE_CHECK(it->second.size() == s.params.size() * sizeof(T),
                "precision conversion: {} state component '{}' has {} bytes, expected {}",
                precision_name(s.precision), name, it->second.size(), s.params.size() * sizeof(T));
  return reinterpret_cast<const T*>(it->second.data());
}

template <typename T>
T* output_of(HostTrainingState& s, const std::string& name) {
  std::vector<uint8_t>& bytes = s.state[name];
  bytes.assign(s.params.size() * sizeof(T), 0);
  return reinterpret_cast<T*>(bytes.data());
}

}  // namespace

HostTrainingState convert_training_state(const HostTrainingState& from, Precision to) {
  // Check the source has what its strategy keeps, before anything else.
  for (const StateComponent& c : Optimizer::components(from.precision)) {
    if (c.dtype == "f32")
      component_of<float>(from, c.name);
    else
      component_of<bf16>(from, c.name);
  }
  if (from.precision == to) return from;
  const int64_t n = int64_t(from.params.size());
  const Precision p = from.precision;
  const bool from_f32 = p == Precision::fp32_master;
  const float* master = from_f32 ? component_of<float>(from, "master") : nullptr;
  const float* m32 = from_f32 ? component_of<float>(from, "m") : nullptr;
  const float* v32 = from_f32 ? component_of<float>(from, "v") : nullptr;
  const bf16* m16 = from_f32 ? nullptr : component_of<bf16>(from, "m");
  const bf16* v16 = from_f32 ? nullptr : component_of<bf16>(from, "v");
  // The low part of the weight: δθ, or Kahan's compensation.
  const bf16* dtheta = p == Precision::collage_light || p == Precision::collage_plus
                           ? component_of<bf16>(from, "dtheta")
                       : p == Precision::kahan ? component_of<bf16>(from, "compensation")
                                               : nullptr;
  const bf16* dv = p == Precision::collage_plus ? component_of<bf16>(from, "dv") : nullptr;

  HostTrainingState out;
  out.precision = to;
  out.params.resize(n);
  const bool to_f32 = to == Precision::fp32_master;
  float* out_master = to_f32 ? output_of<float>(out, "master") : nullptr;
  float* out_m32 = to_f32 ? output_of<float>(out, "m") : nullptr;
  float* out_v32 = to_f32 ? output_of<float>(out, "v") : nullptr;
  bf16* out_m16 = to_f32 ? nullptr : output_of<bf16>(out, "m");
  bf16* out_v16 = to_f32 ? nullptr : output_of<bf16>(out, "v");
  const bool to_dtheta = to == Precision::collage_light || to == Precision::collage_plus;
  bf16* out_dtheta = to_dtheta ? output_of<bf16>(out, "dtheta") : nullptr;
  bf16* out_dv = to == Precision::collage_plus ? output_of<bf16>(out, "dv") : nullptr;
  if (to == Precision::kahan) output_of<bf16>(out, "compensation");  // zeros

#pragma omp parallel for schedule(static) if (n > (1 << 16))
  for (int64_t i = 0; i < n; i++) {
    // The exact values this strategy represents (sums of two bf16 are exact in a double
    // unless their exponents are over 45 apart).
    const double W = from_f32 ? master[i] : widen(from.params[i]) + (dtheta ? widen(dtheta[i]) : 0);
    const double M = from_f32 ? m32[i] : widen(m16[i]);
    const double V = from_f32 ? v32[i] : widen(v16[i]) + (dv ? widen(dv[i]) : 0);
    if (to_f32) {
      out_master[i] = static_cast<float>(W);
      out.params[i] = float_to_bf16(out_master[i]);  // fp32-master's invariant θ = rn(master)
      out_m32[i] = static_cast<float>(M);
      out_v32[i] = static_cast<float>(V);
      continue;
    }
    out.params[i] = double_to_bf16(W);
    out_m16[i] = double_to_bf16(M);
    out_v16[i] = double_to_bf16(V);
    if (out_dtheta) out_dtheta[i] = double_to_bf16(W - widen(out.params[i]));
    if (out_dv) out_dv[i] = double_to_bf16(V - widen(out_v16[i]));
  }
  return out;
}

}  // namespace collage
