// Streams: in-order queues of work (kernels, copies, fills, host functions) that run with
// device memory opened (docs/ARCHITECTURE.md, "Host emulation of CUDA", rules 1, 2 and 6).
// Immediate mode runs each item as it is queued, in the caller's thread; deferred mode runs the
// queue in synchronize.
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "simt/device_memory.h"
#include "simt/scheduler.h"
#include "simt/simt.h"

namespace simt {

class Stream {
 public:
  std::mutex mutex;  // guards everything below
  std::deque<std::function<void()>> queue;
  bool failed = false;  // a failure not yet reported by synchronize; later work is dropped
  std::string error;
};

namespace {

bool initial_deferred() {
  const char* text = std::getenv("SIMT_DEFERRED");
  return text && *text && std::strcmp(text, "0") != 0;
}
std::atomic<bool>& deferred_flag() {
  static std::atomic<bool> flag{initial_deferred()};
  return flag;
}

struct StreamRegistry {
  std::mutex mutex;
  std::set<Stream*> streams;
};
StreamRegistry& streams() {
  static StreamRegistry* registry = new StreamRegistry;  // leaked: streams may outlive statics
  return *registry;
}

// The stream of a null Stream* (CUDA's default stream).
Stream* resolve(Stream* stream) {
  if (stream) return stream;
  static Stream* fallback = create_stream();
  return fallback;
}

void record_error(Stream& stream, const char* message) {  // stream.mutex held
  if (stream.failed) return;                              // the first failure is the one reported
  stream.failed = true;
  stream.error = message;
}

// Runs what is queued, in order, with device memory open.
void run_queue(Stream& stream) {
  std::unique_lock lock(stream.mutex);
  if (stream.queue.empty()) return;
  detail::DeviceAccess access;
  while (!stream.queue.empty()) {
    std::function<void()> work = std::move(stream.queue.front());
    stream.queue.pop_front();
    if (stream.failed) continue;
    lock.unlock();
    std::string error;
    try {
      work();
    } catch (const std::exception& exception) {
      error = exception.what();
      if (error.empty()) error = "a queued function threw an exception";
    } catch (...) {
      error = "a queued function threw an exception that is not a std::exception";
    }
    lock.lock();
    if (!error.empty()) record_error(stream, error.c_str());
  }
}

void push(Stream* stream, std::function<void()> work) {
  Stream& s = *resolve(stream);
  {
    std::lock_guard lock(s.mutex);
    s.queue.push_back(std::move(work));
  }
  if (!deferred()) run_queue(s);
}

}  // namespace

Stream* create_stream() {
  Stream* stream = new Stream;
  std::lock_guard lock(streams().mutex);
  streams().streams.insert(stream);
  return stream;
}

void destroy_stream(Stream* stream) {
  if (!stream) return;
  run_queue(*stream);
  {
    std::lock_guard lock(streams().mutex);
    streams().streams.erase(stream);
  }
  if (stream->failed)
    std::fprintf(stderr, "simt: destroy_stream: an error was never reported: %s\n",
                 stream->error.c_str());
  delete stream;
}

void enqueue(Stream* stream, std::function<void()> work) { push(stream, std::move(work)); }

void memcpy_async(Stream* stream, void* destination, const void* source, size_t bytes) {
  if (bytes == 0) return;
  char message[256];
  const char* error =
      detail::check_range(destination, bytes, "memcpy_async destination", message, sizeof message);
  if (!error)
    error = detail::check_range(source, bytes, "memcpy_async source", message, sizeof message);
  if (error) {
    Stream& s = *resolve(stream);
    std::lock_guard lock(s.mutex);
    record_error(s, error);
    return;
  }
  if (deferred() && !is_device_pointer(source)) {
    // Like cudaMemcpyAsync from pageable memory: the source is read now, so the caller may
    // reuse it as soon as this returns.
    std::vector<char> staged(static_cast<const char*>(source),
                             static_cast<const char*>(source) + bytes);
    push(stream, [destination, staged = std::move(staged)] {
      std::memcpy(destination, staged.data(), staged.size());
    });
    return;
  }
  push(stream, [destination, source, bytes] { std::memcpy(destination, source, bytes); });
}

void memset_async(Stream* stream, void* destination, int value, size_t bytes) {
  if (bytes == 0) return;
  char message[256];
  if (const char* error = detail::check_range(destination, bytes, "memset_async destination",
                                              message, sizeof message)) {
    Stream& s = *resolve(stream);
    std::lock_guard lock(s.mutex);
    record_error(s, error);
    return;
  }
  push(stream, [destination, value, bytes] { std::memset(destination, value, bytes); });
}

const char* synchronize(Stream* stream) {
  Stream& s = *resolve(stream);
  run_queue(s);
  std::lock_guard lock(s.mutex);
  if (!s.failed) return nullptr;
  // Kept until the next failure is reported (the caller formats it at once).
  static std::mutex reported_mutex;
  static std::string reported;
  std::lock_guard reported_lock(reported_mutex);
  reported = s.error;
  s.failed = false;
  s.error.clear();
  return reported.c_str();
}

void set_deferred(bool deferred) { deferred_flag() = deferred; }
bool deferred() { return deferred_flag(); }

namespace detail {

void synchronize_all_streams() {
  std::vector<Stream*> all;
  {
    std::lock_guard lock(streams().mutex);
    all.assign(streams().streams.begin(), streams().streams.end());
  }
  for (Stream* stream : all) run_queue(*stream);
}

const char* check_launch(dim3 grid, dim3 block, size_t shared_bytes) {
  const uint64_t threads = uint64_t(block.x) * block.y * block.z;
  if (threads == 0) return "invalid configuration argument: a block of 0 threads";
  if (threads > 1024) return "invalid configuration argument: more than 1024 threads per block";
  if (block.z > 64) return "invalid configuration argument: block.z > 64";
  if (uint64_t(grid.x) * grid.y * grid.z == 0) return "invalid configuration argument: empty grid";
  if (grid.x > 0x7fffffffu) return "invalid configuration argument: grid.x > 2^31 - 1";
  if (grid.y > 65535 || grid.z > 65535)
    return "invalid configuration argument: grid.y or grid.z > 65535";
  if (shared_bytes > (227u << 10))
    return "invalid configuration argument: more than 227 KiB of dynamic shared memory";
  return nullptr;
}

void enqueue_kernel(Stream* stream, KernelLaunch launch) {
  push(stream, [launch = std::move(launch)] { run_grid(launch); });
}

}  // namespace detail
}  // namespace simt
