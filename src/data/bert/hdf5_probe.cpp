// The probe that opens BERT HDF5 files before this process does: hdf5_probe.h says why.
#include "data/bert/hdf5_probe.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>

#include "core/error.h"
#include "data/bert/bert_hdf5.h"

extern char** environ;

// AddressSanitizer's allocator maps its heap inside address space it reserved at start-up, so
// an address-space limit does not bound it: a probe built with it gets an RSS limit instead.
#if defined(__SANITIZE_ADDRESS__)
#define COLLAGE_PROBE_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define COLLAGE_PROBE_UNDER_ASAN 1
#endif
#endif

namespace collage {
namespace {

// The probe's environment: the file that lists the paths (NUL-separated), and the bytes of
// address space it may add to what it starts with.
constexpr const char* kListVariable = "COLLAGE_HDF5_PROBE";
constexpr const char* kMemoryVariable = "COLLAGE_HDF5_PROBE_MEMORY";

std::mutex limits_mutex;
Hdf5ProbeLimits probe_limits;
std::atomic<int64_t> probes_started{0};

// ---------------------------------------------------------------------------------------
// The probe's side: this executable started with kListVariable set.

// The address space this process has mapped now (VmSize), in bytes: under AddressSanitizer
// that is terabytes of reserved shadow, so the limit is set above it, not absolutely.
uint64_t address_space_now() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmSize:", 0) == 0) return std::strtoull(line.c_str() + 7, nullptr, 10) << 10;
  return 0;
}

void write_all(int fd, std::string_view text) {
  while (!text.empty()) {
    const ssize_t n = ::write(fd, text.data(), text.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) ::_exit(3);  // the process that started the probe is gone
    text.remove_prefix(static_cast<size_t>(n));
  }
}

// Runs before main() in every executable that links this file; does nothing unless this
// process is a probe. Exits without returning to main(), and with _exit: no atexit handlers of
// a program that never started (libhdf5's, LeakSanitizer's) run.
[[gnu::constructor]] void serve_probe() {
  const char* list = std::getenv(kListVariable);
  if (list == nullptr) return;
  uint64_t extra_memory = 0;
  if (const char* extra = std::getenv(kMemoryVariable)) {
    extra_memory = std::strtoull(extra, nullptr, 10);
    const rlim_t cap = address_space_now() + extra_memory;
    const rlimit limit{cap, cap};
    setrlimit(RLIMIT_AS, &limit);
  }
  std::ifstream paths(list, std::ios::binary);
  std::string path;
  while (std::getline(paths, path, '\0')) {
    std::string result = "ok\n";
    try {
      const BertHdf5File file(path, BertHdf5File::kUnknownVocab, /*cache_bytes=*/0,
                              Hdf5Probe::kAlreadyRun);
    } catch (const Error& e) {
      result = fmt::format("error {}\n", e.what());
    } catch (const std::bad_alloc&) {  // the memory limit reached in collage's own code
      result = fmt::format(
          "error {}: opening it needs more than the {} MiB of memory the separate process "
          "collage opens each HDF5 file in first may use (docs/DATA.md §8): sizes libhdf5 "
          "read from a damaged file\n",
          path, extra_memory >> 20);
    } catch (const std::exception& e) {
      result = fmt::format("error {}: cannot open as an HDF5 file ({})\n", path, e.what());
    }
    std::replace(result.begin(), result.end() - 1, '\n', ' ');
    write_all(STDOUT_FILENO, result);
    if (result[0] == 'e') break;
  }
  ::_exit(0);
}

// ---------------------------------------------------------------------------------------
// The caller's side.

struct Fd {
  int fd = -1;
  ~Fd() { close(); }
  void close() {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
};

// The list of paths, NUL-separated, in a temporary file removed when this goes.
struct PathList {
  std::string path;
  explicit PathList(const std::vector<std::string>& paths) {
    path = (std::filesystem::temp_directory_path() / "collage-hdf5-probe-XXXXXX").string();
    Fd file{::mkstemp(path.data())};
    if (file.fd < 0) fail("cannot create {} for the HDF5 probe: {}", path, std::strerror(errno));
    std::string text;
    for (const std::string& p : paths) text += p + '\0';
    if (::write(file.fd, text.data(), text.size()) != static_cast<ssize_t>(text.size()))
      fail("cannot write {} for the HDF5 probe: {}", path, std::strerror(errno));
  }
  ~PathList() { ::unlink(path.c_str()); }
};

std::string signal_text(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev ? fmt::format("signal {}, SIG{}", sig, abbrev) : fmt::format("signal {}", sig);
}

// What the probe's stderr says of its end: a sanitizer's SUMMARY (else its ERROR, else the last
// line) and, from a sanitizer's stack, the first frame outside the C library and the sanitizer
// runtime: libhdf5's, or collage's own (a finding for tests/fuzz/fuzz_bert_hdf5).
std::string last_words(const std::string& err) {
  std::string best, last, frame;
  size_t start = 0;
  while (start < err.size()) {
    size_t end = err.find('\n', start);
    if (end == std::string::npos) end = err.size();
    std::string line = err.substr(start, end - start);
    start = end + 1;
    if (line.empty()) continue;
    last = line;
    if (line.find("SUMMARY:") != std::string::npos ||
        (best.empty() && line.find("ERROR:") != std::string::npos))
      best = line;
    const size_t in = line.find(" in ");
    if (frame.empty() && line.find_first_not_of(' ') != std::string::npos &&
        line[line.find_first_not_of(' ')] == '#' && in != std::string::npos) {
      const std::string function = line.substr(in + 4, line.find(' ', in + 4) - in - 4);
      bool runtime = false;
      for (const char* part : {"libc.so", "sysdeps/", "__interceptor_", "__asan", "__sanitizer",
                               "__ubsan", "libclang_rt", "libasan", "libubsan"})
        runtime = runtime || line.find(part) != std::string::npos;
      for (const char* allocation : {"malloc", "calloc", "realloc", "free", "operator"})
        runtime = runtime || function == allocation;
      if (!runtime) frame = line.substr(in + 4, line.find(" (BuildId") - in - 4);
    }
  }
  std::string words = best.empty() ? last : best;
  if (words.size() > 300) words = words.substr(0, 300) + "...";
  if (!frame.empty()) words += "; first frame: " + frame.substr(0, 300);
  return words;
}

pid_t spawn_probe(const PathList& list, int64_t extra_memory_bytes, int out, int err) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e)
    if (std::strncmp(*e, kListVariable, std::strlen(kListVariable)) != 0) env.emplace_back(*e);
  env.push_back(fmt::format("{}={}", kListVariable, list.path));
  env.push_back(fmt::format("{}={}", kMemoryVariable, extra_memory_bytes));
#if defined(COLLAGE_PROBE_UNDER_ASAN)
  // Resident memory, checked by the sanitizer's background thread: the extra bytes plus 256 MiB
  // for what the probe holds at start-up.
  const std::string rss_limit =
      fmt::format("hard_rss_limit_mb={}", (extra_memory_bytes >> 20) + 256);
  auto asan = std::find_if(env.begin(), env.end(),
                           [](const std::string& e) { return e.rfind("ASAN_OPTIONS=", 0) == 0; });
  if (asan == env.end())
    env.push_back("ASAN_OPTIONS=" + rss_limit);
  else
    *asan += ":" + rss_limit;
#endif
  std::vector<char*> envp;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  char name[] = "collage-hdf5-probe";
  char* argv[] = {name, nullptr};

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out, STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, err, STDERR_FILENO);
  posix_spawn_file_actions_addclosefrom_np(&actions, STDERR_FILENO + 1);
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attributes, &none);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGMASK);
  pid_t pid = -1;
  const int error = posix_spawn(&pid, "/proc/self/exe", &actions, &attributes, argv, envp.data());
  posix_spawnattr_destroy(&attributes);
  posix_spawn_file_actions_destroy(&actions);
  if (error != 0)
    fail("cannot start the process that opens HDF5 files first (/proc/self/exe): {}",
         std::strerror(error));
  ++probes_started;
  return pid;
}

}  // namespace

void set_hdf5_probe_limits(const Hdf5ProbeLimits& limits) {
  const std::lock_guard lock(limits_mutex);
  probe_limits = limits;
}

int64_t hdf5_probes_started() { return probes_started.load(); }

void probe_bert_hdf5_files(const std::vector<std::string>& paths) {
  if (paths.empty()) return;
  Hdf5ProbeLimits limits;
  {
    const std::lock_guard lock(limits_mutex);
    limits = probe_limits;
  }
  const PathList list(paths);
  int out_pipe[2], err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) fail("HDF5 probe: pipe: {}", std::strerror(errno));
  Fd out{out_pipe[0]}, out_end{out_pipe[1]};
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) fail("HDF5 probe: pipe: {}", std::strerror(errno));
  Fd err{err_pipe[0]}, err_end{err_pipe[1]};
  const pid_t pid = spawn_probe(list, limits.extra_memory_bytes, out_end.fd, err_end.fd);
  out_end.close();
  err_end.close();

  // Read both pipes until the probe closes them, allowing each file its time.
  using Clock = std::chrono::steady_clock;
  const auto per_file = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(limits.seconds_per_file));
  auto deadline = Clock::now() + per_file;
  size_t opened = 0;
  std::optional<std::string> refusal;
  std::string out_text, err_text;
  bool timed_out = false;
  pollfd fds[2] = {{out.fd, POLLIN, 0}, {err.fd, POLLIN, 0}};
  while (fds[0].fd >= 0 || fds[1].fd >= 0) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
    const int ready = ::poll(fds, 2, static_cast<int>(std::max<int64_t>(left.count(), 0)));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) {
      timed_out = ready == 0;
      break;
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char buffer[4096];
      const ssize_t n = ::read(fds[i].fd, buffer, sizeof buffer);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        fds[i].fd = -1;
        continue;
      }
      std::string& text = i == 0 ? out_text : err_text;
      text.append(buffer, static_cast<size_t>(n));
      if (i == 1 && err_text.size() > (64 << 10)) err_text.erase(0, err_text.size() - (32 << 10));
    }
    for (size_t end; (end = out_text.find('\n')) != std::string::npos; out_text.erase(0, end + 1)) {
      if (out_text.compare(0, end, "ok") == 0) {
        ++opened;
        deadline = Clock::now() + per_file;
      } else if (out_text.compare(0, 6, "error ") == 0) {
        refusal = out_text.substr(6, end - 6);
      }
    }
  }
  if (timed_out || fds[0].fd >= 0 || fds[1].fd >= 0) ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }

  if (refusal) throw Error(*refusal);
  if (opened == paths.size() && WIFEXITED(status) && WEXITSTATUS(status) == 0) return;
  const std::string& file = paths[std::min(opened, paths.size() - 1)];
  const std::string said = last_words(err_text);
  const std::string where = fmt::format(
      "in the separate process collage opens each HDF5 file in first (docs/DATA.md §8){}",
      said.empty() ? "" : " [" + said + "]");
  if (timed_out)
    fail(
        "{}: opening it took more than {} s, {}: a damaged file libhdf5 loops on, a named pipe, "
        "or a stalled file system",
        file, limits.seconds_per_file, where);
  const std::string what = WIFSIGNALED(status)
                               ? fmt::format("crashed ({})", signal_text(WTERMSIG(status)))
                               : fmt::format("ended with exit status {}", WEXITSTATUS(status));
  fail(
      "{}: libhdf5 {} reading the file's structure, {}: the file is damaged; copy it again, or "
      "leave it out of the data",
      file, what, where);
}

}  // namespace collage
