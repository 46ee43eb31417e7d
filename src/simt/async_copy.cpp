#include "simt/async_copy.h"

#include <cstring>

#include "simt/collectives.h"
#include "simt/scheduler.h"

namespace simt {
namespace {

detail::Fiber& running_fiber(const char* what) {
  detail::Scheduler* scheduler = detail::Scheduler::running();
  if (!scheduler) detail::kernel_fault("%s outside a kernel", what);
  return scheduler->current_fiber();
}

}  // namespace

void copy_async(void* destination, const void* source, uint32_t bytes, uint32_t source_bytes) {
  detail::Fiber& self = running_fiber("cp.async");
  if (bytes != 16 || source_bytes > bytes)
    detail::kernel_fault("cp.async: %u bytes from %u (cp.async.cg copies 16, from 0..16)", bytes,
                         source_bytes);
  if (reinterpret_cast<uintptr_t>(destination) % 16 != 0 ||
      (source_bytes > 0 && reinterpret_cast<uintptr_t>(source) % 16 != 0))
    detail::kernel_fault("cp.async: %p <- %p is not 16-byte aligned", destination, source);
  self.async_copies.push_back({destination, source, bytes, source_bytes, self.async_groups});
}

void copy_async_commit() { running_fiber("cp.async.commit_group").async_groups++; }

void copy_async_wait(uint32_t pending) {
  detail::Fiber& self = running_fiber("cp.async.wait_group");
  // Groups [0, done) complete; copies not yet committed belong to no group and stay.
  const uint32_t done = self.async_groups > pending ? self.async_groups - pending : 0;
  size_t kept = 0;
  for (const detail::AsyncCopy& copy : self.async_copies) {
    if (copy.group < done) {
      char* destination = static_cast<char*>(copy.destination);
      if (copy.source_bytes > 0) std::memcpy(destination, copy.source, copy.source_bytes);
      std::memset(destination + copy.source_bytes, 0, copy.bytes - copy.source_bytes);
    } else {
      self.async_copies[kept++] = copy;
    }
  }
  self.async_copies.resize(kept);
}

}  // namespace simt
