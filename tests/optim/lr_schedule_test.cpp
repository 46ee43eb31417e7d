// Learning-rate schedules against their closed forms (Megatron's OptimizerParamScheduler):
// linear warmup from 0 to lr over warmup_steps, then cosine/linear/constant to min_lr at
// decay_steps, then min_lr.
#include "optim/lr_schedule.h"

#include <gtest/gtest.h>

#include <cmath>

namespace collage {
namespace {

OptimizerConfig schedule(const std::string& kind) {
  OptimizerConfig c;
  c.lr = 6e-4;
  c.min_lr = 6e-5;
  c.warmup_steps = 200;
  c.decay_steps = 20000;
  c.schedule = kind;
  return c;
}

TEST(LrSchedule, WarmupIsLinearFromZero) {
  OptimizerConfig c = schedule("cosine");
  EXPECT_DOUBLE_EQ(learning_rate(c, 1), 6e-4 / 200);
  EXPECT_DOUBLE_EQ(learning_rate(c, 100), 3e-4);
  EXPECT_DOUBLE_EQ(learning_rate(c, 200), 6e-4);
}

TEST(LrSchedule, CosineReachesMinLrAtDecaySteps) {
  OptimizerConfig c = schedule("cosine");
  const double mid = (200 + 20000) / 2.0;  // halfway through the decay: the mean of lr, min_lr
  EXPECT_NEAR(learning_rate(c, int64_t(mid)), (6e-4 + 6e-5) / 2, 1e-12);
  const int64_t t = 5000;
  const double p = (t - 200) / double(20000 - 200);
  EXPECT_NEAR(learning_rate(c, t), 6e-5 + (6e-4 - 6e-5) * 0.5 * (1 + std::cos(M_PI * p)), 1e-15);
  EXPECT_DOUBLE_EQ(learning_rate(c, 20000), 6e-5);
  EXPECT_DOUBLE_EQ(learning_rate(c, 50000), 6e-5);
  for (int64_t s = 201; s < 20000; s += 97) {
    EXPECT_LE(learning_rate(c, s + 1), learning_rate(c, s)) << s;  // monotone decay
  }
}

TEST(LrSchedule, LinearAndConstant) {
  OptimizerConfig linear = schedule("linear");
  EXPECT_NEAR(learning_rate(linear, 10100), 6e-4 - (6e-4 - 6e-5) * 0.5, 1e-15);
  EXPECT_DOUBLE_EQ(learning_rate(linear, 20000), 6e-5);
  OptimizerConfig constant = schedule("constant");
  EXPECT_DOUBLE_EQ(learning_rate(constant, 50), 1.5e-4);  // warmup still applies
  EXPECT_DOUBLE_EQ(learning_rate(constant, 300), 6e-4);
  EXPECT_DOUBLE_EQ(learning_rate(constant, 30000), 6e-4);
}

TEST(LrSchedule, NoWarmup) {
  OptimizerConfig c = schedule("cosine");
  c.warmup_steps = 0;
  EXPECT_NEAR(learning_rate(c, 1), 6e-4, 1e-9);
}

}  // namespace
}  // namespace collage
