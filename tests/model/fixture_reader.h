#pragma once
// Reader for the fixtures of scripts/reference/gpt_reference.py (format in its --help):
// magic "CLGFIX01", uint32 count, then per entry: uint32 name length, name, uint32 ndim,
// int64 dims, float32 data. Little-endian, as the machines we run on.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace collage::test {

struct FixtureTensor {
  std::vector<int64_t> shape;
  std::vector<float> data;
};

using Fixture = std::map<std::string, FixtureTensor>;

// Throws (failing the test loudly) when the file is missing or malformed.
inline Fixture read_fixture(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw std::runtime_error("missing fixture " + path +
                             "; regenerate: /usr/bin/python3 scripts/reference/gpt_reference.py");
  }
  auto read = [&](void* dst, size_t bytes) {
    in.read(static_cast<char*>(dst), static_cast<std::streamsize>(bytes));
    if (!in) throw std::runtime_error("truncated fixture " + path);
  };
  char magic[8];
  read(magic, 8);
  if (std::string(magic, 8) != "CLGFIX01") throw std::runtime_error("not a fixture: " + path);
  uint32_t count;
  read(&count, 4);
  Fixture fixture;
  for (uint32_t i = 0; i < count; ++i) {
    uint32_t name_length, ndim;
    read(&name_length, 4);
    std::string name(name_length, '\0');
    read(name.data(), name_length);
    read(&ndim, 4);
    FixtureTensor tensor;
    tensor.shape.resize(ndim);
    read(tensor.shape.data(), ndim * sizeof(int64_t));
    int64_t numel = 1;
    for (int64_t d : tensor.shape) numel *= d;
    tensor.data.resize(static_cast<size_t>(numel));
    read(tensor.data.data(), tensor.data.size() * sizeof(float));
    fixture[name] = std::move(tensor);
  }
  return fixture;
}

// ‖got − want‖ / ‖want‖ over n values, in double: how the reference tests measure errors.
inline double relative_error(const float* got, const float* want, int64_t n) {
  double diff = 0, norm = 0;
  for (int64_t i = 0; i < n; ++i) {
    diff += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    norm += double(want[i]) * want[i];
  }
  return std::sqrt(diff / std::max(norm, 1e-30));
}

inline const FixtureTensor& entry(const Fixture& fixture, const std::string& name) {
  auto it = fixture.find(name);
  if (it == fixture.end()) throw std::runtime_error("fixture has no entry " + name);
  return it->second;
}

}  // namespace collage::test
