#include "optim/optimizer.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"

namespace collage {

std::vector<StateComponent> Optimizer::components(Precision precision) {
  const StateComponent f32_master{"master", "f32", 4}, f32_m{"m", "f32", 4}, f32_v{"v", "f32", 4};
  const StateComponent m{"m", "bf16", 2}, v{"v", "bf16", 2};
  const StateComponent dtheta{"dtheta", "bf16", 2}, dv{"dv", "bf16", 2};
  const StateComponent compensation{"compensation", "bf16", 2};
  switch (precision) {
    case Precision::fp32_master:  // the (16, 32) mixed-precision baseline
      return {f32_master, f32_m, f32_v};
    case Precision::bf16:
    case Precision::stochastic:  // θ stochastically rounded: no extra state
      return {m, v};
    case Precision::collage_light:
      return {m, v, dtheta};
    case Precision::collage_plus:
      return {m, v, dtheta, dv};
    case Precision::kahan:
      return {m, v, compensation};
  }
  fail("optimizer.precision: unknown strategy {}", int(precision));
}

StatePlan Optimizer::plan_state(Precision precision, int64_t num_parameters) {
  StatePlan plan;
  plan.components = components(precision);
  Arena counting;  // the same takes as the constructor's, so the sizes agree to the byte
  for (StateComponent& c : plan.components) {
    c.bytes = size_t(num_parameters) * c.element_bytes;
    counting.take<char>(int64_t(c.bytes));
  }
  plan.arena_bytes = counting.used();
  return plan;
}

Optimizer::Optimizer(const OptimizerConfig& config, Backend& backend, std::vector<ParamSpan> spans,
                     bf16* params, bf16* grads, int64_t num_parameters, OptimizerOptions options)
    : config_(config),
      backend_(backend),
      spans_(std::move(spans)),
      params_(params),
      grads_(grads),
      num_parameters_(num_parameters),
      options_(std::move(options)) {
  shard_begin_ = options_.shard_begin;
  shard_end_ = options_.shard_end < 0 ? num_parameters : options_.shard_end;
  COLLAGE_CHECK(shard_begin_ >= 0 && shard_begin_ <= shard_end_,
                "optimizer: shard [{}, {}) is not a range of elements", shard_begin_, shard_end_);
  for (const ParamSpan& span : spans_) {
    COLLAGE_CHECK(span.offset >= 0 && span.numel >= 0 && span.offset + span.numel <= num_parameters,
                  "optimizer: parameter span [{}, {}) outside the {} parameters", span.offset,
                  span.offset + span.numel, num_parameters);
    COLLAGE_CHECK(options_.edq_groups.empty() ||
                      (span.edq_group >= 0 && span.edq_group < int(options_.edq_groups.size())),
                  "optimizer: EDQ group {} of span at {} not among the {} groups", span.edq_group,
                  span.offset, options_.edq_groups.size());
  }
  // ZeRO-1: only the parts of the spans inside the shard are this rank's to update. A span
  // cut in two keeps its offsets, so the stochastic-rounding bits of an element do not
  // depend on the sharding.
  std::vector<ParamSpan> in_shard;
  for (ParamSpan span : spans_) {
    const int64_t begin = std::max(span.offset, shard_begin_);
    const int64_t end = std::min(span.offset + span.numel, shard_end_);
    if (begin >= end) continue;
    span.offset = begin;
    span.numel = end - begin;
    in_shard.push_back(span);
  }
  spans_ = std::move(in_shard);
  StatePlan plan = plan_state(config.precision, shard_elements());
  state_arena_ = std::make_unique<Arena>(backend_, plan.arena_bytes, "optimizer state");
  state_ = std::move(plan.components);
  // backend.allocate() zero-fills: moments and error terms start at 0 (docs/PRECISION.md §4).
  for (StateComponent& c : state_) c.data = state_arena_->take<char>(int64_t(c.bytes));

  if (config.precision == Precision::fp32_master) {
    // The master copy starts as the bf16 weights, widened exactly.
    const int64_t n = shard_elements();
    std::vector<bf16> host(n);
    std::vector<float> widened(n);
    backend_.copy_to_host(host.data(), params_ + shard_begin_, n * sizeof(bf16));
    bf16_to_float_array(host.data(), widened.data(), n);
    backend_.copy_to_device(component("master").data, widened.data(), n * sizeof(float));
  }
}

const StateComponent& Optimizer::component(const std::string& name) const {
  for (const StateComponent& c : state_)
    if (c.name == name) return c;
  fail("optimizer: strategy {} has no state component '{}'", precision_name(config_.precision),
       name);
}

StepEdq Optimizer::step(int64_t t, double lr, Comm& comm, float grad_scale) {
  const size_t groups = options_.edq_groups.size();
  // One EdqSums per tensor: a backend that queues work fills them by synchronize().
  std::vector<EdqSums> span_edq(spans_.size());
  std::vector<OptimizerStep> steps(spans_.size());
  for (size_t k = 0; k < spans_.size(); k++) {
    const ParamSpan& span = spans_[k];
    OptimizerStep& s = steps[k];
    s.precision = config_.precision;
    s.adam_order = config_.adam_order;
    s.collage_plus_reference_quirk = config_.collage_plus_reference_quirk;
    s.param = params_ + span.offset;
    s.grad = grads_ + span.offset;
    s.n = span.numel;
    for (size_t c = 0; c < state_.size(); c++) {
      s.state[c] = static_cast<char*>(state_[c].data) +
                   (span.offset - shard_begin_) * state_[c].element_bytes;
    }
    s.lr = lr;
    s.beta1 = config_.beta1;
    s.beta2 = config_.beta2;
    s.eps = config_.eps;
    s.weight_decay = span.weight_decay ? config_.weight_decay : 0.0;
    s.t = t;
    s.grad_scale = grad_scale;
    // Element i of the span draws the random bits of parameter (offset + i): independent of
    // how the parameters are cut into spans.
    s.rounding_seed = options_.rounding_seed;
    s.rounding_offset = span.offset;
    s.edq = config_.edq ? &span_edq[k] : nullptr;
  }
  backend_.optimizer_steps(steps);  // one call: the cuda backend steps every tensor in a launch
  backend_.synchronize();
  std::vector<EdqSums> local(groups + 1);  // [0] total, [1 + k] group k
  for (size_t k = 0; k < spans_.size(); k++) {
    if (!spans_[k].count_edq) continue;
    local[0] += span_edq[k];
    if (groups > 0) local[1 + spans_[k].edq_group] += span_edq[k];
  }

  StepEdq result;
  if (!config_.edq) return result;
  // One all-reduce of 4 doubles per sum (counts are exact in a double below 2^53).
  std::vector<double> packed;
  for (const EdqSums& e : local)
    packed.insert(packed.end(), {e.dot, e.u_squared, double(e.updated), double(e.lost)});
  comm.all_reduce_sum(packed.data(), int64_t(packed.size()));
  auto unpack = [&](size_t k) {
    return EdqSums{packed[4 * k], packed[4 * k + 1], std::llround(packed[4 * k + 2]),
                   std::llround(packed[4 * k + 3])};
  };
  result.total = unpack(0);
  for (size_t k = 0; k < groups; k++) result.groups.push_back(unpack(1 + k));
  return result;
}

float clipping_factor(const OptimizerConfig& config, double grad_norm) {
  if (config.grad_clip <= 0 || grad_norm <= config.grad_clip) return 1.0f;
  return float(config.grad_clip / grad_norm);
}

uint64_t stochastic_rounding_seed(uint64_t training_seed) {
  // splitmix64's finaliser of (seed ^ salt): neighbouring seeds give unrelated keys.
  uint64_t z = training_seed ^ 0x636f6c6c61676521ull;  // "collage!"
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace collage
