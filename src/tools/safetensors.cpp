// The safetensors format by hand: see safetensors.h.
#include "tools/safetensors.h"

#include <fcntl.h>
#include <fmt/ranges.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

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

void write_all(int fd, const std::string& path, const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, std::min<size_t>(size, size_t{1} << 30));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("{}: write failed: {}", path, std::strerror(errno));
    p += n, size -= size_t(n);
  }
}

void read_all(int fd, const std::string& path, void* data, size_t size) {
  char* p = static_cast<char*>(data);
  while (size > 0) {
    const ssize_t n = ::read(fd, p, std::min<size_t>(size, size_t{1} << 30));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail("{}: read failed: {}", path, std::strerror(errno));
    if (n == 0) fail("{}: truncated safetensors file (unexpected end of file)", path);
    p += n, size -= size_t(n);
  }
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

std::string safetensors_header(const std::vector<SafetensorsTensor>& tensors,
                               const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::set<std::string> names;
  uint64_t offset = 0;
  for (const SafetensorsTensor& t : tensors) {
    COLLAGE_CHECK(!t.name.empty() && t.name != "__metadata__" && names.insert(t.name).second,
                  "safetensors: tensor name '{}' is empty, reserved or repeated", t.name);
    const uint64_t bytes = byte_size(t.shape, safetensors_dtype_size(t.dtype));
    COLLAGE_CHECK(bytes == t.bytes.size(),
                  "safetensors: tensor '{}' has {} bytes, but shape [{}] of {} needs {}", t.name,
                  t.bytes.size(), fmt::join(t.shape, ", "), t.dtype, bytes);
    header[t.name] = {
        {"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string json;
  try {
    json = header.dump();
  } catch (const nlohmann::json::exception& e) {  // a name or value that is not UTF-8
    fail("safetensors: the header cannot be written as JSON: {}", e.what());
  }
  json.append((8 - json.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  const uint64_t n = json.size();
  std::string out(8, '\0');
  std::memcpy(out.data(), &n, 8);
  return out + json;
}

uint64_t write_safetensors(const std::string& path, const std::vector<SafetensorsTensor>& tensors,
                           const std::map<std::string, std::string>& metadata) {
  const std::string header = safetensors_header(tensors, metadata);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("{}: cannot create: {}", path, std::strerror(errno));
  uint64_t written = header.size();
  try {
    write_all(fd, path, header.data(), header.size());
    for (const SafetensorsTensor& t : tensors) {
      write_all(fd, path, t.bytes.data(), t.bytes.size());
      written += t.bytes.size();
    }
    if (::fsync(fd) != 0) fail("{}: fsync failed: {}", path, std::strerror(errno));
  } catch (...) {
    ::close(fd);
    throw;
  }
  if (::close(fd) != 0) fail("{}: close failed: {}", path, std::strerror(errno));
  return written;
}

SafetensorsFile read_safetensors(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("{}: cannot open: {}", path, std::strerror(errno));
  struct FdCloser {
    int fd;
    ~FdCloser() { ::close(fd); }
  } closer{fd};
  struct stat st;
  if (::fstat(fd, &st) != 0) fail("{}: cannot stat: {}", path, std::strerror(errno));
  const uint64_t size = uint64_t(st.st_size);
  if (size < 8) fail("{}: not a safetensors file ({} bytes, no header length)", path, size);
  uint64_t n = 0;
  read_all(fd, path, &n, 8);
  if (n > size - 8 || n > kMaxHeaderBytes)
    fail("{}: header length {} does not fit the file ({} bytes) or the 100 MB limit", path, n,
         size);
  std::string text(n, '\0');
  read_all(fd, path, text.data(), n);
  const uint64_t data_bytes = size - 8 - n;

  SafetensorsFile file;
  struct Entry {
    uint64_t begin, end;
    SafetensorsTensor tensor;
  };
  std::vector<Entry> entries;
  try {
    COLLAGE_CHECK(!text.empty() && text[0] == '{', "the header is not a JSON object");
    const nlohmann::json header = nlohmann::json::parse(text);
    for (const auto& [name, value] : header.items()) {
      if (name == "__metadata__") {
        for (const auto& [key, v] : value.items()) {
          COLLAGE_CHECK(v.is_string(), "__metadata__ value of '{}' is not a string", key);
          file.metadata[key] = v.get<std::string>();
        }
        continue;
      }
      Entry e;
      e.tensor.name = name;
      e.tensor.dtype = value.at("dtype").get<std::string>();
      e.tensor.shape = value.at("shape").get<std::vector<int64_t>>();
      const auto offsets = value.at("data_offsets").get<std::vector<uint64_t>>();
      COLLAGE_CHECK(offsets.size() == 2 && offsets[0] <= offsets[1] && offsets[1] <= data_bytes,
                    "tensor '{}': data_offsets outside the {} bytes of data", name, data_bytes);
      const uint64_t bytes = byte_size(e.tensor.shape, safetensors_dtype_size(e.tensor.dtype));
      COLLAGE_CHECK(bytes == offsets[1] - offsets[0],
                    "tensor '{}': shape [{}] of {} needs {} bytes, data_offsets span {}", name,
                    fmt::join(e.tensor.shape, ", "), e.tensor.dtype, bytes,
                    offsets[1] - offsets[0]);
      e.begin = offsets[0], e.end = offsets[1];
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
    e.tensor.bytes.resize(e.end - e.begin);
    read_all(fd, path, e.tensor.bytes.data(), e.tensor.bytes.size());
    position = e.end;
    file.tensors.push_back(std::move(e.tensor));
  }
  if (position != data_bytes)
    fail("{}: the tensors cover {} of the {} data bytes", path, position, data_bytes);
  return file;
}

}  // namespace collage
