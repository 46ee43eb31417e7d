// Zeroing memory (Backend::zero): above all the gradients, which the trainer zeroes before
// every step and the backward then accumulates into (GPT-2 124M: 249 MB). One core's stores
// do not fill the memory bandwidth that two reach: on the 2-core Intel development VM one
// thread zeroes those 249 MB in 25.5 ms, two in 12.8. So a large region is cut into one slice
// per thread, each cleared with memset; a small one is cleared by the calling thread.
#include <algorithm>
#include <cstring>

#include "backend/cpu/kernels.h"

namespace collage::cpu {

void zero_bytes(CpuContext& cx, void* dst, size_t bytes) {
  constexpr size_t kParallelBytes = size_t(1) << 20;  // below this a parallel region costs more
  if (bytes < kParallelBytes || cx.threads <= 1) {
    if (bytes) std::memset(dst, 0, bytes);
    return;
  }
  char* begin = static_cast<char*>(dst);
  const int slices = cx.threads;
  const size_t per_slice = (bytes / slices + 63) / 64 * 64;  // whole 64-byte lines a slice
#pragma omp parallel for schedule(static) num_threads(cx.threads)
  for (int s = 0; s < slices; s++) {
    const size_t from = std::min(bytes, per_slice * size_t(s));
    const size_t to = std::min(bytes, from + per_slice);
    if (to > from) std::memset(begin + from, 0, to - from);
  }
}

}  // namespace collage::cpu
