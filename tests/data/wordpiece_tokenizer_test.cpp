// WordpieceTokenizer (bert-base-uncased) against an independent reference:
// tests/fixtures/wordpiece_vectors.json holds the ids that Hugging Face's `tokenizers` (Rust,
// npm) gives for each string, adjusted where it departs from Google's tokenization.py;
// scripts/reference/make_wordpiece_vectors.js writes it and says how. Hand-worked cases below
// pin each BasicTokenizer step and the WordPiece search on their own.
#include "data/text/wordpiece_tokenizer.h"

#include <gtest/gtest.h>
#include <omp.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "reference_fixture.h"

namespace collage {
namespace {

namespace fs = std::filesystem;

using testing::kBertVocab;
using testing::kNoBertVocab;

using Words = std::vector<std::string>;

struct ReferenceCase {
  std::string name;
  std::string input;  // what is encoded (bytes; not always UTF-8)
  std::vector<int32_t> ids;
};

using testing::from_hex;

const nlohmann::json& fixture() {
  static const nlohmann::json j = [] {
    std::ifstream in(COLLAGE_FIXTURES "/wordpiece_vectors.json");
    if (!in) throw std::runtime_error("missing tests/fixtures/wordpiece_vectors.json");
    return nlohmann::json::parse(in);
  }();
  return j;
}

std::vector<ReferenceCase> reference_cases() {
  std::vector<ReferenceCase> cases;
  for (const auto& c : fixture()["cases"]) {
    ReferenceCase rc;
    rc.name = c["name"];
    rc.input = c.contains("bytes_hex") ? from_hex(c["bytes_hex"]) : c["text"].get<std::string>();
    rc.ids = c["ids"].get<std::vector<int32_t>>();
    cases.push_back(std::move(rc));
  }
  return cases;
}

class WordpieceTokenizerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (fs::exists(kBertVocab))
      tokenizer_ = new WordpieceTokenizer(WordpieceTokenizer::load(kBertVocab));
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    tokenizer_ = nullptr;
  }
  void SetUp() override { ASSERT_NE(tokenizer_, nullptr) << kNoBertVocab; }
  static const WordpieceTokenizer& tok() { return *tokenizer_; }

  // "" when equal, else the first difference with the token strings around it.
  static std::string first_difference(const std::vector<int32_t>& got,
                                      const std::vector<int32_t>& want) {
    if (got == want) return "";
    size_t i = 0;
    while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
    auto at = [&](const std::vector<int32_t>& v) {
      if (i >= v.size()) return std::string("(end)");
      return std::to_string(v[i]) + " \"" + tok().token(v[i]) + "\"";
    };
    return "first difference at token " + std::to_string(i) + ": got " + at(got) + ", want " +
           at(want) + " (lengths " + std::to_string(got.size()) + " vs " +
           std::to_string(want.size()) + ")";
  }
  std::vector<std::string> pieces(const std::string& text) const {
    std::vector<std::string> out;
    for (int32_t id : tok().encode(text)) out.push_back(tok().token(id));
    return out;
  }

  static WordpieceTokenizer* tokenizer_;
};
WordpieceTokenizer* WordpieceTokenizerTest::tokenizer_ = nullptr;

TEST_F(WordpieceTokenizerTest, VocabularyIsBertBaseUncased) {
  EXPECT_EQ(tok().vocab_size(), fixture()["vocab_size"].get<int>());
  EXPECT_EQ(tok().vocab_size(), 30522);
  EXPECT_EQ(tok().unk_id(), fixture()["unk_id"].get<int32_t>());
  EXPECT_EQ(tok().unk_id(), 100);
  EXPECT_EQ(tok().id_of("[PAD]"), 0);
  EXPECT_EQ(tok().id_of("[unused0]"), 1);
  EXPECT_EQ(tok().id_of("[CLS]"), 101);
  EXPECT_EQ(tok().id_of("[SEP]"), 102);
  EXPECT_EQ(tok().id_of("[MASK]"), 103);
  EXPECT_EQ(tok().id_of("!"), 999);
  EXPECT_EQ(tok().id_of("the"), 1996);
  EXPECT_EQ(tok().id_of("##s"), 2015);
  EXPECT_EQ(tok().id_of("not a token"), -1);
  EXPECT_EQ(tok().token(1996), "the");
  EXPECT_EQ(tok().token(30521), "##～");
}

TEST_F(WordpieceTokenizerTest, EncodeMatchesReferenceForEveryCase) {
  const auto cases = reference_cases();
  ASSERT_GE(cases.size(), 250u);
  size_t ids = 0;
  for (const auto& c : cases) {
    EXPECT_EQ(first_difference(tok().encode(c.input), c.ids), "") << "case " << c.name;
    ids += c.ids.size();
  }
  EXPECT_GT(ids, 10000u);
  // The kinds of text the reference must cover (a fixture regenerated without them fails).
  std::set<std::string> names;
  for (const auto& c : cases) names.insert(c.name);
  for (const char* name :
       {"accents_french", "accents_german", "accents_nordic_slavic", "accents_decomposed",
        "cjk_chinese", "cjk_extension_compat", "punctuation_runs", "ascii_symbols", "control_chars",
        "nul_and_replacement", "whitespace_kinds", "long_word_100", "long_word_101",
        "long_word_accents_precomposed_101", "mixed_case", "greek_final_sigma", "invalid_utf8",
        "gutenberg_alice_300_lines", "random_199"}) {
    EXPECT_TRUE(names.count(name)) << "fixture lacks case " << name;
  }
}

TEST_F(WordpieceTokenizerTest, EncodeAppendAppends) {
  std::vector<int32_t> ids = {7};
  tok().encode_append("hello world", ids);
  EXPECT_EQ(ids, (std::vector<int32_t>{7, 7592, 2088}));
}

// Steps 1-5 of BasicTokenizer (wordpiece_tokenizer.h), worked by hand.
TEST_F(WordpieceTokenizerTest, BasicWordsFollowEachStep) {
  using W = WordpieceTokenizer;
  // 1. Cleaning: C* characters, U+0000 and U+FFFD vanish (joining their neighbours); tab, LF,
  //    CR and Zs separate words; VT and FF are controls, not spaces.
  EXPECT_EQ(W::basic_words("a\x01"
                           "b\x7f"
                           "c\u200Bd\u00ADe\uE000f\u0378g"),
            Words{"abcdefg"});
  EXPECT_EQ(W::basic_words(std::string("x\0y\uFFFDz", 7)), Words{"xyz"});
  EXPECT_EQ(W::basic_words("a\tb\nc\rd\u00A0e\u3000f"), (Words{"a", "b", "c", "d", "e", "f"}));
  EXPECT_EQ(W::basic_words("a\vb\fc"), Words{"abc"});
  EXPECT_EQ(W::basic_words("a\u2028b\u2029c"), (Words{"a", "b", "c"}));
  EXPECT_EQ(W::basic_words(" \t\u3000 "), Words{});
  EXPECT_EQ(W::basic_words(""), Words{});
  // 2. CJK ideographs stand alone, kana and Hangul do not; U+F900 is normalised to U+8C48.
  EXPECT_EQ(W::basic_words("ab中文cd"), (Words{"ab", "中", "文", "cd"}));
  EXPECT_EQ(W::basic_words("ひらがな한국"), Words{"ひらかな\u1112\u1161\u11AB\u1100\u116E\u11A8"});
  EXPECT_EQ(W::basic_words("\uF900\U00020000"), (Words{"\u8C48", "\U00020000"}));
  // 4. Lower-casing, NFD, non-spacing marks dropped; letters without a decomposition stay.
  EXPECT_EQ(W::basic_words("Héllo ÜBER Åsa e\u0301 \u212B"),
            (Words{"hello", "uber", "asa", "e", "a"}));
  EXPECT_EQ(W::basic_words("Ørsted Łódź ß"), (Words{"ørsted", "łodz", "ß"}));
  EXPECT_EQ(W::basic_words("\u0301 \u0308"), Words{});  // marks alone leave nothing
  EXPECT_EQ(W::basic_words("İstanbul"), Words{"istanbul"});
  // Final_Sigma, decided on the whole word before punctuation is split off.
  EXPECT_EQ(W::basic_words("ΟΔΟΣ ΣΑ Σ ΑΣ."), (Words{"οδος", "σα", "σ", "ας", "."}));
  // 5. Punctuation: ASCII symbols and P*, one word per character; other symbols stay.
  EXPECT_EQ(W::basic_words("Wait...!! $5+x"),
            (Words{"wait", ".", ".", ".", "!", "!", "$", "5", "+", "x"}));
  EXPECT_EQ(W::basic_words("«a»—b…"), (Words{"«", "a", "»", "—", "b", "…"}));
  EXPECT_EQ(W::basic_words("©2020 €5 x°"), (Words{"©2020", "€5", "x°"}));
  // Ill-formed UTF-8 becomes U+FFFD, which cleaning drops.
  EXPECT_EQ(W::basic_words("ab\xff"
                           "cd \xc3"),
            (Words{"abcd"}));
}

TEST_F(WordpieceTokenizerTest, GreedyLongestMatchWithContinuationPieces) {
  EXPECT_EQ(pieces("i like strawberries"), (Words{"i", "like", "straw", "##berries"}));
  EXPECT_EQ(pieces("Unaffable"), (Words{"una", "##ffa", "##ble"}));
  EXPECT_EQ(pieces("[CLS] [MASK]"), (Words{"[", "cl", "##s", "]", "[", "mask", "]"}));
}

TEST_F(WordpieceTokenizerTest, WordsOfMoreThan100CharactersAreUnknown) {
  const std::vector<int32_t> unk = {tok().unk_id()};
  EXPECT_EQ(tok().encode(std::string(100, 'x')).size(), 50u);  // "xx" + 49 * "##xx"
  EXPECT_EQ(tok().encode(std::string(101, 'x')), unk);
  // Characters are counted after normalisation: 120 code points that become 60.
  std::string decomposed, precomposed;
  for (int i = 0; i < 60; ++i) decomposed += "e\u0301";
  EXPECT_NE(tok().encode(decomposed), unk);
  for (int i = 0; i < 101; ++i) precomposed += "é";
  EXPECT_EQ(tok().encode(precomposed), unk);
  // A million-character word costs one look-up per character, not a quadratic search.
  EXPECT_EQ(tok().encode(std::string(1'000'000, 'q') + " ok"),
            (std::vector<int32_t>{tok().unk_id(), tok().id_of("ok")}));
}

TEST_F(WordpieceTokenizerTest, ParallelEncodingGivesTheSameIds) {
  const auto cases = reference_cases();
  const int n = static_cast<int>(cases.size());
  std::vector<std::vector<int32_t>> got(static_cast<size_t>(n) * 4);
#pragma omp parallel for schedule(dynamic, 1) num_threads(2)
  for (int i = 0; i < n * 4; ++i) got[i] = tok().encode(cases[i % n].input);
  for (int i = 0; i < n * 4; ++i) {
    EXPECT_EQ(got[i], cases[i % n].ids) << "case " << cases[i % n].name;
  }
}

TEST_F(WordpieceTokenizerTest, TokenRejectsIdsOutsideTheVocabulary) {
  for (int32_t bad : {-1, 30522, 1 << 30}) {
    try {
      tok().token(bad);
      ADD_FAILURE() << "no error for id " << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::to_string(bad)), std::string::npos) << e.what();
    }
  }
}

// --- A small vocabulary: the WordPiece search on its own. ------------------------------------

TEST(WordpieceSmallVocabularyTest, SearchIsGreedyLongestFirst) {
  const auto tok = WordpieceTokenizer::from_tokens(
      {"[UNK]", "un", "una", "##aff", "##ff", "##able", "##a", "##ble", "a", "b", "##b", "##"},
      "small");
  auto ids = [&](const std::string& text) { return tok.encode(text); };
  EXPECT_EQ(ids("unaffable"), (std::vector<int32_t>{2, 4, 5}));  // una ##ff ##able, not un ##aff
  EXPECT_EQ(ids("unable"), (std::vector<int32_t>{2, 7}));        // una ##ble, not un ##able
  EXPECT_EQ(ids("ab"), (std::vector<int32_t>{8, 10}));           // a ##b
  EXPECT_EQ(ids("abx b"), (std::vector<int32_t>{0, 9}));  // no piece for "x": the word is [UNK]
  EXPECT_EQ(ids("ff"), (std::vector<int32_t>{0}));        // "##ff" cannot start a word
  EXPECT_EQ(ids("#"), (std::vector<int32_t>{0}));         // "##" is a token, "#" is not
  EXPECT_EQ(tok.vocab_size(), 12);
  EXPECT_EQ(tok.unk_id(), 0);
  EXPECT_EQ(tok.id_of("##able"), 5);
}

TEST(WordpieceSmallVocabularyTest, LimitIs100CodePoints) {
  const auto tok = WordpieceTokenizer::from_tokens({"[UNK]", "é", "##é"}, "small");
  std::string word;
  for (int i = 0; i < 100; ++i) word += "\u00E9";
  // Normalisation makes "e" of every "é", which this vocabulary does not have.
  EXPECT_EQ(tok.encode(word), std::vector<int32_t>{0});
  std::vector<int32_t> want(100, 2);  // e ##e ##e ...
  want[0] = 1;
  const auto plain = WordpieceTokenizer::from_tokens({"[UNK]", "e", "##e"}, "small");
  EXPECT_EQ(plain.encode(word), want);
  EXPECT_EQ(plain.encode(word + "\u00E9"), std::vector<int32_t>{0});
}

// --- load() errors, each naming the file and line. -------------------------------------------

class WordpieceLoadTest : public ::testing::Test {
 protected:
  std::string write(const std::string& name, const std::string& content) {
    return dir_.write(name, content);
  }
  static void expect_load_error(const std::string& path, const std::vector<std::string>& needles) {
    testing::expect_error_mentions([&] { WordpieceTokenizer::load(path); }, needles);
  }
  testing::TempDir dir_;
};

TEST_F(WordpieceLoadTest, ValidFileWithAndWithoutFinalNewline) {
  for (const std::string& text : {std::string("[UNK]\nhi\n##s\n"), std::string("[UNK]\nhi\n##s")}) {
    const auto tok = WordpieceTokenizer::load(write("vocab.txt", text));
    EXPECT_EQ(tok.vocab_size(), 3);
    EXPECT_EQ(tok.encode("His hi, x"), (std::vector<int32_t>{1, 2, 1, 0, 0}));
  }
}

TEST_F(WordpieceLoadTest, ErrorsNameFileAndLine) {
  const auto missing = dir_.file("nope.txt");
  expect_load_error(missing, {missing});
  expect_load_error(write("empty.txt", ""), {"empty.txt", "empty"});
  expect_load_error(write("blank.txt", "[UNK]\na\n\nb\n"), {"blank.txt:3", "empty line"});
  expect_load_error(write("crlf.txt", "[UNK]\r\na\r\n"), {"crlf.txt:1", "carriage return"});
  expect_load_error(write("twice.txt", "[UNK]\na\nb\na\n"), {"twice.txt:4", "\"a\"", "line 2"});
  expect_load_error(write("nounk.txt", "a\nb\n"), {"nounk.txt", "[UNK]"});
  expect_load_error(write("latin1.txt", "[UNK]\ncaf\xe9\n"), {"latin1.txt:2", "UTF-8"});
}

}  // namespace
}  // namespace collage
