// The SIGSEGV report of fault_handler.h.
#include "simt/fault_handler.h"

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace simt::detail {
namespace {

struct sigaction previous_action;

void write_stderr(const char* text) {
  size_t length = std::strlen(text);
  while (length > 0) {
    const ssize_t written = write(STDERR_FILENO, text, length);
    if (written <= 0) return;
    text += written;
    length -= size_t(written);
  }
}

// Not installed under AddressSanitizer (install_fault_handler), whose own handler reports.
[[maybe_unused]] void on_segv(int signal, siginfo_t* info, void* context) {
  char message[1024], where[512];
  const void* address = info->si_addr;
  const bool device = describe_device_address(address, message, sizeof message);
  const bool stack = !device && describe_scheduler_address(address, message, sizeof message);
  if (device || stack) {
    write_stderr("simt: ");
    write_stderr(message);
    if (describe_running_thread(where, sizeof where)) {
      write_stderr(" (in ");
      write_stderr(where);
      write_stderr(")");
    } else {
      write_stderr(" (in host code: device memory is accessible only to queued work)");
    }
    write_stderr("\n");
  }
  // Hand the fault on: the previous handler, or the default action once the faulting
  // instruction runs again.
  if (previous_action.sa_flags & SA_SIGINFO) {
    if (previous_action.sa_sigaction) {
      previous_action.sa_sigaction(signal, info, context);
      return;
    }
  } else if (previous_action.sa_handler != SIG_DFL && previous_action.sa_handler != SIG_IGN) {
    previous_action.sa_handler(signal);
    return;
  }
  struct sigaction fallback {};
  fallback.sa_handler = SIG_DFL;
  sigemptyset(&fallback.sa_mask);
  sigaction(SIGSEGV, &fallback, nullptr);
}

}  // namespace

void install_fault_handler() {
#if !defined(__SANITIZE_ADDRESS__)
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction action {};
    action.sa_sigaction = &on_segv;
    action.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
    sigemptyset(&action.sa_mask);
    sigaction(SIGSEGV, &action, &previous_action);
  });
#endif
}

void ensure_signal_stack() {
#if !defined(__SANITIZE_ADDRESS__)
  thread_local bool done = false;
  if (done) return;
  done = true;
  stack_t current{};
  if (sigaltstack(nullptr, &current) == 0 && !(current.ss_flags & SS_DISABLE)) return;
  // Never freed: the thread may still take a signal while it exits.
  const size_t bytes = 64u << 10;
  stack_t alternate{};
  alternate.ss_sp = std::malloc(bytes);
  alternate.ss_size = bytes;
  if (alternate.ss_sp) sigaltstack(&alternate, nullptr);
#endif
}

}  // namespace simt::detail
