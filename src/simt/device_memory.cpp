// Emulated device memory (docs/ARCHITECTURE.md, "Host emulation of CUDA", rule 1). Layout of
// one allocation of `bytes`:
//
//   [guard][ ...slack... | bytes rounded up to 256 ][guard]      (guards: kGuardBytes)
//                        ^ the pointer device_malloc returns (256-aligned)
//
// so a kernel that reads or writes past the rounded end (or before the start of a
// page-multiple allocation) hits a guard. The data pages are PROT_NONE except while a
// DeviceAccess is alive (queued work runs), so the host faults on any dereference outside
// queued work.
#include "simt/device_memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "simt/fault_handler.h"
#include "simt/simt.h"

namespace simt {
namespace detail {
void synchronize_all_streams();  // stream.cpp: device_free waits for queued work, as cudaFree
}

namespace {

constexpr size_t kAlignment = 256;
constexpr unsigned char kPoison = 0xff;  // NaN as float and as bf16, -1 as integers

struct Allocation {
  char* mapping;  // start of the leading guard
  size_t mapping_bytes;
  char* data;  // the readable/writable pages (between the guards)
  size_t data_bytes;
  size_t bytes;  // as asked for
};

struct Registry {
  std::mutex mutex;
  std::map<uintptr_t, Allocation> allocations;  // by the pointer handed out
  int open = 0;                                 // live DeviceAccess objects
};

Registry& registry() {
  static Registry* instance = new Registry;  // leaked: allocations may outlive static destructors
  return *instance;
}

size_t page_bytes() {
  static const size_t bytes = size_t(sysconf(_SC_PAGESIZE));
  return bytes;
}

void protect(const Allocation& allocation, int protection) {
  if (mprotect(allocation.data, allocation.data_bytes, protection) != 0) {
    std::perror("simt: mprotect of device memory");
    std::abort();
  }
}

// The allocation containing `pointer` (registry locked), or nullptr.
const std::pair<const uintptr_t, Allocation>* lookup(Registry& r, const void* pointer) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(pointer);
  auto it = r.allocations.upper_bound(address);
  if (it == r.allocations.begin()) return nullptr;
  --it;
  if (address >= it->first + it->second.bytes) return nullptr;
  return &*it;
}

}  // namespace

void* device_malloc(size_t bytes) {
  detail::install_fault_handler();
  if (bytes == 0) bytes = 1;
  const size_t page = page_bytes();
  const size_t usable = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  Allocation allocation{};
  allocation.bytes = bytes;
  allocation.data_bytes = (usable + page - 1) / page * page;
  allocation.mapping_bytes = allocation.data_bytes + 2 * detail::kGuardBytes;
  void* mapping =
      mmap(nullptr, allocation.mapping_bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapping == MAP_FAILED) return nullptr;
  allocation.mapping = static_cast<char*>(mapping);
  allocation.data = allocation.mapping + detail::kGuardBytes;
  // Transparent huge pages where the kernel allows them: every queued op opens and closes all
  // device memory with mprotect, whose cost grows with the page-table entries it rewrites
  // (a 2 MiB huge page is one entry instead of 512). Only a hint; correctness does not depend
  // on it.
  if (allocation.data_bytes >= (size_t(2) << 20))
    madvise(allocation.data, allocation.data_bytes, MADV_HUGEPAGE);
  protect(allocation, PROT_READ | PROT_WRITE);
  std::memset(allocation.data, kPoison, allocation.data_bytes);
  char* pointer = allocation.data + allocation.data_bytes - usable;
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  if (r.open == 0) protect(allocation, PROT_NONE);
  r.allocations.emplace(reinterpret_cast<uintptr_t>(pointer), allocation);
  return pointer;
}

void device_free(void* pointer) {
  if (!pointer) return;
  detail::synchronize_all_streams();
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  auto it = r.allocations.find(reinterpret_cast<uintptr_t>(pointer));
  if (it == r.allocations.end()) {
    std::fprintf(stderr, "simt: device_free(%p): not the start of a live device allocation\n",
                 pointer);
    std::abort();
  }
  munmap(it->second.mapping, it->second.mapping_bytes);
  r.allocations.erase(it);
}

bool is_device_pointer(const void* pointer) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  return lookup(r, pointer) != nullptr;
}

namespace detail {

DeviceAccess::DeviceAccess() {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  if (r.open++ == 0)
    for (const auto& [pointer, allocation] : r.allocations)
      protect(allocation, PROT_READ | PROT_WRITE);
}

DeviceAccess::~DeviceAccess() {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  if (--r.open == 0)
    for (const auto& [pointer, allocation] : r.allocations) protect(allocation, PROT_NONE);
}

bool find_allocation(const void* pointer, const char** start, size_t* bytes) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  const auto* found = lookup(r, pointer);
  if (!found) return false;
  *start = reinterpret_cast<const char*>(found->first);
  *bytes = found->second.bytes;
  return true;
}

const char* check_range(const void* pointer, size_t bytes, const char* what, char* message,
                        size_t message_bytes) {
  const char* start = nullptr;
  size_t allocation_bytes = 0;
  if (!find_allocation(pointer, &start, &allocation_bytes)) return nullptr;  // host memory
  const size_t offset = size_t(static_cast<const char*>(pointer) - start);
  if (bytes <= allocation_bytes - offset) return nullptr;
  std::snprintf(message, message_bytes,
                "%s: %zu bytes at offset %zu of the device allocation %p of %zu bytes run past "
                "its end",
                what, bytes, offset, static_cast<const void*>(start), allocation_bytes);
  return message;
}

bool describe_device_address(const void* address, char* message, size_t bytes) {
  // Runs in the SIGSEGV handler: never wait for the lock.
  Registry& r = registry();
  std::unique_lock lock(r.mutex, std::try_to_lock);
  if (!lock.owns_lock()) return false;
  const char* target = static_cast<const char*>(address);
  for (const auto& [pointer, allocation] : r.allocations) {
    const char* start = reinterpret_cast<const char*>(pointer);
    if (target < allocation.mapping || target >= allocation.mapping + allocation.mapping_bytes)
      continue;
    if (target >= allocation.data && target < allocation.data + allocation.data_bytes) {
      std::snprintf(message, bytes,
                    "illegal access to device memory at %p (offset %td of the device allocation "
                    "%p of %zu bytes)",
                    address, target - start, static_cast<const void*>(start), allocation.bytes);
    } else if (target < allocation.data) {
      std::snprintf(message, bytes,
                    "illegal address %p: %td bytes before the device allocation %p of %zu bytes",
                    address, start - target, static_cast<const void*>(start), allocation.bytes);
    } else {
      std::snprintf(message, bytes,
                    "illegal address %p: %td bytes past the end of the device allocation %p of "
                    "%zu bytes",
                    address, target - (start + allocation.bytes), static_cast<const void*>(start),
                    allocation.bytes);
    }
    return true;
  }
  return false;
}

}  // namespace detail
}  // namespace simt
