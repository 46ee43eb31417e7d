// Running a grid: the blocks of a launch, in order of their linear index (x fastest), on the
// calling OS thread, or shared out over worker_threads() OS threads (SIMT_THREADS) that each
// take the next unstarted block. The workers are started once and then wait for launches.
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

#include "simt/scheduler.h"

namespace simt {
namespace {

unsigned initial_worker_threads() {
  const char* text = std::getenv("SIMT_THREADS");
  const long value = text ? std::strtol(text, nullptr, 10) : 1;
  return value > 0 ? unsigned(std::min(value, 256l)) : 1u;
}

std::atomic<unsigned>& worker_count() {
  static std::atomic<unsigned> count{initial_worker_threads()};
  return count;
}

// OS threads beyond the caller, started on demand and kept (never joined: they wait for work
// until the process exits).
class WorkerPool {
 public:
  static WorkerPool& instance() {
    static WorkerPool* pool = new WorkerPool;  // leaked on purpose: threads outlive statics
    return *pool;
  }

  // Runs job() on the caller and on `extra` pool threads; returns when all have returned.
  void run(unsigned extra, const std::function<void()>& job) {
    std::lock_guard one_grid_at_a_time(run_mutex_);  // streams of different host threads
    std::unique_lock lock(mutex_);
    while (threads_.size() < extra)
      threads_.emplace_back([this, id = threads_.size()] { loop(id); });
    job_ = &job;
    wanted_ = extra;
    pending_ = extra;
    ++generation_;
    start_.notify_all();
    lock.unlock();
    job();
    lock.lock();
    done_.wait(lock, [this] { return pending_ == 0; });
    job_ = nullptr;
  }

 private:
  void loop(size_t id) {
    uint64_t seen = 0;
    std::unique_lock lock(mutex_);
    for (;;) {
      start_.wait(lock, [&] { return generation_ != seen; });
      seen = generation_;
      if (id >= wanted_) continue;
      const std::function<void()>* job = job_;
      lock.unlock();
      (*job)();
      lock.lock();
      if (--pending_ == 0) done_.notify_all();
    }
  }

  std::mutex run_mutex_;
  std::mutex mutex_;  // guards what follows
  std::condition_variable start_, done_;
  std::vector<std::thread> threads_;
  const std::function<void()>* job_ = nullptr;
  uint64_t generation_ = 0;
  size_t wanted_ = 0, pending_ = 0;
};

}  // namespace

namespace {
std::atomic<bool>& reverse_flag() {
  static std::atomic<bool> flag{[] {
    const char* text = std::getenv("SIMT_REVERSE");
    return text && *text && text[0] != '0';
  }()};
  return flag;
}
}  // namespace

void set_reverse_schedule(bool reverse) { reverse_flag() = reverse; }
bool reverse_schedule() { return reverse_flag(); }

void set_worker_threads(unsigned count) { worker_count() = std::clamp(count, 1u, 256u); }
unsigned worker_threads() { return worker_count(); }

namespace detail {

void run_grid(const KernelLaunch& launch) {
  const dim3 grid = launch.grid;
  const uint64_t blocks = uint64_t(grid.x) * grid.y * grid.z;
  auto block_index = [&grid](uint64_t k) {
    return uint3{unsigned(k % grid.x), unsigned(k / grid.x % grid.y),
                 unsigned(k / (uint64_t(grid.x) * grid.y))};
  };
  const unsigned workers =
      launch.single_os_thread ? 1u : unsigned(std::min<uint64_t>(worker_threads(), blocks));
  if (workers <= 1) {
    Scheduler& scheduler = Scheduler::for_this_thread();
    for (uint64_t k = 0; k < blocks; ++k) scheduler.run_block(launch, block_index(k));
    return;
  }
  std::atomic<uint64_t> next{0};
  const std::function<void()> job = [&] {
    Scheduler& scheduler = Scheduler::for_this_thread();
    for (uint64_t k; (k = next.fetch_add(1, std::memory_order_relaxed)) < blocks;)
      scheduler.run_block(launch, block_index(k));
  };
  WorkerPool::instance().run(workers - 1, job);
}

}  // namespace detail
}  // namespace simt
