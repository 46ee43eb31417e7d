// The safetensors format by hand: see safetensors.h.
#include "checkpoint/safetensors.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "core/error.h"

namespace collage {

static_assert(std::endian::native == std::endian::little, "safetensors are little-endian");

namespace {

constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // the reference implementation's limit

// numel · element size, or UINT64_MAX for a negative dimension or an overflow.
uint64_t byte_size(const std::vector<int64_t>& shape, size_t element_bytes) {
  unsigned __int128 bytes = element_bytes;
  for (int64_t d : shape) {
    if (d < 0) return UINT64_MAX;
    bytes *= static_cast<uint64_t>(d);
    if (bytes >= (static_cast<unsigned __int128>(1) << 64)) return UINT64_MAX;
  }
  return static_cast<uint64_t>(bytes);
}

// "WHERE: tensor 'NAME' has B bytes, but shape [..] of DTYPE needs S", unless B == S.
void check_bytes(const std::string& where, const std::string& name, const std::string& dtype,
                 const std::vector<int64_t>& shape, uint64_t expected, uint64_t actual) {
  COLLAGE_CHECK(actual == expected, "{}: tensor '{}' has {} bytes, but shape [{}] of {} needs {}",
                where, name, actual, fmt::join(shape, ", "), dtype, expected);
}

// The header of `tensors` (see safetensors_header); errors start with `where`. Fills `bytes`
// with each tensor's size.
std::string header_bytes(const std::string& where,
                         const std::vector<SafetensorsTensorInfo>& tensors,
                         const std::map<std::string, std::string>& metadata,
                         std::vector<uint64_t>& bytes) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::set<std::string> names;
  uint64_t offset = 0;
  bytes.clear();
  for (const SafetensorsTensorInfo& t : tensors) {
    COLLAGE_CHECK(!t.name.empty() && t.name != "__metadata__" && names.insert(t.name).second,
                  "{}: tensor name '{}' is empty, reserved or repeated", where, t.name);
    uint64_t size = 0;
    try {
      size = safetensors_tensor_bytes(t);
    } catch (const Error& e) {
      fail("{}: {}", where, e.what());
    }
    COLLAGE_CHECK(size <= UINT64_MAX - offset, "{}: the tensors' bytes add up past 2^64", where);
    header[t.name] = {
        {"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + size}}};
    offset += size;
    bytes.push_back(size);
  }
  std::string json;
  try {
    json = header.dump();
  } catch (const nlohmann::json::exception& e) {  // a name or value that is not UTF-8
    fail("{}: the header cannot be written as JSON: {}", where, e.what());
  }
  json.append((8 - json.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  const uint64_t n = json.size();
  std::string out(8, '\0');
  std::memcpy(out.data(), &n, 8);
  return out + json;
}

std::vector<SafetensorsTensorInfo> infos_of(const std::vector<SafetensorsTensor>& tensors) {
  std::vector<SafetensorsTensorInfo> infos;
  infos.reserve(tensors.size());
  for (const SafetensorsTensor& t : tensors) infos.push_back({t.name, t.dtype, t.shape});
  return infos;
}

// The header of tensors with their bytes, checking the bytes against the shapes too.
std::string checked_header(const std::string& where, const std::vector<SafetensorsTensor>& tensors,
                           const std::map<std::string, std::string>& metadata) {
  std::vector<uint64_t> bytes;
  std::string header = header_bytes(where, infos_of(tensors), metadata, bytes);
  for (size_t i = 0; i < tensors.size(); i++) {
    const SafetensorsTensor& t = tensors[i];
    check_bytes(where, t.name, t.dtype, t.shape, bytes[i], t.bytes.size());
  }
  return header;
}

}  // namespace

size_t safetensors_dtype_size(const std::string& dtype) {
  static const std::map<std::string, size_t> sizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
      {"U32", 4},  {"F32", 4}, {"F64", 8}, {"I64", 8},     {"U64", 8}};
  const auto it = sizes.find(dtype);
  COLLAGE_CHECK(it != sizes.end(), "unknown safetensors dtype '{}'", dtype);
  return it->second;
}

uint64_t safetensors_tensor_bytes(const SafetensorsTensorInfo& tensor) {
  const uint64_t bytes = byte_size(tensor.shape, safetensors_dtype_size(tensor.dtype));
  COLLAGE_CHECK(bytes != UINT64_MAX,
                "tensor '{}': shape [{}] of {} has a negative dimension or 2^64 bytes or more",
                tensor.name, fmt::join(tensor.shape, ", "), tensor.dtype);
  return bytes;
}

std::string safetensors_header(const std::vector<SafetensorsTensorInfo>& tensors,
                               const std::map<std::string, std::string>& metadata) {
  std::vector<uint64_t> bytes;
  return header_bytes("safetensors", tensors, metadata, bytes);
}

std::string safetensors_header(const std::vector<SafetensorsTensor>& tensors,
                               const std::map<std::string, std::string>& metadata) {
  return checked_header("safetensors", tensors, metadata);
}

SafetensorsWriter::SafetensorsWriter(std::string path, std::vector<SafetensorsTensorInfo> tensors,
                                     const std::map<std::string, std::string>& metadata)
    : path_(std::move(path)), tensors_(std::move(tensors)) {
  const std::string header = header_bytes(path_, tensors_, metadata, bytes_);
  fd_ = create_for_writing(path_);
  write_all(fd_.get(), path_, header.data(), header.size());
  written_ = header.size();
}

void SafetensorsWriter::append(std::span<const uint8_t> bytes) {
  COLLAGE_CHECK(fd_.get() >= 0 && next_ < tensors_.size(),
                "{}: a tensor's bytes after all {} tensors of the header", path_, tensors_.size());
  const SafetensorsTensorInfo& t = tensors_[next_];
  check_bytes(path_, t.name, t.dtype, t.shape, bytes_[next_], bytes.size());
  write_all(fd_.get(), path_, bytes.data(), bytes.size());
  written_ += bytes.size();
  next_++;
}

uint64_t SafetensorsWriter::finish() {
  COLLAGE_CHECK(fd_.get() >= 0, "{}: already finished", path_);
  COLLAGE_CHECK(next_ == tensors_.size(), "{}: {} of {} tensors written; tensor '{}' is missing",
                path_, next_, tensors_.size(), tensors_[next_].name);
  sync_and_close(std::move(fd_), path_);
  return written_;
}

uint64_t write_safetensors(const std::string& path, const std::vector<SafetensorsTensor>& tensors,
                           const std::map<std::string, std::string>& metadata) {
  checked_header(path, tensors, metadata);  // every check before the file exists
  SafetensorsWriter writer(path, infos_of(tensors), metadata);
  for (const SafetensorsTensor& t : tensors) writer.append(t.bytes);
  return writer.finish();
}

uint64_t write_safetensors_streamed(const std::string& path,
                                    const std::vector<SafetensorsTensorInfo>& tensors,
                                    const std::map<std::string, std::string>& metadata,
                                    const SafetensorsBytesFn& bytes_of) {
  SafetensorsWriter writer(path, tensors, metadata);
  for (size_t i = 0; i < tensors.size(); i++) writer.append(bytes_of(i));
  return writer.finish();
}

SafetensorsHeader safetensors_header_of(int fd, const std::string& path) {
  const uint64_t size = file_size(fd, path);
  if (size < 8) fail("{}: not a safetensors file ({} bytes, no header length)", path, size);
  uint64_t n = 0;
  pread_all(fd, path, &n, 8, 0);
  if (n > size - 8 || n > kMaxHeaderBytes)
    fail("{}: header length {} does not fit the file ({} bytes) or the 100 MB limit", path, n,
         size);
  std::string text(n, '\0');
  pread_all(fd, path, text.data(), n, 8);
  const uint64_t data_start = 8 + n;
  const uint64_t data_bytes = size - data_start;

  SafetensorsHeader result;
  struct Entry {
    uint64_t begin, end;
    SafetensorsStoredTensor tensor;
  };
  std::vector<Entry> entries;
  try {
    COLLAGE_CHECK(!text.empty() && text[0] == '{', "the header is not a JSON object");
    const nlohmann::json header = nlohmann::json::parse(text);
    for (const auto& [name, value] : header.items()) {
      if (name == "__metadata__") {
        COLLAGE_CHECK(value.is_object(), "__metadata__ is not an object");
        for (const auto& [key, v] : value.items()) {
          COLLAGE_CHECK(v.is_string(), "__metadata__ value of '{}' is not a string", key);
          result.metadata[key] = v.get<std::string>();
        }
        continue;
      }
      Entry e;
      e.tensor.name = name;
      e.tensor.dtype = value.at("dtype").get<std::string>();
      e.tensor.shape = value.at("shape").get<std::vector<int64_t>>();
      const auto offsets = value.at("data_offsets").get<std::vector<uint64_t>>();
      COLLAGE_CHECK(offsets.size() == 2 && offsets[0] <= offsets[1] && offsets[1] <= data_bytes,
                    "tensor '{}': data_offsets outside the {} bytes of data (a truncated file?)",
                    name, data_bytes);
      size_t element_bytes = 0;
      try {
        element_bytes = safetensors_dtype_size(e.tensor.dtype);
      } catch (const Error& unknown) {
        fail("tensor '{}': {}", name, unknown.what());
      }
      const uint64_t bytes = byte_size(e.tensor.shape, element_bytes);
      COLLAGE_CHECK(bytes == offsets[1] - offsets[0],
                    "tensor '{}': shape [{}] of {} needs {} bytes, data_offsets span {}", name,
                    fmt::join(e.tensor.shape, ", "), e.tensor.dtype, bytes,
                    offsets[1] - offsets[0]);
      e.begin = offsets[0], e.end = offsets[1];
      e.tensor.file = path;
      e.tensor.offset = data_start + e.begin;
      e.tensor.bytes = bytes;
      entries.push_back(std::move(e));
    }
  } catch (const std::exception& e) {  // nlohmann::json errors and the checks above
    fail("{}: bad safetensors header: {}", path, e.what());
  }
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) {  // empty tensors before the one at their place
              return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
            });
  uint64_t position = 0;
  for (Entry& e : entries) {
    if (e.begin != position)
      fail("{}: tensor '{}' starts at byte {} of the data, expected {} (gap or overlap)", path,
           e.tensor.name, e.begin, position);
    position = e.end;
    result.tensors.push_back(std::move(e.tensor));
  }
  if (position != data_bytes)
    fail("{}: the tensors cover {} of the {} data bytes", path, position, data_bytes);
  return result;
}

SafetensorsFile read_safetensors(const std::string& path) {
  const FileDescriptor fd = open_for_reading(path);
  SafetensorsHeader header = safetensors_header_of(fd.get(), path);
  SafetensorsFile file;
  file.metadata = std::move(header.metadata);
  for (SafetensorsStoredTensor& t : header.tensors) {
    std::vector<uint8_t> bytes(t.bytes);
    pread_all(fd.get(), path, bytes.data(), bytes.size(), t.offset);
    file.tensors.push_back(
        {std::move(t.name), std::move(t.dtype), std::move(t.shape), std::move(bytes)});
  }
  return file;
}

}  // namespace collage
