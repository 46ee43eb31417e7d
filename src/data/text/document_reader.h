#pragma once
// The documents of `collage prepare-gpt`'s inputs, in order:
//   - a .jsonl or .json file holds one JSON object per line; the document is the string
//     field `jsonl_key` (Megatron's preprocess_data.py input format; blank lines skipped);
//   - any other file is plain text and is one whole document.
// Every problem throws Error naming the file (and the line for JSONL).
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

namespace collage {

struct SourceDocument {
  std::string text;
  std::string origin;      // "path" or "path:line", for messages
  int64_t file_bytes = 0;  // bytes of the input file this document accounts for (progress)
};

class DocumentReader {
 public:
  // Checks up front that every path is a readable regular file.
  DocumentReader(std::vector<std::string> paths, std::string jsonl_key);

  int64_t total_file_bytes() const { return total_file_bytes_; }

  // Appends documents to `batch` until it holds max_documents or max_bytes of text (at least
  // one document). Returns false if there was nothing left to read.
  bool read_batch(std::vector<SourceDocument>& batch, int64_t max_bytes, int64_t max_documents);

  static bool is_jsonl(const std::string& path);

 private:
  bool next(SourceDocument& doc);  // false at the end of the last input
  bool next_jsonl_line(SourceDocument& doc);

  std::vector<std::string> paths_;
  std::string jsonl_key_;
  int64_t total_file_bytes_ = 0;
  size_t next_path_ = 0;  // index of the next input to open
  std::ifstream jsonl_;   // the JSONL file being read, if any
  std::string jsonl_path_;
  int64_t jsonl_line_ = 0;
};

}  // namespace collage
