// The AVX-512 compilation of the cpu optimizer's element loop
// (src/backend/cpu/optimizer_chunks.cpp) against the baseline one (AVX2 in Release; lanes_step_test
// and cpu_strategy_step_test pin the baseline to the scalar step): θ, every state component and
// every chunk's EDQ sums, bit for bit, for every strategy, both Adam orders, the reference quirk,
// early and late steps, inputs with NaN, ±inf, subnormals and ±0, several chunks and a ragged tail.
// Skips, saying why, where the CPU cannot run AVX-512 or the build has no AVX-512 compilation.
// Also each compilation with its table of reciprocal denominators against itself dividing.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cpu/optimizer_chunks.h"
#include "backend/cpu/optimizer_isa.h"
#include "numerics/precision.h"
#include "reference_math.h"

namespace collage::test {
namespace {

using cpu::OptimizerLoop;

// Two full chunks, one ragged one (a lane-vector remainder and a scalar tail).
constexpr int64_t kN = 2 * cpu::kOptimizerChunk + 1000 + 37;
constexpr int64_t kChunks = (kN + cpu::kOptimizerChunk - 1) / cpu::kOptimizerChunk;

// One tensor's storage: param and grad in the storage type, the state components as bytes.
struct Tensor {
  std::vector<uint8_t> param, grad;
  std::vector<std::vector<uint8_t>> state;
};

// fp32 values (fp32-master's state, fp32 storage): a bf16 component plus random low bits.
void put_f32(Bf16Random& r, uint8_t* at, uint16_t high) {
  uint32_t u = uint32_t(high) << 16;
  if ((u & 0x7f800000u) != 0x7f800000u) u |= uint32_t(r.engine()()) & 0xffffu;
  std::memcpy(at, &u, 4);
}

Tensor make_tensor(Precision precision, bool fp32_storage, uint64_t seed) {
  Bf16Random r(seed);
  const size_t storage_bytes = fp32_storage ? 4 : 2;
  Tensor t;
  t.param.resize(kN * storage_bytes);
  t.grad.resize(kN * storage_bytes);
  const bool fp32_state = precision == Precision::fp32_master;
  t.state.assign(size_t(state_count(precision)), std::vector<uint8_t>(kN * (fp32_state ? 4 : 2)));
  const double scales[] = {1e-3, 1e-6, 1e-4, 1e-9};  // m, v, δθ or c, δv (master: θ's)
  for (int64_t i = 0; i < kN; i++) {
    const uint16_t theta = component(r, 0.1, false), grad = component(r, 1e-3, false);
    if (fp32_storage) {
      put_f32(r, &t.param[4 * i], theta), put_f32(r, &t.grad[4 * i], grad);
    } else {
      std::memcpy(&t.param[2 * i], &theta, 2), std::memcpy(&t.grad[2 * i], &grad, 2);
    }
    for (size_t c = 0; c < t.state.size(); c++) {
      if (fp32_state) {  // master, m, v
        const uint16_t high = c == 0 ? theta : component(r, scales[c - 1], c == 2);
        put_f32(r, &t.state[c][4 * i], high);
      } else {
        const uint16_t x = component(r, scales[c], c == 1);
        std::memcpy(&t.state[c][2 * i], &x, 2);
      }
    }
  }
  return t;
}

// Bits equal; for fp32 values (fp32-master's state) a NaN matches any NaN: the payload of an
// operation on two NaNs depends on operand order, which IEEE leaves open and the compiler may
// swap (bf16 results go through rn, which makes every NaN 0x7fff).
bool same_fp32(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want, int64_t* at) {
  for (size_t i = 0; i < got.size(); i += 4) {
    float a, b;
    std::memcpy(&a, &got[i], 4), std::memcpy(&b, &want[i], 4);
    if (std::memcmp(&a, &b, 4) != 0 && !(std::isnan(a) && std::isnan(b))) {
      *at = int64_t(i / 4);
      return false;
    }
  }
  return true;
}

// With use_table, the loop divides by multiplying with the step's table of reciprocal
// denominators (optimizer_chunks.h), as optimizer_step runs it; without, it divides.
std::vector<double> run(const OptimizerLoop& loop, Tensor& t, OptimizerStep step, bool fp32_storage,
                        bool use_table) {
  step.param = t.param.data();
  step.grad = t.grad.data();
  for (size_t c = 0; c < t.state.size(); c++) step.state[c] = t.state[c].data();
  std::vector<double> partial(cpu::kPartialSums * kChunks, -1.0);
  std::vector<float> values(cpu::ReciprocalDenominators::kEntries);
  cpu::ReciprocalDenominators table;
  table.values = use_table ? values.data() : nullptr;
  loop.step_chunks(step, fp32_storage, 2, partial.data(), table);
  return partial;
}

// Steps the same tensors with `got` and with `want` (each with or without the table) for
// every strategy, both Adam orders, the quirk and fp32 storage, over three steps, and expects
// the same θ, state and EDQ chunk sums.
void expect_same_bits(const OptimizerLoop& want_loop, bool want_table,
                      const OptimizerLoop& got_loop, bool got_table) {
  struct Case {
    Precision precision;
    bool fp32_storage, quirk;
  };
  std::vector<Case> cases;
  for (Precision p : {Precision::fp32_master, Precision::bf16, Precision::collage_light,
                      Precision::collage_plus, Precision::kahan, Precision::stochastic})
    cases.push_back({p, false, false});
  cases.push_back({Precision::collage_plus, false, true});
  cases.push_back({Precision::fp32_master, true, false});

  for (const Case& c : cases) {
    for (AdamOrder order : {AdamOrder::torch, AdamOrder::hf}) {
      SCOPED_TRACE(std::string(precision_name(c.precision)) +
                   (order == AdamOrder::hf ? " hf" : " torch") + (c.quirk ? " quirk" : "") +
                   (c.fp32_storage ? " fp32 storage" : ""));
      Tensor a = make_tensor(c.precision, c.fp32_storage, 11 + int(c.precision));
      Tensor b = a;
      for (int64_t t : {int64_t(1), int64_t(2), int64_t(100000)}) {
        OptimizerStep step;
        step.precision = c.precision;
        step.adam_order = order;
        step.collage_plus_reference_quirk = c.quirk;
        step.n = kN;
        step.lr = 1e-3;
        step.beta2 = t == 2 ? 0.999 : 0.95;
        step.weight_decay = order == AdamOrder::torch ? 0.1 : 0.0;
        step.t = t;
        step.rounding_seed = 42;
        // Indices that wrap past INT64_MAX within the tensor (the noise's 64-bit lanes).
        step.rounding_offset = t == 2 ? INT64_MAX - 5000 : 123;
        const std::vector<double> want = run(want_loop, a, step, c.fp32_storage, want_table);
        const std::vector<double> got = run(got_loop, b, step, c.fp32_storage, got_table);
        const std::string at_t = "t " + std::to_string(t);
        // The EDQ sums; the block counts after them differ by design (guarded or not).
        for (int64_t chunk = 0; chunk < kChunks; chunk++) {
          for (int k = 0; k < 4; k++) {
            const int64_t i = cpu::kPartialSums * chunk + k;
            const bool same = std::memcmp(&got[i], &want[i], 8) == 0 ||
                              (std::isnan(got[i]) && std::isnan(want[i]));
            ASSERT_TRUE(same) << "EDQ sum " << k << " of chunk " << chunk << ", " << at_t << ": "
                              << got[i] << " vs " << want[i];
          }
        }
        int64_t at = -1;
        if (c.fp32_storage) {
          ASSERT_TRUE(same_fp32(b.param, a.param, &at)) << "param " << at << ", " << at_t;
        } else {
          ASSERT_EQ(b.param, a.param) << at_t;
        }
        for (size_t k = 0; k < a.state.size(); k++) {
          if (c.precision == Precision::fp32_master) {
            ASSERT_TRUE(same_fp32(b.state[k], a.state[k], &at))
                << "state " << k << " element " << at << ", " << at_t;
          } else {
            ASSERT_EQ(b.state[k], a.state[k]) << "state " << k << ", " << at_t;
          }
        }
      }
    }
  }
}

TEST(CpuOptimizerIsa, Avx512LoopIsBitIdenticalToTheBaseline) {
  const std::vector<OptimizerLoop> loops = cpu::runnable_optimizer_loops();
  if (loops.size() < 2) GTEST_SKIP() << "no AVX-512 loop to compare: " << cpu::why_no_avx512();
  ASSERT_EQ(loops[1].isa, "AVX-512");
  expect_same_bits(loops[0], true, loops[1], true);
}

// The table of reciprocal denominators changes how a is computed, not its bits (collage_math.h,
// adam_direction): each loop with the table == the same loop dividing.
TEST(CpuOptimizerIsa, ReciprocalTableGivesTheBitsOfTheDivision) {
  for (const OptimizerLoop& loop : cpu::runnable_optimizer_loops()) {
    SCOPED_TRACE(loop.name);
    expect_same_bits(loop, false, loop, true);
  }
}

TEST(CpuOptimizerIsa, ChoiceNamesTheLoopItRuns) {
  const OptimizerLoop& chosen = cpu::chosen_optimizer_loop();
  const std::string line = cpu::optimizer_loop_description();
  const std::vector<OptimizerLoop> loops = cpu::runnable_optimizer_loops();
  const char* variable = std::getenv("COLLAGE_CPU_OPTIMIZER");
  const std::string setting = variable && *variable ? variable : "auto";
  // auto (and avx512) take the widest loop the CPU runs; baseline the build's own.
  const OptimizerLoop& want = setting == "baseline" ? loops.front() : loops.back();
  EXPECT_EQ(chosen.name, want.name);
  EXPECT_EQ(chosen.step_chunks, want.step_chunks);
  EXPECT_NE(line.find(want.isa == "none" ? "scalar" : want.isa), std::string::npos) << line;
  EXPECT_NE(line.find(setting), std::string::npos) << line;
  if (loops.size() < 2) {
    EXPECT_NE(line.find(cpu::why_no_avx512()), std::string::npos) << line;
  }
}

}  // namespace
}  // namespace collage::test
