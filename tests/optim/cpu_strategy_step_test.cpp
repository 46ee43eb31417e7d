// The cpu backend's optimizer_step for every strategy == the header's per-element step
// (src/numerics/collage_math.h) applied element by element, bit for bit; its EDQ sums equal the
// header's terms summed (exactly for the counts); 1 and 2 threads give identical bits for θ,
// the state and the EDQ sums; the fp32 backend runs fp32-master only.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/optimizer_chunks.h"
#include "backend/cpu/optimizer_isa.h"
#include "core/error.h"
#include "numerics/collage_math.h"
#include "reference_math.h"

namespace collage::test {
namespace {

using math::bfloat;

constexpr int64_t kN = 100003;  // several of the backend's chunks, and a ragged last one
constexpr int kSteps = 3;

struct Case {
  Precision precision;
  AdamOrder order;
  bool quirk;
  double weight_decay;
};

std::vector<Case> all_cases() {
  std::vector<Case> out;
  for (Precision p : {Precision::fp32_master, Precision::bf16, Precision::collage_light,
                      Precision::collage_plus, Precision::kahan, Precision::stochastic}) {
    for (AdamOrder order : {AdamOrder::torch, AdamOrder::hf}) {
      out.push_back({p, order, false, order == AdamOrder::torch ? 0.1 : 0.0});
    }
  }
  out.push_back({Precision::collage_plus, AdamOrder::torch, true, 0.1});
  return out;
}

// Host copies of one tensor's θ, gradients per step and state (raw bytes per component).
struct HostTensor {
  std::vector<bf16> theta;
  std::vector<std::vector<bf16>> grads;
  std::vector<std::vector<uint8_t>> state;
};

HostTensor make_tensor(const Case& c, uint64_t seed) {
  Bf16Random r(seed);
  HostTensor h;
  auto b = [](double x) { return bf16{bits_of(rb(x))}; };
  for (int64_t i = 0; i < kN; i++)
    h.theta.push_back(b(r.normal() * std::pow(10.0, r.uniform(-3, 0))));
  for (int s = 0; s < kSteps; s++) {
    std::vector<bf16> g(kN);
    for (int64_t i = 0; i < kN; i++) g[i] = b(r.normal() * std::pow(10.0, r.uniform(-5, 0)));
    h.grads.push_back(g);
  }
  const bool fp32 = c.precision == Precision::fp32_master;
  for (int k = 0; k < state_count(c.precision); k++) {
    std::vector<uint8_t> bytes(kN * (fp32 ? 4 : 2));
    for (int64_t i = 0; i < kN; i++) {
      if (fp32) {
        const float x = k == 0 ? bf16_to_float(h.theta[i]) : 0.0f;  // master = θ; m, v = 0
        std::memcpy(&bytes[4 * i], &x, 4);
      } else {
        // m, v start at 0 (as in training); the low parts/compensation start at 0 too.
        std::memset(&bytes[2 * i], 0, 2);
      }
    }
    h.state.push_back(bytes);
  }
  return h;
}

OptimizerStep make_step(const Case& c, int64_t t) {
  OptimizerStep s;
  s.precision = c.precision;
  s.adam_order = c.order;
  s.collage_plus_reference_quirk = c.quirk;
  s.n = kN;
  s.lr = 1e-3, s.beta1 = 0.9, s.beta2 = 0.95, s.eps = 1e-8, s.weight_decay = c.weight_decay;
  s.t = t;
  s.rounding_seed = 1234;
  s.rounding_offset = 777;
  return s;
}

// How a run applies global-norm clipping's factor to each step's gradient.
enum class Clipping { none, scale_first, fused };

// Runs kSteps of the backend on a copy of h; returns the final host tensor and EDQ sums. With
// clipping, every step's gradient is scaled by `factor`: by Backend::scale before the step, or
// by the step itself (OptimizerStep::grad_scale).
// edq: each step's EDQ sums, or null to ask for none (OptimizerStep::edq).
HostTensor run_backend(const Case& c, HostTensor h, int threads, std::vector<EdqSums>* edq,
                       Clipping clipping = Clipping::none, float factor = 1.0f) {
  auto backend = make_cpu_backend(threads);
  const size_t nbytes = kN * sizeof(bf16);
  void* theta = backend->allocate(nbytes);
  void* grad = backend->allocate(nbytes);
  std::vector<void*> state;
  backend->copy_to_device(theta, h.theta.data(), nbytes);
  for (auto& s : h.state) {
    state.push_back(backend->allocate(s.size()));
    backend->copy_to_device(state.back(), s.data(), s.size());
  }
  if (edq) edq->assign(kSteps, EdqSums{});
  for (int k = 0; k < kSteps; k++) {
    backend->copy_to_device(grad, h.grads[k].data(), nbytes);
    if (clipping == Clipping::scale_first) backend->scale(static_cast<bf16*>(grad), factor, kN);
    OptimizerStep s = make_step(c, k + 1);
    if (clipping == Clipping::fused) s.grad_scale = factor;
    s.param = theta, s.grad = grad;
    for (size_t j = 0; j < state.size(); j++) s.state[j] = state[j];
    s.edq = edq ? &(*edq)[k] : nullptr;
    backend->optimizer_step(s);
  }
  backend->copy_to_host(h.theta.data(), theta, nbytes);
  for (size_t j = 0; j < state.size(); j++) {
    backend->copy_to_host(h.state[j].data(), state[j], h.state[j].size());
    backend->release(state[j]);
  }
  backend->release(theta);
  backend->release(grad);
  return h;
}

// The same steps through the header, element by element, in order.
HostTensor run_header(const Case& c, HostTensor h, std::vector<math::EdqAccumulator>& edq) {
  edq.assign(kSteps, math::EdqAccumulator{});
  auto get = [&](int k, int64_t i) {
    return math::bf16_from_bits(reinterpret_cast<uint16_t*>(h.state[k].data())[i]);
  };
  auto put = [&](int k, int64_t i, bfloat x) {
    reinterpret_cast<uint16_t*>(h.state[k].data())[i] = math::bf16_bits(x);
  };
  for (int k = 0; k < kSteps; k++) {
    const OptimizerStep st = make_step(c, k + 1);
    const math::AdamScalars s = math::make_adam_scalars(
        st.lr, st.beta1, st.beta2, st.eps, st.weight_decay, st.t, c.order == AdamOrder::hf);
    for (int64_t i = 0; i < kN; i++) {
      bfloat th = math::bf16_from_bits(h.theta[i].bits);
      const bfloat g = math::bf16_from_bits(h.grads[k][i].bits);
      if (c.precision == Precision::fp32_master) {
        float* f[3];
        for (int j = 0; j < 3; j++) f[j] = reinterpret_cast<float*>(h.state[j].data()) + i;
        edq[k].add(math::step_fp32_master(*f[0], math::to_f32(g), *f[1], *f[2], s));
        h.theta[i].bits = math::bf16_bits(math::rn(*f[0]));
        continue;
      }
      bfloat m = get(0, i), v = get(1, i);
      bfloat extra = state_count(c.precision) > 2 ? get(2, i) : bfloat{};
      bfloat dv = state_count(c.precision) > 3 ? get(3, i) : bfloat{};
      switch (c.precision) {
        case Precision::bf16:
          edq[k].add(math::step_bf16(th, g, m, v, s));
          break;
        case Precision::collage_light:
          edq[k].add(math::step_collage_light(th, g, m, v, extra, s));
          break;
        case Precision::collage_plus:
          edq[k].add(math::step_collage_plus(th, g, m, v, extra, dv, s, c.quirk));
          break;
        case Precision::kahan:
          edq[k].add(math::step_kahan(th, g, m, v, extra, s));
          break;
        case Precision::stochastic:
          edq[k].add(math::step_stochastic(th, g, m, v, s, st.rounding_seed, st.t,
                                           st.rounding_offset + i));
          break;
        default:
          break;
      }
      h.theta[i].bits = math::bf16_bits(th);
      put(0, i, m), put(1, i, v);
      if (state_count(c.precision) > 2) put(2, i, extra);
      if (state_count(c.precision) > 3) put(3, i, dv);
    }
  }
  return h;
}

// 64-element blocks a step of kN elements has: each chunk's whole blocks (the rest of a chunk
// goes one element at a time).
constexpr int64_t kBlocksPerStep =
    kN / cpu::kOptimizerChunk * (cpu::kOptimizerChunk / 64) + kN % cpu::kOptimizerChunk / 64;

// The blocks stepped with guarded rounding during f(), and of them those redone exactly. The
// AVX-512 loop guards every bf16-state strategy, the AVX2 one collage-plus only
// (docs/ARCHITECTURE.md, "The cpu optimizer").
template <typename F>
cpu::GuardedRoundingCounts guarded_blocks_during(const F& f) {
  const cpu::GuardedRoundingCounts before = cpu::guarded_rounding_counts();
  f();
  const cpu::GuardedRoundingCounts after = cpu::guarded_rounding_counts();
  return {after.guarded - before.guarded, after.redone - before.redone};
}
bool loop_guards(const Case& c) {
  const std::string& isa = cpu::chosen_optimizer_loop().isa;
  if (isa == "AVX-512") return c.precision != Precision::fp32_master;
  return isa == "AVX2" && c.precision == Precision::collage_plus;
}

bool same_edq_bits(const EdqSums& a, const EdqSums& b) {
  return std::memcmp(&a.dot, &b.dot, 8) == 0 && std::memcmp(&a.u_squared, &b.u_squared, 8) == 0 &&
         a.updated == b.updated && a.lost == b.lost;
}

std::string describe(const Case& c) {
  const char* names[] = {"fp32-master",  "bf16",  "collage-light",
                         "collage-plus", "kahan", "stochastic"};
  return std::string(names[int(c.precision)]) + (c.order == AdamOrder::hf ? " hf" : " torch") +
         (c.quirk ? " quirk" : "");
}

TEST(CpuStrategyStep, MatchesTheHeaderBitForBitWithDeterministicEdq) {
  uint64_t seed = 1;
  for (const Case& c : all_cases()) {
    SCOPED_TRACE(describe(c));
    const HostTensor start = make_tensor(c, seed++);
    std::vector<math::EdqAccumulator> want_edq;
    const HostTensor want = run_header(c, start, want_edq);
    std::vector<EdqSums> edq1, edq2, edq2_again;
    HostTensor one;
    const cpu::GuardedRoundingCounts blocks =
        guarded_blocks_during([&] { one = run_backend(c, start, 1, &edq1); });
    // Ordinary values: every block takes the fast rounding (and none if the loop has none).
    EXPECT_EQ(blocks.guarded, loop_guards(c) ? kSteps * kBlocksPerStep : 0);
    EXPECT_EQ(blocks.redone, 0);
    const HostTensor two = run_backend(c, start, 2, &edq2);
    const HostTensor two_again = run_backend(c, start, 2, &edq2_again);
    const HostTensor without_edq = run_backend(c, start, 2, nullptr);  // a loop of its own
    for (const HostTensor* got :
         {static_cast<const HostTensor*>(&one), &two, &two_again, &without_edq}) {
      ASSERT_EQ(0, std::memcmp(got->theta.data(), want.theta.data(), kN * sizeof(bf16)));
      for (size_t j = 0; j < want.state.size(); j++) {
        ASSERT_EQ(got->state[j], want.state[j]) << "state " << j;
      }
    }
    for (int k = 0; k < kSteps; k++) {
      ASSERT_TRUE(same_edq_bits(edq1[k], edq2[k])) << "step " << k;  // any thread count
      ASSERT_TRUE(same_edq_bits(edq2[k], edq2_again[k])) << "step " << k;
      EXPECT_EQ(edq1[k].updated, want_edq[k].updated);
      EXPECT_EQ(edq1[k].lost, want_edq[k].lost);
      EXPECT_GT(edq1[k].updated, kN / 2);
      // Summation order differs from the sequential sum: rounding only.
      EXPECT_NEAR(edq1[k].dot, want_edq[k].dot, 1e-12 * std::fabs(want_edq[k].dot));
      EXPECT_NEAR(edq1[k].u_squared, want_edq[k].u_squared, 1e-12 * want_edq[k].u_squared);
    }
  }
}

// `start` stepped by the backend (2 threads) and by the header: θ, the state and the EDQ counts
// bit for bit; where the loop guards, some blocks redone and most not.
void expect_headers_bits_with_some_blocks_redone(const Case& c, const HostTensor& start) {
  std::vector<math::EdqAccumulator> want_edq;
  const HostTensor want = run_header(c, start, want_edq);
  std::vector<EdqSums> edq;
  HostTensor got;
  const cpu::GuardedRoundingCounts blocks =
      guarded_blocks_during([&] { got = run_backend(c, start, 2, &edq); });
  if (loop_guards(c)) {  // some blocks were redone, and the clean ones between were not
    EXPECT_GT(blocks.redone, 0);
    EXPECT_LT(blocks.redone, blocks.guarded / 4);
  }
  for (int64_t i = 0; i < kN; i++) {
    ASSERT_EQ(got.theta[i].bits, want.theta[i].bits) << "θ[" << i << "]";
  }
  for (size_t j = 0; j < want.state.size(); j++) {
    ASSERT_EQ(got.state[j], want.state[j]) << "state " << j;
  }
  for (int k = 0; k < kSteps; k++) {
    EXPECT_EQ(edq[k].updated, want_edq[k].updated) << "step " << k;
    EXPECT_EQ(edq[k].lost, want_edq[k].lost) << "step " << k;
  }
}

// The lane loop rounds with three instructions where that gives rn's bits and redoes a block
// exactly where it may not (Bf16Adam::guarded_in_place in backend/cpu/optimizer_chunks.cpp): a
// NaN, ±inf or subnormal among the loaded values, or an exception flag raised on the way (g²
// overflowing, v·β2 falling below the normals). Sparse values of those kinds, about one block
// in eight, in θ, in the gradient and in each state array: every strategy still gives the
// header's bits, in the blocks that fell back and in the clean blocks between them.
TEST(CpuStrategyStep, UnusualValuesGiveTheHeadersBitsWhereverTheyFall) {
  const uint16_t unusual[] = {
      0x7fc1, 0x7f80, 0xff80,  // NaN, ±inf
      0x0003, 0x8041,          // subnormals
      0x7b40, 0xfb00,          // ±2^119 and more: g² and the guarded rounding overflow
      0x0080, 0x0380, 0x8100,  // normals whose products fall below 2^-126
      0x8000, 0xbc00,          // −0, and −2^-7: a v whose square root is NaN
  };
  uint64_t seed = 200;
  for (const Case& c : all_cases()) {
    SCOPED_TRACE(describe(c));
    HostTensor start = make_tensor(c, seed++);
    const bool bf16_state = c.precision != Precision::fp32_master;
    const int components = 2 + (bf16_state ? state_count(c.precision) : 0);
    int n = 0;
    for (int64_t i = 37; i < kN; i += 500, n++) {
      const uint16_t bits = unusual[n % std::size(unusual)];
      const int component = (n / int(std::size(unusual))) % components;
      if (component == 0) {
        start.theta[i].bits = bits;
      } else if (component == 1) {
        for (auto& g : start.grads) g[i].bits = bits;
      } else {
        std::memcpy(&start.state[component - 2][2 * i], &bits, 2);
      }
    }
    expect_headers_bits_with_some_blocks_redone(c, start);
  }
}

// The MCF strategies' renormalisations do not round in the lane loop: their error terms are
// checked to be bf16 already (rn_expect_exact, numerics/bf16_math.h), and a block where one
// is not is redone exactly. The MCFs the strategies make always pass; a state read from
// elsewhere need not be renormalised, and then they fail: (x, δx) = (1 + 2^-7, 3) gives
// x' − s = 3 − 2^-7, nine bits. Such pairs in (θ, δθ) and, for collage-plus, (v, δv), about
// one block in eight: every bit as the header's, and those blocks redone.
TEST(CpuStrategyStep, McfsThatAreNotRenormalisedGiveTheHeadersBits) {
  const uint16_t high = 0x3f81, low = 0x4040;  // 1 + 2^-7, 3
  uint64_t seed = 300;
  for (const Case& c : all_cases()) {
    const bool plus = c.precision == Precision::collage_plus;
    if (!plus && c.precision != Precision::collage_light) continue;
    SCOPED_TRACE(describe(c));
    HostTensor start = make_tensor(c, seed++);
    int n = 0;
    for (int64_t i = 37; i < kN; i += 500, n++) {
      if (plus && n % 2 == 1) {  // state {m, v, δθ, δv}
        std::memcpy(&start.state[1][2 * i], &high, 2);
        std::memcpy(&start.state[3][2 * i], &low, 2);
      } else {
        start.theta[i].bits = high;
        std::memcpy(&start.state[2][2 * i], &low, 2);
      }
    }
    expect_headers_bits_with_some_blocks_redone(c, start);
  }
}

// Clipping fused into the step (OptimizerStep::grad_scale) gives the bits of Backend::scale on
// the gradient first, for every strategy, on the lane path and the scalar tail, its EDQ sums
// included; a factor that rounds some products to subnormals and one that leaves every
// gradient as it is (1 is "none", 1 − 2^-24 is a multiplication).
TEST(CpuStrategyStep, FusedClippingIsScaleThenStep) {
  uint64_t seed = 100;
  for (const Case& c : all_cases()) {
    SCOPED_TRACE(describe(c));
    const HostTensor start = make_tensor(c, seed++);
    for (float factor : {0.37f, 3e-35f, 1.0f - 0x1p-24f}) {
      SCOPED_TRACE(factor);
      std::vector<EdqSums> first_edq, fused_edq;
      const HostTensor first = run_backend(c, start, 2, &first_edq, Clipping::scale_first, factor);
      const HostTensor fused = run_backend(c, start, 2, &fused_edq, Clipping::fused, factor);
      ASSERT_EQ(0, std::memcmp(fused.theta.data(), first.theta.data(), kN * sizeof(bf16)));
      for (size_t j = 0; j < first.state.size(); j++)
        ASSERT_EQ(fused.state[j], first.state[j]) << "state " << j;
      for (int k = 0; k < kSteps; k++)
        ASSERT_TRUE(same_edq_bits(fused_edq[k], first_edq[k])) << "step " << k;
    }
  }
  // fp32 storage (fp32-master only): the gradient is the fp32 product g·factor.
  auto backend = make_cpu_backend_fp32(2);
  constexpr int64_t n = 1000 + 7;
  Bf16Random r(7);
  std::vector<float> theta(n), grad(n);
  for (int64_t i = 0; i < n; i++) theta[i] = float(r.normal()), grad[i] = float(1e-2 * r.normal());
  std::vector<float> results[2];
  for (int fused = 0; fused < 2; fused++) {
    std::vector<float> zeros(n, 0.0f);
    void* d[5];
    const std::vector<float>* host[5] = {&theta, &grad, &theta, &zeros, &zeros};
    for (int j = 0; j < 5; j++) {
      d[j] = backend->allocate(n * 4);
      backend->copy_to_device(d[j], host[j]->data(), n * 4);
    }
    OptimizerStep s;
    s.param = d[0], s.grad = d[1], s.state[0] = d[2], s.state[1] = d[3], s.state[2] = d[4];
    s.n = n, s.lr = 1e-2, s.weight_decay = 0.1, s.t = 1;
    if (fused)
      s.grad_scale = 0.37f;
    else
      backend->scale(static_cast<float*>(d[1]), 0.37f, n);
    backend->optimizer_step(s);
    results[fused].resize(n);
    backend->copy_to_host(results[fused].data(), d[0], n * 4);
    for (void* p : d) backend->release(p);
  }
  EXPECT_EQ(0, std::memcmp(results[0].data(), results[1].data(), n * 4));
  EXPECT_NE(0, std::memcmp(results[0].data(), theta.data(), n * 4));  // the step moved θ
}

TEST(CpuStrategyStep, EdqIsOptionalAndAddsUp) {
  const Case c{Precision::collage_light, AdamOrder::torch, false, 0.1};
  const HostTensor start = make_tensor(c, 99);
  auto backend = make_cpu_backend(2);
  std::vector<void*> buffers;
  auto upload = [&](const void* data, size_t bytes) {
    buffers.push_back(backend->allocate(bytes));
    backend->copy_to_device(buffers.back(), data, bytes);
    return buffers.back();
  };
  OptimizerStep s = make_step(c, 1);
  s.param = upload(start.theta.data(), kN * 2);
  s.grad = upload(start.grads[0].data(), kN * 2);
  for (int j = 0; j < 3; j++) s.state[j] = upload(start.state[j].data(), kN * 2);
  EXPECT_NO_THROW(backend->optimizer_step(s));  // no EDQ requested
  EdqSums sums;
  sums.updated = 5, sums.lost = 2, sums.dot = 1.5, sums.u_squared = 2.5;
  s.edq = &sums;
  s.t = 2;
  backend->optimizer_step(s);
  EXPECT_GT(sums.updated, 5);  // added to what was there
  EXPECT_GE(sums.lost, 2);
  for (void* p : buffers) backend->release(p);
}

TEST(CpuStrategyStep, Fp32BackendRunsFp32MasterOnly) {
  auto backend = make_cpu_backend_fp32(1);
  std::vector<float> theta = {1.0f, -2.0f, 0.5f}, grad = {0.1f, 0.2f, -0.3f};
  std::vector<float> master = theta, m(3, 0.0f), v(3, 0.0f);
  void* d[5];
  const std::vector<float>* host[5] = {&theta, &grad, &master, &m, &v};
  for (int j = 0; j < 5; j++) {
    d[j] = backend->allocate(12);
    backend->copy_to_device(d[j], host[j]->data(), 12);
  }
  OptimizerStep s;
  s.param = d[0], s.grad = d[1], s.state[0] = d[2], s.state[1] = d[3], s.state[2] = d[4];
  s.n = 3, s.lr = 1e-2, s.weight_decay = 0.1, s.t = 1;
  backend->optimizer_step(s);
  std::vector<float> got(3);
  backend->copy_to_host(got.data(), d[0], 12);
  const math::AdamScalars sc = math::make_adam_scalars(1e-2, 0.9, 0.95, 1e-8, 0.1, 1, false);
  for (int i = 0; i < 3; i++) {
    float w = theta[i], mi = 0, vi = 0;
    math::step_fp32_master(w, grad[i], mi, vi, sc);
    EXPECT_EQ(got[i], w) << i;  // θ is the master itself
  }
  for (Precision p : {Precision::bf16, Precision::collage_light, Precision::collage_plus,
                      Precision::kahan, Precision::stochastic}) {
    s.precision = p;
    try {
      backend->optimizer_step(s);
      ADD_FAILURE() << "no error for precision " << int(p);
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("bf16 backend"), std::string::npos) << e.what();
    }
  }
  for (void* p : d) backend->release(p);
}

TEST(CpuStrategyStep, MissingStateIsAnErrorNamingTheStrategy) {
  auto backend = make_cpu_backend(1);
  void* theta = backend->allocate(8);
  void* grad = backend->allocate(8);
  void* a = backend->allocate(8);
  OptimizerStep s;
  s.precision = Precision::collage_plus;
  s.param = theta, s.grad = grad, s.state[0] = a, s.state[1] = a, s.state[2] = a;
  s.n = 4;
  try {
    backend->optimizer_step(s);
    ADD_FAILURE() << "no error without state[3]";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("collage-plus"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("state[3]"), std::string::npos) << e.what();
  }
  for (void* p : {theta, grad, a}) backend->release(p);
}

}  // namespace
}  // namespace collage::test
