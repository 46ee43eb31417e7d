// collage eval's library side (tools/evaluate.h): a checkpoint evaluated after training gives
// exactly the validation figures training logged at its step, for the GPT and for BERT, from a
// file, a directory or "latest"; --iters picks the first of training's batches.
#include "tools/evaluate.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "encoder_run.h"
#include "train/trainer.h"

namespace collage {
namespace {

std::string checkpoint_of(const fs::path& run, int step) {
  return (run / "checkpoints" / fmt::format("step_{:08d}.ckpt", step)).string();
}

TEST_F(TrainerTest, EvalGivesTheValidationLossTrainingLogged) {
  const Config config = tiny_config("run");  // validation and checkpoints at steps 3 and 6
  train(config, {});
  const auto records = metrics("run");
  ASSERT_EQ(records.size(), 7u);
  const double logged3 = records[3].at("val_loss").get<double>();
  const double logged6 = records[6].at("val_loss").get<double>();

  const EvalResult at3 = evaluate(config, {checkpoint_of(dir_ / "run", 3)});
  EXPECT_EQ(at3.step, 3);
  EXPECT_EQ(at3.iters, config.training.eval_iters);
  EXPECT_EQ(at3.loss, logged3);  // the same computation: bit for bit
  EXPECT_EQ(at3.perplexity, std::exp(logged3));
  EXPECT_EQ(at3.record.at("val_loss").get<double>(), logged3);
  EXPECT_EQ(at3.record.at("val_perplexity").get<double>(), std::exp(logged3));
  EXPECT_NE(at3.text.find(fmt::format("val loss {:.4f}", logged3)), std::string::npos) << at3.text;

  // A directory means its newest checkpoint; "latest" the config's checkpoint.dir's.
  const EvalResult from_dir = evaluate(config, {(dir_ / "run" / "checkpoints").string()});
  EXPECT_EQ(from_dir.step, 6);
  EXPECT_EQ(from_dir.loss, logged6);
  EXPECT_EQ(evaluate(config, {"latest"}).loss, logged6);

  // Fewer batches: the first of training's (one batch differs from two).
  const EvalResult one = evaluate(config, {checkpoint_of(dir_ / "run", 3), 1});
  EXPECT_EQ(one.iters, 1);
  EXPECT_NE(one.loss, logged3);
  // More than training validated on works too.
  EXPECT_TRUE(std::isfinite(evaluate(config, {checkpoint_of(dir_ / "run", 3), 5}).loss));
}

TEST_F(TrainerTest, EvalOfAMissingCheckpointNamesIt) {
  const Config config = tiny_config("run");
  const std::string missing = (dir_ / "run" / "checkpoints" / "step_00000099.ckpt").string();
  try {
    evaluate(config, {missing});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(missing), std::string::npos) << e.what();
  }
  // "latest" with no checkpoint names the directory.
  try {
    evaluate(config, {"latest"});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find((dir_ / "run" / "checkpoints").string()),
              std::string::npos)
        << e.what();
  }
}

TEST_F(EncoderTrainerTest, BertEvalGivesTheValidationFiguresTrainingLogged) {
  const Config config = encoder_config("bert", "run");
  train(config, {});
  const auto records = metrics("run");
  ASSERT_EQ(records.size(), 7u);
  const nlohmann::json& logged = records[3];
  const EvalResult result = evaluate(config, {checkpoint_of(dir_ / "run", 3)});
  EXPECT_EQ(result.step, 3);
  EXPECT_EQ(result.loss, logged.at("val_loss").get<double>());
  for (const char* key : {"val_mlm_loss", "val_mlm_accuracy", "val_nsp_loss", "val_nsp_accuracy"}) {
    ASSERT_TRUE(result.record.contains(key)) << key;
    EXPECT_EQ(result.record.at(key).get<double>(), logged.at(key).get<double>()) << key;
  }
  EXPECT_EQ(result.perplexity, std::exp(logged.at("val_mlm_loss").get<double>()));
  EXPECT_EQ(result.record.at("val_mlm_perplexity").get<double>(), result.perplexity);
  EXPECT_NE(result.text.find("mlm perplexity"), std::string::npos) << result.text;
}

}  // namespace
}  // namespace collage
