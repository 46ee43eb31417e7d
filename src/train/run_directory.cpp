// The run directories' locks (run_directory.h).
#include "train/run_directory.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "core/error.h"

namespace collage {
namespace {

std::string holder_pid(const std::string& lock_path) {
  std::string pid;
  std::ifstream(lock_path) >> pid;
  return pid.empty() ? "unknown" : pid;
}

}  // namespace

RunDirectoryLock::RunDirectoryLock(const std::string& dir, const std::string& key,
                                   double wait_seconds) {
  std::error_code ec;
  const std::filesystem::path resolved = std::filesystem::canonical(dir, ec);
  const std::string where = ec ? dir : resolved.string();
  const std::string path = (std::filesystem::path(where) / "collage.lock").string();
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  COLLAGE_CHECK(fd_ >= 0, "{}: cannot open {}: {}", key, path, std::strerror(errno));
  using Clock = std::chrono::steady_clock;
  const Clock::time_point deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double>(std::max(0.0, wait_seconds)));
  bool told = false;
  while (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    if (Clock::now() >= deadline) {
      const std::string holder = holder_pid(path);
      ::close(fd_);
      fd_ = -1;
      fail(
          "{} {} is in use by another collage run (pid {}){}; wait for it to end, give this run "
          "another {}, or let it wait with --wait-lock SECONDS",
          key, where, holder,
          wait_seconds > 0 ? fmt::format(", still after waiting {} s", wait_seconds) : "", key);
    }
    if (!told) {
      spdlog::info(
          "{} {} is in use by another collage run (pid {}): waiting up to {} s for it "
          "to end",
          key, where, holder_pid(path), wait_seconds);
      told = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd_, 0) == 0) (void)!::write(fd_, pid.data(), pid.size());
}

RunDirectoryLock::~RunDirectoryLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock
}

}  // namespace collage
