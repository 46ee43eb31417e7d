#pragma once
// Megatron / NeMo "MMIDIDX" indexed dataset: a pair of files
//   <prefix>.bin  raw little-endian tokens of every sequence, back to back
//   <prefix>.idx  header (magic, version, dtype code, S, D1) + i32 lengths[S]
//                 + i64 byte pointers[S] + i64 document_indices[D1]
// (layout: docs/DATA.md §2). IndexedDataset maps an existing pair read-only
// and validates every field against the file sizes; IndexedDatasetWriter produces a pair
// that appears atomically (written under .tmp names, fsynced, then renamed).
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

namespace collage {

// Token dtype codes stored at offset 17 of the .idx (mcore numbering). Only integer codes
// are valid for token files; 6 (float64) and 7 (float32 in mcore, float64 in legacy
// Megatron) are rejected by the reader.
enum class TokenDType : uint8_t {
  uint8 = 1,
  int8 = 2,
  int16 = 3,
  int32 = 4,
  int64 = 5,
  float64 = 6,
  float32 = 7,
  uint16 = 8
};

// Bytes per token of an integer dtype (throws Error for float codes).
int64_t dtype_itemsize(TokenDType dtype);
// "uint16", "int32", ... for messages and `collage inspect`.
const char* dtype_name(TokenDType dtype);

// A read-only memory-mapped view of <prefix>.idx / <prefix>.bin.
class IndexedDataset {
 public:
  // Maps prefix.idx and prefix.bin; throws collage::Error naming the file and the problem
  // for anything inconsistent (magic, version, dtype, sizes, pointers, document index).
  explicit IndexedDataset(const std::string& prefix);
  ~IndexedDataset();
  IndexedDataset(const IndexedDataset&) = delete;
  IndexedDataset& operator=(const IndexedDataset&) = delete;
  IndexedDataset(IndexedDataset&& other) noexcept;
  IndexedDataset& operator=(IndexedDataset&& other) noexcept;

  const std::string& prefix() const { return prefix_; }
  std::string idx_path() const { return prefix_ + ".idx"; }
  std::string bin_path() const { return prefix_ + ".bin"; }

  int64_t num_sequences() const { return num_sequences_; }        // S
  int64_t num_documents() const { return num_doc_indices_ - 1; }  // D1 - 1
  int64_t num_tokens() const { return num_tokens_; }              // sum of sequence lengths
  TokenDType dtype() const { return dtype_; }
  int64_t itemsize() const { return itemsize_; }

  // The three .idx arrays (copied out of the mapping at load: in the file they sit at
  // unaligned offsets). Valid while this object lives.
  std::span<const int32_t> sequence_lengths() const { return lengths_; }  // [S] tokens per sequence
  std::span<const int64_t> sequence_pointers() const {
    return pointers_;
  }  // [S] byte offset in .bin
  std::span<const int64_t> document_indices() const {
    return doc_indices_;
  }  // [D1] first sequence of each doc

  // Copies tokens [offset, offset+count) of sequence `seq` into out[0..count), widened to
  // int32. Throws Error if the range is outside the sequence.
  void read(int64_t seq, int64_t offset, int64_t count, int32_t* out) const;

  // Largest token id in the whole .bin (scans it; -1 for an empty file).
  int64_t max_token_id() const;
  // Throws Error naming the .bin, the sequence and the position of the first token that is
  // < 0 or >= vocab_size. Scans the whole .bin.
  void check_token_ids(int64_t vocab_size) const;

 private:
  void release() noexcept;
  int64_t token_at(int64_t k) const;  // token k of the whole .bin, widened

  std::string prefix_;
  const uint8_t* idx_map_ = nullptr;  // whole .idx, mapped only while validating
  size_t idx_size_ = 0;
  const uint8_t* bin_map_ = nullptr;  // whole .bin (nullptr when the .bin is empty)
  size_t bin_size_ = 0;
  TokenDType dtype_ = TokenDType::uint16;
  int64_t itemsize_ = 2;
  int64_t num_sequences_ = 0;
  int64_t num_doc_indices_ = 0;  // D1
  int64_t num_tokens_ = 0;
  std::vector<int32_t> lengths_;      // [S]
  std::vector<int64_t> pointers_;     // [S] bytes
  std::vector<int64_t> doc_indices_;  // [D1]
};

// Writes a new <prefix>.bin / <prefix>.idx pair. Each add_document() call appends one
// sequence that is also one document (the layout Megatron's preprocess_data.py produces
// without --split-sentences). Nothing appears under the real names until finalize().
class IndexedDatasetWriter {
 public:
  IndexedDatasetWriter(std::string prefix, TokenDType dtype);
  ~IndexedDatasetWriter();  // removes the .tmp files if finalize() was never called
  IndexedDatasetWriter(const IndexedDatasetWriter&) = delete;
  IndexedDatasetWriter& operator=(const IndexedDatasetWriter&) = delete;

  // Appends tokens[0..n) as one sequence + one document. Throws Error if a token does not
  // fit the dtype (e.g. >= 65536 for uint16) or n exceeds int32.
  void add_document(const int32_t* tokens, int64_t n);
  void add_document(const std::vector<int32_t>& tokens) {
    add_document(tokens.data(), static_cast<int64_t>(tokens.size()));
  }

  // Writes the .idx, fsyncs both files and renames <prefix>.bin.tmp -> <prefix>.bin and
  // <prefix>.idx.tmp -> <prefix>.idx. The writer cannot be used afterwards.
  void finalize();

  int64_t num_documents() const { return static_cast<int64_t>(lengths_.size()); }
  int64_t num_tokens() const { return num_tokens_; }

  // Megatron's choice: uint16 if vocab_size < 65500, else int32.
  static TokenDType best_dtype(int64_t vocab_size);

 private:
  std::string prefix_;
  TokenDType dtype_;
  int64_t itemsize_;
  std::FILE* bin_ = nullptr;  // <prefix>.bin.tmp while open
  std::vector<int32_t> lengths_;
  int64_t num_tokens_ = 0;
  std::vector<uint8_t> buffer_;  // one document encoded in dtype_
  bool finalized_ = false;
};

}  // namespace collage
