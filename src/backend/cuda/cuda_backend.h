#pragma once
// The factory of the cuda backend of one build (see context.h); collage::make_cuda_backend and
// make_cuda_emulated_backend (backend/backend.h) call the right one.
#include <memory>
#include <string>

#include "backend/backend.h"
#include "backend/cuda/runtime/context.h"

namespace collage::cuda {
COLLAGE_CUDA_VARIANT_BEGIN

// name: "cuda" or "cuda-emulated" (what Backend::name() returns).
std::unique_ptr<Backend> make_backend(const std::string& name, int device);

COLLAGE_CUDA_VARIANT_END
}  // namespace collage::cuda
