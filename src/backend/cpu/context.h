#pragma once
// CpuContext: what every cpu kernel gets besides its tensors: the thread count and the
// backend-owned working memory (scratch.h for the fp32 scratch, and the index and sum vectors
// below). All of it grows to the largest request and is then reused, so a training step
// allocates nothing after the first one. Kernels run one at a time: a context is not shared
// by concurrent calls.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "backend/cpu/isa_choice.h"
#include "backend/cpu/onednn_gemm.h"
#include "backend/cpu/optimizer_chunks.h"
#include "backend/cpu/scratch.h"

namespace collage::cpu {

// cos/sin of the RoPE angles t·base^(-2i/HS) for t < T, i < HS/2, computed in double once per
// (T, HS, base) and kept.
struct RopeTable {
  int T = 0, half = 0;
  float base = 0;
  std::vector<float> cos, sin;  // (T, HS/2)
};

struct CpuContext {
  int threads = 1;
  // Which compilation of the lane kernels runs (lane_kernels.h); the backend sets the process's
  // choice, a test may set either.
  CpuIsa isa = CpuIsa::baseline;
  ScratchMemory scratch;  // fp32 buffers a kernel takes by name for one call (scratch.h)
  std::vector<int32_t> rows_by_token;  // embedding backward: rows grouped by token
  std::vector<int64_t> token_groups;   // start of each token's group in rows_by_token
  std::vector<double> partial_sums;    // sum / sum_squares: one per fixed-size chunk
  // The optimizer's per-step table (optimizer_chunks.h) and its memory.
  std::vector<float> reciprocal_denominator_values;
  ReciprocalDenominators reciprocal_denominators;
  std::vector<int32_t> key_visible;  // attention: per thread, 1 for each key not masked
  RopeTable rope;
  // Set: matmuls run as oneDNN matmuls (parallel.cpu_gemm); null: OpenBLAS on widened tiles.
  std::unique_ptr<OnednnGemm> onednn;
  // With onednn and bf16 storage: one single-threaded engine per thread, for the products that
  // attention computes per head inside its own OpenMP loop (onednn_gemm.h, "Threads").
  std::vector<std::unique_ptr<OnednnGemm>> onednn_per_thread;
};

}  // namespace collage::cpu
