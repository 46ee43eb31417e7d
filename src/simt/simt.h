#pragma once
// simt: a host emulator of CUDA's SIMT execution model, so that the kernels in kernels/*.cu
// compile with g++ and run on the CPU (the cuda-emulated backend; docs/ARCHITECTURE.md, "Host
// emulation of CUDA"). It knows nothing of collage. A kernel file includes this header in
// place of the CUDA runtime; the host side (src/backend/cuda/runtime/runtime_emulated.cpp) uses the
// stream, memory and launch functions of namespace simt below.
//
// RULES (what the project relies on; docs/ARCHITECTURE.md, "Host emulation of CUDA", numbers
// them the same way)
//
// 1. Device memory is host memory that the host cannot touch. Every device_malloc is its own
//    mapping, PROT_NONE whenever no queued work (kernel, copy, fill, enqueued function) runs,
//    and readable/writable exactly while such work runs. Host code that dereferences a device
//    pointer therefore faults (SIGSEGV), as it would be an illegal access on a GPU. The
//    allocation is placed so that its end (its size rounded up to 256 bytes) meets a PROT_NONE
//    guard (64 KiB, fault_handler.h), so a kernel that runs past the end faults too. A SIGSEGV
//    on device memory, a guard or a fiber stack's guard first prints "simt: ..." saying which
//    (and, inside a kernel, naming kernel, block and thread). Fresh memory holds a poison
//    pattern (all bytes 0xff: NaN in float and bf16), never zeros.
// 2. Asynchronous in spirit. Work queued on a Stream runs in order. In immediate mode (the
//    default) it runs at once in the caller's thread; in deferred mode (set_deferred(true) or
//    SIMT_DEFERRED=1) only in synchronize (or destroy_stream). So in deferred mode a host that
//    reads a device-to-host copy without synchronising sees stale data, as it may on a GPU.
//    A host source of memcpy_async is staged at the call (like cudaMemcpyAsync from pageable
//    memory); a host destination is written when the copy runs.
// 3. Execution. The blocks of a grid run one after another (on SIMT_THREADS worker OS threads,
//    default 1, which makes every run deterministic). Within a block each CUDA thread is a
//    fiber; the scheduler always resumes the lowest-numbered runnable thread (the highest in
//    reverse mode, set_reverse_schedule), which runs until it exits or blocks at __syncthreads
//    or a warp collective. So thread 0 runs as far as it can before thread 1 starts: a kernel
//    that reads another thread's shared memory without the barrier that orders it reads stale
//    (poisoned, for dynamic shared memory) data and gives a wrong result. Warp collectives are
//    rendezvous with partial-mask and divergence semantics as on Volta and later (collectives.h).
//    __shared__ variables are per-OS-thread statics (cuda_types.h); dynamic shared memory is
//    poisoned at the start of every block and ends at a guard.
// 4. Fibers (Boost.Context) have 64 KiB stacks (SIMT_STACK bytes) with a guard below, created
//    once per worker OS thread and reused by every block and launch. Measured on the
//    development machine (tests/simt/costs_test.cpp): ~30-40 ns per CUDA thread started,
//    ~30 ns per __syncthreads per thread, ~30 ns per shuffle per lane.
// 5. AddressSanitizer is told about every fiber switch (__sanitizer_start/finish_switch_fiber);
//    ASan builds keep __shared__ as plain statics (with redzones) and use one worker.
// 6. Errors. A kernel bug the emulator can see (deadlock, warp mask misuse, __syncthreads
//    outside a kernel) prints "simt: ..." naming the kernel, block and thread and aborts, like a
//    GPU fault. (Kernels are named by symbol when the executable exports it, else by
//    "file+offset" for addr2line, with their parameter types.) A queued function that throws makes
//    synchronize return the exception's what(); the stream then drops the work queued after it
//    until that synchronize reports the error. Invalid launch configurations and copies outside an
//    allocation are reported too (below).
//
// Environment: SIMT_THREADS (worker OS threads), SIMT_STACK (fiber stack bytes),
// SIMT_DEFERRED=1 (deferred mode), SIMT_REVERSE=1 (reverse schedule).
#include <cstddef>
#include <functional>
#include <tuple>
#include <utility>

#include "simt/async_copy.h"
#include "simt/collectives.h"
#include "simt/cuda_types.h"
#include "simt/device_functions.h"
#include "simt/warp_matrix.h"

namespace simt {

class Stream;  // an in-order queue of work

Stream* create_stream();
void destroy_stream(Stream* stream);  // runs what is queued first

// Emulated device memory: 256-byte aligned, contents a poison pattern, readable only while
// queued work runs (rule 1). device_free waits for every stream first, as cudaFree does.
void* device_malloc(size_t bytes);
void device_free(void* pointer);
// Whether `pointer` lies inside a live device allocation.
bool is_device_pointer(const void* pointer);

// Queues a host function that touches device memory (the emulated cuBLASLt GEMM uses it).
// If it throws, synchronize returns the exception's message.
void enqueue(Stream* stream, std::function<void()> work);
// Copies and fills in stream order (rule 2). A device range that runs past its allocation
// queues nothing and makes the next synchronize return an error.
void memcpy_async(Stream* stream, void* destination, const void* source, size_t bytes);
void memset_async(Stream* stream, void* destination, int value, size_t bytes);
// Runs (deferred mode) or waits for everything queued. Returns nullptr, or the message of the
// first failure since the last synchronize (valid until the next failure is reported).
const char* synchronize(Stream* stream);

// Deferred mode (rule 2); the initial value comes from SIMT_DEFERRED.
void set_deferred(bool deferred);
bool deferred();
// Worker OS threads that run the blocks of a grid (initially SIMT_THREADS, default 1).
void set_worker_threads(unsigned count);
unsigned worker_threads();
// Reverse schedule (initially SIMT_REVERSE=1): within a block, run the HIGHEST-numbered
// runnable thread first. The default order exposes a missing barrier before reading a
// higher-numbered thread's data, the reverse order one before reading a lower-numbered
// thread's; running a kernel's tests both ways catches either.
void set_reverse_schedule(bool reverse);
bool reverse_schedule();

namespace detail {
// One queued kernel launch: `body` runs the kernel with its arguments in the calling fiber.
struct KernelLaunch {
  dim3 grid, block;
  size_t shared_bytes = 0;
  std::function<void()> body;
  const void* kernel = nullptr;   // its address, for messages
  const char* parameters = "";    // its parameter types, for messages
  bool single_os_thread = false;  // __shared__ are plain statics (SIMT_SHARED_STATIC)
};
// nullptr, or why (grid, block, shared_bytes) is not a valid launch configuration.
const char* check_launch(dim3 grid, dim3 block, size_t shared_bytes);
void enqueue_kernel(Stream* stream, KernelLaunch launch);
template <typename... P>
const char* parameter_types() {
  return __PRETTY_FUNCTION__;  // "... [with P = {float*, int}]"
}
}  // namespace detail

// Queues kernel<<<grid, block, shared_bytes, stream>>>(args...): the arguments are converted to
// the kernel's parameter types and copied at the call, like CUDA. Returns nullptr, or a static
// message for an invalid configuration (no threads or more than 1024 per block, block.z > 64,
// an empty grid, grid.y or grid.z > 65535, more than 227 KiB of dynamic shared memory), in
// which case nothing is queued.
template <typename... P, typename... A>
const char* launch(Stream* stream, void (*kernel)(P...), dim3 grid, dim3 block, size_t shared_bytes,
                   A... args) {
  static_assert(sizeof...(P) == sizeof...(A), "simt::launch: wrong number of kernel arguments");
  if (const char* error = detail::check_launch(grid, block, shared_bytes)) return error;
  detail::KernelLaunch work;
  work.grid = grid;
  work.block = block;
  work.shared_bytes = shared_bytes;
  work.body = [kernel, arguments = std::tuple<P...>(static_cast<P>(args)...)] {
    std::apply(kernel, arguments);  // each CUDA thread gets its own copy of the parameters
  };
  work.kernel = reinterpret_cast<const void*>(kernel);
  work.parameters = detail::parameter_types<P...>();
#if defined(SIMT_SHARED_STATIC)
  work.single_os_thread = true;
#endif
  detail::enqueue_kernel(stream, std::move(work));
  return nullptr;
}

}  // namespace simt
