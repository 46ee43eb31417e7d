// `collage inspect` on BERT pretraining HDF5 data, end to end: the real binary on the files
// h5py wrote (scripts/reference/make_bert_hdf5_fixtures.py), its printed counts, shapes,
// dtypes and sample compared with tests/fixtures/bert_hdf5/reference.json and vocab.txt.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "run_collage.h"

namespace {

const std::string kDir = std::string(COLLAGE_FIXTURES) + "/bert_hdf5";

const nlohmann::json& reference() {
  static const nlohmann::json j = [] {
    std::ifstream in(kDir + "/reference.json");
    return nlohmann::json::parse(in);
  }();
  return j;
}

std::vector<std::string> vocab() {
  std::ifstream in(kDir + "/vocab.txt");
  std::vector<std::string> tokens;
  for (std::string line; std::getline(in, line);) tokens.push_back(line);
  return tokens;
}

// The text after "<key>" on the first line that starts with it (after leading spaces).
std::string field(const std::string& output, const std::string& key) {
  std::istringstream lines(output);
  std::string line;
  while (std::getline(lines, line)) {
    const size_t start = line.find_first_not_of(' ');
    if (start != std::string::npos && line.compare(start, key.size(), key) == 0) {
      const std::string rest = line.substr(start + key.size());
      return rest.substr(std::min(rest.size(), rest.find_first_not_of(' ')));
    }
  }
  ADD_FAILURE() << "no line starting with '" << key << "' in:\n" << output;
  return "";
}

std::vector<int32_t> ids(const std::string& text) {
  std::istringstream in(text);
  std::vector<int32_t> out;
  for (int64_t v; in >> v;) out.push_back(static_cast<int32_t>(v));
  return out;
}

std::string joined(const std::vector<std::string>& words) {
  std::string s;
  for (const auto& w : words) s += (s.empty() ? "" : " ") + w;
  return s;
}

void expect_printed_sample(const std::string& output, const nlohmann::json& want) {
  EXPECT_EQ(ids(field(output, "input_ids:")), want["input_ids"].get<std::vector<int32_t>>());
  EXPECT_EQ(ids(field(output, "input_mask:")), want["input_mask"].get<std::vector<int32_t>>());
  EXPECT_EQ(ids(field(output, "segment_ids:")), want["segment_ids"].get<std::vector<int32_t>>());
  EXPECT_EQ(ids(field(output, "masked_lm_positions:")),
            want["masked_positions"].get<std::vector<int32_t>>());
  EXPECT_EQ(ids(field(output, "masked_lm_ids:")), want["masked_ids"].get<std::vector<int32_t>>());
}

TEST(InspectBertCli, FileWithVocabulary) {
  const auto& want = reference()["files"]["valid_int32.hdf5"];
  const CommandResult run = run_collage("inspect '" + kDir + "/valid_int32.hdf5' --vocab-file '" +
                                        kDir + "/vocab.txt' --decode 4");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(field(run.output, "samples:"), std::to_string(want["samples"].size()));
  EXPECT_EQ(field(run.output, "seq_len:"), "16");
  EXPECT_EQ(field(run.output, "max_predictions:"), "3");
  EXPECT_EQ(field(run.output, "vocabulary:"),
            kDir + "/vocab.txt (" + std::to_string(vocab().size()) + " tokens)");
  for (const char* name : {"input_ids", "input_mask", "segment_ids"})
    EXPECT_EQ(field(run.output, name), "[7, 16]      int32                chunked [2, 16] gzip 4");
  for (const char* name : {"masked_lm_positions", "masked_lm_ids"})
    EXPECT_EQ(field(run.output, name), "[7, 3]       int32                chunked [2, 3] gzip 4");
  EXPECT_EQ(field(run.output, "next_sentence_labels"),
            "[7]          int32                chunked [2] gzip 4");

  const auto& s = want["samples"][4];
  EXPECT_NE(run.output.find("sample 4 (" + kDir + "/valid_int32.hdf5 row 4): next_sentence_label " +
                            std::to_string(s["next_sentence_label"].get<int>()) + ", " +
                            std::to_string(s["masked_positions"].size()) + " masked positions"),
            std::string::npos)
      << run.output;
  expect_printed_sample(run.output, s);
  // Tokens under the input mask, and position=original token for each label.
  const auto v = vocab();
  std::vector<std::string> tokens, masked;
  const auto input_ids = s["input_ids"].get<std::vector<int32_t>>();
  const auto mask = s["input_mask"].get<std::vector<int32_t>>();
  for (size_t i = 0; i < input_ids.size(); ++i)
    if (mask[i] == 1) tokens.push_back(v[input_ids[i]]);
  const auto positions = s["masked_positions"].get<std::vector<int32_t>>();
  const auto labels = s["masked_ids"].get<std::vector<int32_t>>();
  for (size_t m = 0; m < positions.size(); ++m)
    masked.push_back(std::to_string(positions[m]) + "=" + v[labels[m]]);
  EXPECT_EQ(field(run.output, "tokens:"), joined(tokens));
  EXPECT_EQ(field(run.output, "masked:"), joined(masked));
  EXPECT_EQ(field(run.output, "text:").rfind("[CLS] ", 0), 0u) << run.output;
}

TEST(InspectBertCli, EveryWidthWithoutVocabulary) {
  const auto& want = reference()["files"]["widths.hdf5"];
  const CommandResult run = run_collage("inspect '" + kDir + "/widths.hdf5'");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(field(run.output, "samples:"), "5");
  EXPECT_EQ(field(run.output, "input_ids").find("[5, 12]      uint16"), 0u);
  EXPECT_EQ(field(run.output, "masked_lm_ids").find("[5, 4]       int32 (big-endian)"), 0u);
  EXPECT_EQ(field(run.output, "next_sentence_labels").find("[5]          int64"), 0u);
  EXPECT_EQ(field(run.output, "vocabulary:").find("none"), 0u);
  expect_printed_sample(run.output, want["samples"][0]);
  EXPECT_EQ(run.output.find("tokens:"), std::string::npos);
}

TEST(InspectBertCli, DirectoryOfShards) {
  const auto& want = reference()["shards"];
  const CommandResult run = run_collage("inspect '" + kDir + "/shards' --decode 6 --check");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(field(run.output, "samples:"), "19");
  EXPECT_EQ(field(run.output, "BERT HDF5:"),
            "directory " + kDir + "/shards, 4 files (*.hdf5, *.h5)");
  for (size_t f = 0; f < want["files"].size(); ++f)
    EXPECT_EQ(field(run.output, want["files"][f].get<std::string>()),
              std::to_string(want["sizes"][f].get<int>()) + " samples");
  EXPECT_EQ(field(run.output, "input_mask").find("[5, 16]      int8"), 0u);
  // Sample 6 in name order: shard 0 has 5 rows, so shard 1, row 1.
  EXPECT_NE(run.output.find("sample 6 (" + kDir + "/shards/wikicorpus_en_training_1.hdf5 row 1)"),
            std::string::npos)
      << run.output;
  expect_printed_sample(run.output, want["samples"][1][1]);
  EXPECT_EQ(field(run.output, "values:"), "all 19 samples checked");
}

TEST(InspectBertCli, ErrorsNameFileDatasetAndRow) {
  CommandResult run = run_collage("inspect '" + kDir + "/wrong_seq_len.hdf5'");
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_NE(run.output.find("wrong_seq_len.hdf5: dataset 'input_mask' has shape [4, 9]"),
            std::string::npos)
      << run.output;

  // Values are checked on the rows read: sample 0 is fine, --check reads row 3.
  const std::string bad =
      "inspect '" + kDir + "/id_out_of_vocab.hdf5' --vocab-file '" + kDir + "/vocab.txt'";
  run = run_collage(bad);
  EXPECT_EQ(run.exit_code, 0) << run.output;
  run = run_collage(bad + " --check");
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_NE(run.output.find("id_out_of_vocab.hdf5: dataset 'input_ids': row 3, column 2: id " +
                            std::to_string(reference()["vocab_size"].get<int>()) +
                            " is outside the vocabulary"),
            std::string::npos)
      << run.output;

  run = run_collage("inspect '" + kDir + "/valid_int32.hdf5' --decode 7");
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_NE(run.output.find("--decode 7: " + kDir + "/valid_int32.hdf5 has samples 0 .. 6"),
            std::string::npos)
      << run.output;

  run = run_collage("inspect '" + kDir + "/valid_int32.hdf5' --samples 2");
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_NE(run.output.find("--samples applies to Megatron"), std::string::npos) << run.output;

  run = run_collage("inspect '" + kDir + "/missing.h5'");
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_NE(run.output.find("missing.h5: no such file or directory"), std::string::npos)
      << run.output;
}

}  // namespace
