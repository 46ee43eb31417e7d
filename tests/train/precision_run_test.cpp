// The precision strategies through the training loop: EDQ in the step line and in
// metrics.jsonl (globally, per layer group, cumulatively), the start-of-run memory log, and
// resuming under another strategy (refused, or converted with --convert-precision).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>

#include "checkpoint/checkpoint.h"
#include "core/error.h"
#include "optim/optimizer.h"
#include "optim/precision_conversion.h"
#include "tiny_run.h"
#include "train/trainer.h"

namespace collage {
namespace {

std::string read_file(const fs::path& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST_F(TrainerTest, EdqIsLoggedEveryStepWithItsCumulativeRatio) {
  train(tiny_config("run", {"optimizer.precision=collage-plus", "logging.level=info",
                            "logging.edq_groups=true"}),
        {});
  auto records = metrics("run");
  ASSERT_EQ(records.size(), 7u);
  for (size_t i = 1; i < records.size(); i++) {
    SCOPED_TRACE(i);
    const nlohmann::json& r = records[i];
    for (const char* key : {"edq", "edq_ratio", "lost_frac", "edq_ratio_cumulative"})
      ASSERT_TRUE(r.contains(key)) << key;
    EXPECT_GT(r["edq"].get<double>(), 0);
    // Collage keeps what rounding drops in δθ: the stored weights follow u closely.
    EXPECT_NEAR(r["edq_ratio"].get<double>(), 1.0, 0.1);
    EXPECT_GE(r["lost_frac"].get<double>(), 0.0);
    EXPECT_LE(r["lost_frac"].get<double>(), 1.0);
    // Groups: the embeddings (the head is tied to them), each layer, the final layernorm.
    std::vector<std::string> groups;
    for (const auto& [name, ratio] : r["edq_groups"].items()) groups.push_back(name);
    EXPECT_EQ(groups, (std::vector<std::string>{"embeddings", "h.0", "h.1", "head"}));
  }
  // After one step the cumulative ratio is that step's ratio.
  EXPECT_EQ(records[1]["edq_ratio_cumulative"].get<double>(),
            records[1]["edq_ratio"].get<double>());
  const std::string log = read_file(dir_ / "run" / "train.log");
  EXPECT_NE(log.find("| edq_ratio "), std::string::npos) << log;
  EXPECT_NE(log.find("% |"), std::string::npos) << log;
}

TEST_F(TrainerTest, EdqOffLeavesItOutOfMetricsAndLog) {
  train(tiny_config("run", {"optimizer.edq=false", "logging.level=info"}), {});
  for (const nlohmann::json& r : metrics("run")) {
    EXPECT_FALSE(r.contains("edq"));
    EXPECT_FALSE(r.contains("edq_ratio_cumulative"));
    EXPECT_FALSE(r.contains("edq_groups"));
  }
  const std::string log = read_file(dir_ / "run" / "train.log");
  EXPECT_NE(log.find("| grad norm "), std::string::npos) << log;  // step lines were written
  EXPECT_EQ(log.find("| edq"), std::string::npos) << log;
}

// At a learning rate below half an ulp of most weights, plain bf16 drops most updates, for
// good; Collage keeps them in δθ and releases them into θ as they add up (so its cumulative
// ratio climbs towards 1 over the steps); stochastic rounding keeps them in expectation; the
// fp32 master takes them whole. The plumbing from the backend's sums to the logged figures
// shows each of these.
TEST_F(TrainerTest, EdqSeparatesLostUpdatesFromKeptOnes) {
  std::map<std::string, std::vector<nlohmann::json>> runs;
  for (const char* precision : {"bf16", "collage-light", "stochastic", "fp32-master"}) {
    const std::string run = std::string("run-") + precision;
    train(tiny_config(run, {std::string("optimizer.precision=") + precision, "optimizer.lr=1e-5",
                            "optimizer.min_lr=1e-5", "optimizer.schedule=constant",
                            "optimizer.warmup_steps=0", "optimizer.weight_decay=0",
                            "training.max_steps=12", "training.eval_interval=0"}),
          {});
    runs[precision] = metrics(run);
  }
  auto cumulative = [&](const char* precision, int step) {
    for (const nlohmann::json& r : runs.at(precision)) {
      if (r["step"] == step) return r["edq_ratio_cumulative"].get<double>();
    }
    ADD_FAILURE() << precision << " has no record of step " << step;
    return 0.0;
  };
  EXPECT_LT(cumulative("bf16", 12), 0.5);
  EXPECT_GT(runs["bf16"].back()["lost_frac"].get<double>(), 0.5);
  EXPECT_GT(cumulative("collage-light", 12), 0.8);
  EXPECT_GT(cumulative("collage-light", 12), cumulative("collage-light", 1) + 0.3);
  EXPECT_NEAR(cumulative("stochastic", 12), 1.0, 0.1);
  EXPECT_NEAR(cumulative("fp32-master", 12), 1.0, 1e-3);
  // (fp32 loses only updates below half an ulp of a 24-bit master: a few tiny ones)
  EXPECT_LT(runs["fp32-master"].back()["lost_frac"].get<double>(), 1e-3);
}

TEST_F(TrainerTest, StartOfRunMemoryLogComesFromTheAllocations) {
  train(tiny_config("run", {"optimizer.precision=collage-plus", "logging.level=info",
                            "training.max_steps=1", "training.eval_interval=0"}),
        {});
  const std::string log = read_file(dir_ / "run" / "train.log");
  for (const char* line : {"memory of rank 0 of 1: ", "  parameters (bf16)", "  gradients (bf16)",
                           "    m (bf16)", "    v (bf16)", "    δθ (bf16)", "    δv (bf16)",
                           "  activations (2 x 16 tokens)", "  total"})
    EXPECT_NE(log.find(line), std::string::npos) << "missing '" << line << "' in\n" << log;
  // θ + g + m + v + δθ + δv: 12 bytes per parameter (docs/PRECISION.md §6).
  const size_t at = log.find("  θ + g + state");
  ASSERT_NE(at, std::string::npos);
  const std::string row = log.substr(at, log.find('\n', at) - at);
  EXPECT_NE(row.find("12.00 B/parameter"), std::string::npos) << row;
}

TEST_F(TrainerTest, ResumingUnderAnotherStrategyNeedsConvertPrecision) {
  train(tiny_config("run", {"training.max_steps=3"}), {});  // fp32-master
  Config plus = tiny_config("run", {"optimizer.precision=collage-plus"});
  try {
    train(plus, {"latest"});
    FAIL() << "expected the strategy switch to be refused";
  } catch (const Error& e) {
    const std::string message = e.what();
    for (const char* part : {"'fp32-master'", "'collage-plus'", "--convert-precision",
                             "--set optimizer.precision=fp32-master"})
      EXPECT_NE(message.find(part), std::string::npos) << part << " in: " << message;
  }
  // Refused before anything was written: `latest` is still the fp32-master step 3.
  const std::string step3 = resolve_resume("latest", (dir_ / "run" / "checkpoints").string());
  EXPECT_EQ(load_checkpoint(step3).meta["precision"], "fp32-master");

  // Converted, the run continues; its checkpoints are collage-plus ones.
  TrainOptions convert;
  convert.resume = "latest";
  convert.convert_precision = true;
  TrainResult result = train(plus, convert);
  EXPECT_EQ(result.last_step, 6);
  Checkpoint end = load_checkpoint(result.last_checkpoint);
  EXPECT_EQ(end.meta["precision"], "collage-plus");
  EXPECT_NO_THROW(end.tensor("optimizer.dv"));
  EXPECT_THROW(end.tensor("optimizer.master"), Error);
  auto records = metrics("run");
  ASSERT_EQ(records.size(), 7u);  // steps 0-3 of the first run, 4-6 of the converted one
  EXPECT_TRUE(std::isfinite(records.back()["loss"].get<double>()));
}

// --convert-precision loads what convert_training_state() makes of the checkpoint: one step
// after a converted resume equals one step after resuming a checkpoint converted by hand.
TEST_F(TrainerTest, ConvertedResumeEqualsResumingFromAHandConvertedCheckpoint) {
  train(tiny_config("a", {"training.max_steps=3"}), {});  // fp32-master
  fs::create_directories(dir_ / "b" / "checkpoints");
  Checkpoint fp32 =
      load_checkpoint(resolve_resume("latest", (dir_ / "a" / "checkpoints").string()));

  // Hand conversion of the checkpoint file to collage-light.
  HostTrainingState state;
  state.precision = Precision::fp32_master;
  for (const CheckpointTensor& t : fp32.tensors) {
    if (t.name.rfind("optimizer.", 0) == 0) {
      state.state[t.name.substr(10)] = t.bytes;
    } else {
      const size_t before = state.params.size();
      state.params.resize(before + t.bytes.size() / 2);
      std::memcpy(state.params.data() + before, t.bytes.data(), t.bytes.size());
    }
  }
  const HostTrainingState light = convert_training_state(state, Precision::collage_light);
  Checkpoint converted = fp32;
  converted.tensors.clear();
  size_t offset = 0;
  for (const CheckpointTensor& t : fp32.tensors) {
    if (t.name.rfind("optimizer.", 0) == 0) continue;
    CheckpointTensor c = t;
    std::memcpy(c.bytes.data(), light.params.data() + offset, c.bytes.size());
    offset += c.bytes.size() / 2;
    converted.tensors.push_back(c);
  }
  for (const StateComponent& c : Optimizer::components(Precision::collage_light))
    converted.tensors.push_back(
        {"optimizer." + c.name, c.dtype, {int64_t(light.params.size())}, light.state.at(c.name)});
  converted.meta["precision"] = "collage-light";
  save_checkpoint((dir_ / "b" / "checkpoints").string(), converted, 5);

  TrainOptions convert{"latest", true};
  train(tiny_config("a", {"optimizer.precision=collage-light", "training.max_steps=4"}), convert);
  train(tiny_config("b", {"optimizer.precision=collage-light", "training.max_steps=4"}),
        {"latest"});
  Checkpoint x = load_checkpoint(resolve_resume("latest", (dir_ / "a" / "checkpoints").string()));
  Checkpoint y = load_checkpoint(resolve_resume("latest", (dir_ / "b" / "checkpoints").string()));
  EXPECT_EQ(x.step, 4);
  EXPECT_EQ(y.step, 4);
  ASSERT_EQ(x.tensors.size(), y.tensors.size());
  for (size_t i = 0; i < x.tensors.size(); i++)
    EXPECT_EQ(x.tensors[i].bytes, y.tensors[i].bytes) << x.tensors[i].name;
}

}  // namespace
}  // namespace collage
