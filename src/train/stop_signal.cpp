// Signal handlers for a clean stop (stop_signal.h). The handler only stores the signal number:
// everything else (the checkpoint, the logs) happens in the training loop.
#include "train/stop_signal.h"

#include <unistd.h>

#include <atomic>
#include <csignal>

namespace collage {
namespace {

std::atomic<int> received{0};

void on_stop_signal(int signal) {
  int expected = 0;
  if (received.compare_exchange_strong(expected, signal)) return;
  if (signal == SIGINT) {  // the second Ctrl-C: abort now (write(2) is async-signal-safe)
    static const char message[] = "collage: second SIGINT: aborting without a checkpoint\n";
    (void)!::write(STDERR_FILENO, message, sizeof(message) - 1);
    std::signal(SIGINT, SIG_DFL);
    std::raise(SIGINT);
  }
}

}  // namespace

void install_stop_signals() {
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // a blocking read or MPI call continues after the handler
  for (int signal : {SIGTERM, SIGINT, SIGUSR1}) sigaction(signal, &action, nullptr);
}

int stop_signal_received() { return received.load(); }

void clear_stop_signal() { received.store(0); }

}  // namespace collage
