#pragma once
// The SIGSEGV report (internal to src/simt): when a fault hits emulated device memory, a
// device allocation's guard pages or a fiber stack's guard page, prints "simt: ..." saying
// which (and, inside a kernel, the kernel, block and thread), then lets the fault take its
// course (the previous handler, or the default action: the process dies of SIGSEGV).
// Not installed under AddressSanitizer, which reports faults itself.
#include <cstddef>

namespace simt::detail {

// The PROT_NONE region below every fiber stack, around every device allocation and after the
// dynamic shared memory. Larger than one page because code built without stack-clash probes
// (GCC's default here) moves the stack pointer by a whole frame at once, and a kernel's stray
// index can be off by more than a page: 64 KiB of address space catches both.
constexpr size_t kGuardBytes = 64u << 10;

// Installs the handler once (device_malloc and the first scheduler call it).
void install_fault_handler();
// Gives the calling OS thread an alternate signal stack, so the handler can report a fiber
// stack overflow (the scheduler calls it for every thread that runs fibers).
void ensure_signal_stack();

// Pieces of the report, from the module that owns the state (device memory; the running
// scheduler: fiber stack guards and the dynamic shared memory guard); each returns false when the
// address is not its own. They run inside the signal handler, so they never wait for a lock
// (naming the kernel may allocate; the process is going down anyway).
bool describe_device_address(const void* address, char* message, size_t bytes);
bool describe_scheduler_address(const void* address, char* message, size_t bytes);
bool describe_running_thread(char* message, size_t bytes);

}  // namespace simt::detail
