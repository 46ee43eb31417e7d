// optimizer_step: fp32-master AdamW over a few steps against a float64 AdamW, and the errors
// of a strategy called without its state (the bf16 strategies' math: tests/optim/).
#include "backend/cpu/cpu_backend.h"
#include "backend_test_util.h"

namespace collage::test {
namespace {

struct Hyper {
  double lr = 1e-2, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
};

template <typename S>
class OptimizerTest : public ::testing::Test {};
TYPED_TEST_SUITE(OptimizerTest, StorageTypes, StorageNames);

TYPED_TEST(OptimizerTest, Fp32MasterAdamWMatchesFloat64OverSteps) {
  using S = TypeParam;
  auto backend = Storage<S>::make();
  Rng rng(1);
  const Hyper hp;
  for (int64_t n : {int64_t(1), int64_t(1001), int64_t(40007)}) {
    std::vector<float> master(n);
    for (auto& w : master) w = float(rng.normal());
    std::vector<S> param(n);
    for (int64_t i = 0; i < n; i++) param[i] = Storage<S>::from(master[i]);
    DeviceBuffer<S, BackendT<S>> d_param(*backend, param), d_grad(*backend, size_t(n));
    DeviceBuffer<float, BackendT<S>> d_master(*backend, master), d_m(*backend, size_t(n)),
        d_v(*backend, size_t(n));
    // float64 AdamW from the same start
    std::vector<double> w(master.begin(), master.end()), m(n, 0.0), v(n, 0.0);
    std::vector<double> m_terms(n, 0.0);  // the same average of |g|: m can cancel to ~0
    for (int64_t t = 1; t <= 3; t++) {
      // Gradients of mixed scales, including some tiny ones where eps matters.
      auto grad = random_values<S>(rng, size_t(n), t == 2 ? 1e-6 : 1.0);
      d_grad.upload(grad);
      OptimizerStep step;
      step.precision = Precision::fp32_master;
      step.param = d_param.get();
      step.grad = d_grad.get();
      step.n = n;
      step.state[0] = d_master.get();
      step.state[1] = d_m.get();
      step.state[2] = d_v.get();
      step.lr = hp.lr, step.beta1 = hp.beta1, step.beta2 = hp.beta2, step.eps = hp.eps;
      step.weight_decay = hp.weight_decay;
      step.t = t;
      backend->optimizer_step(step);
      for (int64_t i = 0; i < n; i++) {
        const double g = Storage<S>::to(grad[i]);
        m[i] = hp.beta1 * m[i] + (1 - hp.beta1) * g;
        m_terms[i] = hp.beta1 * m_terms[i] + (1 - hp.beta1) * std::fabs(g);
        v[i] = hp.beta2 * v[i] + (1 - hp.beta2) * g * g;
        const double m_hat = m[i] / (1 - std::pow(hp.beta1, t));
        const double v_hat = v[i] / (1 - std::pow(hp.beta2, t));
        w[i] -= hp.lr * (m_hat / (std::sqrt(v_hat) + hp.eps) + hp.weight_decay * w[i]);
      }
    }
    const auto got_master = d_master.download();
    // fp32 state, a few fp32 roundings per step: the moments to ~1e-6 of their terms; the
    // master (O(1)) to its rounding, ~6e-8 a step, plus ~1e-6 of the O(lr) updates.
    expect_close(to_double(got_master), w, 1e-6, 1e-7, "master");
    const auto got_m = to_double(d_m.download());
    for (int64_t i = 0; i < n; i++) ASSERT_NEAR(got_m[i], m[i], 1e-6 * m_terms[i]) << "m " << i;
    expect_close(to_double(d_v.download()), v, 1e-6, 0.0, "v");  // a sum of positive terms
    // The weights the model reads are the master rounded to storage, exactly.
    const auto got_param = d_param.download();
    for (int64_t i = 0; i < n; i++) {
      ASSERT_TRUE(
          same_bits(std::vector<S>{got_param[i]}, std::vector<S>{Storage<S>::from(got_master[i])}))
          << i;
    }
  }
}

// Every bf16 strategy needs its state components: a missing one is an Error naming the
// strategy (the math itself is tested in tests/optim/).
TEST(Optimizer, MissingStateNamesTheStrategy) {
  auto backend = make_cpu_backend(kThreads);
  DeviceBuffer<bf16, Backend> param(*backend, size_t(4)), grad(*backend, size_t(4));
  for (Precision p : {Precision::bf16, Precision::collage_light, Precision::collage_plus,
                      Precision::kahan, Precision::stochastic}) {
    OptimizerStep step;
    step.precision = p;
    step.param = param.get();
    step.grad = grad.get();
    step.n = 4;
    try {
      backend->optimizer_step(step);
      ADD_FAILURE() << "no error for precision " << int(p);
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("state["), std::string::npos) << e.what();
    }
  }
}

TEST(Optimizer, Fp32MasterWithoutStateIsAnError) {
  auto backend = make_cpu_backend(kThreads);
  DeviceBuffer<bf16, Backend> param(*backend, size_t(4)), grad(*backend, size_t(4));
  OptimizerStep step;
  step.param = param.get();
  step.grad = grad.get();
  step.n = 4;
  EXPECT_THROW(backend->optimizer_step(step), Error);
}

}  // namespace
}  // namespace collage::test
