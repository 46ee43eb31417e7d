// The training loop on tiny BERT and RoBERTa models and synthetic HDF5 shards
// (encoder_run.h): both losses fall, validation figures are logged, a resumed run continues bit
// for bit (dropout masks, mid-shard data position, dynamic masks), and data that does not fit
// the config is refused naming the file and the key.
#include <gtest/gtest.h>

#include <cmath>

#include "checkpoint/checkpoint.h"
#include "core/error.h"
#include "encoder_run.h"
#include "train/trainer.h"

namespace collage {
namespace {

// The MLM loss falls from ln 160 = 5.1 (a fresh model) to the words' frequencies, ln 50 = 3.9,
// within 50 steps (measured: validation 5.09 -> 3.97; reading the topic from the context, down
// to ln 10, takes this tiny model hundreds of steps more).
TEST_F(EncoderTrainerTest, BertLossesFallAndValidationIsLogged) {
  train(encoder_config("bert", "run",
                       {"training.max_steps=50", "optimizer.decay_steps=50", "optimizer.lr=5.0e-3",
                        "training.eval_interval=25", "checkpoint.interval=0"}),
        {});
  auto records = metrics("run");
  ASSERT_EQ(records.size(), 51u);
  // Step 0: validation of the fresh model, MLM near uniform over the vocab, NSP near ln 2.
  EXPECT_NEAR(records[0]["val_mlm_loss"].get<double>(), std::log(160.0), 0.5);
  EXPECT_NEAR(records[0]["val_nsp_loss"].get<double>(), std::log(2.0), 0.2);
  for (const char* key : {"val_mlm_accuracy", "val_nsp_accuracy"}) {
    EXPECT_GE(records[0][key].get<double>(), 0.0) << key;
    EXPECT_LE(records[0][key].get<double>(), 1.0) << key;
  }
  const nlohmann::json& first = records[1];
  const nlohmann::json& last = records[50];
  // loss = MLM + NSP, each a mean.
  EXPECT_NEAR(first["loss"].get<double>(),
              first["mlm_loss"].get<double>() + first["nsp_loss"].get<double>(), 1e-9);
  EXPECT_LT(last["mlm_loss"].get<double>(), 4.3);
  EXPECT_LT(last["val_mlm_loss"].get<double>(), records[0]["val_mlm_loss"].get<double>() - 0.8);
  EXPECT_NEAR(last["val_loss"].get<double>(),
              last["val_mlm_loss"].get<double>() + last["val_nsp_loss"].get<double>(), 1e-9);
  EXPECT_TRUE(records[25].contains("val_nsp_accuracy"));
  EXPECT_FALSE(records[26].contains("val_loss"));
}

// Stopping at step 3 and resuming gives the same steps 4..6 bit for bit: the data position
// (mid-shard, and across the epoch boundary at sample 39), the dropout masks and, for RoBERTa,
// the dynamic masks are all replayed.
TEST_F(EncoderTrainerTest, ResumeContinuesBitForBit) {
  for (const char* arch : {"bert", "roberta"}) {
    SCOPED_TRACE(arch);
    const std::string straight = std::string("straight-") + arch;
    const std::string split = std::string("split-") + arch;
    const std::string small = "data.hdf5_train=" + (dir_ / "small").string();
    train(encoder_config(arch, straight, {small}), {});
    train(encoder_config(arch, split, {small, "training.max_steps=3"}), {});
    train(encoder_config(arch, split, {small}), {"latest"});
    auto a = metrics(straight), b = metrics(split);
    ASSERT_EQ(a.size(), 7u);
    ASSERT_EQ(b.size(), 7u);
    for (size_t i = 1; i < a.size(); i++) {
      SCOPED_TRACE(i);
      for (const char* key : {"loss", "mlm_loss", "grad_norm", "edq", "val_loss"}) {
        ASSERT_EQ(a[i].contains(key), b[i].contains(key)) << key;
        if (a[i].contains(key)) EXPECT_EQ(a[i][key].get<double>(), b[i][key].get<double>()) << key;
      }
    }
    EXPECT_EQ(a[6]["consumed_samples"], 48);
    Checkpoint x =
        load_checkpoint(resolve_resume("latest", (dir_ / straight / "checkpoints").string()));
    Checkpoint y =
        load_checkpoint(resolve_resume("latest", (dir_ / split / "checkpoints").string()));
    ASSERT_EQ(x.tensors.size(), y.tensors.size());
    for (size_t i = 0; i < x.tensors.size(); i++)
      EXPECT_EQ(x.tensors[i].bytes, y.tensors[i].bytes) << x.tensors[i].name;
  }
}

// BERT's phase 2: longer sequences and more masked positions, starting from phase 1's weights
// (--init-from) with a fresh optimizer state, schedule and data position. (Both phases have the
// same position table, as BERT's 512: phase 1 uses the first 32 positions.)
TEST_F(EncoderTrainerTest, PhaseTwoStartsFromPhaseOneWeights) {
  train(encoder_config("bert", "phase1",
                       {"training.max_steps=40", "optimizer.decay_steps=40", "optimizer.lr=5.0e-3",
                        "training.eval_interval=0", "checkpoint.interval=0",
                        "model.max_position_embeddings=48"}),
        {});
  write_encoder_shards(dir_ / "long", 2, 20, 48, 8, 4);
  const std::vector<std::string> phase2 = {"data.seq_len=48",
                                           "data.max_predictions=8",
                                           "model.max_position_embeddings=48",
                                           "data.hdf5_train=" + (dir_ / "long").string(),
                                           "data.hdf5_valid=" + (dir_ / "long").string(),
                                           "training.max_steps=2",
                                           "optimizer.decay_steps=2",
                                           "optimizer.warmup_steps=1"};
  TrainOptions init;
  init.init_from = (dir_ / "phase1" / "checkpoints").string();
  train(encoder_config("bert", "phase2", phase2), init);
  train(encoder_config("bert", "scratch", phase2), {});
  auto two = metrics("phase2"), scratch = metrics("scratch");
  ASSERT_EQ(two.size(), 3u);
  EXPECT_EQ(two[1]["step"], 1);              // a fresh schedule: step 1, warmup lr
  EXPECT_EQ(two[1]["consumed_samples"], 8);  // and a fresh data position
  EXPECT_EQ(two[1]["lr"].get<double>(), scratch[1]["lr"].get<double>());
  // Phase 1's weights already know the words' frequencies: far below a fresh model.
  EXPECT_LT(two[0]["val_mlm_loss"].get<double>(), scratch[0]["val_mlm_loss"].get<double>() - 0.8);
  // Weights of another shape are refused, naming the tensor.
  std::vector<std::string> wider = phase2;
  wider.push_back("model.max_position_embeddings=64");
  try {
    train(encoder_config("bert", "mismatch", wider), init);
    FAIL() << "expected a shape error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("embeddings.position.weight"), std::string::npos)
        << e.what();
  }
}

TEST_F(EncoderTrainerTest, RobertaHasNoNextSentenceFigures) {
  train(encoder_config("roberta", "run"), {});
  auto records = metrics("run");
  ASSERT_EQ(records.size(), 7u);
  EXPECT_TRUE(records[3].contains("val_mlm_accuracy"));
  EXPECT_FALSE(records[3].contains("val_nsp_accuracy"));
  EXPECT_FALSE(records[3].contains("nsp_loss"));
  EXPECT_EQ(records[3]["loss"].get<double>(), records[3]["mlm_loss"].get<double>());
}

// Dropout is drawn per sample: switching it off changes the training losses, but not the
// step-0 validation (which never drops).
TEST_F(EncoderTrainerTest, DropoutActsInTrainingOnly) {
  train(encoder_config("bert", "on"), {});
  train(encoder_config("bert", "off", {"model.hidden_dropout=0", "model.attention_dropout=0"}), {});
  auto on = metrics("on"), off = metrics("off");
  EXPECT_EQ(on[0]["val_loss"].get<double>(), off[0]["val_loss"].get<double>());
  EXPECT_NE(on[1]["loss"].get<double>(), off[1]["loss"].get<double>());
}

std::string error_of_run(const Config& config) {
  try {
    train(config, {});
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST_F(EncoderTrainerTest, DataThatDoesNotFitTheConfigIsRefusedNamingFileAndKey) {
  const std::string seq = error_of_run(encoder_config("bert", "a", {"data.seq_len=30"}));
  EXPECT_NE(seq.find("data.hdf5_train"), std::string::npos) << seq;
  EXPECT_NE(seq.find("32 tokens, but data.seq_len is 30"), std::string::npos) << seq;
  const std::string pred = error_of_run(encoder_config("bert", "b", {"data.max_predictions=6"}));
  EXPECT_NE(pred.find("5 masked positions per sequence, but data.max_predictions is 6"),
            std::string::npos)
      << pred;
  const std::string vocab = error_of_run(encoder_config("bert", "c", {"model.vocab_size=120"}));
  EXPECT_NE(vocab.find("part_0000"), std::string::npos) << vocab;  // the shard holding id >= 120
  const std::string valid = error_of_run(encoder_config("bert", "d", {"data.hdf5_valid=\"\""}));
  EXPECT_NE(valid.find("data.hdf5_valid is empty"), std::string::npos) << valid;
  const std::string missing =
      error_of_run(encoder_config("bert", "e", {"data.hdf5_train=" + (dir_ / "nope").string()}));
  EXPECT_NE(missing.find("nope: no such file or directory"), std::string::npos) << missing;
}

}  // namespace
}  // namespace collage
