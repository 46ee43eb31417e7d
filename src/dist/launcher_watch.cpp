// The launcher watch (launcher_watch.h).
#include "dist/launcher_watch.h"

#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "core/error_lines.h"

namespace collage {
namespace {

std::atomic<pid_t> g_launcher{0};  // the parent at start; 0: no watch

}  // namespace

void stop_if_launcher_gone() {
  const pid_t launcher = g_launcher.load(std::memory_order_relaxed);
  if (launcher == 0 || ::getppid() == launcher) return;
  print_error("collage: error: ",
              fmt::format("the launcher (pid {}: mpirun, orted or slurmstepd) has gone: ending "
                          "this rank now, without a checkpoint (the newest written one stays)",
                          launcher));
  std::_Exit(1);
}

void start_launcher_watch() {
  static std::once_flag started;
  std::call_once(started, [] {
    const pid_t parent = ::getppid();
    if (parent <= 1) return;  // already an orphan: nothing to tell apart
    g_launcher.store(parent);
    // Detached: it holds nothing, and the process may end in any way while it sleeps.
    std::thread([] {
      while (true) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        stop_if_launcher_gone();
      }
    }).detach();
  });
}

}  // namespace collage
