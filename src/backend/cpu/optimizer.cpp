// One optimizer step over one tensor, for every precision strategy. The per-element math is
// src/optim/collage_math.h (shared with the CUDA kernel, so both compute the same bits); this
// file only checks the arguments, maps the storage to __nv_bfloat16 and runs the elements in
// parallel.
//
// Threading and EDQ: the elements are cut into fixed chunks of kChunk (independent of the
// thread count); OpenMP hands out chunks, each chunk sums its EDQ terms on its own, and the
// chunk sums are added in chunk order afterwards. θ and the state are elementwise, and the
// order in which the EDQ sums are formed depends on n only, so θ, the state and the sums
// are bit-identical run to run and for any thread count.
#include <algorithm>
#include <cstdint>

#include "backend/cpu/kernels.h"
#include "backend/cpu/storage.h"
#include "core/error.h"
#include "optim/collage_math.h"

namespace collage::cpu {
namespace {

namespace cm = collage::math;

constexpr int64_t kChunk = 16384;

const char* strategy_name(Precision precision) {
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

// State components per strategy (backend/optimizer_step.h).
int state_count(Precision precision) {
  switch (precision) {
    case Precision::fp32_master:
      return 3;
    case Precision::bf16:
    case Precision::stochastic:
      return 2;
    case Precision::collage_light:
    case Precision::kahan:
      return 3;
    case Precision::collage_plus:
      return 4;
  }
  return 0;
}

void check_step(const OptimizerStep& step) {
  const char* name = strategy_name(step.precision);
  COLLAGE_CHECK(step.n >= 0, "optimizer step ({}): n = {} is negative", name, step.n);
  COLLAGE_CHECK(step.param && step.grad, "optimizer step ({}): param and grad must be set", name);
  for (int c = 0; c < state_count(step.precision); c++) {
    COLLAGE_CHECK(step.state[c], "optimizer step ({}): state[{}] is not set ({} state tensors)",
                  name, c, state_count(step.precision));
  }
  COLLAGE_CHECK(step.t >= 1, "optimizer step: step counter t = {} must start at 1", step.t);
  COLLAGE_CHECK(step.beta1 >= 0 && step.beta1 < 1 && step.beta2 >= 0 && step.beta2 < 1,
                "optimizer step: beta1 = {} and beta2 = {} must be in [0, 1)", step.beta1,
                step.beta2);
}

// Runs element(i) -> EdqTerm for i < n, chunk by chunk, and adds the EDQ sums to *edq.
// cx.partial_sums holds 4 doubles per chunk: dot, u², #updated, #lost (counts are exact
// in double far beyond any tensor size).
template <typename Element>
void for_each_element(CpuContext& cx, int64_t n, EdqSums* edq, const Element& element) {
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  cx.partial_sums.assign(size_t(4 * chunks), 0.0);
  double* partial = cx.partial_sums.data();
#pragma omp parallel for schedule(static) num_threads(cx.threads) if (chunks > 1)
  for (int64_t c = 0; c < chunks; c++) {
    cm::EdqAccumulator sums;
    const int64_t end = std::min(n, (c + 1) * kChunk);
    for (int64_t i = c * kChunk; i < end; i++) sums.add(element(i));
    partial[4 * c + 0] = sums.dot;
    partial[4 * c + 1] = sums.u_squared;
    partial[4 * c + 2] = double(sums.updated);
    partial[4 * c + 3] = double(sums.lost);
  }
  if (!edq) return;
  EdqSums total;
  for (int64_t c = 0; c < chunks; c++) {
    total.dot += partial[4 * c + 0];
    total.u_squared += partial[4 * c + 1];
    total.updated += int64_t(partial[4 * c + 2]);
    total.lost += int64_t(partial[4 * c + 3]);
  }
  *edq += total;
}

// collage::bf16 and __nv_bfloat16 share the layout; convert through the bits so no object
// is accessed through the other type.
inline cm::bfloat nv(bf16 x) { return cm::bf16_from_bits(x.bits); }
inline bf16 ours(cm::bfloat x) { return bf16{cm::bf16_bits(x)}; }

// The bf16-state strategies (bf16 storage only), one instantiation per strategy so the
// element loop has no branch on it. Each element loads its values, runs the header's step
// and stores them back.
template <Precision P>
void bf16_state_step(CpuContext& cx, const OptimizerStep& step, const cm::AdamScalars& s) {
  bf16* theta = static_cast<bf16*>(step.param);
  const bf16* grad = static_cast<const bf16*>(step.grad);
  bf16* m = static_cast<bf16*>(step.state[0]);
  bf16* v = static_cast<bf16*>(step.state[1]);
  bf16* extra = static_cast<bf16*>(step.state[2]);  // δθ or the Kahan compensation
  bf16* dv = static_cast<bf16*>(step.state[3]);
  const bool quirk = step.collage_plus_reference_quirk;
  const uint64_t seed = step.rounding_seed;
  const int64_t t = step.t, offset = step.rounding_offset;
  for_each_element(cx, step.n, step.edq, [&](int64_t i) {
    cm::bfloat th = nv(theta[i]), mi = nv(m[i]), vi = nv(v[i]);
    const cm::bfloat g = nv(grad[i]);
    cm::EdqTerm term;
    if constexpr (P == Precision::bf16) {
      term = cm::step_bf16(th, g, mi, vi, s);
    } else if constexpr (P == Precision::collage_light) {
      cm::bfloat dth = nv(extra[i]);
      term = cm::step_collage_light(th, g, mi, vi, dth, s);
      extra[i] = ours(dth);
    } else if constexpr (P == Precision::collage_plus) {
      cm::bfloat dth = nv(extra[i]), dvi = nv(dv[i]);
      term = cm::step_collage_plus(th, g, mi, vi, dth, dvi, s, quirk);
      extra[i] = ours(dth), dv[i] = ours(dvi);
    } else if constexpr (P == Precision::kahan) {
      cm::bfloat comp = nv(extra[i]);
      term = cm::step_kahan(th, g, mi, vi, comp, s);
      extra[i] = ours(comp);
    } else {
      static_assert(P == Precision::stochastic);
      term = cm::step_stochastic(th, g, mi, vi, s, seed, t, offset + i);
    }
    theta[i] = ours(th), m[i] = ours(mi), v[i] = ours(vi);
    return term;
  });
}

// fp32-master: state {master, m, v} fp32; the weights are rn(master) (bf16 storage) or the
// master itself (fp32 storage).
template <typename S>
void fp32_master_step(CpuContext& cx, const OptimizerStep& step, const cm::AdamScalars& s) {
  S* param = static_cast<S*>(step.param);
  const S* grad = static_cast<const S*>(step.grad);
  float* master = static_cast<float*>(step.state[0]);
  float* m = static_cast<float*>(step.state[1]);
  float* v = static_cast<float*>(step.state[2]);
  for_each_element(cx, step.n, step.edq, [&](int64_t i) {
    const cm::EdqTerm term = cm::step_fp32_master(master[i], load(grad[i]), m[i], v[i], s);
    if constexpr (is_fp32_storage<S>) {
      param[i] = master[i];
    } else {
      param[i] = ours(cm::rn(master[i]));
    }
    return term;
  });
}

}  // namespace

template <typename S>
void optimizer_step(CpuContext& cx, const OptimizerStep& step) {
  if (is_fp32_storage<S> && step.precision != Precision::fp32_master) {
    fail(
        "optimizer: precision {} keeps bf16 state and needs the bf16 backend (the fp32 "
        "backend runs fp32-master only)",
        strategy_name(step.precision));
  }
  check_step(step);
  const cm::AdamScalars s =
      cm::make_adam_scalars(step.lr, step.beta1, step.beta2, step.eps, step.weight_decay, step.t,
                            step.adam_order == AdamOrder::hf);
  if constexpr (is_fp32_storage<S>) {
    fp32_master_step<S>(cx, step, s);
  } else {
    switch (step.precision) {
      case Precision::fp32_master:
        return fp32_master_step<S>(cx, step, s);
      case Precision::bf16:
        return bf16_state_step<Precision::bf16>(cx, step, s);
      case Precision::collage_light:
        return bf16_state_step<Precision::collage_light>(cx, step, s);
      case Precision::collage_plus:
        return bf16_state_step<Precision::collage_plus>(cx, step, s);
      case Precision::kahan:
        return bf16_state_step<Precision::kahan>(cx, step, s);
      case Precision::stochastic:
        return bf16_state_step<Precision::stochastic>(cx, step, s);
    }
  }
}

template void optimizer_step<bf16>(CpuContext&, const OptimizerStep&);
template void optimizer_step<float>(CpuContext&, const OptimizerStep&);

}  // namespace collage::cpu
