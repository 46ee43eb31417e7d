#pragma once
// The cpu kernels' scratch memory: fp32 working space (bf16 tiles widened to fp32, per-thread
// partial sums) that a kernel takes by name for the length of one call:
//
//   Scratch scratch(cx.scratch);                                    // one kernel call
//   float* widened_input = scratch.take(size_t(N) * C);             // (N, C)
//   const PerThread weight_tile = scratch.per_thread(n * C, threads);  // (n, C) per thread
//
// Everything taken is given back when the Scratch ends. The memory grows to the largest
// call's need and is then reused, so a training step allocates nothing after the first one.
// Every buffer starts on a 256-byte boundary, so threads never share a cache line. Contents
// are undefined: a kernel writes what it reads.
#include <cstddef>
#include <vector>

namespace collage::cpu {

// Equal slices of one buffer, one per thread.
class PerThread {
 public:
  PerThread(float* base, size_t stride) : base_(base), stride_(stride) {}
  float* operator[](int thread) const { return base_ + stride_ * static_cast<size_t>(thread); }

 private:
  float* base_;
  size_t stride_;
};

// The memory behind every Scratch of one backend (a member of its CpuContext).
class ScratchMemory {
 public:
  ScratchMemory() = default;
  ScratchMemory(const ScratchMemory&) = delete;
  ScratchMemory& operator=(const ScratchMemory&) = delete;
  ~ScratchMemory();

 private:
  friend class Scratch;
  struct Block {
    float* data = nullptr;
    size_t floats = 0;
  };
  void begin();
  float* take(size_t floats);
  void end() noexcept;

  Block block_;                  // where takes come from
  std::vector<Block> outgrown_;  // blocks the open call outgrew: its earlier buffers are there
  size_t used_ = 0;              // floats of block_ taken by the open call
  size_t call_floats_ = 0;       // floats taken by the open call, in every block
  size_t largest_call_ = 0;      // floats the largest call so far took
  bool open_ = false;
};

// One kernel call's scratch; kernels run one at a time, so at most one is open per backend.
class Scratch {
 public:
  explicit Scratch(ScratchMemory& memory) : memory_(memory) { memory_.begin(); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch() { memory_.end(); }

  float* take(size_t floats) { return memory_.take(floats); }
  PerThread per_thread(size_t floats_per_thread, int threads);

 private:
  ScratchMemory& memory_;
};

}  // namespace collage::cpu
