#pragma once
// The few runtime services the cuda backend's host code and kernel launchers use, so that
// nothing else calls cudart directly: memory, copies in stream order, synchronisation.
// runtime_device.cpp implements them with the CUDA runtime API (never the driver API: the
// executable must start without a driver), runtime_emulated.cpp with the host SIMT emulator.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "backend/cuda/runtime/context.h"
#include "core/op_family.h"

namespace collage::cuda {
COLLAGE_CUDA_VARIANT_BEGIN

// Opens the context on GPU `device` (the emulator has one): creates the stream and the GEMM
// engine, reads the device's properties. close_context waits for the stream and frees all of it.
void open_context(CudaContext& cx, int device);
void close_context(CudaContext& cx);

// Device memory, 256-byte aligned; contents undefined (the backend zero-fills arenas).
void* device_allocate(CudaContext& cx, size_t bytes);
// Waits for queued work (which may still use the memory), then frees it. Never throws: it runs
// in destructors; a fault of earlier work surfaces at the next synchronize().
void device_release(CudaContext& cx, void* pointer);

// Host -> device in stream order; `host_source` may be reused as soon as this returns.
void upload(CudaContext& cx, void* device_destination, const void* host_source, size_t bytes);
// Device -> host: waits for the stream (a synchronisation), then the data is in place.
void download(CudaContext& cx, void* host_destination, const void* device_source, size_t bytes);
// Device -> device and fills, in stream order.
void copy_on_device(CudaContext& cx, void* destination, const void* source, size_t bytes);
void fill_bytes(CudaContext& cx, void* destination, int byte, size_t bytes);
// Waits until everything queued on the stream has run; throws collage::Error if a kernel
// faulted. Counts cx.synchronizations.
void synchronize(CudaContext& cx);

// `collage bench --profile`: from profile_start on, every kernel and GEMM launch is recorded
// under the family of its op name (core/op_family.h): on a GPU a pair of CUDA events around
// it on the stream (from a pool, created once and reused), in the emulator host timestamps
// queued before and after it. profile_stop waits for the stream and returns each family's
// milliseconds and launches since profile_start, then records nothing more. The launch hooks
// are called by launch() (kernels/common.cuh) and gemm() only while cx.profile is set.
void profile_start(CudaContext& cx);
std::vector<OpFamilyTime> profile_stop(CudaContext& cx);
void profile_launch_begin(CudaContext& cx, const char* op);
void profile_launch_end(CudaContext& cx);
// Frees the profile's events and records (close_context calls it).
void profile_release(CudaContext& cx);

// `buffer` grown to at least `bytes` (its contents are then undefined). Growing waits for the
// stream first: queued kernels may still use the old memory.
void* grow(CudaContext& cx, DeviceBuffer& buffer, size_t bytes);
template <typename T>
T* scratch(CudaContext& cx, DeviceBuffer& buffer, size_t count) {
  return static_cast<T*>(grow(cx, buffer, count * sizeof(T)));
}

COLLAGE_CUDA_VARIANT_END
}  // namespace collage::cuda
