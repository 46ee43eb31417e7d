#include "train/metrics.h"

#include <fstream>
#include <sstream>
#include <vector>

#include "core/error.h"

namespace collage {

MetricsFile::MetricsFile(const std::string& path, int64_t resume_step) : path_(path) {
  std::vector<std::string> kept;
  if (resume_step >= 0) {
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) {
      auto record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (record.is_object() && record.value("step", int64_t{-1}) <= resume_step) {
        kept.push_back(line);
      }
    }
  }
  file_ = std::fopen(path.c_str(), "w");
  COLLAGE_CHECK(file_ != nullptr, "{}: cannot open metrics file for writing", path);
  for (const auto& line : kept) std::fprintf(file_, "%s\n", line.c_str());
  std::fflush(file_);
}

MetricsFile::~MetricsFile() {
  if (file_) std::fclose(file_);
}

void MetricsFile::write(const nlohmann::json& record) {
  std::fprintf(file_, "%s\n", record.dump().c_str());
  std::fflush(file_);
}

}  // namespace collage
