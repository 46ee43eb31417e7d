// The run directory's lock (run_directory.h).
#include "train/run_directory.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"

namespace collage {

RunDirectoryLock::RunDirectoryLock(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / "collage.lock").string();
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  COLLAGE_CHECK(fd_ >= 0, "logging.dir: cannot open {}: {}", path, std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    std::string holder;
    std::ifstream(path) >> holder;
    ::close(fd_);
    fd_ = -1;
    fail(
        "logging.dir {} is in use by another collage run (pid {}); wait for it to end, or give "
        "this run another logging.dir",
        dir, holder.empty() ? "unknown" : holder);
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd_, 0) == 0) (void)!::write(fd_, pid.data(), pid.size());
}

RunDirectoryLock::~RunDirectoryLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock
}

}  // namespace collage
