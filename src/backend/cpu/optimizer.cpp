// One optimizer step over one tensor. Only the fp32-master baseline exists so far: AdamW on
// an fp32 master copy with fp32 moments, the model's weights being the master rounded to
// the storage type. The other precision strategies come with their own issue.
#include <cmath>

#include "backend/cpu/kernels.h"
#include "backend/cpu/storage.h"
#include "core/error.h"

namespace collage::cpu {
namespace {

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

// state = {master f32, m f32, v f32}:
//   m = β1 m + (1-β1) g;  v = β2 v + (1-β2) g²;  m̂ = m / (1-β1^t);  v̂ = v / (1-β2^t)
//   master -= lr · (m̂ / (√v̂ + eps) + wd · master);  param = rn(master)
// in fp32 arithmetic (the bias corrections in double, once per call).
template <typename S>
void adamw_fp32_master(CpuContext& cx, const OptimizerStep& step) {
  COLLAGE_CHECK(step.param && step.grad && step.state[0] && step.state[1] && step.state[2],
                "optimizer step (fp32-master): param, grad and the 3 state tensors must be set");
  COLLAGE_CHECK(step.t >= 1, "optimizer step: step counter t = {} must start at 1", step.t);
  S* param = static_cast<S*>(step.param);
  const S* grad = static_cast<const S*>(step.grad);
  float* master = static_cast<float*>(step.state[0]);
  float* m = static_cast<float*>(step.state[1]);
  float* v = static_cast<float*>(step.state[2]);
  const float lr = float(step.lr), beta1 = float(step.beta1), beta2 = float(step.beta2);
  const float eps = float(step.eps), weight_decay = float(step.weight_decay);
  const float correction1 = float(1.0 - std::pow(step.beta1, double(step.t)));
  const float correction2 = float(1.0 - std::pow(step.beta2, double(step.t)));
  const int64_t n = step.n;
#pragma omp parallel for simd schedule(static) num_threads(cx.threads) if (n > (1 << 15))
  for (int64_t i = 0; i < n; i++) {
    const float g = load(grad[i]);
    const float m_i = beta1 * m[i] + (1.0f - beta1) * g;
    const float v_i = beta2 * v[i] + (1.0f - beta2) * g * g;
    const float m_hat = m_i / correction1, v_hat = v_i / correction2;
    const float w = master[i] - lr * (m_hat / (std::sqrt(v_hat) + eps) + weight_decay * master[i]);
    m[i] = m_i;
    v[i] = v_i;
    master[i] = w;
    store(param[i], w);
  }
}

}  // namespace

template <typename S>
void optimizer_step(CpuContext& cx, const OptimizerStep& step) {
  if (step.precision != Precision::fp32_master) {
    fail("optimizer: precision {} is not implemented yet", strategy_name(step.precision));
  }
  adamw_fp32_master<S>(cx, step);
}

template void optimizer_step<bf16>(CpuContext&, const OptimizerStep&);
template void optimizer_step<float>(CpuContext&, const OptimizerStep&);

}  // namespace collage::cpu
