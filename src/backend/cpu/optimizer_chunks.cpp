// The cpu optimizer's element loop: one optimizer step over the elements of one tensor, for
// every precision strategy. The per-element math is src/numerics/collage_math.h (shared with
// the CUDA kernel, so both compute the same bits); this file maps the storage to the header's
// types and runs the elements in parallel. optimizer.cpp checks nothing more and picks the
// compilation of this file that runs (below).
//
// From a precision to its math: step_chunks's switch (at the end) names the strategy, e.g.
// CollageLightStep, whose at<B>(i) loads the elements, makes the one collage_math.h call of
// the same name and stores them back. step_chunk is where B is chosen: kLanes elements at a
// time, then one at a time.
//
// Many elements at a time: collage_math.h is a template over the bf16 type B, and with the
// Bf16Lanes of numerics/bf16_lanes.h one call steps kLanes (64) consecutive elements with the
// same operations lane by lane, so the bits are those of the scalar step. The few elements
// left over at the end of a tensor (n mod kLanes) take the scalar step. Builds without
// AVX2/FMA (e.g. Debug, no -march) run every element through the scalar step.
//
// One source, two compilations (docs/ARCHITECTURE.md, "The cpu optimizer"): with the build's
// flags (AVX2 in Release: -march=x86-64-v3), and on x86-64 once more with -march=x86-64-v4 and
// COLLAGE_ISA_NAMESPACE=avx512, where the lane vectors are AVX-512 registers (16 lanes each,
// numerics/lane_registers.h). Everything here is in namespace collage::cpu::<that namespace>,
// and the file uses nothing but the numerics headers (themselves in it), so no inline function
// compiled for AVX-512 can stand in for a baseline one (numerics/isa_namespace.h). Both
// compilations give the same bits: the same operations per lane, and the EDQ lane sums of the
// same 64 lanes added in the same order.
//
// Rounding in three instructions: the bf16 strategies (with AVX2, collage-plus only) step their
// lane vectors with the guarded rn (bf16_lanes.h, LaneRounding::guarded), which gives rn's bits
// for the values training meets and raises an exception flag, or meets a NaN found first, for
// the others; such a block is put back as it was and stepped again with the exact rn
// (Bf16Adam::guarded_in_place; docs/ARCHITECTURE.md, "The cpu optimizer"). The error terms of
// the MCF strategies' renormalisations and TwoProds (rn_expect_exact) are not rounded at all
// there, only checked to be bf16 already.
//
// Dividing by multiplying: with lane vectors, the bf16 strategies' Adam direction multiplies by
// a per-step table of reciprocal denominators instead of dividing, with the same bits
// (collage_math.h, adam_direction; use_reciprocal_denominators below).
//
// Threading and EDQ: the elements are cut into fixed chunks of kOptimizerChunk (independent
// of the thread count); OpenMP hands out chunks, each chunk sums its EDQ terms on its own, and
// optimizer.cpp adds the chunk sums in chunk order afterwards. θ and the state are
// elementwise, and the order in which the EDQ sums are formed depends on n only, so θ, the
// state and the sums are bit-identical run to run, for any thread count and either ISA.
#include "backend/cpu/optimizer_chunks.h"

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <type_traits>
#include <utility>

#include "numerics/collage_math.h"
#include "numerics/isa_namespace.h"

#if defined(__AVX2__) && defined(__FMA__)
#include "numerics/bf16_lanes.h"
#include "numerics/edq_lanes.h"
#define COLLAGE_CPU_OPTIMIZER_LANES 1
#endif

namespace collage::cpu {
inline namespace COLLAGE_ISA_NAMESPACE {
namespace {

namespace cm = collage::math;

// [[gnu::flatten]] (step_chunk below), except under AddressSanitizer: instrumented and
// flattened, this file took g++ over ten minutes at -O1 (8.5 s unflattened), for speed a
// sanitized build does not need. The bits do not depend on inlining (-ffp-contract=off).
#ifdef __SANITIZE_ADDRESS__
#define COLLAGE_FLATTEN
#else
#define COLLAGE_FLATTEN [[gnu::flatten]]
#endif
#ifdef COLLAGE_CPU_OPTIMIZER_LANES
static_assert(kOptimizerChunk % cm::kLanes == 0, "only a tensor's last chunk has a tail");
#endif

// The EDQ sums of one chunk.
struct ChunkSums {
  double dot = 0, u_squared = 0;
  int64_t updated = 0, lost = 0;
  int64_t guarded = 0, redone = 0;  // blocks stepped with guarded lanes; of them, redone exactly
};

// Blocks this thread has redone exactly (Bf16Adam::guarded_in_place); step_chunk takes the
// difference over its chunk.
thread_local int64_t blocks_redone_in_thread = 0;

// Calls f(0), f(1), ..., f(N−1), unrolled at compile time: a loop over the state arrays would
// keep their lane vectors in memory (GCC -O2 does not unroll it).
template <size_t N, typename F>
inline void unrolled(const F& f) {
  [&]<size_t... K>(std::index_sequence<K...>) { (f(K), ...); }
  (std::make_index_sequence<N>());
}

// ---- element access: the storage at p as the header's types (one element or kLanes) ----
// collage::bf16 and __nv_bfloat16 share the layout; one element goes through the bits so no
// object is accessed through the other type. Only the numerics headers' functions are used
// (not numerics/bf16.h's or backend/cpu/storage.h's), for the reason at the top. The lane
// types' operations (rn, to_f32, ...) are found through their arguments, so they are called
// unqualified.

inline void load(cm::bfloat& x, const bf16* p) { x = cm::bf16_from_bits(p->bits); }
inline void store(bf16* p, cm::bfloat x) { p->bits = cm::bf16_bits(x); }
inline void load(float& x, const float* p) { x = *p; }
inline void load(float& x, const bf16* p) { x = cm::to_f32(cm::bf16_from_bits(p->bits)); }
inline void store(float* p, float x) { *p = x; }
inline void store(bf16* p, float x) { store(p, cm::rn(x)); }  // fp32-master: θ = rn(master)
#ifdef COLLAGE_CPU_OPTIMIZER_LANES
using cm::LaneRounding;
inline const uint16_t* bits_of(const bf16* p) { return reinterpret_cast<const uint16_t*>(p); }
inline uint16_t* bits_of(bf16* p) { return reinterpret_cast<uint16_t*>(p); }
template <LaneRounding R>
inline void load(cm::Bf16LanesOf<R>& x, const bf16* p) {
  x = cm::load_bf16_lanes<R>(bits_of(p));
}
template <LaneRounding R>
inline void store(bf16* p, cm::Bf16LanesOf<R> x) {
  cm::store_bf16_lanes(bits_of(p), x);
}
inline void load(cm::F32Lanes& x, const float* p) { x = cm::load_f32_lanes(p); }
inline void load(cm::F32Lanes& x, const bf16* p) { x = to_f32(cm::load_bf16_lanes(bits_of(p))); }
inline void store(float* p, cm::F32Lanes x) { cm::store_f32_lanes(p, x); }
inline void store(bf16* p, cm::F32Lanes x) { cm::store_bf16_lanes(bits_of(p), rn(x)); }
using Bf16Lanes = cm::Bf16Lanes;
using GuardedBf16Lanes = cm::GuardedBf16Lanes;
using F32Lanes = cm::F32Lanes;

// The lines of the kLanes elements of an array from p on, kPrefetchBytes ahead
// (lane_registers.h: one core's loads alone do not reach DRAM's bandwidth).
template <typename T>
inline void prefetch_lanes(const T* p) {
  for (size_t b = 0; b < cm::kLanes * sizeof(T); b += 64)
    cm::reg::prefetch_ahead(reinterpret_cast<const char*>(p) + b);
}

// Bit i set where lane i of a register of x is NaN (or, with AVX-512, ±inf or subnormal).
template <typename Lanes>
unsigned unusual_bits(const Lanes& x) {
  unsigned bits = 0;
  cm::for_each_register([&](int k) { bits |= cm::reg::unusual_bits(x.r[k]); });
  return bits;
}
#else
struct Bf16Lanes {};  // never instantiated without the lane path
struct GuardedBf16Lanes {};
struct F32Lanes {};
#endif

// The gradient as the step reads it, with clipping's factor c (OptimizerStep::grad_scale) fused
// into the load: rn(g·c), the bits Backend::scale stores (cm::clipped_gradient), or g itself
// when c = 1. fp32-master on bf16 storage rounds the product to bf16 before widening, as the
// stored gradient would be; on fp32 storage the product is the fp32 one.
template <typename B>  // cm::bfloat or a Bf16LanesOf
B scaled_gradient(B g, float c) {
  return c != 1.0f ? cm::clipped_gradient(g, c) : g;
}
template <typename B>
void load_gradient(B& g, const bf16* p, float c) {
  load(g, p);
  g = scaled_gradient(g, c);
}
inline void load_gradient(float& g, const bf16* p, float c) {
  cm::bfloat b;
  load_gradient(b, p, c);
  g = cm::to_f32(b);
}
inline void load_gradient(float& g, const float* p, float c) {
  load(g, p);
  if (c != 1.0f) g = cm::clipped_gradient(g, c);
}
#ifdef COLLAGE_CPU_OPTIMIZER_LANES
inline void load_gradient(F32Lanes& g, const bf16* p, float c) {
  Bf16Lanes b;
  load_gradient(b, p, c);
  g = to_f32(b);
}
inline void load_gradient(F32Lanes& g, const float* p, float c) {
  load(g, p);
  if (c != 1.0f) g = f32_mul(g, F32Lanes(c));
}
#endif

// ---- the strategies: at<B>(i) steps the elements from i on, one (B = cm::bfloat or float)
// or kLanes (B = GuardedBf16Lanes or F32Lanes), with the collage_math.h step of its name, and
// returns their EDQ term. Lanes and One name the two element types; step_chunk below picks
// one. ----

// What every bf16-state strategy has: θ, g, m, v and the step's scalars, and the walk from
// the storage to the step and back (in_place).
struct Bf16Adam {
  // Guarded lanes with AVX-512; with AVX2 only for collage-plus (CollagePlusStep). AVX2's 16
  // registers spill where AVX-512's 32 do not, and the guarded loop costs more than the cheaper
  // rn saves except where it saves the most (on Zen 4, in cache: collage-plus 1.10× faster,
  // the others 5–10% slower).
#ifdef COLLAGE_CPU_OPTIMIZER_LANES
  using Lanes = std::conditional_t<cm::reg::kWidth == 16, GuardedBf16Lanes, Bf16Lanes>;
#else
  using Lanes = Bf16Lanes;
#endif
  using One = cm::bfloat;
  bf16* theta;
  const bf16* grad;
  bf16 *m, *v;
  cm::AdamScalars s;
  float grad_scale;  // clipping's factor, fused (scaled_gradient)

  // Loads element(s) i of g and of the state arrays (θ, m, v, then the strategy's own) as B,
  // calls step(g, θ, m, v, ...), which updates all but g, and stores them back; returns the
  // step's EDQ term. Lane vectors go guarded first (guarded_in_place).
  template <typename B, typename Step, typename... Extra>
  auto in_place(int64_t i, const Step& step, Extra*... extra) const {
    const std::array<bf16*, 3 + sizeof...(Extra)> arrays{theta, m, v, extra...};
    if constexpr (std::is_same_v<B, GuardedBf16Lanes>) {
      return guarded_in_place(i, step, arrays);
    } else {
      return exact_in_place<B>(i, step, arrays);
    }
  }

 private:
  template <typename B, typename Step, size_t N>
  auto exact_in_place(int64_t i, const Step& step, const std::array<bf16*, N>& arrays) const {
    B g;
    std::array<B, N> x;
    load(g, grad + i);
    unrolled<N>([&](size_t a) { load(x[a], arrays[a] + i); });
    const auto edq = step_with(step, scaled_gradient(g, grad_scale), x);
    unrolled<N>([&](size_t a) { store(arrays[a] + i, x[a]); });
    return edq;
  }

  template <typename Step, typename B, size_t N>
  static auto step_with(const Step& step, B g, std::array<B, N>& x) {
    return std::apply([&](auto&... values) { return step(g, values...); }, x);
  }

#ifdef COLLAGE_CPU_OPTIMIZER_LANES
  // kLanes elements, with the three-instruction rn (GuardedBf16Lanes) where that gives rn's
  // bits, else with the exact one (docs/ARCHITECTURE.md, "The cpu optimizer"). A block whose
  // loaded values hold a NaN, ±inf or a subnormal goes exact at once. The loaded values are
  // added lane by lane in fp32 to find them: the sum is NaN where one of them is NaN or +inf
  // meets −inf, ±inf where one is ±inf (with AVX-512 unusual_bits sees that too; with AVX2
  // the guarded run raises IE for it), and a subnormal operand raises DE in its addition, read
  // from MXCSR before the step. (Classifying every loaded register instead cost 5–12% of
  // kahan's loop in cache on the Zen 5 VM.) Otherwise the block runs guarded and stores its
  // results, keeping a copy of what they overwrote. If an exception flag went up (a value that
  // the guarded rn may not round right met it) or a value kept unrounded by rn_expect_exact
  // was not a bf16, the copy goes back and the block runs again exactly from the same values.
  // The flags are read after the stores, and reading them clobbers memory (reg::read_mxcsr), so
  // the compiler emits every store before the read, and with it every operation whose result
  // is stored. All of the step's operations are: each ends in θ or the state, the EDQ term's u
  // too. (Storing only after the check kept all of a block's results in registers until then:
  // 2–10% slower.) step_chunk clears the flags when it starts; every exact run clears them.
  template <typename Step, size_t N>
  auto guarded_in_place(int64_t i, const Step& step, const std::array<bf16*, N>& arrays) const {
    GuardedBf16Lanes g;
    std::array<GuardedBf16Lanes, N> x;
    load(g, grad + i);
    cm::GuardedF32Lanes sum = to_f32(g);
    unrolled<N>([&](size_t a) { load(x[a], arrays[a] + i), sum = f32_add(sum, to_f32(x[a])); });
    if (!unusual_bits(sum) && !cm::reg::denormal_operand_flag()) {
      uint16_t before[N][cm::kLanes];  // the stored bits the results overwrite
      unrolled<N>([&](size_t a) { std::memcpy(before[a], arrays[a] + i, sizeof before[a]); });
      cm::reg::clear_expected_exact();
      const cm::EdqLanesTerm edq = step_with(step, scaled_gradient(g, grad_scale), x);
      unrolled<N>([&](size_t a) { store(arrays[a] + i, x[a]); });
      if (!cm::reg::guarded_flags() && !cm::reg::expected_exact_failed()) return edq;
      unrolled<N>([&](size_t a) { std::memcpy(arrays[a] + i, before[a], sizeof before[a]); });
    }
    blocks_redone_in_thread++;
    const cm::EdqLanesTerm edq = exact_in_place<Bf16Lanes>(i, step, arrays);
    cm::reg::clear_guarded_flags();
    return edq;
  }
#endif
};

// bf16: state {m, v}.
struct Bf16Step : Bf16Adam {
  template <typename B>
  auto at(int64_t i) const {
    return in_place<B>(
        i, [&](auto g, auto& th, auto& mi, auto& vi) { return cm::step_bf16(th, g, mi, vi, s); });
  }
};

// collage-light: state {m, v, δθ}.
struct CollageLightStep : Bf16Adam {
  bf16* dtheta;
  template <typename B>
  auto at(int64_t i) const {
    return in_place<B>(
        i,
        [&](auto g, auto& th, auto& mi, auto& vi, auto& dth) {
          return cm::step_collage_light(th, g, mi, vi, dth, s);
        },
        dtheta);
  }
};

// collage-plus: state {m, v, δθ, δv}.
struct CollagePlusStep : Bf16Adam {
#ifdef COLLAGE_CPU_OPTIMIZER_LANES
  using Lanes = GuardedBf16Lanes;  // on AVX2 too (Bf16Adam::Lanes says why)
#endif
  bf16 *dtheta, *dv;
  bool reference_quirk;
  template <typename B>
  auto at(int64_t i) const {
    return in_place<B>(
        i,
        [&](auto g, auto& th, auto& mi, auto& vi, auto& dth, auto& dvi) {
          return cm::step_collage_plus(th, g, mi, vi, dth, dvi, s, reference_quirk);
        },
        dtheta, dv);
  }
};

// kahan: state {m, v, c}.
struct KahanStep : Bf16Adam {
  bf16* compensation;
  template <typename B>
  auto at(int64_t i) const {
    return in_place<B>(
        i,
        [&](auto g, auto& th, auto& mi, auto& vi, auto& c) {
          return cm::step_kahan(th, g, mi, vi, c, s);
        },
        compensation);
  }
};

// stochastic: state {m, v}; element i's rounding noise comes from (seed, t, offset + i).
struct StochasticStep : Bf16Adam {
  uint64_t seed;
  int64_t t, offset;
  // offset + i modulo 2^64, as rounding_noise16 takes it: no signed overflow for any offset.
  int64_t index(int64_t i) const { return int64_t(uint64_t(offset) + uint64_t(i)); }
  template <typename B>
  auto at(int64_t i) const {
    return in_place<B>(i, [&](auto g, auto& th, auto& mi, auto& vi) {
#ifdef COLLAGE_CPU_OPTIMIZER_LANES
      if constexpr (!std::is_same_v<decltype(g), cm::bfloat>) {
        return cm::step_stochastic(th, g, mi, vi, s, seed, t, cm::LaneIndices{index(i)});
      } else
#endif
      {
        return cm::step_stochastic(th, g, mi, vi, s, seed, t, index(i));
      }
    });
  }
};

// fp32-master: state {master, m, v} fp32; the weights are rn(master) (bf16 storage) or the
// master itself (fp32 storage). Bound by memory, not by its one rounding: exact lanes only.
template <typename S>
struct Fp32MasterStep {
  using Lanes = F32Lanes;
  using One = float;
  S* param;
  const S* grad;
  float *master, *m, *v;
  cm::AdamScalars s;
  float grad_scale;  // clipping's factor, fused (load_gradient)
  template <typename F>
  auto at(int64_t i) const {
#ifdef COLLAGE_CPU_OPTIMIZER_LANES
    // Bound by memory (above): reading ahead took GPT-2 124M's loop from 0.72-0.76 to 0.65-0.68
    // ns an element on 2 threads of the AMX VM. The bf16-state strategies, bound by their
    // instructions more than by memory, measured the same with it, so they go without.
    if constexpr (!std::is_same_v<F, One>) {
      prefetch_lanes(master + i), prefetch_lanes(m + i), prefetch_lanes(v + i);
      prefetch_lanes(grad + i), prefetch_lanes(param + i);
    }
#endif
    F w, g, mi, vi;
    load(w, master + i), load_gradient(g, grad + i, grad_scale), load(mi, m + i), load(vi, v + i);
    const auto edq = cm::step_fp32_master(w, g, mi, vi, s);
    store(master + i, w), store(m + i, mi), store(v + i, vi), store(param + i, w);
    return edq;
  }
};

// ---- the element loop ----

// One chunk [begin, end): kLanes elements at a time while kLanes remain (the lane path),
// then the rest one at a time, the bits the same either way. The EDQ terms are summed in a
// fixed order for a given chunk: the lane vectors first (kLanes lane sums, combined in lane
// order), then the tail. Without kEdq (the step asked for no EDQ: OptimizerStep::edq null)
// the terms are not summed, and the sums stay 0: the sums in double are a quarter of the bf16
// strategy's loop. flatten: the strategy's whole step is inlined into these loops (GCC
// leaves mult and grow as calls otherwise, and the lane vectors would travel through memory).
template <bool kEdq, typename Strategy>
COLLAGE_FLATTEN ChunkSums step_chunk(const Strategy& strategy, int64_t begin, int64_t end) {
  ChunkSums sums;
  int64_t i = begin;
  auto sum = [](auto& edq_sums, const auto& term) {  // the EDQ, if the step asked for it
    if constexpr (kEdq) edq_sums.add(term);
  };
#ifdef COLLAGE_CPU_OPTIMIZER_LANES
  // The guarded lanes read the exception flags (Bf16Adam::guarded_in_place): start them
  // clear, and leave this thread's as they were. The exact lanes leave them alone.
  constexpr bool kGuarded = std::is_same_v<typename Strategy::Lanes, GuardedBf16Lanes>;
  const uint32_t caller_mxcsr = kGuarded ? cm::reg::read_mxcsr() : 0;
  if constexpr (kGuarded) cm::reg::clear_guarded_flags();
  const int64_t redone_before = blocks_redone_in_thread;
  cm::EdqLanesAccumulator lanes;
  for (; i + cm::kLanes <= end; i += cm::kLanes)
    sum(lanes, strategy.template at<typename Strategy::Lanes>(i));
  sums.dot = lanes.dot_total(), sums.u_squared = lanes.u_squared_total();
  sums.updated = lanes.updated, sums.lost = lanes.lost;
  if constexpr (kGuarded) {
    sums.guarded = (i - begin) / cm::kLanes;
    sums.redone = blocks_redone_in_thread - redone_before;
    cm::reg::write_mxcsr(caller_mxcsr);
  }
#endif
  cm::EdqAccumulator tail;
  for (; i < end; i++) sum(tail, strategy.template at<typename Strategy::One>(i));
  sums.dot += tail.dot, sums.u_squared += tail.u_squared;
  sums.updated += tail.updated, sums.lost += tail.lost;
  return sums;
}

// Steps elements [0, n) in chunks of kOptimizerChunk, which the threads share, and writes
// each chunk's sums to partial_sums (kPartialSums doubles per chunk, optimizer_chunks.h; the
// counts exact in double far beyond any tensor size).
template <bool kEdq, typename Strategy>
void step_elements(int64_t n, int threads, double* partial_sums, const Strategy& strategy) {
  const int64_t chunks = (n + kOptimizerChunk - 1) / kOptimizerChunk;
#pragma omp parallel for schedule(static) num_threads(threads) if (chunks > 1)
  for (int64_t c = 0; c < chunks; c++) {
    const int64_t end = (c + 1) * kOptimizerChunk < n ? (c + 1) * kOptimizerChunk : n;
    const ChunkSums sums = step_chunk<kEdq>(strategy, c * kOptimizerChunk, end);
    double* out = partial_sums + kPartialSums * c;
    out[0] = sums.dot, out[1] = sums.u_squared;
    out[2] = double(sums.updated), out[3] = double(sums.lost);
    out[4] = double(sums.guarded), out[5] = double(sums.redone);
  }
}

template <typename T>
T* state(const OptimizerStep& step, int index) {
  return static_cast<T*>(step.state[index]);
}

// Points s at `table`, refilled first if it was filled for other scalars; leaves s alone when
// the table cannot be used (the division then stays). Lane loops only: filled with lanes, a
// table costs about what stepping 65536 elements does (70–80 µs with AVX-512 on the
// development machine), at most once per step: under 0.1% of GPT-2 124M's optimizer step. A
// build without lanes (Debug) is not built for speed.
void use_reciprocal_denominators(cm::AdamScalars& s, ReciprocalDenominators& table) {
#ifdef COLLAGE_CPU_OPTIMIZER_LANES
  if (!table.values) return;
  auto same = [](float a, float b) { return cm::float_bits(a) == cm::float_bits(b); };
  if (!table.filled || table.hf_order != s.hf_order || !same(table.eps, s.eps) ||
      (!s.hf_order && !same(table.sqrt_bc2, s.sqrt_bc2))) {
    table.usable = fill_reciprocal_denominators(s, table.values);
    table.filled = true;
    table.eps = s.eps, table.sqrt_bc2 = s.sqrt_bc2, table.hf_order = s.hf_order;
  }
  if (table.usable) s.reciprocal_denominators = table.values;
#else
  (void)s, (void)table;
#endif
}

// The precision picks the strategy; step_chunk runs its at<B>(i) over the elements.
template <typename S>
void step_storage(const OptimizerStep& step, int threads, double* partial_sums,
                  ReciprocalDenominators& table) {
  cm::AdamScalars s =
      cm::make_adam_scalars(step.lr, step.beta1, step.beta2, step.eps, step.weight_decay, step.t,
                            step.adam_order == AdamOrder::hf);
  S* param = static_cast<S*>(step.param);
  const S* grad = static_cast<const S*>(step.grad);
  auto run = [&](const auto& strategy) {
    if (step.edq) return step_elements<true>(step.n, threads, partial_sums, strategy);
    step_elements<false>(step.n, threads, partial_sums, strategy);
  };
  if (step.precision == Precision::fp32_master) {
    const Fp32MasterStep<S> master{
        param, grad,           state<float>(step, 0), state<float>(step, 1), state<float>(step, 2),
        s,     step.grad_scale};
    return run(master);
  }
  if constexpr (!std::is_same_v<S, float>) {
    use_reciprocal_denominators(s, table);
    const Bf16Adam adam{param, grad,           state<bf16>(step, 0), state<bf16>(step, 1),
                        s,     step.grad_scale};
    switch (step.precision) {
      case Precision::bf16:
        return run(Bf16Step{adam});
      case Precision::collage_light:
        return run(CollageLightStep{adam, state<bf16>(step, 2)});
      case Precision::collage_plus:
        return run(CollagePlusStep{adam, state<bf16>(step, 2), state<bf16>(step, 3),
                                   step.collage_plus_reference_quirk});
      case Precision::kahan:
        return run(KahanStep{adam, state<bf16>(step, 2)});
      case Precision::stochastic:
        return run(StochasticStep{adam, step.rounding_seed, step.t, step.rounding_offset});
      case Precision::fp32_master:
        break;  // above
    }
  }
}

}  // namespace

void step_chunks(const OptimizerStep& step, bool fp32_storage, int threads, double* partial_sums,
                 ReciprocalDenominators& table) {
  if (fp32_storage) return step_storage<float>(step, threads, partial_sums, table);
  step_storage<bf16>(step, threads, partial_sums, table);
}

bool fill_reciprocal_denominators(const cm::AdamScalars& s, float* values) {
  auto fill = [&](uint32_t b, auto v) {  // entries b, b+1, ... as many as v holds
    using cm::f32_div, cm::to_f32;       // the scalar ones; a lane vector's are its friends
    store(values + b, f32_div(1.0f, to_f32(cm::adam_denominator(v, s))));
  };
  uint32_t b = 0;
#ifdef COLLAGE_CPU_OPTIMIZER_LANES
  uint16_t bits[cm::kLanes];  // b, b+1, ..., b+kLanes−1
  for (int k = 0; k < cm::kLanes; k++) bits[k] = uint16_t(k);
  for (; b < ReciprocalDenominators::kEntries; b += cm::kLanes) {
    Bf16Lanes v;
    load(v, reinterpret_cast<const bf16*>(bits));
    fill(b, v);
    for (uint16_t& x : bits) x = uint16_t(x + cm::kLanes);
  }
#endif
  for (; b < ReciprocalDenominators::kEntries; b++) fill(b, cm::bf16_from_bits(uint16_t(b)));
  // A ±inf entry is 1/0, or the reciprocal of a nonzero denominator overflowed. Rare: look for
  // one first (a loop the compiler vectorizes), then at each one's denominator.
  bool infinite = false;
  for (b = 0; b < ReciprocalDenominators::kEntries; b++) {
    infinite |= (cm::float_bits(values[b]) & 0x7fffffffu) == 0x7f800000u;
  }
  if (!infinite) return true;
  for (b = 0; b < ReciprocalDenominators::kEntries; b++) {
    if (!std::isinf(values[b])) continue;
    if (cm::to_f32(cm::adam_denominator(cm::bf16_from_bits(uint16_t(b)), s)) != 0) return false;
  }
  return true;
}

const char* lane_isa() {
#ifdef COLLAGE_CPU_OPTIMIZER_LANES
  return cm::reg::kIsa;
#else
  return "none";
#endif
}

}  // namespace COLLAGE_ISA_NAMESPACE
}  // namespace collage::cpu
