// The Optimizer layer: which state each strategy keeps (names, element types, the bytes per
// parameter of docs/PRECISION.md §6), how that state starts, what every backend step is
// given (adam order, quirk, rounding keys, per-span state pointers, EDQ sums), and how the
// EDQ sums are reduced over ranks through the Comm.
#include "optim/optimizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"

namespace collage {
namespace {

constexpr Precision kAll[] = {Precision::fp32_master,  Precision::bf16,  Precision::collage_light,
                              Precision::collage_plus, Precision::kahan, Precision::stochastic};

// A backend whose memory is host memory and whose optimizer_step only records its argument
// and reports EDQ sums derived from the span (dot = n, ‖u‖² = 2n, updated = n, lost = 1).
class RecordingBackend final : public Backend {
 public:
  std::vector<OptimizerStep> steps;

  std::string name() const override { return "recording"; }
  void* allocate(size_t bytes) override {  // zero-filled and 256-byte aligned, like a device's
    const size_t rounded = (bytes / 256 + 1) * 256;
    return std::memset(std::aligned_alloc(256, rounded), 0, rounded);
  }
  void release(void* p) override { std::free(p); }
  void copy_to_device(void* d, const void* s, size_t n) override { std::memcpy(d, s, n); }
  void copy_to_host(void* d, const void* s, size_t n) override { std::memcpy(d, s, n); }
  void copy(void* d, const void* s, size_t n) override { std::memcpy(d, s, n); }
  void zero(void* d, size_t n) override { std::memset(d, 0, n); }
  void do_optimizer_step(const OptimizerStep& s) override {
    steps.push_back(s);
    if (s.edq) *s.edq += EdqSums{double(s.n), 2.0 * double(s.n), s.n, 1};
  }

  // Nothing else is used by the Optimizer.
  [[noreturn]] static void unused() { throw std::logic_error("not used by the Optimizer"); }
  void do_embedding_forward(bf16*, const int32_t*, const bf16*, const bf16*, int, int, int, int64_t,
                            int64_t) override {
    unused();
  }
  void do_embedding_backward(bf16*, bf16*, const bf16*, const int32_t*, int, int, int, int64_t,
                             int64_t) override {
    unused();
  }
  void do_layernorm_forward(bf16*, float*, float*, const bf16*, const bf16*, const bf16*, int64_t,
                            int, float) override {
    unused();
  }
  void do_layernorm_backward(bf16*, bf16*, bf16*, const bf16*, const bf16*, const bf16*,
                             const float*, const float*, int64_t, int, bf16*) override {
    unused();
  }
  void do_matmul_forward(bf16*, const bf16*, const bf16*, const bf16*, int64_t, int, int) override {
    unused();
  }
  void do_matmul_backward(bf16*, bf16*, bf16*, const bf16*, const bf16*, const bf16*, int64_t, int,
                          int) override {
    unused();
  }
  void do_gelu_forward(bf16*, const bf16*, int64_t) override { unused(); }
  void do_gelu_backward(bf16*, const bf16*, const bf16*, int64_t) override { unused(); }
  void do_add(bf16*, const bf16*, const bf16*, int64_t) override { unused(); }
  void do_accumulate(bf16*, const bf16*, int64_t) override { unused(); }
  void do_rope_forward(bf16*, const bf16*, int, int, int, int, float) override { unused(); }
  void do_rope_backward(bf16*, const bf16*, int, int, int, int, float) override { unused(); }
  void do_attention_forward(bf16*, float*, const bf16*, const int32_t*, bool, int, int, int,
                            int) override {
    unused();
  }
  void do_attention_backward(bf16*, const bf16*, const bf16*, const bf16*, const float*,
                             const int32_t*, bool, int, int, int, int, bf16*) override {
    unused();
  }
  void do_cross_entropy_forward(float*, const bf16*, const int32_t*, int64_t, int, int,
                                float*) override {
    unused();
  }
  void do_cross_entropy_backward(bf16*, const bf16*, const int32_t*, int64_t, int, int,
                                 float) override {
    unused();
  }
  void do_cross_entropy_shard_max(float*, const bf16*, int64_t, int, int, int64_t) override {
    unused();
  }
  void do_cross_entropy_shard_sums(float*, const bf16*, const int32_t*, const float*, int64_t, int,
                                   int, int64_t) override {
    unused();
  }
  void do_cross_entropy_shard_loss(float*, float*, const float*, const float*, const int32_t*,
                                   int64_t) override {
    unused();
  }
  void do_cross_entropy_shard_backward(bf16*, const bf16*, const int32_t*, const float*, int64_t,
                                       int, int, int64_t, float) override {
    unused();
  }
  void do_gelu_erf_forward(bf16*, const bf16*, int64_t) override { unused(); }
  void do_gelu_erf_backward(bf16*, const bf16*, const bf16*, int64_t) override { unused(); }
  void do_tanh_forward(bf16*, const bf16*, int64_t) override { unused(); }
  void do_tanh_backward(bf16*, const bf16*, const bf16*, int64_t) override { unused(); }
  void do_dropout_forward(bf16*, const bf16*, int64_t, float, uint64_t, uint64_t) override {
    unused();
  }
  void do_dropout_backward(bf16*, const bf16*, int64_t, float, uint64_t, uint64_t) override {
    unused();
  }
  void do_attention_forward_dropout(bf16*, float*, const bf16*, const int32_t*, bool, int, int, int,
                                    int, float, uint64_t, uint64_t) override {
    unused();
  }
  void do_attention_backward_dropout(bf16*, const bf16*, const bf16*, const bf16*, const float*,
                                     const int32_t*, bool, int, int, int, int, float, uint64_t,
                                     uint64_t) override {
    unused();
  }
  void do_gather_rows(bf16*, const bf16*, const int32_t*, int64_t, int) override { unused(); }
  void do_scatter_add_rows(bf16*, const bf16*, const int32_t*, int64_t, int) override { unused(); }
  double do_sum(const float*, int64_t) override { unused(); }
  double do_sum_squares(const bf16*, int64_t) override { unused(); }
  void do_scale(bf16*, float, int64_t) override { unused(); }
};

// `ranks` identical ranks: every all-reduce multiplies by the rank count; counts its calls.
class ScalingComm final : public Comm {
 public:
  explicit ScalingComm(int ranks) : ranks_(ranks) {}
  int calls = 0;
  int rank() const override { return 0; }
  int size() const override { return ranks_; }
  void all_reduce_sum(double* data, int64_t n) override {
    calls++;
    for (int64_t i = 0; i < n; i++) data[i] *= ranks_;
  }
  void all_reduce_sum(float*, int64_t) override { FAIL() << "EDQ sums are doubles"; }
  void all_reduce_sum(bf16*, int64_t) override { FAIL() << "EDQ sums are doubles"; }
  void all_reduce_max(float*, int64_t) override { FAIL() << "EDQ needs no max"; }
  void reduce_scatter_sum(const float*, float*, int64_t) override { FAIL() << "not a sum"; }
  void reduce_scatter_sum(const bf16*, bf16*, int64_t) override { FAIL() << "not a sum"; }
  void all_gather(const void*, void*, int64_t) override { FAIL() << "not a gather"; }
  void broadcast(void*, int64_t, int) override {}
  void barrier() override {}

 private:
  int ranks_;
};

// Host weights 1, 2, 3, ... as bf16.
struct Weights {
  std::vector<bf16> params, grads;
  explicit Weights(int64_t n) : params(n), grads(n) {
    for (int64_t i = 0; i < n; i++) params[i] = float_to_bf16(1.0f + float(i));
  }
};

TEST(Optimizer, EveryStrategyKeepsTheDocumentedComponentsInBackendOrder) {
  // optimizer_step.h's state order, written out here.
  const std::map<Precision, std::vector<std::pair<std::string, std::string>>> documented = {
      {Precision::fp32_master, {{"master", "f32"}, {"m", "f32"}, {"v", "f32"}}},
      {Precision::bf16, {{"m", "bf16"}, {"v", "bf16"}}},
      {Precision::collage_light, {{"m", "bf16"}, {"v", "bf16"}, {"dtheta", "bf16"}}},
      {Precision::collage_plus, {{"m", "bf16"}, {"v", "bf16"}, {"dtheta", "bf16"}, {"dv", "bf16"}}},
      {Precision::kahan, {{"m", "bf16"}, {"v", "bf16"}, {"compensation", "bf16"}}},
      {Precision::stochastic, {{"m", "bf16"}, {"v", "bf16"}}},
  };
  for (Precision p : kAll) {
    SCOPED_TRACE(precision_name(p));
    const std::vector<StateComponent> components = Optimizer::components(p);
    const auto& want = documented.at(p);
    ASSERT_EQ(components.size(), want.size());
    for (size_t i = 0; i < want.size(); i++) {
      EXPECT_EQ(components[i].name, want[i].first);
      EXPECT_EQ(components[i].dtype, want[i].second);
      EXPECT_EQ(components[i].element_bytes, want[i].second == "f32" ? 4u : 2u);
    }
  }
}

// docs/PRECISION.md §6: weights + grads + optimizer state, bytes/parameter, from the real
// allocation, and the plan (no allocation) is that allocation to the byte.
TEST(Optimizer, AllocatesTheBytesPerParameterOfTheCollageTable) {
  const std::map<Precision, int> table = {
      {Precision::bf16, 8},   {Precision::collage_light, 10}, {Precision::collage_plus, 12},
      {Precision::kahan, 10}, {Precision::stochastic, 8},     {Precision::fp32_master, 16}};
  const int64_t n = 1001;  // not a multiple of the arena alignment
  for (Precision p : kAll) {
    SCOPED_TRACE(precision_name(p));
    RecordingBackend backend;
    Weights w(n);
    OptimizerConfig config;
    config.precision = p;
    Optimizer optimizer(config, backend, {{0, n, true}}, w.params.data(), w.grads.data(), n);
    size_t component_bytes = 0;
    for (const StateComponent& c : optimizer.state()) {
      EXPECT_EQ(c.bytes, size_t(n) * c.element_bytes) << c.name;
      EXPECT_EQ(reinterpret_cast<uintptr_t>(c.data) % Arena::kAlignment, 0u) << c.name;
      component_bytes += c.bytes;
    }
    EXPECT_EQ((2 * n * sizeof(bf16) + component_bytes) / n, size_t(table.at(p)));
    EXPECT_EQ((2 * n * sizeof(bf16) + component_bytes) % n, 0u);
    // The arena holds the components plus alignment gaps (< 256 bytes before each).
    EXPECT_GE(optimizer.state_bytes(), component_bytes);
    EXPECT_LT(optimizer.state_bytes(), component_bytes + Arena::kAlignment * 4);
    const StatePlan plan = Optimizer::plan_state(p, n);
    EXPECT_EQ(plan.arena_bytes, optimizer.state_bytes());
    ASSERT_EQ(plan.components.size(), optimizer.state().size());
    for (size_t i = 0; i < plan.components.size(); i++)
      EXPECT_EQ(plan.components[i].bytes, optimizer.state()[i].bytes);
  }
}

TEST(Optimizer, StateStartsAtZeroExceptTheMasterWhichIsTheWidenedWeights) {
  const int64_t n = 37;
  for (Precision p : kAll) {
    SCOPED_TRACE(precision_name(p));
    RecordingBackend backend;
    Weights w(n);
    w.params[5] = float_to_bf16(-3.140625f);  // exactly representable: widening is exact
    OptimizerConfig config;
    config.precision = p;
    Optimizer optimizer(config, backend, {{0, n, false}}, w.params.data(), w.grads.data(), n);
    for (const StateComponent& c : optimizer.state()) {
      const auto* bytes = static_cast<const uint8_t*>(c.data);
      if (c.name == "master") {
        const auto* master = static_cast<const float*>(c.data);
        for (int64_t i = 0; i < n; i++)
          EXPECT_EQ(master[i], i == 5 ? -3.140625f : 1.0f + float(i)) << i;
      } else {
        for (size_t i = 0; i < c.bytes; i++) ASSERT_EQ(bytes[i], 0) << c.name << " byte " << i;
      }
    }
    EXPECT_THROW(optimizer.component("nope"), Error);
  }
}

TEST(Optimizer, EachSpanGetsItsStateSlicesRoundingKeysDecayAndSettings) {
  RecordingBackend backend;
  const int64_t n = 10;
  Weights w(n);
  OptimizerConfig config;
  config.precision = Precision::collage_plus;
  config.adam_order = AdamOrder::hf;
  config.collage_plus_reference_quirk = true;
  config.weight_decay = 0.25;
  config.beta1 = 0.8, config.beta2 = 0.999, config.eps = 1e-6;
  Optimizer optimizer(config, backend, {{0, 4, true}, {4, 6, false}}, w.params.data(),
                      w.grads.data(), n, {/*rounding_seed=*/0xfeedu, {}});
  ScalingComm comm(1);
  optimizer.step(7, 0.5, comm);
  ASSERT_EQ(backend.steps.size(), 2u);
  for (size_t k = 0; k < 2; k++) {
    const OptimizerStep& s = backend.steps[k];
    const int64_t offset = k == 0 ? 0 : 4;
    EXPECT_EQ(s.precision, Precision::collage_plus);
    EXPECT_EQ(s.adam_order, AdamOrder::hf);
    EXPECT_TRUE(s.collage_plus_reference_quirk);
    EXPECT_EQ(s.param, w.params.data() + offset);
    EXPECT_EQ(s.grad, w.grads.data() + offset);
    EXPECT_EQ(s.n, k == 0 ? 4 : 6);
    for (int c = 0; c < 4; c++)  // m, v, δθ, δv: bf16, sliced at the span's offset
      EXPECT_EQ(s.state[c], static_cast<char*>(optimizer.state()[c].data) + 2 * offset) << c;
    EXPECT_EQ(s.lr, 0.5);
    EXPECT_EQ(s.beta1, 0.8);
    EXPECT_EQ(s.beta2, 0.999);
    EXPECT_EQ(s.eps, 1e-6);
    EXPECT_EQ(s.weight_decay, k == 0 ? 0.25 : 0.0);
    EXPECT_EQ(s.t, 7);
    EXPECT_EQ(s.rounding_seed, 0xfeedu);
    EXPECT_EQ(s.rounding_offset, offset);  // the element's key is its place in memory
    EXPECT_NE(s.edq, nullptr);
  }
  // fp32-master slices f32 state by 4 bytes per element.
  RecordingBackend fp32_backend;
  config = OptimizerConfig{};
  Optimizer fp32(config, fp32_backend, {{0, 4, true}, {4, 6, false}}, w.params.data(),
                 w.grads.data(), n);
  fp32.step(1, 0.1, comm);
  for (int c = 0; c < 3; c++)
    EXPECT_EQ(fp32_backend.steps[1].state[c], static_cast<char*>(fp32.state()[c].data) + 4 * 4);
  EXPECT_EQ(fp32_backend.steps[1].state[3], nullptr);
}

TEST(Optimizer, EdqSumsAreAddedPerGroupAndReducedInOneCollective) {
  RecordingBackend backend;
  const int64_t n = 12;
  Weights w(n);
  OptimizerConfig config;
  config.precision = Precision::bf16;
  // Three spans in two groups: group 1 = spans 0 and 2.
  Optimizer optimizer(config, backend, {{0, 2, true, 1}, {2, 3, true, 0}, {5, 7, false, 1}},
                      w.params.data(), w.grads.data(), n, {0, {"first", "second"}});
  ScalingComm comm(3);  // three ranks holding the same sums
  const StepEdq edq = optimizer.step(1, 1e-3, comm);
  EXPECT_EQ(comm.calls, 1);
  // Per span the backend adds {n, 2n, n, 1}; every figure is then tripled by the reduction.
  EXPECT_EQ(edq.total.dot, 3.0 * 12);
  EXPECT_EQ(edq.total.u_squared, 3.0 * 24);
  EXPECT_EQ(edq.total.updated, 3 * 12);
  EXPECT_EQ(edq.total.lost, 3 * 3);
  ASSERT_EQ(edq.groups.size(), 2u);
  EXPECT_EQ(edq.groups[0].dot, 3.0 * 3);
  EXPECT_EQ(edq.groups[0].lost, 3 * 1);
  EXPECT_EQ(edq.groups[1].dot, 3.0 * 9);
  EXPECT_EQ(edq.groups[1].u_squared, 3.0 * 18);
  EXPECT_EQ(edq.groups[1].updated, 3 * 9);
  EXPECT_EQ(edq.groups[1].lost, 3 * 2);
  EXPECT_EQ(optimizer.edq_groups(), (std::vector<std::string>{"first", "second"}));

  // A span naming a group that does not exist is refused when groups are given.
  EXPECT_THROW(Optimizer(config, backend, {{0, 2, true, 2}}, w.params.data(), w.grads.data(), n,
                         {0, {"first", "second"}}),
               Error);
  EXPECT_THROW(Optimizer(config, backend, {{8, 5, true}}, w.params.data(), w.grads.data(), n),
               Error);
}

TEST(Optimizer, EdqOffPassesNoSumsAndCallsNoCollective) {
  RecordingBackend backend;
  Weights w(4);
  OptimizerConfig config;
  config.edq = false;
  Optimizer optimizer(config, backend, {{0, 4, true}}, w.params.data(), w.grads.data(), 4);
  ScalingComm comm(2);
  const StepEdq edq = optimizer.step(1, 1e-3, comm);
  EXPECT_EQ(comm.calls, 0);
  EXPECT_EQ(backend.steps.at(0).edq, nullptr);
  EXPECT_EQ(edq.total.u_squared, 0.0);
  EXPECT_TRUE(edq.groups.empty());
}

TEST(Optimizer, RoundingSeedDependsOnTheTrainingSeedAndCanBeRestored) {
  EXPECT_EQ(stochastic_rounding_seed(1234), stochastic_rounding_seed(1234));
  EXPECT_NE(stochastic_rounding_seed(1234), stochastic_rounding_seed(1235));
  EXPECT_NE(stochastic_rounding_seed(1234), 1234u);  // salted: not the init seed itself
  RecordingBackend backend;
  Weights w(4);
  Optimizer optimizer(OptimizerConfig{}, backend, {{0, 4, true}}, w.params.data(), w.grads.data(),
                      4, {99, {}});
  optimizer.set_rounding_seed(7);
  ScalingComm comm(1);
  optimizer.step(1, 1e-3, comm);
  EXPECT_EQ(backend.steps.at(0).rounding_seed, 7u);
}

// Two spans, one with weight decay, on the real cpu backend: after one step with a zero
// gradient, only the decayed span moves, by exactly lr·wd·θ (Adam's update is 0 for g = 0).
TEST(Optimizer, Fp32MasterStepsEverySpanWithItsOwnDecayOnTheCpuBackend) {
  auto backend = make_cpu_backend(1);
  const int64_t n = 10;
  bf16* params = static_cast<bf16*>(backend->allocate(n * sizeof(bf16)));
  bf16* grads = static_cast<bf16*>(backend->allocate(n * sizeof(bf16)));
  std::vector<bf16> host(n);
  for (int64_t i = 0; i < n; i++) host[i] = float_to_bf16(1.0f + i);
  backend->copy_to_device(params, host.data(), n * sizeof(bf16));

  OptimizerConfig config;
  config.weight_decay = 0.5;
  Optimizer optimizer(config, *backend, {{0, 4, true}, {4, 6, false}}, params, grads, n);
  ScalingComm comm(1);
  optimizer.step(1, 0.1, comm);
  std::vector<float> master(n);
  backend->copy_to_host(master.data(), optimizer.component("master").data, n * sizeof(float));
  for (int64_t i = 0; i < n; i++) {
    const double want = i < 4 ? (1.0 + i) * (1 - 0.1 * 0.5) : 1.0 + i;
    EXPECT_NEAR(master[i], want, 1e-6 * want) << i;
  }
  backend->release(params);
  backend->release(grads);
}

}  // namespace
}  // namespace collage
