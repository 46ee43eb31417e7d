#pragma once
// Loads tests/fixtures/gpt_dataset_reference.json, written by
// scripts/reference/gpt_dataset_reference.py (numpy), and helpers shared by the data tests: a
// scratch directory, the message of an expected Error, the BERT vocabulary's path.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../error_of.h"

// EXPECT_HAS(message, "part"): `part` occurs in `message` (an error naming a file, a key, ...).
#define EXPECT_HAS(text, part)                               \
  EXPECT_NE(std::string(text).find(part), std::string::npos) \
      << "'" << (part) << "' not in: " << (text)

namespace collage::testing {

inline const nlohmann::json& reference() {
  static const nlohmann::json j = [] {
    std::ifstream in(std::string(COLLAGE_FIXTURES) + "/gpt_dataset_reference.json");
    if (!in) throw std::runtime_error("missing gpt_dataset_reference.json fixture");
    return nlohmann::json::parse(in);
  }();
  return j;
}

inline std::string fixture_prefix(const std::string& name) {
  return std::string(COLLAGE_FIXTURES) + "/" + name;
}

inline std::vector<char> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(in), {});
}

inline void write_bytes(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A fresh empty directory under the system temp dir, removed when the object dies.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = std::filesystem::temp_directory_path() /
            (std::string("collage_data_") + info->test_suite_name() + "_" + info->name() + "_" +
             std::to_string(::getpid()));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string str() const { return path_.string(); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  // Writes `content` to the file `name` in the directory and returns its path.
  std::string write(const std::string& name, const std::string& content) const {
    std::ofstream(file(name), std::ios::binary) << content;
    return file(name);
  }

 private:
  std::filesystem::path path_;
};

// The bytes a hex string spells ("e9" -> "\xe9"): the fixtures' inputs that are not UTF-8.
inline std::string from_hex(const std::string& hex) {
  std::string bytes;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    bytes.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  return bytes;
}

using test::error_of;

// `f` throws a collage::Error whose message has every one of `needles` (a file name, a line,
// the reason): the load-error tests of the tokenizers.
template <typename F>
void expect_error_mentions(F&& f, const std::vector<std::string>& needles) {
  const std::string message = error_of(f);
  if (message.empty()) return;  // error_of has failed the test
  for (const auto& needle : needles) EXPECT_HAS(message, needle);
}

// The BERT vocabulary of the WordPiece and prepare_bert tests, and what to say when it is missing.
inline const std::string kBertVocab = COLLAGE_SOURCE_DIR "/data/assets/bert-uncased/vocab.txt";
inline const char* const kNoBertVocab =
    "BERT vocabulary missing (data/assets/bert-uncased/vocab.txt): run scripts/install-deps.sh "
    "--assets";

}  // namespace collage::testing
