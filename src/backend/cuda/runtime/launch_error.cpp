// The errors of kernels/common.cuh: a launch that failed (which op, where, with what shape)
// and an entry's argument check, as collage::Error.
#include <cstdarg>
#include <cstdio>
#include <source_location>

#include "backend/cuda/runtime/context.h"
#include "core/error.h"
#if defined(COLLAGE_EMULATED)
#include "simt/simt.h"
#else
#include <vector_types.h>
#endif

namespace collage::cuda {
COLLAGE_CUDA_VARIANT_BEGIN

void throw_launch_error(const char* op, const char* error, dim3 grid, dim3 block,
                        size_t shared_bytes, const std::source_location& where) {
  fail(
      "{}: kernel launch failed at {}:{}: {} (grid {}x{}x{}, block {}x{}x{}, {} bytes of dynamic "
      "shared memory)",
      op, where.file_name(), where.line(), error, grid.x, grid.y, grid.z, block.x, block.y, block.z,
      shared_bytes);
}

void throw_invalid_argument(const char* format, ...) {
  char message[512];
  va_list args;
  va_start(args, format);
  std::vsnprintf(message, sizeof message, format, args);
  va_end(args);
  throw Error(message);
}

COLLAGE_CUDA_VARIANT_END
}  // namespace collage::cuda
