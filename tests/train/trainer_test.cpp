// The training loop end to end on a tiny GPT and a synthetic Megatron dataset: loss falls,
// a resumed run continues bit for bit, and bad input stops the run with a clear message
// and without damaging checkpoints.
#include "train/trainer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "config/config.h"
#include "core/error.h"
#include "data/indexed_dataset.h"
#include "train/checkpoint.h"

namespace collage {
namespace {

namespace fs = std::filesystem;

// Documents of a repeating, learnable pattern (a noisy counter), so the loss can fall fast.
void write_dataset(const std::string& prefix, int documents, int32_t bad_token = -1) {
  IndexedDatasetWriter writer(prefix, TokenDType::uint16);
  std::mt19937 gen(42);
  for (int d = 0; d < documents; d++) {
    std::vector<int32_t> tokens(40 + gen() % 60);
    int32_t start = gen() % 50;
    for (size_t i = 0; i < tokens.size(); i++) tokens[i] = (start + i) % 50 + (gen() % 8 == 0);
    if (bad_token >= 0 && d == documents / 2) tokens[3] = bad_token;
    writer.add_document(tokens);
  }
  writer.finalize();
}

class TrainerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("collage_trainer_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    write_dataset((dir_ / "tokens").string(), 200);
  }
  void TearDown() override { fs::remove_all(dir_); }

  Config tiny_config(const std::string& run_name, std::vector<std::string> overrides = {}) {
    const std::string yaml = fmt::format(R"(
model: {{n_layer: 2, hidden_size: 32, n_head: 2, vocab_size: 64, max_position_embeddings: 32}}
data: {{datasets: ["{}"], seq_len: 16, split: "90,5,5"}}
training: {{micro_batch_size: 2, global_batch_size: 4, max_steps: 6, eval_interval: 3,
           eval_iters: 2, log_interval: 1}}
optimizer: {{lr: 3.0e-3, min_lr: 3.0e-4, warmup_steps: 2, decay_steps: 6}}
parallel: {{threads: 2}}
logging: {{dir: "{}", progress: "off", level: "warn"}}
checkpoint: {{interval: 3, keep: 5}}
)",
                                         (dir_ / "tokens").string(), (dir_ / run_name).string());
    return parse_config(yaml, "tiny.yaml", overrides);
  }

  std::vector<nlohmann::json> metrics(const std::string& run_name) {
    std::ifstream in(dir_ / run_name / "metrics.jsonl");
    std::vector<nlohmann::json> records;
    for (std::string line; std::getline(in, line);) records.push_back(nlohmann::json::parse(line));
    return records;
  }

  fs::path dir_;
};

TEST_F(TrainerTest, LossFallsAndValidationIsLogged) {
  Config config = tiny_config("run", {"training.max_steps=30", "optimizer.decay_steps=30",
                                      "training.eval_interval=10", "checkpoint.interval=0"});
  TrainResult result = train(config, {});
  auto records = metrics("run");
  ASSERT_EQ(records.size(), 31u);  // step 0 (validation only), then one record per step
  EXPECT_EQ(records[0]["step"], 0);
  EXPECT_NEAR(records[0]["val_loss"].get<double>(), std::log(64.0), 0.5);
  EXPECT_FALSE(records[0].contains("loss"));
  records.erase(records.begin());
  const double first = records.front()["loss"], last = records.back()["loss"];
  EXPECT_NEAR(first, std::log(64.0), 0.5);  // near uniform over the vocab at init
  EXPECT_LT(last, first - 1.0) << "training loss did not fall";
  EXPECT_TRUE(records[9].contains("val_loss"));
  EXPECT_FALSE(records[10].contains("val_loss"));
  EXPECT_LT(result.last_val_loss, first - 1.0);
  for (const char* key : {"step", "loss", "lr", "grad_norm", "tokens_per_s", "ms_per_step"}) {
    EXPECT_TRUE(records[5].contains(key)) << key;
  }
  EXPECT_TRUE(fs::exists(dir_ / "run" / "config.yaml"));
  EXPECT_TRUE(fs::exists(dir_ / "run" / "train.log"));
}

TEST_F(TrainerTest, ResumeContinuesBitForBit) {
  train(tiny_config("straight"), {});
  // The same run stopped at step 3 (its checkpoint), then resumed to step 6.
  train(tiny_config("split", {"training.max_steps=3"}), {});
  train(tiny_config("split"), {"latest"});
  auto a = metrics("straight"), b = metrics("split");
  ASSERT_EQ(a.size(), 7u);  // step 0 validation + 6 steps
  ASSERT_EQ(b.size(), 7u);
  for (size_t i = 0; i < a.size(); i++) {
    SCOPED_TRACE(i);
    EXPECT_EQ(a[i]["step"], b[i]["step"]);
    EXPECT_EQ(a[i].value("loss", -1.0), b[i].value("loss", -1.0));
    EXPECT_EQ(a[i].value("grad_norm", -1.0), b[i].value("grad_norm", -1.0));
    EXPECT_EQ(a[i].contains("val_loss"), b[i].contains("val_loss"));
    if (a[i].contains("val_loss"))
      EXPECT_EQ(a[i]["val_loss"].get<double>(), b[i]["val_loss"].get<double>());
  }
  // Final weights identical too.
  Checkpoint x =
      load_checkpoint(resolve_resume("latest", (dir_ / "straight" / "checkpoints").string()));
  Checkpoint y =
      load_checkpoint(resolve_resume("latest", (dir_ / "split" / "checkpoints").string()));
  ASSERT_EQ(x.tensors.size(), y.tensors.size());
  for (size_t i = 0; i < x.tensors.size(); i++) {
    EXPECT_EQ(x.tensors[i].bytes, y.tensors[i].bytes) << x.tensors[i].name;
  }
}

TEST_F(TrainerTest, NonFiniteLossStopsWithoutDamagingCheckpoints) {
  train(tiny_config("run", {"training.max_steps=3"}), {});
  const std::string good = resolve_resume("latest", (dir_ / "run" / "checkpoints").string());
  // An absurd learning rate overflows the weights on resume; the run must stop naming the
  // step, and `latest` must still be the good checkpoint.
  Config config = tiny_config("run", {"optimizer.lr=1.0e+38", "optimizer.min_lr=1.0e+38"});
  try {
    train(config, {"latest"});
    FAIL() << "expected a non-finite loss error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("step"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("without writing a checkpoint"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(resolve_resume("latest", (dir_ / "run" / "checkpoints").string()), good);
  EXPECT_NO_THROW(load_checkpoint(good));
}

TEST_F(TrainerTest, TokenIdAtOrAboveVocabIsRejectedNamingTheFile) {
  write_dataset((dir_ / "bad").string(), 20, /*bad_token=*/64);
  Config config = tiny_config("run", {"data.datasets=[\"" + (dir_ / "bad").string() + "\"]"});
  try {
    train(config, {});
    FAIL() << "expected an out-of-vocab error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bad.bin"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("64"), std::string::npos) << e.what();
  }
}

TEST_F(TrainerTest, MissingDatasetIsAClearError) {
  Config config = tiny_config("run", {"data.datasets=[\"" + (dir_ / "nope").string() + "\"]"});
  try {
    train(config, {});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("nope"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace collage
