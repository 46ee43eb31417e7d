#pragma once
// Helpers for the tests of the host SIMT emulator (src/simt): device arrays, a stream per test,
// upload/download, and guards that restore the emulator's global modes.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "simt/simt.h"

// The report of a fault on protected memory in a death test: the emulator's own message, or
// under AddressSanitizer (which keeps SIGSEGV to itself) ASan's.
#if defined(__SANITIZE_ADDRESS__)
#define SIMT_FAULT_REPORT(regex) "AddressSanitizer: (SEGV|stack-overflow)"
#else
#define SIMT_FAULT_REPORT(regex) regex
#endif

namespace simt_test {

// Device memory for `count` values of T, freed at the end of the scope.
template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t count)
      : count_(count), data_(static_cast<T*>(simt::device_malloc(count * sizeof(T)))) {}
  ~DeviceArray() { simt::device_free(data_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  T* get() const { return data_; }
  size_t size() const { return count_; }
  size_t bytes() const { return count_ * sizeof(T); }

 private:
  size_t count_;
  T* data_;
};

// Set deferred mode, the worker count or the reverse schedule for the scope, then restore it.
class DeferredMode {
 public:
  explicit DeferredMode(bool deferred) : saved_(simt::deferred()) { simt::set_deferred(deferred); }
  ~DeferredMode() { simt::set_deferred(saved_); }

 private:
  bool saved_;
};
class WorkerThreads {
 public:
  explicit WorkerThreads(unsigned count) : saved_(simt::worker_threads()) {
    simt::set_worker_threads(count);
  }
  ~WorkerThreads() { simt::set_worker_threads(saved_); }

 private:
  unsigned saved_;
};

class ReverseSchedule {
 public:
  explicit ReverseSchedule(bool reverse) : saved_(simt::reverse_schedule()) {
    simt::set_reverse_schedule(reverse);
  }
  ~ReverseSchedule() { simt::set_reverse_schedule(saved_); }

 private:
  bool saved_;
};

// A test with its own stream; upload/download go through it and check for errors. Each test
// starts from the emulator's defaults (immediate mode, lowest-first order, one worker) whatever
// SIMT_DEFERRED / SIMT_REVERSE / SIMT_THREADS say, since some expectations depend on them.
class SimtTest : public ::testing::Test {
 protected:
  SimtTest() : stream(simt::create_stream()) {
    // Death tests re-run the test binary instead of forking a process with worker threads.
    GTEST_FLAG_SET(death_test_style, "threadsafe");
  }
  ~SimtTest() override { simt::destroy_stream(stream); }

  template <typename T>
  void upload(const DeviceArray<T>& destination, const std::vector<T>& values) {
    ASSERT_EQ(values.size(), destination.size());
    simt::memcpy_async(stream, destination.get(), values.data(), destination.bytes());
  }
  template <typename T>
  std::vector<T> download(const DeviceArray<T>& source) {
    std::vector<T> values(source.size());
    simt::memcpy_async(stream, values.data(), source.get(), source.bytes());
    sync();
    return values;
  }
  void sync() {
    const char* error = simt::synchronize(stream);
    EXPECT_EQ(error, nullptr) << error;
  }
  // Launches and checks that the configuration was accepted.
  template <typename... P, typename... A>
  void run(void (*kernel)(P...), dim3 grid, dim3 block, size_t shared_bytes, A... args) {
    const char* error = simt::launch(stream, kernel, grid, block, shared_bytes, args...);
    ASSERT_EQ(error, nullptr) << error;
  }

  DeferredMode immediate_{false};
  ReverseSchedule lowest_first_{false};
  WorkerThreads one_worker_{1};
  simt::Stream* stream;
};

}  // namespace simt_test
