// One optimizer step over one tensor, for every precision strategy. The per-element math is
// src/optim/collage_math.h (shared with the CUDA kernel, so both compute the same bits); this
// file only checks the arguments, maps the storage to the header's types and runs the
// elements in parallel.
//
// Many elements at a time: collage_math.h is a template over the bf16 type, and with the
// Bf16Lanes of optim/bf16_lanes.h (AVX2) one call steps kLanes (64) consecutive elements with
// the same operations lane by lane, so the bits are those of the scalar step. The few
// elements left over at the end of a tensor (n mod kLanes) take the scalar step. Builds
// without AVX2/FMA (e.g. Debug, no -march) run every element through the scalar step.
//
// Threading and EDQ: the elements are cut into fixed chunks of kChunk (independent of the
// thread count); OpenMP hands out chunks, each chunk sums its EDQ terms on its own, and the
// chunk sums are added in chunk order afterwards. θ and the state are elementwise, and the
// order in which the EDQ sums are formed depends on n only, so θ, the state and the sums
// are bit-identical run to run and for any thread count.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "backend/cpu/kernels.h"
#include "backend/cpu/storage.h"
#include "core/error.h"
#include "optim/collage_math.h"

#if defined(__AVX2__) && defined(__FMA__)
#include "optim/bf16_lanes.h"
#include "optim/edq_lanes.h"
#define COLLAGE_CPU_OPTIMIZER_LANES 1
#endif

namespace collage::cpu {
namespace {

namespace cm = collage::math;

constexpr int64_t kChunk = 16384;
#ifdef COLLAGE_CPU_OPTIMIZER_LANES
static_assert(kChunk % collage::math::kLanes == 0, "only a tensor's last chunk has a tail");
#endif

void check_step(const OptimizerStep& step) {
  const char* name = precision_name(step.precision);
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

// The EDQ sums of one chunk.
struct ChunkSums {
  double dot = 0, u_squared = 0;
  int64_t updated = 0, lost = 0;
};

// Runs one chunk [begin, end): step(i, type<B>) steps the elements from i on, with
// B = Bf16Lanes (kLanes of them; returns an EdqLanesTerm) or B = bfloat (one; returns an
// EdqTerm), and F32Lanes or float for fp32-master. Sums the EDQ terms: the lane vectors first
// (kLanes lane sums, combined in lane order), then the scalar tail, a fixed order for a given
// chunk. flatten: the strategy's whole step is inlined into this loop (GCC leaves mult and grow as
// calls otherwise, and its lane vectors would travel through memory at every call).
template <typename Lanes, typename Lane1, typename Step>
[[gnu::flatten]] ChunkSums run_chunk(int64_t begin, int64_t end, const Step& step) {
  ChunkSums sums;
  int64_t i = begin;
#ifdef COLLAGE_CPU_OPTIMIZER_LANES
  cm::EdqLanesAccumulator lanes;
  for (; i + cm::kLanes <= end; i += cm::kLanes) lanes.add(step(i, std::type_identity<Lanes>()));
  sums.dot = lanes.dot_total(), sums.u_squared = lanes.u_squared_total();
  sums.updated = lanes.updated, sums.lost = lanes.lost;
#endif
  cm::EdqAccumulator tail;
  for (; i < end; i++) tail.add(step(i, std::type_identity<Lane1>()));
  sums.dot += tail.dot, sums.u_squared += tail.u_squared;
  sums.updated += tail.updated, sums.lost += tail.lost;
  return sums;
}

// Runs chunk(begin, end) -> ChunkSums over [0, n) in chunks of kChunk, and adds the EDQ sums
// to *edq. cx.partial_sums holds 4 doubles per chunk: dot, u², #updated, #lost (counts are
// exact in double far beyond any tensor size).
template <typename Chunk>
void for_each_chunk(CpuContext& cx, int64_t n, EdqSums* edq, const Chunk& chunk) {
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  cx.partial_sums.assign(size_t(4 * chunks), 0.0);
  double* partial = cx.partial_sums.data();
#pragma omp parallel for schedule(static) num_threads(cx.threads) if (chunks > 1)
  for (int64_t c = 0; c < chunks; c++) {
    const ChunkSums sums = chunk(c * kChunk, std::min(n, (c + 1) * kChunk));
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

// ---- element access: the storage at p as the header's types (one element or kLanes) ----
// collage::bf16 and __nv_bfloat16 share the layout; one element goes through the bits so no
// object is accessed through the other type.

inline void load(cm::bfloat& x, const bf16* p) { x = cm::bf16_from_bits(p->bits); }
inline void store(bf16* p, cm::bfloat x) { p->bits = cm::bf16_bits(x); }
inline void load(float& x, const float* p) { x = *p; }
inline void load(float& x, const bf16* p) { x = bf16_to_float(*p); }
inline void store(float* p, float x) { *p = x; }
inline void store(bf16* p, float x) { store(p, cm::rn(x)); }  // fp32-master: θ = rn(master)
inline int64_t element_index(int64_t index, std::type_identity<cm::bfloat>) { return index; }
#ifdef COLLAGE_CPU_OPTIMIZER_LANES
inline const uint16_t* bits_of(const bf16* p) { return reinterpret_cast<const uint16_t*>(p); }
inline uint16_t* bits_of(bf16* p) { return reinterpret_cast<uint16_t*>(p); }
inline void load(cm::Bf16Lanes& x, const bf16* p) { x = cm::load_bf16_lanes(bits_of(p)); }
inline void store(bf16* p, cm::Bf16Lanes x) { cm::store_bf16_lanes(bits_of(p), x); }
inline void load(cm::F32Lanes& x, const float* p) { x = cm::load_f32_lanes(p); }
inline void load(cm::F32Lanes& x, const bf16* p) {
  x = cm::to_f32(cm::load_bf16_lanes(bits_of(p)));
}
inline void store(float* p, cm::F32Lanes x) { cm::store_f32_lanes(p, x); }
inline void store(bf16* p, cm::F32Lanes x) { cm::store_bf16_lanes(bits_of(p), cm::rn(x)); }
inline cm::LaneIndices element_index(int64_t index, std::type_identity<cm::Bf16Lanes>) {
  return {index};
}
using Bf16Lanes = cm::Bf16Lanes;
using F32Lanes = cm::F32Lanes;
#else
struct Bf16Lanes {};  // never instantiated without the lane path
struct F32Lanes {};
#endif

// The bf16-state strategies (bf16 storage only), one instantiation per strategy so the
// element loop has no branch on it. Each step loads its elements, runs the header's step
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
  // Elements i.. (one, or kLanes when B is Bf16Lanes).
  auto step_at = [&](int64_t i, auto type) {
    using B = typename decltype(type)::type;
    B th, g, mi, vi;
    load(th, theta + i), load(g, grad + i), load(mi, m + i), load(vi, v + i);
    auto term = [&] {
      if constexpr (P == Precision::bf16) {
        return cm::step_bf16(th, g, mi, vi, s);
      } else if constexpr (P == Precision::collage_light) {
        B dth;
        load(dth, extra + i);
        const auto edq = cm::step_collage_light(th, g, mi, vi, dth, s);
        store(extra + i, dth);
        return edq;
      } else if constexpr (P == Precision::collage_plus) {
        B dth, dvi;
        load(dth, extra + i), load(dvi, dv + i);
        const auto edq = cm::step_collage_plus(th, g, mi, vi, dth, dvi, s, quirk);
        store(extra + i, dth), store(dv + i, dvi);
        return edq;
      } else if constexpr (P == Precision::kahan) {
        B comp;
        load(comp, extra + i);
        const auto edq = cm::step_kahan(th, g, mi, vi, comp, s);
        store(extra + i, comp);
        return edq;
      } else {
        static_assert(P == Precision::stochastic);
        return cm::step_stochastic(th, g, mi, vi, s, seed, t, element_index(offset + i, type));
      }
    }();
    store(theta + i, th), store(m + i, mi), store(v + i, vi);
    return term;
  };
  for_each_chunk(cx, step.n, step.edq, [&](int64_t begin, int64_t end) {
    return run_chunk<Bf16Lanes, cm::bfloat>(begin, end, step_at);
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
  // Elements i.. (one, or kLanes when F is F32Lanes).
  auto step_at = [&](int64_t i, auto type) {
    using F = typename decltype(type)::type;
    F w, g, mi, vi;
    load(w, master + i), load(g, grad + i), load(mi, m + i), load(vi, v + i);
    const auto term = cm::step_fp32_master(w, g, mi, vi, s);
    store(master + i, w), store(m + i, mi), store(v + i, vi);
    store(param + i, w);
    return term;
  };
  for_each_chunk(cx, step.n, step.edq, [&](int64_t begin, int64_t end) {
    return run_chunk<F32Lanes, float>(begin, end, step_at);
  });
}

}  // namespace

template <typename S>
void optimizer_step(CpuContext& cx, const OptimizerStep& step) {
  if (is_fp32_storage<S> && step.precision != Precision::fp32_master) {
    fail(
        "optimizer: precision {} keeps bf16 state and needs the bf16 backend (the fp32 "
        "backend runs fp32-master only)",
        precision_name(step.precision));
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
