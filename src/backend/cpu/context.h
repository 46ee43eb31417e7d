#pragma once
// CpuContext: what every cpu kernel gets besides its tensors: the thread count and the
// backend-owned scratch memory (fp32 working copies of bf16 tiles, per-thread partial sums).
// Scratch grows to the largest request and is then reused, so a training step allocates
// nothing after the first one. Kernels run one at a time: a context is not shared by
// concurrent calls.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "backend/cpu/onednn_gemm.h"

namespace collage::cpu {

// A growable fp32 buffer aligned to 256 bytes; growing does not preserve the contents.
class FloatBuffer {
 public:
  FloatBuffer() = default;
  FloatBuffer(const FloatBuffer&) = delete;
  FloatBuffer& operator=(const FloatBuffer&) = delete;
  ~FloatBuffer();
  float* get(size_t count);

 private:
  float* data_ = nullptr;
  size_t capacity_ = 0;
};

// Equal slices of one FloatBuffer, one per thread, each starting on a 256-byte boundary so
// threads never share a cache line.
class PerThread {
 public:
  PerThread(FloatBuffer& buffer, size_t count_per_thread, int threads)
      : stride_((count_per_thread + 63) / 64 * 64),
        base_(buffer.get(stride_ * static_cast<size_t>(threads))) {}
  float* operator[](int thread) const { return base_ + stride_ * static_cast<size_t>(thread); }

 private:
  size_t stride_;
  float* base_;
};

// cos/sin of the RoPE angles t·base^(-2i/HS) for t < T, i < HS/2, computed in double once per
// (T, HS, base) and kept.
struct RopeTable {
  int T = 0, half = 0;
  float base = 0;
  std::vector<float> cos, sin;  // (T, HS/2)
};

struct CpuContext {
  int threads = 1;
  // Numbered scratch slots; each kernel documents which ones it uses. A slot holds one
  // kernel's data only for the duration of that kernel.
  FloatBuffer scratch[6];
  std::vector<int32_t> rows_by_token;  // embedding backward: rows grouped by token
  std::vector<int64_t> token_groups;   // start of each token's group in rows_by_token
  std::vector<double> partial_sums;    // sum / sum_squares: one per fixed-size chunk
  std::vector<int32_t> key_visible;    // attention: per thread, 1 for each key not masked
  RopeTable rope;
  // Set: matmuls run as oneDNN matmuls (parallel.cpu_gemm); null: OpenBLAS on widened tiles.
  std::unique_ptr<OnednnGemm> onednn;
};

}  // namespace collage::cpu
