#pragma once
// The safetensors format (Hugging Face's, https://github.com/huggingface/safetensors), written
// and read by hand:
//
//   offset 0   8 B   u64 little-endian N: bytes of the header
//          8   N B   JSON header, UTF-8, padded with spaces to make 8 + N a multiple of 8:
//                    {"NAME": {"dtype": "BF16", "shape": [d0, d1], "data_offsets": [begin, end]},
//                     ..., "__metadata__": {"key": "value", ...}}   (string values only)
//          8+N       the tensors' raw little-endian, row-major bytes; data_offsets are relative
//                    to this point, and the tensors cover it exactly: no gaps, no overlap
//
// The writers lay tensors out in the order given, back to back; all of one dtype (an export is
// BF16 or F32 throughout), every tensor then starts aligned to its element size. Since the
// header holds only names, dtypes and shapes, it is written before any tensor's bytes exist:
// SafetensorsWriter then takes the bytes one tensor at a time, so a writer that produces each
// tensor when it is needed (write_safetensors_streamed) holds one tensor, not the model.
//
// A model split over several such files (Hugging Face's "sharded checkpoint") is
// safetensors_shards.h; reading one lazily, safetensors_reader.h.
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "checkpoint/posix_file.h"

namespace collage {

// What a header says of a tensor: everything but its bytes.
struct SafetensorsTensorInfo {
  std::string name;
  std::string dtype;           // safetensors names: "BF16", "F32", "F16", "F64", "I32", ...
  std::vector<int64_t> shape;  // {} is a scalar
};

struct SafetensorsTensor {
  std::string name;
  std::string dtype;           // safetensors names: "BF16", "F32", "F16", "F64", "I32", ...
  std::vector<int64_t> shape;  // {} is a scalar
  std::vector<uint8_t> bytes;  // numel · dtype size, little-endian, row-major
};

struct SafetensorsFile {
  std::map<std::string, std::string> metadata;  // "__metadata__"
  std::vector<SafetensorsTensor> tensors;       // in file (offset) order
};

// A tensor as a file's header places it: its entry and where its bytes lie.
struct SafetensorsStoredTensor {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  std::string file;     // the path of the file that holds it
  uint64_t offset = 0;  // of its first byte from the start of the file: 8 + N + begin
  uint64_t bytes = 0;   // end - begin = numel · dtype size
};

// A file's header, checked against the file's size (safetensors_header_of).
struct SafetensorsHeader {
  std::map<std::string, std::string> metadata;   // "__metadata__"
  std::vector<SafetensorsStoredTensor> tensors;  // in offset order
};

// The bytes of tensor `index` (of the list given to a writer), made when the writer needs them.
using SafetensorsBytesFn = std::function<std::vector<uint8_t>(size_t index)>;

// Bytes per element of a safetensors dtype name; throws Error for one it does not know.
size_t safetensors_dtype_size(const std::string& dtype);

// numel · dtype size of a tensor; Error for an unknown dtype, a negative dimension, or a size
// past 2^64.
uint64_t safetensors_tensor_bytes(const SafetensorsTensorInfo& tensor);

// The 8-byte length and the padded JSON header of a file holding `tensors` back to back in
// this order (what the writers write before the data). Checks names (non-empty, unique, not
// "__metadata__") and dtypes and shapes; Error otherwise.
std::string safetensors_header(const std::vector<SafetensorsTensorInfo>& tensors,
                               const std::map<std::string, std::string>& metadata);
// The same for tensors with their bytes, also checking that each one's bytes match its shape.
std::string safetensors_header(const std::vector<SafetensorsTensor>& tensors,
                               const std::map<std::string, std::string>& metadata);

// A safetensors file written one tensor at a time. The constructor creates (or truncates)
// `path` and writes the header; append() takes the next tensor's bytes in header order;
// finish() fsyncs and closes. A writer destroyed before finish() (an Error on the way) leaves
// the file partial, which the reader refuses (its offsets run past the end): not atomic by
// itself, callers write under a temporary name or directory and rename.
class SafetensorsWriter {
 public:
  // Errors as safetensors_header's, before the file is created, but naming `path`.
  SafetensorsWriter(std::string path, std::vector<SafetensorsTensorInfo> tensors,
                    const std::map<std::string, std::string>& metadata);

  // The bytes of tensor appended() of the header (numel · dtype size); Error naming the tensor
  // and the file when their size is not its shape's, or when every tensor is already written.
  void append(std::span<const uint8_t> bytes);
  size_t appended() const { return next_; }
  const std::string& path() const { return path_; }

  // After the last tensor: fsyncs and closes; returns the file's size in bytes. Error if a
  // tensor was not appended.
  uint64_t finish();

 private:
  std::string path_;
  std::vector<SafetensorsTensorInfo> tensors_;
  std::vector<uint64_t> bytes_;  // (tensors) numel · dtype size of each
  FileDescriptor fd_;
  size_t next_ = 0;       // the tensor append() writes next
  uint64_t written_ = 0;  // bytes written so far, header included
};

// Writes the file at `path` (created or truncated) and fsyncs it; returns the bytes written.
// Every tensor is checked before the file is created. Not atomic by itself: callers write
// into a temporary name or directory and rename.
uint64_t write_safetensors(const std::string& path, const std::vector<SafetensorsTensor>& tensors,
                           const std::map<std::string, std::string>& metadata);

// Writes the file at `path` from the tensors' entries, asking `bytes_of(i)` for tensor i's
// bytes once each, in order 0, 1, ..., and writing them at once: one tensor is in memory at a
// time. fsyncs at the end; returns the bytes written. A callback that returns the wrong number
// of bytes is an Error naming the tensor and the file (the file is left partial).
uint64_t write_safetensors_streamed(const std::string& path,
                                    const std::vector<SafetensorsTensorInfo>& tensors,
                                    const std::map<std::string, std::string>& metadata,
                                    const SafetensorsBytesFn& bytes_of);

// Reads and checks the header of the safetensors file open as `fd` (named `path` in errors
// and in the tensors' `file`): the header length and JSON, dtypes, shapes against offsets,
// tensors covering the data exactly, metadata strings, all against the file's size, reading
// none of the data; Error naming the file (and the tensor or key).
SafetensorsHeader safetensors_header_of(int fd, const std::string& path);

// Reads and checks a whole safetensors file (the header as above, then the data); Error naming
// the file.
SafetensorsFile read_safetensors(const std::string& path);

}  // namespace collage
