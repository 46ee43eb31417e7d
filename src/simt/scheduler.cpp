// The block scheduler: one fiber per CUDA thread, the lowest-numbered runnable thread runs until
// it exits or blocks; barriers and warp collectives as simt.h (rule 3 of docs/ARCHITECTURE.md,
// "Host emulation of CUDA") and collectives.h say.
//
// Fibers switch directly to the next runnable fiber (one jump per blocking point); only the
// start and the end of a block go through the OS thread's own context (main_). A fiber is never
// destroyed: when its CUDA thread exits it parks in exit_current(), and the next block that
// needs it resumes it there to run the kernel body again.
#include "simt/scheduler.h"

#include <cxxabi.h>
#include <dlfcn.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "simt/fault_handler.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#endif

namespace bctx = boost::context::detail;

namespace simt::detail {
namespace {

thread_local Scheduler* running_scheduler = nullptr;

size_t page_bytes() {
  static const size_t bytes = size_t(sysconf(_SC_PAGESIZE));
  return bytes;
}
size_t round_up(size_t bytes, size_t multiple) {
  return (bytes + multiple - 1) / multiple * multiple;
}

size_t env_bytes(const char* name, size_t fallback) {
  const char* text = std::getenv(name);
  if (!text || !*text) return fallback;
  char* end = nullptr;
  const unsigned long long value = std::strtoull(text, &end, 0);
  return value > 0 ? size_t(value) : fallback;
}

// The largest dynamic shared memory a launch may ask for (check_launch enforces it).
constexpr size_t kMaxDynamicShared = 227u << 10;

// Maps `bytes` (page multiple) with a kGuardBytes PROT_NONE guard below (stacks) or above
// (shared memory) them.
char* map_with_guard(size_t bytes, bool guard_below) {
  void* mapping = mmap(nullptr, bytes + kGuardBytes, PROT_NONE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  char* usable = static_cast<char*>(mapping) + (guard_below ? kGuardBytes : 0);
  if (mapping == MAP_FAILED || mprotect(usable, bytes, PROT_READ | PROT_WRITE) != 0) {
    std::fprintf(stderr, "simt: cannot map %zu bytes for fiber stacks or shared memory\n", bytes);
    std::abort();
  }
  return usable;
}

void asan_start_switch(void** fake_stack_save, const void* bottom, size_t size) {
#if defined(__SANITIZE_ADDRESS__)
  __sanitizer_start_switch_fiber(fake_stack_save, bottom, size);
#else
  (void)fake_stack_save, (void)bottom, (void)size;
#endif
}
void asan_finish_switch(void* fake_stack, const void** old_bottom, size_t* old_size) {
#if defined(__SANITIZE_ADDRESS__)
  __sanitizer_finish_switch_fiber(fake_stack, old_bottom, old_size);
#else
  (void)fake_stack, (void)old_bottom, (void)old_size;
#endif
}

const char* op_name(WarpOp op) {
  switch (op) {
    case WarpOp::sync:
      return "__syncwarp";
    case WarpOp::shfl_idx:
      return "__shfl_sync";
    case WarpOp::shfl_xor:
      return "__shfl_xor_sync";
    case WarpOp::shfl_down:
      return "__shfl_down_sync";
    case WarpOp::shfl_up:
      return "__shfl_up_sync";
    case WarpOp::vote:
      return "__ballot_sync/__any_sync/__all_sync";
    case WarpOp::exchange:
      return "a warp-wide matrix instruction (mma/ldmatrix)";
  }
  return "?";
}

// The lane a shuffle reads, as PTX's shfl.sync defines it for CUDA's width argument: segments of
// `width` lanes; idx reads within the own segment, xor/down may not go past the segment's end,
// up not before its start (then the lane reads its own value). Offsets use their low 5 bits.
unsigned shuffle_source(WarpOp op, unsigned lane, int argument, int width) {
  const unsigned segment_mask = 32u - unsigned(width);  // lane bits that name the segment
  const unsigned first = lane & segment_mask, last = first | (31u & ~segment_mask);
  const unsigned b = unsigned(argument) & 31u;
  int source = int(lane);
  switch (op) {
    case WarpOp::shfl_idx:
      source = int(first | (b & ~segment_mask));
      break;
    case WarpOp::shfl_xor:
      source = int(lane ^ b);
      break;
    case WarpOp::shfl_down:
      source = int(lane + b);
      break;
    case WarpOp::shfl_up:
      source = int(lane) - int(b);
      break;
    default:
      break;
  }
  const bool valid = op == WarpOp::shfl_up ? source >= int(first) : source <= int(last);
  return valid ? unsigned(source) : lane;
}

bool is_shuffle(WarpOp op) {
  return op == WarpOp::shfl_idx || op == WarpOp::shfl_xor || op == WarpOp::shfl_down ||
         op == WarpOp::shfl_up;
}

[[noreturn]] void fault_outside_kernel(const char* what) {
  std::fprintf(stderr, "simt: %s called outside a running kernel\n", what);
  std::fflush(stderr);
  std::abort();
}

Scheduler& running_or_fault(const char* what) {
  Scheduler* scheduler = running_scheduler;
  if (!scheduler) fault_outside_kernel(what);
  return *scheduler;
}

}  // namespace

// The first switch into a fresh fiber lands here.
struct FiberEntry {
  static void entry(bctx::transfer_t transfer) {
    Scheduler& scheduler = *running_scheduler;
    Fiber* from = static_cast<Fiber*>(transfer.data);
    from->context = transfer.fctx;
    const void* old_bottom = nullptr;
    size_t old_size = 0;
    asan_finish_switch(nullptr, &old_bottom, &old_size);
    if (from == &scheduler.main_) {
      scheduler.main_.stack = static_cast<char*>(const_cast<void*>(old_bottom));
      scheduler.main_.stack_bytes = old_size;
    }
    scheduler.fiber_loop(*scheduler.current_);
  }
};

Scheduler::Scheduler() : stack_bytes_(round_up(env_bytes("SIMT_STACK", 64u << 10), page_bytes())) {
  shared_mapping_bytes_ = round_up(kMaxDynamicShared, page_bytes());
  shared_mapping_ = map_with_guard(shared_mapping_bytes_, /*guard_below=*/false);
  shared_ = shared_mapping_ + shared_mapping_bytes_;
  install_fault_handler();
  ensure_signal_stack();  // so a fiber stack overflow can be reported
}

Scheduler::~Scheduler() {
  for (auto& fiber : fibers_) munmap(fiber->stack - kGuardBytes, fiber->stack_bytes + kGuardBytes);
  munmap(shared_mapping_, shared_mapping_bytes_ + kGuardBytes);
}

Scheduler* Scheduler::running() { return running_scheduler; }

Scheduler& Scheduler::for_this_thread() {
  thread_local std::unique_ptr<Scheduler> scheduler;
  if (!scheduler) scheduler = std::make_unique<Scheduler>();
  return *scheduler;
}

void Scheduler::ensure_fibers(unsigned count) {
  while (fibers_.size() < count) {
    auto fiber = std::make_unique<Fiber>();
    fiber->stack = map_with_guard(stack_bytes_, /*guard_below=*/true);
    fiber->stack_bytes = stack_bytes_;
    fiber->index = unsigned(fibers_.size());
    fiber->context =
        bctx::make_fcontext(fiber->stack + stack_bytes_, stack_bytes_, &FiberEntry::entry);
    fibers_.push_back(std::move(fiber));
  }
  ready_.resize((fibers_.size() + 63) / 64);
  warps_.resize((fibers_.size() + 31) / 32);
}

void Scheduler::ensure_shared(size_t bytes) {
  // The launch's bytes end exactly at the guard (16-byte aligned start).
  const size_t rounded = round_up(bytes, 16);
  shared_ = shared_mapping_ + shared_mapping_bytes_ - rounded;
  std::memset(shared_, 0xff, rounded);  // poison: what a block has not written is NaN
}

void Scheduler::run_block(const KernelLaunch& launch, uint3 block_index) {
  if (running_scheduler) {
    std::fprintf(stderr, "simt: a kernel launch ran inside a running kernel\n");
    std::abort();
  }
  launch_ = &launch;
  threads_ = launch.block.x * launch.block.y * launch.block.z;
  ensure_fibers(threads_);
  ensure_shared(launch.shared_bytes);
  blockIdx = block_index;
  blockDim = launch.block;
  gridDim = launch.grid;
  for (unsigned i = 0; i < threads_; ++i) {
    Fiber& fiber = *fibers_[i];
    fiber.state = FiberState::ready;
    fiber.thread = uint3{i % launch.block.x, i / launch.block.x % launch.block.y,
                         i / (launch.block.x * launch.block.y)};
  }
  std::fill(ready_.begin(), ready_.end(), 0);
  for (unsigned word = 0; word < (threads_ + 63) / 64; ++word) {
    const unsigned bits = std::min(64u, threads_ - word * 64);
    ready_[word] = bits == 64 ? ~uint64_t(0) : (uint64_t(1) << bits) - 1;
  }
  for (unsigned w = 0; w < (threads_ + 31) / 32; ++w) {
    const unsigned lanes = std::min(32u, threads_ - w * 32);
    warps_[w].waiting = 0;
    warps_[w].exited = lanes == 32 ? 0u : ~((1u << lanes) - 1);
  }
  live_ = threads_;
  at_barrier_ = 0;
  reverse_ = reverse_schedule();
  running_scheduler = this;
  switch_to(main_, *next_ready());  // returns when the last thread has exited
  running_scheduler = nullptr;
  current_ = nullptr;
  launch_ = nullptr;
}

void Scheduler::switch_to(Fiber& from, Fiber& to) {
  current_ = &to;
  asan_start_switch(&from.asan_fake_stack, to.stack, to.stack_bytes);
  const bctx::transfer_t transfer = bctx::jump_fcontext(to.context, &from);
  // Resumed: `from` is this fiber again; the one that switched here saved its context.
  Fiber* previous = static_cast<Fiber*>(transfer.data);
  previous->context = transfer.fctx;
  const void* old_bottom = nullptr;
  size_t old_size = 0;
  asan_finish_switch(from.asan_fake_stack, &old_bottom, &old_size);
  if (previous == &main_) {
    main_.stack = static_cast<char*>(const_cast<void*>(old_bottom));
    main_.stack_bytes = old_size;
  }
  if (&from != &main_) threadIdx = from.thread;
}

void Scheduler::fiber_loop(Fiber& self) {
  for (;;) {
    threadIdx = self.thread;
    try {
      launch_->body();
    } catch (const std::exception& error) {
      fault("the kernel threw an exception: %s", error.what());
    } catch (...) {
      fault("the kernel threw an exception");
    }
    exit_current();  // parks this fiber until a later block starts it again
  }
}

void Scheduler::set_ready(unsigned index) { ready_[index >> 6] |= uint64_t(1) << (index & 63); }
void Scheduler::clear_ready(unsigned index) {
  ready_[index >> 6] &= ~(uint64_t(1) << (index & 63));
}

Fiber* Scheduler::next_ready() {
  const unsigned words = (threads_ + 63) / 64;
  if (reverse_) {
    for (unsigned word = words; word-- > 0;)
      if (ready_[word])
        return fibers_[word * 64 + 63 - unsigned(__builtin_clzll(ready_[word]))].get();
    return nullptr;
  }
  for (unsigned word = 0; word < words; ++word)
    if (ready_[word]) return fibers_[word * 64 + unsigned(__builtin_ctzll(ready_[word]))].get();
  return nullptr;
}

void Scheduler::release_barrier() {
  for (unsigned i = 0; i < threads_; ++i) {
    Fiber& fiber = *fibers_[i];
    if (fiber.state == FiberState::barrier) {
      fiber.state = FiberState::ready;
      set_ready(i);
    }
  }
  at_barrier_ = 0;
}

// The current fiber has just stopped being runnable: run the lowest runnable thread, releasing
// the barrier when every live thread waits there.
void Scheduler::block_current() {
  Fiber& self = *current_;
  Fiber* next = next_ready();
  if (!next) {
    if (at_barrier_ != live_) deadlock();
    release_barrier();
    next = next_ready();
  }
  if (next != &self) switch_to(self, *next);
}

void Scheduler::exit_current() {
  Fiber& self = *current_;
  if (!self.async_copies.empty())
    fault("exited with %zu cp.async copies never waited for (cp.async.wait_group)",
          self.async_copies.size());
  self.async_groups = 0;
  self.state = FiberState::done;
  clear_ready(self.index);
  --live_;
  Warp& warp = warps_[self.index >> 5];
  const uint32_t bit = 1u << (self.index & 31);
  warp.exited |= bit;
  for (uint32_t waiting = warp.waiting; waiting; waiting &= waiting - 1) {
    const Fiber& waiter = *fibers_[(self.index & ~31u) + unsigned(__builtin_ctz(waiting))];
    if (waiter.mask & bit)
      fault(
          "exited while lane %u waits for it in %s with mask 0x%08x (a lane named in a warp "
          "collective's mask must not exit)",
          waiter.index & 31, op_name(waiter.op), waiter.mask);
  }
  if (live_ == 0) {
    switch_to(self, main_);
    return;
  }
  Fiber* next = next_ready();
  if (!next) {
    if (at_barrier_ != live_) deadlock();
    release_barrier();
    next = next_ready();
  }
  switch_to(self, *next);
}

void Scheduler::sync_threads() {
  Fiber& self = *current_;
  self.state = FiberState::barrier;
  ++at_barrier_;
  clear_ready(self.index);
  block_current();
}

uint64_t Scheduler::warp_collective(WarpOp op, unsigned mask, uint64_t value, int argument,
                                    int width, WarpExchange exchange) {
  Fiber& self = *current_;
  const unsigned lane = self.index & 31, warp_index = self.index >> 5;
  const uint32_t bit = 1u << lane;
  if (!(mask & bit))
    fault("%s with mask 0x%08x, which does not name the calling lane %u", op_name(op), mask, lane);
  if (is_shuffle(op) && (width < 1 || width > 32 || (width & (width - 1))))
    fault("%s with width %d (must be a power of two from 1 to 32)", op_name(op), width);
  if (op == WarpOp::exchange && mask != 0xffffffffu)
    fault("%s with mask 0x%08x (the whole warp must execute it)", op_name(op), mask);
  Warp& warp = warps_[warp_index];
  if (const uint32_t gone = mask & warp.exited) {
    const unsigned first = unsigned(__builtin_ctz(gone));
    if (warp_index * 32 + first >= threads_)
      fault("%s with mask 0x%08x names lane %u, which does not exist (the block has %u threads)",
            op_name(op), mask, first, threads_);
    fault("%s with mask 0x%08x names lane %u, which has exited", op_name(op), mask, first);
  }
  self.op = op;
  self.mask = mask;
  self.argument = argument;
  self.width = width;
  self.value = value;
  self.exchange = exchange;
  warp.waiting |= bit;
  if ((warp.waiting & mask) == mask) {
    bool complete = true;
    for (uint32_t lanes = mask; lanes; lanes &= lanes - 1) {
      const Fiber& other = *fibers_[warp_index * 32 + unsigned(__builtin_ctz(lanes))];
      if (other.mask != mask) {
        complete = false;  // that lane waits in another rendezvous; it may still come here
        break;
      }
      if (other.op != op || other.exchange != exchange)
        fault(
            "%s with mask 0x%08x meets lane %u in %s with the same mask (lanes of one "
            "rendezvous must call the same collective)",
            op_name(op), mask, other.index & 31, op_name(other.op));
    }
    if (complete) {
      complete_collective(warp_index, mask);
      return self.result;
    }
  }
  self.state = FiberState::warp;
  clear_ready(self.index);
  block_current();
  return self.result;
}

void Scheduler::complete_collective(unsigned warp_index, unsigned mask) {
  const std::unique_ptr<Fiber>* lanes = &fibers_[warp_index * 32];
  const WarpOp op = current_->op;
  if (op == WarpOp::exchange) {  // the whole warp (checked on arrival): run the completion once
    void* data[32];
    for (unsigned lane = 0; lane < 32; lane++)
      data[lane] = reinterpret_cast<void*>(lanes[lane]->value);
    current_->exchange(data);
  }
  uint64_t ballot = 0;
  if (op == WarpOp::vote)
    for (uint32_t m = mask; m; m &= m - 1) {
      const unsigned lane = unsigned(__builtin_ctz(m));
      if (lanes[lane]->value) ballot |= uint64_t(1) << lane;
    }
  for (uint32_t m = mask; m; m &= m - 1) {
    const unsigned lane = unsigned(__builtin_ctz(m));
    Fiber& fiber = *lanes[lane];
    if (op == WarpOp::vote) {
      fiber.result = ballot;
    } else if (op == WarpOp::sync || op == WarpOp::exchange) {
      fiber.result = 0;
    } else {
      const unsigned source = shuffle_source(op, lane, fiber.argument, fiber.width);
      // A source lane outside the mask takes no part: its value is undefined on a GPU.
      fiber.result = (mask >> source) & 1 ? lanes[source]->value : ~uint64_t(0);
    }
    if (&fiber != current_) {
      fiber.state = FiberState::ready;
      set_ready(fiber.index);
    }
  }
  warps_[warp_index].waiting &= ~mask;
}

void Scheduler::fault(const char* format, ...) {
  char message[1024];
  va_list arguments;
  va_start(arguments, format);
  std::vsnprintf(message, sizeof message, format, arguments);
  va_end(arguments);
  const Fiber* fiber = current_ && current_ != &main_ ? current_ : nullptr;
  std::fprintf(stderr, "simt: %s, block (%u,%u,%u)", describe_kernel(*launch_).c_str(), blockIdx.x,
               blockIdx.y, blockIdx.z);
  if (fiber)
    std::fprintf(stderr, ", thread (%u,%u,%u) (warp %u lane %u)", fiber->thread.x, fiber->thread.y,
                 fiber->thread.z, fiber->index >> 5, fiber->index & 31);
  std::fprintf(stderr, ": %s\n", message);
  std::fflush(stderr);
  std::abort();
}

void Scheduler::deadlock() {
  // The waiting threads, runs of consecutive threads that wait in the same way folded together.
  std::string waits;
  int runs = 0;
  auto same_wait = [](const Fiber& a, const Fiber& b) {
    return a.state == b.state &&
           (a.state == FiberState::barrier || (a.op == b.op && a.mask == b.mask));
  };
  for (unsigned i = 0; i < threads_;) {
    const Fiber& first = *fibers_[i];
    if (first.state != FiberState::barrier && first.state != FiberState::warp) {
      ++i;
      continue;
    }
    unsigned end = i + 1;
    while (end < threads_ && same_wait(*fibers_[end], first)) ++end;
    const Fiber& last = *fibers_[end - 1];
    if (runs++ == 16) {
      waits += "; ...";
      break;
    }
    char line[200], range[80];
    if (end - i == 1)
      std::snprintf(range, sizeof range, "thread (%u,%u,%u)", first.thread.x, first.thread.y,
                    first.thread.z);
    else
      std::snprintf(range, sizeof range, "threads (%u,%u,%u)-(%u,%u,%u)", first.thread.x,
                    first.thread.y, first.thread.z, last.thread.x, last.thread.y, last.thread.z);
    if (first.state == FiberState::barrier)
      std::snprintf(line, sizeof line, "%s%s at __syncthreads", waits.empty() ? "" : "; ", range);
    else
      std::snprintf(line, sizeof line, "%s%s in %s with mask 0x%08x", waits.empty() ? "" : "; ",
                    range, op_name(first.op), first.mask);
    waits += line;
    i = end;
  }
  current_ = nullptr;  // the message names the waiting threads, not the last one to block
  fault(
      "deadlock: every live thread waits and no barrier can be released (%u of %u threads "
      "live, %u at __syncthreads): %s",
      live_, threads_, at_barrier_, waits.c_str());
}

bool describe_scheduler_address(const void* address, char* message, size_t bytes) {
  const Scheduler* scheduler = running_scheduler;
  return scheduler && scheduler->describe_stack_address(address, message, bytes);
}

bool Scheduler::describe_stack_address(const void* address, char* message, size_t bytes) const {
  const char* target = static_cast<const char*>(address);
  const char* shared_end = shared_mapping_ + shared_mapping_bytes_;
  if (launch_ && target >= shared_end && target < shared_end + kGuardBytes) {
    std::snprintf(message, bytes,
                  "dynamic shared memory overrun at %p: %td bytes past the launch's %zu bytes",
                  address, target - (shared_ + launch_->shared_bytes), launch_->shared_bytes);
    return true;
  }
  for (const auto& fiber : fibers_) {
    if (target >= fiber->stack - kGuardBytes && target < fiber->stack) {
      std::snprintf(message, bytes,
                    "fiber stack overflow at %p: a CUDA thread used more than its %zu-byte "
                    "stack (set SIMT_STACK to more bytes)",
                    address, fiber->stack_bytes);
      return true;
    }
  }
  return false;
}

bool describe_running_thread(char* message, size_t bytes) {
  const Scheduler* scheduler = running_scheduler;
  return scheduler && scheduler->describe_running_thread(message, bytes);
}

bool Scheduler::describe_running_thread(char* message, size_t bytes) const {
  if (!launch_ || !current_ || current_ == &main_) return false;
  std::snprintf(message, bytes, "%s, block (%u,%u,%u), thread (%u,%u,%u)",
                describe_kernel(*launch_).c_str(), blockIdx.x, blockIdx.y, blockIdx.z,
                current_->thread.x, current_->thread.y, current_->thread.z);
  return true;
}

std::string describe_kernel(const KernelLaunch& launch) {
  std::string name;
  Dl_info info{};
  if (dladdr(launch.kernel, &info) && info.dli_sname) {
    int status = 0;
    char* demangled = abi::__cxa_demangle(info.dli_sname, nullptr, nullptr, &status);
    name = status == 0 && demangled ? demangled : info.dli_sname;
    std::free(demangled);
  } else {
    char where[512];
    if (info.dli_fname)
      std::snprintf(where, sizeof where, "at %s+0x%zx", info.dli_fname,
                    size_t(static_cast<const char*>(launch.kernel) -
                           static_cast<const char*>(info.dli_fbase)));
    else
      std::snprintf(where, sizeof where, "at %p", launch.kernel);
    name = where;
  }
  // parameter_types' __PRETTY_FUNCTION__: "... [with P = {float*, int}]".
  std::string parameters = launch.parameters ? launch.parameters : "";
  const size_t open = parameters.find("P = {");
  const size_t close = parameters.rfind('}');
  if (open != std::string::npos && close != std::string::npos && close > open)
    parameters = parameters.substr(open + 5, close - open - 5);
  else if (parameters.find("[with") == std::string::npos)
    parameters.clear();  // no parameters
  return "kernel " + name + "(" + parameters + ")";
}

uint64_t warp_collective(WarpOp op, unsigned mask, uint64_t value, int argument, int width,
                         WarpExchange exchange) {
  return running_or_fault(op_name(op)).warp_collective(op, mask, value, argument, width, exchange);
}

void kernel_fault(const char* format, ...) {
  char message[1024];
  va_list arguments;
  va_start(arguments, format);
  std::vsnprintf(message, sizeof message, format, arguments);
  va_end(arguments);
  running_or_fault("simt::detail::kernel_fault").fault("%s", message);
}

void sync_threads() { running_or_fault("__syncthreads").sync_threads(); }

}  // namespace simt::detail

namespace simt {
void* dynamic_shared_memory() {
  return detail::running_or_fault("simt::dynamic_shared_memory").dynamic_shared_memory();
}
}  // namespace simt
