// MMIDIDX reader (mmap + validation) and atomic writer. Layout: docs/DATA.md §2.
#include "data/megatron/indexed_dataset.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <utility>

#include "core/error.h"

namespace collage {
namespace {

constexpr char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
constexpr int64_t kHeaderBytes = 34;  // magic 9 + version 8 + dtype 1 + S 8 + D1 8

// Little-endian scalar at byte `offset` (the file is unaligned: lengths start at 34).
template <typename T>
T load(const uint8_t* base, int64_t offset) {
  T value;
  std::memcpy(&value, base + offset, sizeof(T));
  return value;
}

// Maps a whole file read-only. Returns {nullptr, 0} for an empty file (mmap rejects 0).
std::pair<const uint8_t*, size_t> map_file(const std::string& path, const char* what) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) fail("{}: cannot open {} file: {}", path, what, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    fail("{}: cannot stat: {}", path, std::strerror(err));
  }
  size_t size = static_cast<size_t>(st.st_size);
  if (size == 0) {
    ::close(fd);
    return {nullptr, 0};
  }
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  int err = errno;
  ::close(fd);
  if (p == MAP_FAILED) fail("{}: cannot mmap: {}", path, std::strerror(err));
  return {static_cast<const uint8_t*>(p), size};
}

// Explains a foreign magic so the user knows which tool wrote the file.
void check_magic(const std::string& path, const uint8_t* idx, size_t size) {
  auto starts_with = [&](const char* m, size_t n) {
    return size >= n && std::memcmp(idx, m, n) == 0;
  };
  if (starts_with(kMagic, sizeof(kMagic))) return;
  if (starts_with("TNTIDX\0\0", 8))
    fail(
        "{}: magic TNTIDX is Megatron's legacy lazy/cached IndexedDataset format; collage reads "
        "only the mmap format (MMIDIDX). Re-run preprocessing with --dataset-impl mmap",
        path);
  if (starts_with("MMIDRET\0", 8) || starts_with("KNNRETM\0", 8))
    fail("{}: magic {} is a NeMo RETRO index, not a GPT token index (expected MMIDIDX)", path,
         std::string(reinterpret_cast<const char*>(idx), 7));
  fail("{}: not an MMIDIDX index file (bad magic in the first 9 bytes)", path);
}

}  // namespace

int64_t dtype_itemsize(TokenDType dtype) {
  switch (dtype) {
    case TokenDType::uint8:
    case TokenDType::int8:
      return 1;
    case TokenDType::int16:
    case TokenDType::uint16:
      return 2;
    case TokenDType::int32:
      return 4;
    case TokenDType::int64:
      return 8;
    default:
      fail("dtype code {} is a float type, not a token dtype", static_cast<int>(dtype));
  }
}

const char* dtype_name(TokenDType dtype) {
  switch (dtype) {
    case TokenDType::uint8:
      return "uint8";
    case TokenDType::int8:
      return "int8";
    case TokenDType::int16:
      return "int16";
    case TokenDType::int32:
      return "int32";
    case TokenDType::int64:
      return "int64";
    case TokenDType::float64:
      return "float64";
    case TokenDType::float32:
      return "float32";
    case TokenDType::uint16:
      return "uint16";
  }
  return "unknown";
}

// ---------------------------------------------------------------------------------------
// Reader

IndexedDataset::IndexedDataset(const std::string& prefix) : prefix_(prefix) {
  const std::string idx_file = idx_path();
  const std::string bin_file = bin_path();
  std::tie(idx_map_, idx_size_) = map_file(idx_file, "index (.idx)");
  try {
    const int64_t size = static_cast<int64_t>(idx_size_);
    check_magic(idx_file, idx_map_, idx_size_);
    if (size < kHeaderBytes)
      fail("{}: {} bytes is too short for the 34-byte MMIDIDX header", idx_file, size);

    const uint64_t version = load<uint64_t>(idx_map_, 9);
    if (version != 1) fail("{}: version {} is not supported (only version 1)", idx_file, version);

    const uint8_t code = idx_map_[17];
    if (code == 6 || code == 7)
      fail("{}: dtype code {} is a floating-point type; token files must use an integer dtype",
           idx_file, code);
    if (code < 1 || code > 8) fail("{}: unknown dtype code {}", idx_file, code);
    dtype_ = static_cast<TokenDType>(code);
    itemsize_ = dtype_itemsize(dtype_);

    // S and D1 must be checked before computing 34 + 12 S + 8 D1 (overflow).
    const uint64_t s = load<uint64_t>(idx_map_, 18);
    const uint64_t d1 = load<uint64_t>(idx_map_, 26);
    const uint64_t room = static_cast<uint64_t>(size - kHeaderBytes);
    if (s > room / 12 || d1 > room / 8 || 12 * s + 8 * d1 > room)
      fail(
          "{}: header claims {} sequences and {} document indices, which needs {} bytes, but "
          "the file has {} bytes",
          idx_file, s, d1, "more than " + std::to_string(size), size);
    num_sequences_ = static_cast<int64_t>(s);
    num_doc_indices_ = static_cast<int64_t>(d1);
    const int64_t expected = kHeaderBytes + 12 * num_sequences_ + 8 * num_doc_indices_;
    if (size != expected) {
      if (size == expected + num_sequences_)
        fail(
            "{}: has {} extra bytes after the document index: a multimodal index "
            "(sequence_modes), which collage does not read",
            idx_file, num_sequences_);
      fail("{}: size {} bytes does not match 34 + 12*{} + 8*{} = {} from its header", idx_file,
           size, num_sequences_, num_doc_indices_, expected);
    }
    if (num_sequences_ > std::numeric_limits<int32_t>::max())
      fail("{}: {} sequences is more than collage supports (2^31-1)", idx_file, num_sequences_);
    if (num_doc_indices_ < 1)
      fail("{}: document index is empty (it must hold at least the leading 0)", idx_file);

    // Copy the three arrays into aligned storage: they sit at unaligned offsets in the file.
    const int64_t len_off = kHeaderBytes;
    const int64_t ptr_off = len_off + 4 * num_sequences_;
    const int64_t doc_off = ptr_off + 8 * num_sequences_;
    lengths_.resize(num_sequences_);
    pointers_.resize(num_sequences_);
    doc_indices_.resize(num_doc_indices_);
    std::memcpy(lengths_.data(), idx_map_ + len_off, 4 * num_sequences_);
    std::memcpy(pointers_.data(), idx_map_ + ptr_off, 8 * num_sequences_);
    std::memcpy(doc_indices_.data(), idx_map_ + doc_off, 8 * num_doc_indices_);

    // Lengths and pointers: ptr[0] = 0, ptr[i+1] = ptr[i] + len[i] * itemsize.
    int64_t expected_ptr = 0;
    for (int64_t i = 0; i < num_sequences_; ++i) {
      if (lengths_[i] < 0) fail("{}: sequence {} has negative length {}", idx_file, i, lengths_[i]);
      if (pointers_[i] != expected_ptr)
        fail(
            "{}: sequence {} starts at byte {} of the .bin, but the lengths before it put it at "
            "byte {} (inconsistent pointers)",
            idx_file, i, pointers_[i], expected_ptr);
      expected_ptr += static_cast<int64_t>(lengths_[i]) * itemsize_;
    }
    num_tokens_ = expected_ptr / itemsize_;

    // Document index: 0, nondecreasing, ends at S.
    if (doc_indices_[0] != 0)
      fail("{}: document_indices[0] is {}, must be 0", idx_file, doc_indices_[0]);
    for (int64_t k = 1; k < num_doc_indices_; ++k)
      if (doc_indices_[k] < doc_indices_[k - 1])
        fail("{}: document_indices decreases at {} ({} after {})", idx_file, k, doc_indices_[k],
             doc_indices_[k - 1]);
    if (doc_indices_.back() != num_sequences_)
      fail("{}: last document index is {}, must equal the sequence count {}", idx_file,
           doc_indices_.back(), num_sequences_);
  } catch (...) {
    release();
    throw;
  }
  // The .idx is no longer needed: everything lives in the vectors now.
  ::munmap(const_cast<uint8_t*>(idx_map_), idx_size_);
  idx_map_ = nullptr;
  idx_size_ = 0;

  std::tie(bin_map_, bin_size_) = map_file(bin_file, "token (.bin)");
  const int64_t want = num_tokens_ * itemsize_;
  const int64_t have = static_cast<int64_t>(bin_size_);
  if (have != want) {
    release();
    if (have < want)
      fail("{}: truncated .bin: {} bytes, but {} lists {} tokens of {} = {} bytes", bin_file, have,
           idx_file, num_tokens_, dtype_name(dtype_), want);
    fail("{}: {} bytes, but {} lists {} tokens of {} = {} bytes ({} extra bytes)", bin_file, have,
         idx_file, num_tokens_, dtype_name(dtype_), want, have - want);
  }
}

IndexedDataset::~IndexedDataset() { release(); }

void IndexedDataset::release() noexcept {
  if (idx_map_) ::munmap(const_cast<uint8_t*>(idx_map_), idx_size_);
  if (bin_map_) ::munmap(const_cast<uint8_t*>(bin_map_), bin_size_);
  idx_map_ = bin_map_ = nullptr;
  idx_size_ = bin_size_ = 0;
}

IndexedDataset::IndexedDataset(IndexedDataset&& other) noexcept { *this = std::move(other); }

IndexedDataset& IndexedDataset::operator=(IndexedDataset&& other) noexcept {
  if (this != &other) {
    release();
    prefix_ = std::move(other.prefix_);
    idx_map_ = std::exchange(other.idx_map_, nullptr);
    idx_size_ = std::exchange(other.idx_size_, 0);
    bin_map_ = std::exchange(other.bin_map_, nullptr);
    bin_size_ = std::exchange(other.bin_size_, 0);
    dtype_ = other.dtype_;
    itemsize_ = other.itemsize_;
    num_sequences_ = other.num_sequences_;
    num_doc_indices_ = other.num_doc_indices_;
    num_tokens_ = other.num_tokens_;
    lengths_ = std::move(other.lengths_);
    pointers_ = std::move(other.pointers_);
    doc_indices_ = std::move(other.doc_indices_);
  }
  return *this;
}

// Token `k` of the .bin (global token position) as int64.
int64_t IndexedDataset::token_at(int64_t k) const {
  const uint8_t* p = bin_map_ + k * itemsize_;
  switch (dtype_) {
    case TokenDType::uint8:
      return *p;
    case TokenDType::int8:
      return load<int8_t>(p, 0);
    case TokenDType::int16:
      return load<int16_t>(p, 0);
    case TokenDType::uint16:
      return load<uint16_t>(p, 0);
    case TokenDType::int32:
      return load<int32_t>(p, 0);
    default:
      return load<int64_t>(p, 0);
  }
}

void IndexedDataset::read(int64_t seq, int64_t offset, int64_t count, int32_t* out) const {
  if (seq < 0 || seq >= num_sequences_)
    fail("{}: sequence {} out of range [0, {})", bin_path(), seq, num_sequences_);
  const int64_t len = lengths_[seq];
  if (offset < 0 || count < 0 || offset + count > len)
    fail("{}: tokens [{}, {}) are outside sequence {} of length {}", bin_path(), offset,
         offset + count, seq, len);
  if (count == 0) return;  // `out` may be null then (an empty vector's data())
  const int64_t first = pointers_[seq] / itemsize_ + offset;
  if (dtype_ == TokenDType::int32) {
    std::memcpy(out, bin_map_ + first * 4, count * 4);
    return;
  }
  for (int64_t i = 0; i < count; ++i) {
    const int64_t v = token_at(first + i);
    if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max())
      fail("{}: token {} of sequence {} is {}, which does not fit int32", bin_path(), offset + i,
           seq, v);
    out[i] = static_cast<int32_t>(v);
  }
}

int64_t IndexedDataset::max_token_id() const {
  int64_t best = -1;
#pragma omp parallel for reduction(max : best) schedule(static)
  for (int64_t k = 0; k < num_tokens_; ++k) best = std::max(best, token_at(k));
  return best;
}

void IndexedDataset::check_token_ids(int64_t vocab_size) const {
  int64_t lo = 0, hi = -1;
#pragma omp parallel for reduction(min : lo) reduction(max : hi) schedule(static)
  for (int64_t k = 0; k < num_tokens_; ++k) {
    const int64_t v = token_at(k);
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  if (lo >= 0 && hi < vocab_size) return;
  // Find the first bad token and name its sequence and position.
  for (int64_t k = 0; k < num_tokens_; ++k) {
    const int64_t v = token_at(k);
    if (v >= 0 && v < vocab_size) continue;
    const int64_t byte = k * itemsize_;
    // The last sequence starting at or before `byte` holds it (empty sequences share their
    // pointer with the next one, so they are never the last such sequence).
    const int64_t s =
        std::upper_bound(pointers_.begin(), pointers_.end(), byte) - pointers_.begin() - 1;
    fail(
        "{}: token id {} at position {} of sequence {} (token {} of the file) is outside the "
        "vocabulary [0, {})",
        bin_path(), v, (byte - pointers_[s]) / itemsize_, s, k, vocab_size);
  }
}

// ---------------------------------------------------------------------------------------
// Writer

namespace {

// Writes all of data[0..n) or throws naming the file.
void write_all(std::FILE* f, const void* data, size_t n, const std::string& path) {
  if (n != 0 && std::fwrite(data, 1, n, f) != n)
    fail("{}: write failed: {}", path, std::strerror(errno));
}

// Flushes stdio and the kernel's cache so the data is on disk before the rename.
void flush_and_close(std::FILE* f, const std::string& path) {
  bool ok = std::fflush(f) == 0 && ::fsync(::fileno(f)) == 0;
  int err = errno;
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) fail("{}: cannot flush to disk: {}", path, std::strerror(err));
}

void rename_or_fail(const std::string& from, const std::string& to) {
  if (std::rename(from.c_str(), to.c_str()) != 0)
    fail("cannot rename {} to {}: {}", from, to, std::strerror(errno));
}

}  // namespace

TokenDType IndexedDatasetWriter::best_dtype(int64_t vocab_size) {
  return vocab_size < 65500 ? TokenDType::uint16 : TokenDType::int32;
}

IndexedDatasetWriter::IndexedDatasetWriter(std::string prefix, TokenDType dtype)
    : prefix_(std::move(prefix)), dtype_(dtype), itemsize_(0) {
  if (dtype == TokenDType::float32 || dtype == TokenDType::float64)
    fail("{}.idx: cannot write tokens as {}", prefix_, dtype_name(dtype));
  itemsize_ = dtype_itemsize(dtype);
  const std::string tmp = prefix_ + ".bin.tmp";
  bin_ = std::fopen(tmp.c_str(), "wb");
  if (!bin_) fail("{}: cannot create: {}", tmp, std::strerror(errno));
}

IndexedDatasetWriter::~IndexedDatasetWriter() {
  if (finalized_) return;
  if (bin_) std::fclose(bin_);
  std::remove((prefix_ + ".bin.tmp").c_str());
  std::remove((prefix_ + ".idx.tmp").c_str());
}

void IndexedDatasetWriter::add_document(const int32_t* tokens, int64_t n) {
  COLLAGE_CHECK(!finalized_, "{}: add_document after finalize", prefix_);
  if (n < 0 || n > std::numeric_limits<int32_t>::max())
    fail("{}: document {} has {} tokens (must be 0..2^31-1)", prefix_, lengths_.size(), n);
  // Token ids are never negative; the upper bound is the dtype's.
  int64_t hi = 0;
  switch (dtype_) {
    case TokenDType::uint8:
      hi = 255;
      break;
    case TokenDType::int8:
      hi = 127;
      break;
    case TokenDType::int16:
      hi = 32767;
      break;
    case TokenDType::uint16:
      hi = 65535;
      break;
    default:
      hi = std::numeric_limits<int32_t>::max();
      break;
  }
  buffer_.resize(static_cast<size_t>(n * itemsize_));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t v = tokens[i];
    if (v < 0 || v > hi)
      fail("{}: token {} (position {} of document {}) does not fit dtype {} (0..{})", prefix_, v, i,
           lengths_.size(), dtype_name(dtype_), hi);
    uint8_t* dst = buffer_.data() + i * itemsize_;
    // x86 and every platform we target is little-endian, as the format requires.
    switch (itemsize_) {
      case 1:
        *dst = static_cast<uint8_t>(v);
        break;
      case 2: {
        uint16_t w = static_cast<uint16_t>(v);
        std::memcpy(dst, &w, 2);
        break;
      }
      case 4: {
        int32_t w = static_cast<int32_t>(v);
        std::memcpy(dst, &w, 4);
        break;
      }
      default:
        std::memcpy(dst, &v, 8);
        break;
    }
  }
  write_all(bin_, buffer_.data(), buffer_.size(), prefix_ + ".bin.tmp");
  lengths_.push_back(static_cast<int32_t>(n));
  num_tokens_ += n;
}

void IndexedDatasetWriter::finalize() {
  COLLAGE_CHECK(!finalized_, "{}: finalize called twice", prefix_);
  const std::string bin_tmp = prefix_ + ".bin.tmp", idx_tmp = prefix_ + ".idx.tmp";
  flush_and_close(std::exchange(bin_, nullptr), bin_tmp);

  // Header + lengths[S] + byte pointers[S] + document indices[S+1] (one document per sequence).
  const uint64_t s = lengths_.size(), d1 = s + 1;
  std::vector<int64_t> pointers(s), doc_indices(d1);
  int64_t ptr = 0;
  for (uint64_t i = 0; i < s; ++i) {
    pointers[i] = ptr;
    ptr += static_cast<int64_t>(lengths_[i]) * itemsize_;
  }
  for (uint64_t k = 0; k < d1; ++k) doc_indices[k] = static_cast<int64_t>(k);

  std::FILE* idx = std::fopen(idx_tmp.c_str(), "wb");
  if (!idx) fail("{}: cannot create: {}", idx_tmp, std::strerror(errno));
  try {
    const uint64_t version = 1;
    const uint8_t code = static_cast<uint8_t>(dtype_);
    write_all(idx, kMagic, sizeof(kMagic), idx_tmp);
    write_all(idx, &version, 8, idx_tmp);
    write_all(idx, &code, 1, idx_tmp);
    write_all(idx, &s, 8, idx_tmp);
    write_all(idx, &d1, 8, idx_tmp);
    write_all(idx, lengths_.data(), 4 * s, idx_tmp);
    write_all(idx, pointers.data(), 8 * s, idx_tmp);
    write_all(idx, doc_indices.data(), 8 * d1, idx_tmp);
  } catch (...) {
    std::fclose(idx);
    throw;
  }
  flush_and_close(idx, idx_tmp);

  // The .idx is renamed last, and an old .idx is removed first, so a reader never pairs a
  // new .bin with a stale .idx: until the last rename the dataset is simply "missing".
  std::remove((prefix_ + ".idx").c_str());
  rename_or_fail(bin_tmp, prefix_ + ".bin");
  rename_or_fail(idx_tmp, prefix_ + ".idx");
  finalized_ = true;
}

}  // namespace collage
