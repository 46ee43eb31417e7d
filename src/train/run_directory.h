#pragma once
// One run per run directory: `collage train` holds an exclusive flock(2) on
// <logging.dir>/collage.lock for its whole life (world rank 0 under mpirun), with its pid in the
// file, so a second run on the same directory fails at once naming the holder instead of
// interleaving logs, metrics and checkpoints. The kernel drops the lock when the process ends,
// however it ends: a killed run never leaves a stale lock.
#include <string>

namespace collage {

class RunDirectoryLock {
 public:
  // Throws Error naming the directory and the pid of the run that holds it.
  explicit RunDirectoryLock(const std::string& dir);
  ~RunDirectoryLock();
  RunDirectoryLock(const RunDirectoryLock&) = delete;
  RunDirectoryLock& operator=(const RunDirectoryLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace collage
