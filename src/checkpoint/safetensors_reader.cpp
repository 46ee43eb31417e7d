// A model's safetensors, one file or shards with an index, opened lazily: see
// safetensors_reader.h.
#include "checkpoint/safetensors_reader.h"

#include <filesystem>
#include <nlohmann/json.hpp>
#include <utility>

#include "checkpoint/safetensors_shards.h"
#include "core/error.h"

namespace collage {

namespace fs = std::filesystem;

namespace {

// An index names every tensor once: tens of thousands of lines at most, not this.
constexpr uint64_t kMaxIndexBytes = 100'000'000;

// A shard is named by a file name beside the index, not a path that could lead elsewhere.
bool is_plain_file_name(const std::string& name) {
  return !name.empty() && name != "." && name != ".." &&
         name.find_first_of(std::string("/\0", 2)) == std::string::npos;
}

}  // namespace

SafetensorsReader::SafetensorsReader(const std::string& path) : path_(path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    const std::string index = (fs::path(path) / kSafetensorsIndexFile).string();
    const std::string single = (fs::path(path) / kSafetensorsSingleFile).string();
    const bool has_index = fs::exists(index, ec), has_single = fs::exists(single, ec);
    if (has_index && has_single)
      fail(
          "{}: holds both {} and {}; which one is the model is unclear (Hugging Face's loaders "
          "read {})",
          path, kSafetensorsSingleFile, kSafetensorsIndexFile, kSafetensorsSingleFile);
    if (has_index) {
      open_index(index);
    } else if (has_single) {
      open_single(single);
    } else {
      fail("{}: neither {} nor {} is there: not a safetensors model directory", path,
           kSafetensorsIndexFile, kSafetensorsSingleFile);
    }
  } else if (path.ends_with(".index.json")) {
    open_index(path);
  } else {
    open_single(path);
  }
}

std::vector<std::string> SafetensorsReader::add_file(const std::string& file) {
  FileDescriptor fd = open_for_reading(file);
  SafetensorsHeader header = safetensors_header_of(fd.get(), file);
  if (files_.empty()) metadata_ = std::move(header.metadata);
  std::vector<std::string> names;
  for (SafetensorsStoredTensor& t : header.tensors) {
    const auto [it, added] = by_name_.emplace(t.name, tensors_.size());
    if (!added)
      fail("{} and {} both hold tensor '{}'{}", tensors_[it->second].file, file, t.name,
           index_.empty() ? "" : fmt::format(" (index {})", index_));
    names.push_back(t.name);
    tensors_.push_back(std::move(t));
    file_of_.push_back(files_.size());
  }
  files_.push_back(file);
  descriptors_.push_back(std::move(fd));
  return names;
}

void SafetensorsReader::open_single(const std::string& file) { add_file(file); }

void SafetensorsReader::open_index(const std::string& index) {
  index_ = index;
  nlohmann::json json;
  {
    const FileDescriptor fd = open_for_reading(index);
    const uint64_t size = file_size(fd.get(), index);
    COLLAGE_CHECK(size <= kMaxIndexBytes, "{}: {} bytes, too large for a safetensors index", index,
                  size);
    std::string text(size, '\0');
    pread_all(fd.get(), index, text.data(), size, 0);
    try {
      json = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
      fail("{}: not a safetensors index (not JSON): {}", index, e.what());
    }
  }
  COLLAGE_CHECK(json.is_object() && json.contains("weight_map") && json["weight_map"].is_object(),
                "{}: not a safetensors index (no \"weight_map\" object)", index);
  COLLAGE_CHECK(!json["weight_map"].empty(), "{}: the \"weight_map\" names no tensor", index);

  // weight_map: tensor -> shard file name; the shards in name order, each with the first
  // tensor mapped to it (to say who named a missing file).
  std::map<std::string, std::string> weight_map;
  std::map<std::string, std::string> first_tensor_of;
  for (const auto& [name, value] : json["weight_map"].items()) {
    COLLAGE_CHECK(value.is_string(), "{}: weight_map value of '{}' is not a string", index, name);
    const std::string file = value.get<std::string>();
    COLLAGE_CHECK(is_plain_file_name(file),
                  "{}: weight_map maps '{}' to '{}', not a file name beside the index", index, name,
                  file);
    weight_map.emplace(name, file);
    first_tensor_of.emplace(file, name);
  }
  const fs::path dir = fs::path(index).parent_path();
  for (const auto& [file, tensor] : first_tensor_of) {
    const std::string shard = (dir / file).string();
    std::error_code ec;
    COLLAGE_CHECK(fs::is_regular_file(shard, ec),
                  "{}: weight_map maps '{}' to {}, which does not exist (or is not a file)", index,
                  tensor, shard);
    add_file(shard);  // a tensor in two shards fails here
  }
  // Both ways: each shard's tensors are mapped to it, and each mapped tensor is in its shard.
  for (size_t i = 0; i < tensors_.size(); i++) {
    const SafetensorsStoredTensor& t = tensors_[i];
    const auto it = weight_map.find(t.name);
    if (it == weight_map.end())
      fail("{}: tensor '{}' is not in the index {}", t.file, t.name, index);
    const std::string mapped = (dir / it->second).string();
    if (mapped != t.file)
      fail("{}: tensor '{}' is mapped to {}, whose header lacks it (it is in {})", index, t.name,
           mapped, t.file);
  }
  for (const auto& [name, file] : weight_map)
    if (!contains(name))
      fail("{}: tensor '{}' is mapped to {}, whose header lacks it", index, name,
           (dir / file).string());
}

const SafetensorsStoredTensor& SafetensorsReader::tensor(const std::string& name) const {
  const auto it = by_name_.find(name);
  if (it == by_name_.end()) fail("{}: no tensor '{}'", path_, name);
  return tensors_[it->second];
}

std::vector<uint8_t> SafetensorsReader::read(const std::string& name) const {
  const SafetensorsStoredTensor& t = tensor(name);
  std::vector<uint8_t> bytes(t.bytes);
  const size_t file = file_of_[by_name_.at(name)];
  pread_all(descriptors_[file].get(), t.file, bytes.data(), bytes.size(), t.offset);
  return bytes;
}

}  // namespace collage
