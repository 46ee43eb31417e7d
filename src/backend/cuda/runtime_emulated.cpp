// runtime.h on the host SIMT emulator (src/simt): device memory is the emulator's protected
// host memory, the stream its in-order queue. A kernel fault or a failed queued function
// comes back from simt::synchronize as a message, thrown here as collage::Error.
#include <cstring>

#include "backend/cuda/gemm.h"
#include "backend/cuda/runtime.h"
#include "core/error.h"
#include "simt/simt.h"

namespace collage::cuda {
COLLAGE_CUDA_VARIANT_BEGIN

void open_context(CudaContext& cx, int device) {
  COLLAGE_CHECK(device == 0, "cuda-emulated: there is one emulated device, not device {}", device);
  cx.device = 0;
  cx.sm_count = 1;  // blocks run one after another
  cx.max_shared_bytes = 48 << 10;
  cx.stream = simt::create_stream();
  cx.gemm = create_gemm_engine(cx);
}

void close_context(CudaContext& cx) {
  if (!cx.stream) return;
  simt::synchronize(cx.stream);  // a destructor must not throw: errors were reported before
  for (DeviceBuffer* buffer :
       {&cx.scratch.embedding_rows, &cx.scratch.attention_delta, &cx.scratch.column_partials,
        &cx.scratch.block_partials, &cx.scratch.rope_table}) {
    if (buffer->data) simt::device_free(buffer->data);
    *buffer = {};
  }
  destroy_gemm_engine(cx, cx.gemm);
  cx.gemm = nullptr;
  simt::destroy_stream(cx.stream);
  cx.stream = nullptr;
}

void* device_allocate(CudaContext&, size_t bytes) {
  void* pointer = simt::device_malloc(bytes == 0 ? 1 : bytes);
  COLLAGE_CHECK(pointer, "cuda-emulated: cannot allocate {} bytes of device memory", bytes);
  return pointer;
}

void device_release(CudaContext&, void* pointer) {
  simt::device_free(pointer);  // runs what is queued first, as cudaFree waits for the device
}

void upload(CudaContext& cx, void* device_destination, const void* host_source, size_t bytes) {
  if (bytes) simt::memcpy_async(cx.stream, device_destination, host_source, bytes);
}

void download(CudaContext& cx, void* host_destination, const void* device_source, size_t bytes) {
  if (bytes) simt::memcpy_async(cx.stream, host_destination, device_source, bytes);
  synchronize(cx);
}

void copy_on_device(CudaContext& cx, void* destination, const void* source, size_t bytes) {
  if (bytes) simt::memcpy_async(cx.stream, destination, source, bytes);
}

void fill_bytes(CudaContext& cx, void* destination, int byte, size_t bytes) {
  if (bytes) simt::memset_async(cx.stream, destination, byte, bytes);
}

void synchronize(CudaContext& cx) {
  cx.synchronizations++;
  if (const char* error = simt::synchronize(cx.stream)) fail("cuda-emulated: {}", error);
}

COLLAGE_CUDA_VARIANT_END
}  // namespace collage::cuda
