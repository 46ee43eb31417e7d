// Plain text and JSONL documents for prepare-gpt (see document_reader.h).
#include "data/text/document_reader.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"

namespace collage {

namespace fs = std::filesystem;

bool DocumentReader::is_jsonl(const std::string& path) {
  const std::string ext = fs::path(path).extension().string();
  return ext == ".jsonl" || ext == ".json";
}

DocumentReader::DocumentReader(std::vector<std::string> paths, std::string jsonl_key)
    : paths_(std::move(paths)), jsonl_key_(std::move(jsonl_key)) {
  if (paths_.empty()) fail("prepare-gpt: no input files");
  for (const auto& path : paths_) {
    std::error_code ec;
    if (!fs::is_regular_file(path, ec)) {
      fail("{}: {}", path, fs::exists(path, ec) ? "not a regular file" : "no such file");
    }
    total_file_bytes_ += static_cast<int64_t>(fs::file_size(path, ec));
  }
}

bool DocumentReader::read_batch(std::vector<SourceDocument>& batch, int64_t max_bytes,
                                int64_t max_documents) {
  int64_t bytes = 0, count = 0;
  SourceDocument doc;
  while (count < max_documents && bytes < max_bytes && next(doc)) {
    bytes += static_cast<int64_t>(doc.text.size());
    ++count;
    batch.push_back(std::move(doc));
  }
  return count > 0;
}

bool DocumentReader::next(SourceDocument& doc) {
  while (true) {
    if (jsonl_.is_open()) {
      if (next_jsonl_line(doc)) return true;
      jsonl_.close();
    }
    if (next_path_ == paths_.size()) return false;
    const std::string& path = paths_[next_path_++];
    if (is_jsonl(path)) {
      jsonl_.clear();
      jsonl_.open(path, std::ios::binary);
      if (!jsonl_) fail("{}: cannot open ({})", path, std::strerror(errno));
      jsonl_path_ = path;
      jsonl_line_ = 0;
      continue;
    }
    std::ifstream in(path, std::ios::binary);
    if (!in) fail("{}: cannot open ({})", path, std::strerror(errno));
    std::ostringstream text;
    text << in.rdbuf();
    if (in.bad()) fail("{}: read error", path);
    doc.text = std::move(text).str();
    doc.origin = path;
    doc.file_bytes = static_cast<int64_t>(doc.text.size());
    return true;
  }
}

// The next non-blank line's document; false at the end of the file.
bool DocumentReader::next_jsonl_line(SourceDocument& doc) {
  std::string line;
  while (std::getline(jsonl_, line)) {
    ++jsonl_line_;
    const int64_t line_bytes = static_cast<int64_t>(line.size()) + 1;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = jsonl_path_ + ":" + std::to_string(jsonl_line_);
    nlohmann::json object;
    try {
      object = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      fail("{}: not valid JSON ({})", where, e.what());
    }
    if (!object.is_object())
      fail("{}: expected one JSON object per line, found a JSON {}", where, object.type_name());
    auto field = object.find(jsonl_key_);
    if (field == object.end())
      fail("{}: the object has no \"{}\" field (the document field: --json-key)", where,
           jsonl_key_);
    if (!field->is_string()) {
      fail("{}: field \"{}\" is a {}, not a string", where, jsonl_key_, field->type_name());
    }
    doc.text = field->get<std::string>();
    doc.origin = where;
    doc.file_bytes = line_bytes;
    return true;
  }
  if (jsonl_.bad()) fail("{}: read error", jsonl_path_);
  return false;
}

}  // namespace collage
