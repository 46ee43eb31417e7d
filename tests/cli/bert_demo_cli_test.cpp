// configs/demo/bert-tiny.yaml end to end, shortened: the trainer prepares the HDF5 shards from
// the bundled Gutenberg books with WordPiece (once), trains BERT with MLM + NSP and logs the
// validation MLM loss and accuracy and NSP accuracy; a second run reuses the shards.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "run_collage.h"

namespace collage {
namespace {

namespace fs = std::filesystem;

TEST(BertDemoCli, PreparesGutenbergShardsAndTrains) {
  const fs::path dir =
      fs::temp_directory_path() / ("collage_bert_demo_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const std::string args =
      "train configs/demo/bert-tiny.yaml --set training.max_steps=4 --set "
      "training.eval_interval=2 --set training.eval_iters=2 --set checkpoint.interval=0 "
      "--set logging.progress=off --set logging.dir=" +
      (dir / "run").string() + " --set data.hdf5_train=" + (dir / "train").string() +
      " --set data.hdf5_valid=" + (dir / "valid").string();
  const CommandResult first = run_collage(args);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_NE(first.output.find("data: preparing training shards in"), std::string::npos)
      << first.output;
  EXPECT_NE(first.output.find("data: preparing validation shards in"), std::string::npos);
  EXPECT_TRUE(fs::exists(dir / "train" / "part_00000.hdf5"));
  EXPECT_TRUE(fs::exists(dir / "valid" / "part_00000.hdf5"));
  EXPECT_NE(first.output.find("(mlm "), std::string::npos) << first.output;
  EXPECT_NE(first.output.find("; nsp "), std::string::npos) << first.output;

  std::ifstream metrics(dir / "run" / "metrics.jsonl");
  std::string line, last;
  while (std::getline(metrics, line)) last = line;
  const nlohmann::json record = nlohmann::json::parse(last);
  EXPECT_EQ(record["step"], 4);
  for (const char* key : {"mlm_loss", "nsp_loss", "val_mlm_loss", "val_mlm_accuracy",
                          "val_nsp_accuracy", "edq_ratio"})
    EXPECT_TRUE(record.contains(key)) << key << " missing in " << last;
  // 30522 words: a fresh model's MLM loss is about ln(30522) = 10.3.
  EXPECT_NEAR(record["val_mlm_loss"].get<double>(), 10.3, 1.0);

  // The shards are prepared once; `collage inspect` reads them.
  const CommandResult second = run_collage(args + " --set training.max_steps=1 --overwrite");
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_NE(second.output.find("data: using the prepared training shards"), std::string::npos)
      << second.output;
  const CommandResult inspect = run_collage("inspect " + (dir / "train").string());
  ASSERT_EQ(inspect.exit_code, 0) << inspect.output;
  EXPECT_NE(inspect.output.find("samples"), std::string::npos) << inspect.output;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace collage
