#pragma once
// Helpers of the libFuzzer targets (tests/fuzz/README.md): a fuzzed input as files on disk
// (the readers under test open paths), small numbers taken off the front of an input, and the
// rule of what a finding is.
//
// A reader may refuse any input, but only as collage::Error naming the problem: that is the
// contract `collage` turns into `collage: error: ...` and exit status 1. Anything else that
// escapes (std::exception from a library, a crash, a sanitizer report, a leak) is a finding.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include "core/error.h"

namespace collage::fuzz {

// A per-process scratch directory in /dev/shm (RAM), removed at exit.
inline const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path dir = [] {
    std::filesystem::path base =
        std::filesystem::exists("/dev/shm") ? "/dev/shm" : std::filesystem::temp_directory_path();
    std::filesystem::path d = base / ("collage-fuzz-" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    std::atexit([] { std::filesystem::remove_all(scratch_dir()); });
    return d;
  }();
  return dir;
}

inline std::string write_file(const std::string& name, std::string_view bytes) {
  const std::string path = (scratch_dir() / name).string();
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), bytes.size());
  return path;
}

// Reads the input from the front: numbers first, the rest stays as bytes.
class InputReader {
 public:
  InputReader(const uint8_t* data, size_t size)
      : rest_(reinterpret_cast<const char*>(data), size) {}
  template <typename T>
  T take() {
    T value{};
    const size_t n = std::min(sizeof(T), rest_.size());
    std::memcpy(&value, rest_.data(), n);
    rest_.remove_prefix(n);
    return value;
  }
  // Up to `max` bytes ending before the first `separator` (consumed), or all that is left.
  std::string_view take_until(char separator, size_t max = SIZE_MAX) {
    size_t end = std::min(rest_.find(separator), std::min(max, rest_.size()));
    std::string_view part = rest_.substr(0, end);
    rest_.remove_prefix(std::min(end + 1, rest_.size()));
    return part;
  }
  std::string_view rest() const { return rest_; }

 private:
  std::string_view rest_;
};

// Runs `read`; a collage::Error is a clean refusal, anything else escapes to libFuzzer.
template <typename F>
void refusals_allowed(F&& read) {
  try {
    read();
  } catch (const Error&) {
  }
}

}  // namespace collage::fuzz
