#include "optim/optimizer.h"

#include <vector>

#include "core/error.h"

namespace collage {

std::vector<StateComponent> Optimizer::components(Precision precision) {
  switch (precision) {
    case Precision::fp32_master:
      // The (16, 32) mixed-precision baseline: fp32 master weights and moments.
      return {{"master", "f32", 4, nullptr}, {"m", "f32", 4, nullptr}, {"v", "f32", 4, nullptr}};
    default:
      fail("optimizer.precision: '{}' is not implemented yet (available: fp32-master)",
           precision_name(precision));
  }
}

Optimizer::Optimizer(const OptimizerConfig& config, Backend& backend, std::vector<ParamSpan> spans,
                     bf16* params, bf16* grads, int64_t num_parameters)
    : config_(config),
      backend_(backend),
      spans_(std::move(spans)),
      params_(params),
      grads_(grads),
      num_parameters_(num_parameters) {
  state_ = components(config.precision);
  Arena sizing;
  for (auto& c : state_) sizing.take<char>(num_parameters_ * c.element_bytes);
  state_arena_ = std::make_unique<Arena>(backend_, sizing.used(), "optimizer state");
  for (auto& c : state_) c.data = state_arena_->take<char>(num_parameters_ * c.element_bytes);

  if (config.precision == Precision::fp32_master) {
    // The master copy starts as the bf16 weights, widened exactly.
    std::vector<bf16> host(num_parameters_);
    std::vector<float> widened(num_parameters_);
    backend_.copy_to_host(host.data(), params_, num_parameters_ * sizeof(bf16));
    bf16_to_float_array(host.data(), widened.data(), num_parameters_);
    backend_.copy_to_device(state_[0].data, widened.data(), num_parameters_ * sizeof(float));
  }
}

void Optimizer::step(int64_t t, double lr) {
  for (const ParamSpan& span : spans_) {
    OptimizerStep s;
    s.precision = config_.precision;
    s.param = params_ + span.offset;
    s.grad = grads_ + span.offset;
    s.n = span.numel;
    for (size_t c = 0; c < state_.size(); c++) {
      s.state[c] = static_cast<char*>(state_[c].data) + span.offset * state_[c].element_bytes;
    }
    s.lr = lr;
    s.beta1 = config_.beta1;
    s.beta2 = config_.beta2;
    s.eps = config_.eps;
    s.weight_decay = span.weight_decay ? config_.weight_decay : 0.0;
    s.t = t;
    backend_.optimizer_step(s);
  }
}

}  // namespace collage
