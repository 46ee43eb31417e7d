// Checkpoint files (layout in checkpoint.h): CRC-32C, the writer, the verifying reader, and
// the directory logic (atomic save, `latest`, pruning, resume resolution).
#include "checkpoint/checkpoint.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "checkpoint/posix_file.h"
#include "core/error.h"

#if defined(__SSE4_2__)
#include <nmmintrin.h>
#endif

namespace collage {

namespace fs = std::filesystem;
static_assert(std::endian::native == std::endian::little, "checkpoints are little-endian");

namespace {

constexpr char kMagic[12] = {'C', 'O', 'L', 'L', 'A', 'G', 'E', '-', 'C', 'K', 'P', 'T'};
constexpr uint32_t kVersion = 1;
constexpr uint64_t kHeaderBytes = 32;  // magic, version, H, D
constexpr uint64_t kAlign = 64;        // data section and tensor offsets (for mmap later)

uint64_t align_up(uint64_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

}  // namespace

uint32_t crc32c(const void* data, size_t size, uint32_t crc) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  crc = ~crc;
#if defined(__SSE4_2__)  // the CRC32 instruction computes exactly CRC-32C
  uint64_t c = crc;
  for (; size >= 8; size -= 8, p += 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    c = _mm_crc32_u64(c, word);
  }
  crc = static_cast<uint32_t>(c);
  for (; size > 0; size--) crc = _mm_crc32_u8(crc, *p++);
#else
  static const std::array<uint32_t, 256> table = [] {  // byte-at-a-time, reflected polynomial
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; i++) {
      t[i] = i;
      for (int k = 0; k < 8; k++) t[i] = (t[i] >> 1) ^ (0x82F63B78u & (0u - (t[i] & 1u)));
    }
    return t;
  }();
  for (; size > 0; size--) crc = table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
#endif
  return ~crc;
}

size_t checkpoint_dtype_size(const std::string& dtype) {
  if (dtype == "bf16") return 2;
  if (dtype == "f32" || dtype == "i32") return 4;
  if (dtype == "u8") return 1;
  fail("unknown checkpoint dtype '{}' (valid: bf16, f32, i32, u8)", dtype);
}

int64_t CheckpointTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

const CheckpointTensor& Checkpoint::tensor(const std::string& name) const {
  for (const CheckpointTensor& t : tensors)
    if (t.name == name) return t;
  fail("{}: checkpoint of step {} has no tensor '{}'", path.empty() ? "checkpoint" : path, step,
       name);
}

std::string checkpoint_file_name(int64_t step) { return fmt::format("step_{:08d}.ckpt", step); }

std::string checkpoint_shard_directory_name(int64_t step) {
  return fmt::format("step_{:08d}.shards", step);
}

namespace {

// ---- writing -------------------------------------------------------------------------

// A file written through a POSIX descriptor (for fsync), checksumming what it writes.
class ChecksummedWriter {
 public:
  explicit ChecksummedWriter(std::string path) : path_(std::move(path)) {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) fail("{}: cannot create: {}", path_, std::strerror(errno));
  }
  ~ChecksummedWriter() {
    if (fd_ >= 0) ::close(fd_);
  }
  void write(const void* data, size_t size) {
    crc_ = crc32c(data, size, crc_);
    const char* p = static_cast<const char*>(data);
    while (size > 0) {
      ssize_t n = ::write(fd_, p, std::min<size_t>(size, size_t{1} << 30));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) fail("{}: write failed: {}", path_, std::strerror(errno));
      p += n, size -= size_t(n);
    }
  }
  void zeros(uint64_t count) {
    static const uint8_t zero[kAlign] = {};
    for (; count > 0; count -= std::min(count, kAlign)) write(zero, std::min(count, kAlign));
  }
  uint32_t crc() const { return crc_; }
  // fsync and close: after this the bytes are on disk.
  void commit() {
    if (::fsync(fd_) != 0) fail("{}: fsync failed: {}", path_, std::strerror(errno));
    int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) fail("{}: close failed: {}", path_, std::strerror(errno));
  }

 private:
  std::string path_;
  int fd_ = -1;
  uint32_t crc_ = 0;
};

void fsync_directory(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) fail("{}: cannot open directory: {}", dir, std::strerror(errno));
  int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) fail("{}: fsync failed: {}", dir, std::strerror(errno));
}

// Write `path.tmp` completely, then rename it to `path`: readers see all or nothing.
template <typename WriteBody>
void write_atomically(const std::string& dir, const std::string& path, WriteBody body) {
  const std::string tmp = path + ".tmp";
  try {
    ChecksummedWriter out(tmp);
    body(out);
    out.commit();
  } catch (...) {  // e.g. a full disk: do not leave a large partial file behind
    std::error_code ignored;
    fs::remove(tmp, ignored);
    throw;
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    fail("{}: cannot rename to {}: {}", tmp, path, std::strerror(errno));
  fsync_directory(dir);
}

// ---- reading -------------------------------------------------------------------------

class ChecksummedReader {
 public:
  explicit ChecksummedReader(const std::string& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) fail("{}: cannot open: {}", path, std::strerror(errno));
    struct stat st;
    if (::fstat(fd_, &st) != 0) {
      ::close(fd_);
      fail("{}: cannot stat: {}", path, std::strerror(errno));
    }
    size_ = uint64_t(st.st_size);
  }
  ~ChecksummedReader() { ::close(fd_); }
  uint64_t size() const { return size_; }
  uint32_t crc() const { return crc_; }
  // Read exactly `size` bytes into `data` (or discard them when data is null).
  void read(void* data, uint64_t size, bool checksum = true) {
    uint8_t scratch[1 << 16];
    uint8_t* p = static_cast<uint8_t*>(data);
    while (size > 0) {
      size_t want = p ? size : std::min<uint64_t>(size, sizeof scratch);
      ssize_t n = ::read(fd_, p ? p : scratch, std::min<size_t>(want, size_t{1} << 30));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) fail("{}: read failed: {}", path_, std::strerror(errno));
      if (n == 0) fail("{}: truncated checkpoint (unexpected end of file)", path_);
      if (checksum) crc_ = crc32c(p ? p : scratch, size_t(n), crc_);
      if (p) p += n;
      size -= uint64_t(n);
    }
  }

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
  uint32_t crc_ = 0;
};

// Bytes of a tensor of this shape and dtype, saturating at 2^64 (a corrupt shape must not
// overflow); UINT64_MAX for a negative dimension.
uint64_t byte_size(const std::vector<int64_t>& shape, const std::string& dtype) {
  const unsigned __int128 cap = static_cast<unsigned __int128>(1) << 64;
  unsigned __int128 bytes = checkpoint_dtype_size(dtype);
  for (int64_t d : shape) {
    if (d < 0) return UINT64_MAX;
    bytes = std::min(bytes * static_cast<uint64_t>(d), cap);
  }
  return bytes >= cap ? UINT64_MAX : static_cast<uint64_t>(bytes);
}

// Reads `path`, verifying everything; tensor bytes are kept only when `keep_data`. With
// `header_only` it stops after the metadata and the tensor directory (no data, no checksum).
Checkpoint read_checkpoint(const std::string& path, bool keep_data, bool header_only = false) {
  ChecksummedReader in(path);
  if (in.size() < kHeaderBytes + 4)
    fail("{}: truncated checkpoint ({} bytes, smaller than the header)", path, in.size());
  char magic[sizeof kMagic];
  in.read(magic, sizeof magic);
  if (std::memcmp(magic, kMagic, sizeof kMagic) != 0)
    fail("{}: not a collage checkpoint (bad magic)", path);
  uint32_t version;
  in.read(&version, sizeof version);
  if (version != kVersion)
    fail("{}: unsupported checkpoint format version {} (this build reads version {})", path,
         version, kVersion);
  uint64_t sizes[2];
  in.read(sizes, sizeof sizes);
  const uint64_t meta_bytes = sizes[0], data_bytes = sizes[1];
  if (meta_bytes > in.size() || data_bytes > in.size() ||
      align_up(kHeaderBytes + meta_bytes) + data_bytes + 4 != in.size())
    fail(
        "{}: size mismatch: the header describes {} + {} bytes but the file has {} (truncated "
        "or corrupt)",
        path, meta_bytes, data_bytes, in.size());

  std::string text(meta_bytes, '\0');
  in.read(text.data(), meta_bytes);
  in.read(nullptr, align_up(kHeaderBytes + meta_bytes) - kHeaderBytes - meta_bytes);
  Checkpoint ckpt;
  ckpt.path = path;
  std::vector<uint64_t> offsets;  // of each tensor within the data section
  try {
    nlohmann::json header = nlohmann::json::parse(text);
    ckpt.step = header.at("step").get<int64_t>();
    ckpt.meta = header.at("meta");
    std::set<std::string> names;
    uint64_t end_of_previous = 0;
    for (const nlohmann::json& entry : header.at("tensors")) {
      CheckpointTensor t;
      t.name = entry.at("name").get<std::string>();
      t.dtype = entry.at("dtype").get<std::string>();
      t.shape = entry.at("shape").get<std::vector<int64_t>>();
      uint64_t offset = entry.at("offset").get<uint64_t>(),
               bytes = entry.at("bytes").get<uint64_t>();
      if (!names.insert(t.name).second || offset < end_of_previous || offset > data_bytes ||
          bytes > data_bytes - offset || bytes != byte_size(t.shape, t.dtype))
        fail("tensor '{}' has an inconsistent directory entry", t.name);
      end_of_previous = offset + bytes;
      offsets.push_back(offset);
      t.file_offset = align_up(kHeaderBytes + meta_bytes) + offset;
      ckpt.tensors.push_back(std::move(t));
    }
  } catch (const std::exception& e) {  // nlohmann::json errors and the checks above
    fail("{}: corrupt checkpoint metadata: {}", path, e.what());
  }
  if (header_only) return ckpt;
  uint64_t position = 0;  // within the data section
  for (size_t i = 0; i < ckpt.tensors.size(); i++) {
    CheckpointTensor& t = ckpt.tensors[i];
    uint64_t bytes = byte_size(t.shape, t.dtype);
    in.read(nullptr, offsets[i] - position);  // zero gap
    if (keep_data) t.bytes.resize(bytes);
    in.read(keep_data ? t.bytes.data() : nullptr, bytes);
    position = offsets[i] + bytes;
  }
  in.read(nullptr, data_bytes - position);
  uint32_t computed = in.crc();
  uint32_t stored;
  in.read(&stored, sizeof stored, /*checksum=*/false);
  if (stored != computed)
    fail("{}: checksum mismatch (stored {:08x}, computed {:08x}): the file is corrupt", path,
         stored, computed);
  return ckpt;
}

// ---- the directory ---------------------------------------------------------------------

}  // namespace

std::map<int64_t, std::string> list_checkpoints(const std::string& dir, const std::string& suffix) {
  std::map<int64_t, std::string> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::string name = entry.path().filename().string();
    if (name.size() <= 5 + suffix.size() || name.rfind("step_", 0) != 0 ||
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
      continue;
    std::string digits = name.substr(5, name.size() - 5 - suffix.size());
    if (digits.size() < 8 || digits.size() > 18 ||
        !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
      continue;
    found[std::stoll(digits)] = entry.path().string();
  }
  return found;
}

namespace {

void remove_file(const std::string& path) {
  std::error_code ec;
  if (!fs::remove(path, ec) && ec) spdlog::warn("cannot delete {}: {}", path, ec.message());
}

void remove_shards(const std::string& dir, int64_t step) {
  std::error_code ec;
  fs::remove_all(fs::path(dir) / checkpoint_shard_directory_name(step), ec);
  if (ec) spdlog::warn("cannot delete the shards of step {} in {}: {}", step, dir, ec.message());
}

void prune(const std::string& dir, int64_t saved_step, int keep) {
  std::map<int64_t, std::string> checkpoints = list_checkpoints(dir);
  int kept = 0;
  for (auto it = checkpoints.rbegin(); it != checkpoints.rend(); ++it) {
    if (it->first > saved_step) {
      spdlog::warn(
          "{}: keeping {} although it is newer than the step {} just saved (left by a "
          "run this one was rolled back from?)",
          dir, it->second, saved_step);
    } else if (++kept > keep) {
      remove_file(it->second);
      remove_shards(dir, it->first);
    }
  }
  for (const auto& [step, tmp] : list_checkpoints(dir, ".ckpt.tmp"))
    if (step < saved_step) remove_file(tmp);  // a crash's leftover
  // Shards of a save that never got its manifest (a rank died while saving).
  for (const auto& [step, shards] : list_checkpoints(dir, ".shards"))
    if (step < saved_step && !checkpoints.contains(step)) remove_shards(dir, step);
}

}  // namespace

void remove_checkpoints(const std::string& dir) {
  for (const char* suffix : {".ckpt", ".ckpt.tmp"})
    for (const auto& [step, path] : list_checkpoints(dir, suffix)) remove_file(path);
  for (const auto& [step, shards] : list_checkpoints(dir, ".shards")) remove_shards(dir, step);
  std::error_code ec;
  fs::remove(fs::path(dir) / "latest", ec);
}

void write_checkpoint_file(const std::string& path, const Checkpoint& checkpoint) {
  const std::string dir = fs::path(path).parent_path().string();
  COLLAGE_CHECK(checkpoint.step >= 0, "{}: checkpoint step must be >= 0, got {}", dir,
                checkpoint.step);
  // The directory of tensors: where each one's bytes go in the data section.
  nlohmann::json tensors = nlohmann::json::array();
  std::set<std::string> names;
  uint64_t data_bytes = 0;
  for (const CheckpointTensor& t : checkpoint.tensors) {
    COLLAGE_CHECK(!t.name.empty() && names.insert(t.name).second,
                  "{}: checkpoint tensor name '{}' is empty or repeated", dir, t.name);
    COLLAGE_CHECK(t.bytes.size() == byte_size(t.shape, t.dtype),
                  "{}: checkpoint tensor '{}' has {} bytes, but shape [{}] of {} needs {}", dir,
                  t.name, t.bytes.size(), fmt::join(t.shape, ", "), t.dtype,
                  byte_size(t.shape, t.dtype));
    data_bytes = align_up(data_bytes);
    tensors.push_back({{"name", t.name},
                       {"dtype", t.dtype},
                       {"shape", t.shape},
                       {"offset", data_bytes},
                       {"bytes", t.bytes.size()}});
    data_bytes += t.bytes.size();
  }
  std::string meta;
  try {
    meta =
        nlohmann::json{{"step", checkpoint.step}, {"meta", checkpoint.meta}, {"tensors", tensors}}
            .dump();
  } catch (const nlohmann::json::exception& e) {  // e.g. a string that is not UTF-8
    fail("{}: checkpoint metadata of step {} cannot be stored: {}", dir, checkpoint.step, e.what());
  }

  if (!dir.empty()) fs::create_directories(dir);
  write_atomically(dir.empty() ? "." : dir, path, [&](ChecksummedWriter& out) {
    out.write(kMagic, sizeof kMagic);
    out.write(&kVersion, sizeof kVersion);
    const uint64_t sizes[2] = {meta.size(), data_bytes};
    out.write(sizes, sizeof sizes);
    out.write(meta.data(), meta.size());
    out.zeros(align_up(kHeaderBytes + meta.size()) - kHeaderBytes - meta.size());
    uint64_t position = 0;
    for (const CheckpointTensor& t : checkpoint.tensors) {
      out.zeros(align_up(position) - position);
      out.write(t.bytes.data(), t.bytes.size());
      position = align_up(position) + t.bytes.size();
    }
    const uint32_t crc = out.crc();
    out.write(&crc, sizeof crc);
  });
}

std::string save_checkpoint(const std::string& dir, const Checkpoint& checkpoint, int keep) {
  COLLAGE_CHECK(keep >= 1, "{}: checkpoint.keep must be >= 1, got {}", dir, keep);
  const std::string path = (fs::path(dir) / checkpoint_file_name(checkpoint.step)).string();
  write_checkpoint_file(path, checkpoint);
  const std::string name = checkpoint_file_name(checkpoint.step) + "\n";
  write_atomically(dir, (fs::path(dir) / "latest").string(),
                   [&](ChecksummedWriter& out) { out.write(name.data(), name.size()); });
  prune(dir, checkpoint.step, keep);
  return path;
}

Checkpoint load_checkpoint(const std::string& path) { return read_checkpoint(path, true); }

Checkpoint read_checkpoint_header(const std::string& path) {
  return read_checkpoint(path, /*keep_data=*/false, /*header_only=*/true);
}

std::vector<uint8_t> read_checkpoint_tensor(const std::string& path,
                                            const CheckpointTensor& tensor) {
  std::vector<uint8_t> bytes(byte_size(tensor.shape, tensor.dtype));
  const FileDescriptor fd = open_for_reading(path);
  pread_all(fd.get(), path, bytes.data(), bytes.size(), tensor.file_offset);
  return bytes;
}

std::vector<std::string> checkpoint_shard_paths(const Checkpoint& manifest) {
  std::vector<std::string> paths;
  if (!manifest.meta.contains("shards")) return paths;
  const fs::path dir = fs::path(manifest.path).parent_path();
  try {
    for (const nlohmann::json& name : manifest.meta.at("shards"))
      paths.push_back((dir / name.get<std::string>()).string());
  } catch (const nlohmann::json::exception& e) {
    fail("{}: corrupt list of shards: {}", manifest.path, e.what());
  }
  return paths;
}

void check_shard_of_set(const Checkpoint& manifest, const Checkpoint& shard) {
  COLLAGE_CHECK(shard.step == manifest.step,
                "{}: a shard of step {}, listed by the manifest {} of step {}: the set mixes "
                "saves",
                shard.path, shard.step, manifest.path, manifest.step);
  if (!manifest.meta.contains("save_id")) return;
  const std::string want = manifest.meta.at("save_id").dump();
  const std::string got = shard.meta.contains("save_id") ? shard.meta.at("save_id").dump() : "none";
  COLLAGE_CHECK(got == want,
                "{}: written by another save (save_id {}) than its manifest {} (save_id {}): "
                "the set mixes saves, as when a rank was killed while the step was rewritten",
                shard.path, got, manifest.path, want);
}

void verify_checkpoint(const std::string& path) {
  // A manifest is good only with every shard it lists, each of its own save.
  const Checkpoint manifest = read_checkpoint(path, false);
  for (const std::string& shard : checkpoint_shard_paths(manifest))
    check_shard_of_set(manifest, read_checkpoint(shard, false));
}

std::string resolve_resume(const std::string& arg, const std::string& dir) {
  if (arg != "latest") {
    if (fs::is_directory(arg)) return resolve_resume("latest", arg);
    COLLAGE_CHECK(fs::is_regular_file(arg), "{}: no such checkpoint file", arg);
    return arg;
  }
  // Candidates: what `latest` names first (it is the most recent save even after a
  // rollback to an earlier step), then every checkpoint from the highest step down.
  std::vector<std::string> candidates;
  std::ifstream latest(fs::path(dir) / "latest");
  std::string named;
  if (latest >> named && named.find('/') == std::string::npos)
    candidates.push_back((fs::path(dir) / named).string());
  std::map<int64_t, std::string> checkpoints = list_checkpoints(dir);
  for (auto it = checkpoints.rbegin(); it != checkpoints.rend(); ++it)
    if (candidates.empty() || it->second != candidates[0]) candidates.push_back(it->second);
  COLLAGE_CHECK(!checkpoints.empty(), "{}: no checkpoint to resume from (no step_*.ckpt files)",
                dir);
  for (const std::string& candidate : candidates) {
    try {
      verify_checkpoint(candidate);
      return candidate;
    } catch (const Error& e) {
      spdlog::warn("not resuming from {}: {}", candidate, e.what());
    }
  }
  fail("{}: none of its {} checkpoints verifies (see the warnings above)", dir, checkpoints.size());
}

}  // namespace collage
