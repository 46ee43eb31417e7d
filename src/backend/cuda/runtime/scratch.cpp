// grow(): the named scratch buffers of the CudaContext (runtime.h), on either build.
#include "backend/cuda/runtime/runtime.h"

namespace collage::cuda {
COLLAGE_CUDA_VARIANT_BEGIN

void* grow(CudaContext& cx, DeviceBuffer& buffer, size_t bytes) {
  if (buffer.data && bytes <= buffer.bytes) return buffer.data;
  device_release(cx, buffer.data);  // waits for kernels that may still read the old buffer
  buffer = {};
  buffer.data = device_allocate(cx, bytes);
  buffer.bytes = bytes;
  return buffer.data;
}

COLLAGE_CUDA_VARIANT_END
}  // namespace collage::cuda
