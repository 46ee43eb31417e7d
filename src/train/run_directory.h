#pragma once
// One run per directory: `collage train` holds an exclusive flock(2) on <dir>/collage.lock of
// every directory it writes (logging.dir and checkpoint.dir; world rank 0 under mpirun) for its
// whole life, with its pid in the file, so a second run on either fails naming the holder
// instead of interleaving logs, metrics and checkpoints, or deleting the first run's
// checkpoints with --overwrite. flock locks the file, not its name: two paths that reach one
// directory through symlinks meet at the same lock. The kernel drops the lock when the process
// ends, however it ends: a killed run never leaves a stale lock.
#include <string>

namespace collage {

class RunDirectoryLock {
 public:
  // Locks `dir`, which `key` names in messages ("logging.dir", "checkpoint.dir"). When another
  // process holds it, waits up to `wait_seconds` for it to end (a requeued job whose previous
  // incarnation is still dying), logging the wait once; then throws Error naming the directory
  // (symlinks resolved) and the holder's pid.
  RunDirectoryLock(const std::string& dir, const std::string& key, double wait_seconds = 0);
  ~RunDirectoryLock();
  RunDirectoryLock(const RunDirectoryLock&) = delete;
  RunDirectoryLock& operator=(const RunDirectoryLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace collage
