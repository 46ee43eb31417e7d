#include "train/metrics.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <vector>

#include "core/error.h"

namespace collage {
namespace {

// The whole of `text` with write(2), retrying short writes; throws Error naming the file.
void write_all(int fd, const std::string& text, const std::string& path) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    COLLAGE_CHECK(n > 0, "{}: cannot write metrics: {}", path, std::strerror(errno));
    done += size_t(n);
  }
}

}  // namespace

MetricsFile::MetricsFile(const std::string& path, int64_t resume_step) : path_(path) {
  if (resume_step >= 0) {
    std::string kept;
    std::ifstream in(path);
    for (std::string line; std::getline(in, line);) {
      auto record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (record.is_object() && record.value("step", int64_t{-1}) <= resume_step)
        kept += line + "\n";
    }
    const std::string temporary = path + ".tmp";
    const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    COLLAGE_CHECK(fd >= 0, "{}: cannot open metrics file for writing: {}", temporary,
                  std::strerror(errno));
    write_all(fd, kept, temporary);
    ::fsync(fd);
    ::close(fd);
    std::filesystem::rename(temporary, path);
  }
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | (resume_step < 0 ? O_TRUNC : 0), 0644);
  COLLAGE_CHECK(fd_ >= 0, "{}: cannot open metrics file for writing: {}", path,
                std::strerror(errno));
}

MetricsFile::~MetricsFile() {
  if (fd_ >= 0) ::close(fd_);
}

void MetricsFile::write(const nlohmann::json& record) {
  write_all(fd_, record.dump() + "\n", path_);
}

std::string utc_timestamp() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t seconds = std::chrono::system_clock::to_time_t(now);
  const int millis = int(
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000);
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%S", &utc);
  return fmt::format("{}.{:03d}Z", text, millis);
}

}  // namespace collage
