// optimizer_step of the cuda backend (kernels/optimizer.cu) under the host SIMT emulator
// against the cpu backend (src/backend/cpu/optimizer.cpp), through Backend::optimizer_step.
// Both run the per-element math of src/numerics/collage_math.h with the same AdamScalars, so θ
// and every state component must agree bit for bit: every strategy (collage-plus with and
// without the reference quirk), both Adam orders, weight decay on and off, steps t = 1..4 from
// random state (fp32-master's fp32 master and moments random too), n = 1007 (4 blocks and a
// partial one; the cpu runs 15 lanes of 64 and a scalar tail). Every 20th element has m = v = 0
// and a zero gradient, so with weight decay off its update is 0 (the #updated count).
//
// EDQ: the sums are formed in a different order (the kernel: per lane, a warp's butterfly per
// chunk of 2048 elements, then the chunks; the cpu: 64 lane sums per chunk), so Σ Δ·u and Σ u²
// agree to double rounding: ~n·2^-53 ≈ 1e-13 relative for sums of same-signed terms, checked at
// 1e-9. The counts are exact. The cuda backend queues its steps and fills step.edq at
// synchronize().
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "cuda_test_util.h"

namespace collage::test {
namespace {

struct Strategy {
  Precision precision;
  bool quirk;  // collage-plus: the published in-place Mult
};
const Strategy kStrategies[] = {{Precision::fp32_master, false},   {Precision::bf16, false},
                                {Precision::collage_light, false}, {Precision::collage_plus, false},
                                {Precision::collage_plus, true},   {Precision::kahan, false},
                                {Precision::stochastic, false}};

bool zero_element(int64_t i) { return i % 20 == 7; }

// One parameter tensor with its gradient and optimizer state in both backends.
class Tensor {
 public:
  Tensor(BackendPair& pair, Rng& rng, Precision precision, int64_t n)
      : pair_(&pair), precision_(precision), n_(n) {
    std::vector<float> master(n);
    for (auto& w : master) w = float(rng.normal());
    std::vector<bf16> theta(n);
    for (int64_t i = 0; i < n; i++) theta[i] = float_to_bf16(master[i]);
    theta_ = std::make_unique<Mirrored<bf16>>(pair, theta);
    grad_ = std::make_unique<Mirrored<bf16>>(pair, size_t(n));
    std::vector<double> m(n), v(n);
    for (int64_t i = 0; i < n; i++) {
      m[i] = zero_element(i) ? 0.0 : 1e-2 * rng.normal();
      const double root = 1e-2 * rng.normal();
      v[i] = zero_element(i) ? 0.0 : root * root;
    }
    if (precision == Precision::fp32_master) {
      std::vector<float> mf(m.begin(), m.end()), vf(v.begin(), v.end());
      floats_.push_back(std::make_unique<Mirrored<float>>(pair, master));
      floats_.push_back(std::make_unique<Mirrored<float>>(pair, mf));
      floats_.push_back(std::make_unique<Mirrored<float>>(pair, vf));
      return;
    }
    bf16s_.push_back(std::make_unique<Mirrored<bf16>>(pair, from_double<bf16>(m)));
    bf16s_.push_back(std::make_unique<Mirrored<bf16>>(pair, from_double<bf16>(v)));
    // Compensations: a fraction of half an ulp of θ (or of v), of either sign.
    if (state_count(precision) >= 3) {
      std::vector<double> extra(n);
      for (int64_t i = 0; i < n; i++)
        extra[i] = rng.uniform(-1, 1) * std::ldexp(std::fabs(bf16_to_float(theta[i])), -9);
      bf16s_.push_back(std::make_unique<Mirrored<bf16>>(pair, from_double<bf16>(extra)));
    }
    if (state_count(precision) == 4) {
      std::vector<double> dv(n);
      for (int64_t i = 0; i < n; i++) dv[i] = rng.uniform(-1, 1) * std::ldexp(v[i], -9);
      bf16s_.push_back(std::make_unique<Mirrored<bf16>>(pair, from_double<bf16>(dv)));
    }
  }

  // A new gradient ~ N(0, 1e-4), 0 at the zero elements.
  void new_gradient(Rng& rng) {
    std::vector<double> g(n_);
    for (int64_t i = 0; i < n_; i++) g[i] = zero_element(i) ? 0.0 : 1e-2 * rng.normal();
    const auto values = from_double<bf16>(g);
    grad_ = nullptr;  // release first: a Mirrored cannot be reassigned
    grad_ = std::make_unique<Mirrored<bf16>>(*pair_, values);
  }

  // The step's tensor pointers on one side, from element `skip` on (skip = 1 puts every pointer
  // off 16-byte alignment: the kernel's element-by-element path).
  void fill(OptimizerStep& step, bool emulated, int64_t skip = 0) const {
    step.precision = precision_;
    step.n = n_ - skip;
    step.param = (emulated ? theta_->emulated() : theta_->cpu()) + skip;
    step.grad = (emulated ? grad_->emulated() : grad_->cpu()) + skip;
    for (size_t c = 0; c < floats_.size(); c++)
      step.state[c] = (emulated ? floats_[c]->emulated() : floats_[c]->cpu()) + skip;
    for (size_t c = 0; c < bf16s_.size(); c++)
      step.state[c] = (emulated ? bf16s_[c]->emulated() : bf16s_[c]->cpu()) + skip;
    step.rounding_offset = 1000 * skip;
  }

  void expect_same(const std::string& what) const {
    expect_same_bits(theta_->from_emulated(), theta_->from_cpu(), what + " θ");
    for (size_t c = 0; c < floats_.size(); c++)
      expect_same_bits(floats_[c]->from_emulated(), floats_[c]->from_cpu(),
                       what + " state[" + std::to_string(c) + "]");
    for (size_t c = 0; c < bf16s_.size(); c++)
      expect_same_bits(bf16s_[c]->from_emulated(), bf16s_[c]->from_cpu(),
                       what + " state[" + std::to_string(c) + "]");
  }

  std::vector<bf16> theta_cpu() const { return theta_->from_cpu(); }

 private:
  BackendPair* pair_;
  Precision precision_;
  int64_t n_;
  std::unique_ptr<Mirrored<bf16>> theta_, grad_;
  std::vector<std::unique_ptr<Mirrored<float>>> floats_;
  std::vector<std::unique_ptr<Mirrored<bf16>>> bf16s_;
};

struct Hyper {
  AdamOrder order;
  double beta1, beta2, eps;
};
const Hyper kOrders[] = {{AdamOrder::torch, 0.9, 0.95, 1e-8}, {AdamOrder::hf, 0.9, 0.999, 1e-6}};

// The largest relative EDQ difference seen, over the whole file (reported at the end).
double worst_edq_relative = 0;

void expect_edq_close(const EdqSums& got, const EdqSums& want, const std::string& what) {
  EXPECT_EQ(got.updated, want.updated) << what << " #updated";
  EXPECT_EQ(got.lost, want.lost) << what << " #lost";
  auto check = [&](double g, double w, const char* name) {
    const double diff = std::fabs(g - w);
    EXPECT_LE(diff, 1e-9 * std::fabs(w))
        << what << " " << name << ": " << cuda_name() << " " << g << ", cpu " << w;
    if (w != 0) worst_edq_relative = std::max(worst_edq_relative, diff / std::fabs(w));
  };
  check(got.dot, want.dot, "Σ Δ·u");
  check(got.u_squared, want.u_squared, "Σ u²");
}

// Steps one tensor on both backends with the same hyperparameters and compares everything.
void step_both(BackendPair& pair, Tensor& tensor, const Strategy& strategy, const Hyper& hyper,
               double weight_decay, int64_t t, const std::string& what) {
  OptimizerStep step;
  step.adam_order = hyper.order;
  step.collage_plus_reference_quirk = strategy.quirk;
  step.lr = 1e-3, step.beta1 = hyper.beta1, step.beta2 = hyper.beta2, step.eps = hyper.eps;
  step.weight_decay = weight_decay;
  step.t = t;
  step.rounding_seed = 0x5eed, step.rounding_offset = 12345;
  step.grad_scale = t % 2 ? 1.0f : 0.37f;  // clipping's factor on every other step
  EdqSums cpu_edq, emulated_edq;
  tensor.fill(step, false);
  step.edq = &cpu_edq;
  pair.cpu->optimizer_step(step);
  tensor.fill(step, true);
  step.edq = &emulated_edq;
  pair.emulated->optimizer_step(step);
  pair.emulated->synchronize();  // the queued step's EDQ sums arrive here
  tensor.expect_same(what);
  expect_edq_close(emulated_edq, cpu_edq, what);
  EXPECT_GT(cpu_edq.updated, 0) << what;
  if (weight_decay == 0) EXPECT_LT(cpu_edq.updated, step.n) << what << ": the zero elements";
}

TEST(CudaOptimizer, EveryStrategyBitIdenticalToCpu) {
  BackendPair pair;
  Rng rng(51);
  constexpr int64_t n = 1000 + 7;
  int64_t lost = 0;
  for (const Strategy& strategy : kStrategies) {
    for (const Hyper& hyper : kOrders) {
      for (double weight_decay : {0.0, 0.1}) {
        const std::string what = std::string(precision_name(strategy.precision)) +
                                 (strategy.quirk ? " (quirk)" : "") +
                                 (hyper.order == AdamOrder::hf ? " hf" : " torch") +
                                 " wd=" + std::to_string(weight_decay);
        Tensor tensor(pair, rng, strategy.precision, n);
        for (int64_t t = 1; t <= 4; t++) {
          tensor.new_gradient(rng);
          const auto before = tensor.theta_cpu();
          step_both(pair, tensor, strategy, hyper, weight_decay, t,
                    what + " t=" + std::to_string(t));
          if (same_bits(tensor.theta_cpu(), before)) lost++;
        }
      }
    }
  }
  EXPECT_EQ(lost, 0) << "steps that changed no weight at all";
  std::printf("optimizer: worst relative EDQ difference %.3g (checked at 1e-9)\n",
              worst_edq_relative);
}

// Several tensors stepped before one synchronize, each into its own EdqSums (as the trainer
// does), a tensor of many blocks (n = 70001: 35 blocks of 8-element groups, the last of which
// to finish adds the blocks' EDQ sums; the cpu: 5 chunks), and an empty tensor that adds
// nothing.
TEST(CudaOptimizer, QueuedStepsFillTheirOwnEdqSums) {
  BackendPair pair;
  Rng rng(52);
  const int64_t sizes[] = {70001, 33, 0, 1007};
  std::vector<std::unique_ptr<Tensor>> tensors;
  for (int64_t n : sizes) {
    tensors.push_back(std::make_unique<Tensor>(pair, rng, Precision::collage_plus, n));
    tensors.back()->new_gradient(rng);
  }
  std::vector<EdqSums> cpu_edq(tensors.size()), emulated_edq(tensors.size());
  for (size_t k = 0; k < tensors.size(); k++) {
    OptimizerStep step;
    step.lr = 1e-3, step.weight_decay = 0.1, step.t = 3;
    tensors[k]->fill(step, false);
    step.edq = &cpu_edq[k];
    pair.cpu->optimizer_step(step);
    tensors[k]->fill(step, true);
    step.edq = &emulated_edq[k];
    pair.emulated->optimizer_step(step);
  }
  pair.emulated->synchronize();
  for (size_t k = 0; k < tensors.size(); k++) {
    const std::string what =
        "tensor " + std::to_string(k) + " (n=" + std::to_string(sizes[k]) + ")";
    tensors[k]->expect_same(what);
    expect_edq_close(emulated_edq[k], cpu_edq[k], what);
    if (sizes[k] > 0) EXPECT_GT(cpu_edq[k].updated, 0) << what;
  }
  EXPECT_EQ(emulated_edq[2].dot, 0.0);  // n = 0
  EXPECT_EQ(emulated_edq[2].updated, 0);
}

// One optimizer_steps call over tensors of every shape the kernel splits differently, as the
// trainer makes it: many chunks (n = 70001), a tail past the last 8-element group (1007), fewer
// elements than a group (5), an unaligned tensor (its first element skipped), an empty one,
// weight decay on some and off others. Bits and EDQ sums as the cpu's one step per tensor, in
// 2 launches (the step, the EDQ totals) however many tensors; a list whose second half has
// another learning rate takes 2 launches per half.
TEST(CudaOptimizer, OneLaunchStepsAListOfTensors) {
  BackendPair pair;
  Rng rng(53);
  const int64_t sizes[] = {70001, 1007, 5, 2049, 0, 4096};
  const int64_t skips[] = {0, 0, 0, 1, 0, 0};
  constexpr size_t kTensors = std::size(sizes);
  for (const Strategy& strategy : kStrategies) {
    for (bool two_rates : {false, true}) {
      const std::string what = std::string(precision_name(strategy.precision)) +
                               (strategy.quirk ? " (quirk)" : "") +
                               (two_rates ? ", two learning rates" : "");
      std::vector<std::unique_ptr<Tensor>> tensors;
      std::vector<OptimizerStep> cpu_steps(kTensors), emulated_steps(kTensors);
      std::vector<EdqSums> cpu_edq(kTensors), emulated_edq(kTensors);
      for (size_t k = 0; k < kTensors; k++) {
        tensors.push_back(std::make_unique<Tensor>(pair, rng, strategy.precision, sizes[k]));
        tensors.back()->new_gradient(rng);
        for (bool emulated : {false, true}) {
          OptimizerStep& step = emulated ? emulated_steps[k] : cpu_steps[k];
          step.collage_plus_reference_quirk = strategy.quirk;
          step.lr = two_rates && k >= kTensors / 2 ? 2e-3 : 1e-3;
          step.weight_decay = k % 2 ? 0.0 : 0.1;
          step.t = 3;
          step.rounding_seed = 0x5eed;
          tensors[k]->fill(step, emulated, skips[k]);
          step.edq = emulated ? &emulated_edq[k] : &cpu_edq[k];
        }
      }
      pair.cpu->optimizer_steps(cpu_steps);
      const int64_t launches = pair.emulated->counters().launches;
      pair.emulated->optimizer_steps(emulated_steps);
      EXPECT_EQ(pair.emulated->counters().launches - launches, two_rates ? 4 : 2) << what;
      pair.emulated->synchronize();
      for (size_t k = 0; k < kTensors; k++) {
        const std::string tensor = what + ", tensor " + std::to_string(k) +
                                   " (n=" + std::to_string(sizes[k] - skips[k]) + ")";
        tensors[k]->expect_same(tensor);
        expect_edq_close(emulated_edq[k], cpu_edq[k], tensor);
        if (sizes[k] > 0) EXPECT_GT(cpu_edq[k].updated, 0) << tensor;
      }
      EXPECT_EQ(emulated_edq[4].updated, 0);  // n = 0 adds nothing
    }
  }
}

TEST(CudaOptimizer, MissingStateIsAnError) {
  BackendPair pair;
  Mirrored<bf16> param(pair, size_t(4)), grad(pair, size_t(4)), m(pair, size_t(4));
  OptimizerStep step;
  step.precision = Precision::bf16;
  step.param = param.emulated();
  step.grad = grad.emulated();
  step.n = 4;
  step.state[0] = m.emulated();  // v missing
  EXPECT_THROW(pair.emulated->optimizer_step(step), Error);
}

}  // namespace
}  // namespace collage::test
