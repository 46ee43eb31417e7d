#pragma once
// The trainer tests' fixture: a tiny GPT config on a synthetic Megatron dataset in a
// temporary directory, and the metrics.jsonl records of a run.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "config/config.h"
#include "data/megatron/indexed_dataset.h"

namespace collage {

namespace fs = std::filesystem;

// Documents of a repeating, learnable pattern (a noisy counter), so the loss can fall fast.
inline void write_dataset(const std::string& prefix, int documents, int32_t bad_token = -1) {
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

}  // namespace collage
