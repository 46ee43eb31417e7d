// The Optimizer layer: which state a strategy keeps, how the master copy starts, and that
// a step goes through every parameter span with its own weight-decay flag.
#include "optim/optimizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/error.h"

namespace collage {
namespace {

TEST(Optimizer, Fp32MasterKeepsMasterAndMomentsInFp32) {
  auto components = Optimizer::components(Precision::fp32_master);
  ASSERT_EQ(components.size(), 3u);
  size_t bytes = 0;
  for (auto& c : components) bytes += c.element_bytes;
  EXPECT_EQ(bytes, 12u);  // + bf16 θ and g = 16 bytes/parameter (COLLAGE.md table)
}

TEST(Optimizer, UnimplementedPrecisionIsAClearError) {
  try {
    Optimizer::components(Precision::collage_plus);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("collage-plus"), std::string::npos) << e.what();
  }
}

// Two spans, one with weight decay: after one step with a zero gradient, only the decayed
// span moves, by exactly lr·wd·θ (Adam's update is 0 for g = 0).
TEST(Optimizer, StepsEverySpanWithItsOwnDecay) {
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
  EXPECT_EQ(optimizer.state_bytes() >= size_t(12 * n), true);
  std::vector<float> master(n);
  backend->copy_to_host(master.data(), optimizer.state()[0].data, n * sizeof(float));
  for (int64_t i = 0; i < n; i++) EXPECT_EQ(master[i], 1.0f + i);

  optimizer.step(1, 0.1);
  backend->copy_to_host(master.data(), optimizer.state()[0].data, n * sizeof(float));
  for (int64_t i = 0; i < n; i++) {
    const double want = i < 4 ? (1.0 + i) * (1 - 0.1 * 0.5) : 1.0 + i;
    EXPECT_NEAR(master[i], want, 1e-6 * want) << i;
  }
  backend->release(params);
  backend->release(grads);
}

}  // namespace
}  // namespace collage
