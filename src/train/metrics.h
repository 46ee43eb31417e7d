#pragma once
// MetricsFile: one JSON object per line (metrics.jsonl), one per logged step or
// evaluation. On resume at step s, lines of steps after s are dropped first (the cut file
// replaces the old one by a rename, so a crash leaves one or the other, never half), so the
// file always describes one consistent run. Each record is appended with a single write(2):
// a run killed with SIGKILL leaves whole lines only.
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

  void write(const nlohmann::json& record);  // appended, whole

 private:
  std::string path_;
  int fd_ = -1;
};

// Now as ISO 8601 UTC with milliseconds, "2026-11-23T17:04:05.123Z": the records' "time".
std::string utc_timestamp();

}  // namespace collage
