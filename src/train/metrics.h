#pragma once
// MetricsFile: one JSON object per line (metrics.jsonl), one per logged step or
// evaluation. On resume at step s, lines of steps after s are dropped first, so the file
// always describes one consistent run.
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

namespace collage {

class MetricsFile {
 public:
  // resume_step < 0: start a new file; otherwise keep only records with step <= resume_step.
  MetricsFile(const std::string& path, int64_t resume_step);
  ~MetricsFile();
  MetricsFile(const MetricsFile&) = delete;
  MetricsFile& operator=(const MetricsFile&) = delete;

  void write(const nlohmann::json& record);  // appended and flushed

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
};

}  // namespace collage
