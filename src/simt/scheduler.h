#pragma once
// The block scheduler (internal to src/simt): runs the blocks of a kernel launch on one OS
// thread, one fiber per CUDA thread (docs/ARCHITECTURE.md, "Host emulation of CUDA", rules 3
// and 4). Each OS thread that runs blocks owns one Scheduler, whose fibers and stacks live as
// long as the thread and are reused by every block and launch.
#include <boost/context/detail/fcontext.hpp>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "simt/simt.h"

namespace simt::detail {

enum class FiberState : uint8_t { ready, barrier, warp, done };

// A cp.async copy in flight (src/simt/async_copy.h): done when its thread waits for its group.
struct AsyncCopy {
  void* destination;
  const void* source;
  uint32_t bytes, source_bytes;  // source_bytes < bytes: the rest is zero-filled
  uint32_t group;                // the commit group it joins: the thread's commits before it
};

struct Fiber {
  boost::context::detail::fcontext_t context = nullptr;
  char* stack = nullptr;  // lowest usable byte (the guard page is just below)
  size_t stack_bytes = 0;
  void* asan_fake_stack = nullptr;  // AddressSanitizer's bookkeeping across switches
  unsigned index = 0;               // linear thread index in the block
  uint3 thread{};
  FiberState state = FiberState::done;
  // The warp collective this fiber waits at (valid while state == warp, and until it reads
  // `result`).
  WarpOp op = WarpOp::sync;
  unsigned mask = 0;
  int argument = 0, width = 32;
  uint64_t value = 0, result = 0;
  WarpExchange exchange = nullptr;  // WarpOp::exchange: the completion to run
  // cp.async: copies not yet done, in issue order, and the groups committed so far.
  std::vector<AsyncCopy> async_copies;
  uint32_t async_groups = 0;
};

struct Warp {
  uint32_t waiting = 0;  // lanes blocked at a warp collective
  uint32_t exited = 0;   // lanes that have exited, or that do not exist (past the block's end)
};

class Scheduler {
 public:
  Scheduler();
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Runs block `block_index` of `launch` to completion on the calling OS thread.
  void run_block(const KernelLaunch& launch, uint3 block_index);

  // The scheduler whose block runs on this OS thread (nullptr outside a kernel).
  static Scheduler* running();
  // The calling OS thread's scheduler, created on first use.
  static Scheduler& for_this_thread();

  // Kernel-side operations of the running fiber.
  void sync_threads();
  uint64_t warp_collective(WarpOp op, unsigned mask, uint64_t value, int argument, int width,
                           WarpExchange exchange);
  void* dynamic_shared_memory() const { return shared_; }
  Fiber& current_fiber() const { return *current_; }

  // Prints "simt: <kernel, block, thread>: <message>" and aborts (a kernel bug, as a GPU fault).
  [[noreturn]] void fault(const char* format, ...) __attribute__((format(printf, 2, 3)));

  // For the SIGSEGV report (fault_handler.h).
  bool describe_stack_address(const void* address, char* message, size_t bytes) const;
  bool describe_running_thread(char* message, size_t bytes) const;

 private:
  friend struct FiberEntry;
  void ensure_fibers(unsigned count);
  void ensure_shared(size_t bytes);
  void fiber_loop(Fiber& self);
  void exit_current();
  void block_current();
  Fiber* next_ready();
  void set_ready(unsigned index);
  void clear_ready(unsigned index);
  void release_barrier();
  void switch_to(Fiber& from, Fiber& to);
  void complete_collective(unsigned warp, unsigned mask);
  [[noreturn]] void deadlock();

  std::vector<std::unique_ptr<Fiber>> fibers_;
  Fiber main_;  // the OS thread's own context while a block runs
  size_t stack_bytes_;
  // Dynamic shared memory: a mapping whose end meets a guard page; shared_ is placed so that
  // the launch's bytes end at the guard.
  char* shared_mapping_ = nullptr;
  size_t shared_mapping_bytes_ = 0;
  char* shared_ = nullptr;

  // The running block.
  const KernelLaunch* launch_ = nullptr;
  unsigned threads_ = 0;  // threads in the block
  unsigned live_ = 0;     // threads not exited
  unsigned at_barrier_ = 0;
  bool reverse_ = false;  // run the highest-numbered runnable thread first
  Fiber* current_ = nullptr;
  std::vector<uint64_t> ready_;  // bit i: thread i is runnable
  std::vector<Warp> warps_;
};

// Runs every block of `launch` (on worker_threads() OS threads unless the launch needs one).
void run_grid(const KernelLaunch& launch);

// "kernel <name or address> (<parameter types>)" for messages.
std::string describe_kernel(const KernelLaunch& launch);

}  // namespace simt::detail
