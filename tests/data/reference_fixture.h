#pragma once
// Loads tests/fixtures/gpt_dataset_reference.json, written by
// scripts/reference/gpt_dataset_reference.py (numpy), and helpers shared by the data tests.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

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

 private:
  std::filesystem::path path_;
};

}  // namespace collage::testing
