#pragma once
// Emulated device memory (internal to src/simt; docs/ARCHITECTURE.md, "Host emulation of
// CUDA", rule 1): every allocation is its own mapping, PROT_NONE except while queued work runs.
// DeviceAccess opens all of them for its lifetime (nested and concurrent uses count; the last
// one to end closes them again).
#include <cstddef>

namespace simt::detail {

class DeviceAccess {
 public:
  DeviceAccess();
  ~DeviceAccess();
  DeviceAccess(const DeviceAccess&) = delete;
  DeviceAccess& operator=(const DeviceAccess&) = delete;
};

// The live allocation containing `pointer`: its start and usable size (the bytes asked for);
// false if `pointer` is not device memory.
bool find_allocation(const void* pointer, const char** start, size_t* bytes);

// nullptr if [pointer, pointer + bytes) is host memory or lies inside one device allocation;
// otherwise a message (written to `message`) saying how it overruns.
const char* check_range(const void* pointer, size_t bytes, const char* what, char* message,
                        size_t message_bytes);

}  // namespace simt::detail
