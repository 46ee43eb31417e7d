// The cpu kernels' scratch memory (scratch.h).
#include "backend/cpu/scratch.h"

#include <algorithm>
#include <cstdlib>
#include <utility>

#include "core/error.h"

namespace collage::cpu {
namespace {

constexpr size_t kAlignFloats = 64;  // 256 bytes

size_t aligned(size_t floats) { return (floats + kAlignFloats - 1) / kAlignFloats * kAlignFloats; }

float* allocate(size_t floats) {
  const size_t bytes = floats * sizeof(float);
  auto* data = static_cast<float*>(std::aligned_alloc(256, bytes));
  if (!data) fail("cpu backend: cannot allocate {} bytes of scratch memory", bytes);
  return data;
}

}  // namespace

ScratchMemory::~ScratchMemory() { std::free(block_.data); }

void ScratchMemory::begin() {
  COLLAGE_CHECK(!open_, "cpu backend: a kernel took scratch memory while another held it");
  // One block that holds the largest call so far, so the next call takes without allocating.
  if (block_.floats < largest_call_) {
    std::free(std::exchange(block_, {}).data);
    block_ = {allocate(largest_call_), largest_call_};
  }
  open_ = true;
}

float* ScratchMemory::take(size_t floats) {
  floats = aligned(floats);
  call_floats_ += floats;
  if (used_ + floats > block_.floats) {
    // This call outgrew the block. Its earlier buffers stay where they are until it ends; the
    // rest comes from a block that would have held the whole call so far.
    if (block_.data) outgrown_.push_back(std::exchange(block_, {}));
    const size_t size = std::max(call_floats_, largest_call_);
    block_ = {allocate(size), size};
    used_ = 0;
  }
  float* buffer = block_.data + used_;
  used_ += floats;
  return buffer;
}

void ScratchMemory::end() noexcept {
  for (Block& block : outgrown_) std::free(block.data);
  outgrown_.clear();
  largest_call_ = std::max(largest_call_, call_floats_);
  call_floats_ = used_ = 0;
  open_ = false;
}

PerThread Scratch::per_thread(size_t floats_per_thread, int threads) {
  const size_t stride = aligned(floats_per_thread);
  return {take(stride * static_cast<size_t>(threads)), stride};
}

}  // namespace collage::cpu
