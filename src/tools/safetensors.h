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
// The writer lays tensors out in the order given, back to back; all of one dtype (an export is
// BF16 or F32 throughout), every tensor then starts aligned to its element size.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace collage {

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

// Bytes per element of a safetensors dtype name; throws Error for one it does not know.
size_t safetensors_dtype_size(const std::string& dtype);

// The 8-byte length and the padded JSON header of a file holding `tensors` back to back in
// this order (what write_safetensors writes before the data). Checks names (non-empty, unique,
// not "__metadata__"), dtypes and that each tensor's bytes match its shape; Error otherwise.
std::string safetensors_header(const std::vector<SafetensorsTensor>& tensors,
                               const std::map<std::string, std::string>& metadata);

// Writes the file at `path` (created or truncated) and fsyncs it; returns the bytes written.
// Not atomic by itself: callers write into a temporary name or directory and rename.
uint64_t write_safetensors(const std::string& path, const std::vector<SafetensorsTensor>& tensors,
                           const std::map<std::string, std::string>& metadata);

// Reads and checks a safetensors file (header length and JSON, dtypes, shapes against
// offsets, tensors covering the data exactly, metadata strings); Error naming the file.
SafetensorsFile read_safetensors(const std::string& path);

}  // namespace collage
