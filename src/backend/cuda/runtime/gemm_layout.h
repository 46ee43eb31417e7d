#pragma once
// The column-major problem cuBLASLt solves for a row-major GemmCall (gemm.h). A row-major
// (r, c) matrix with leading dimension ld is the column-major (c, r) matrix with the same ld,
// so the row-major D = op(a)·op(b) is the column-major Dᵀ = op(b)ᵀ·op(a)ᵀ: cuBLASLt's first
// operand is our b, its second our a, m = N, n = M. gemm_device.cpp builds its descriptors
// from this; tests/cuda/gemm_layout_test.cpp checks it against a row-major product on the CPU
// (the one part of the cuBLASLt call that can be checked without a GPU).
#include <cstdint>

#include "backend/cuda/runtime/gemm.h"

namespace collage::cuda {
COLLAGE_CUDA_VARIANT_BEGIN

// A column-major (rows, cols) matrix with leading dimension ld, used transposed or not.
struct ColumnMajorOperand {
  int64_t rows = 0, cols = 0, ld = 0;
  bool transpose = false;
};

// output (m, n) = op(first) (m, k) · op(second) (k, n), all column-major.
struct ColumnMajorGemm {
  int64_t m = 0, n = 0, k = 0;
  ColumnMajorOperand first, second, output;
};

inline ColumnMajorGemm column_major(const GemmCall& g) {
  ColumnMajorGemm c;
  c.m = g.N, c.n = g.M, c.k = g.K;
  // first = our b: stored row-major (K, N) -> column-major (N, K); transposed it is (N, K)
  // row-major -> column-major (K, N), and op() transposes it back to (N, K).
  c.first = g.transpose_b ? ColumnMajorOperand{g.K, g.N, g.ldb, true}
                          : ColumnMajorOperand{g.N, g.K, g.ldb, false};
  // second = our a: row-major (M, K) -> column-major (K, M); transposed, (K, M) -> (M, K).
  c.second = g.transpose_a ? ColumnMajorOperand{g.M, g.K, g.lda, true}
                           : ColumnMajorOperand{g.K, g.M, g.lda, false};
  c.output = ColumnMajorOperand{g.N, g.M, g.ldd, false};
  return c;
}

COLLAGE_CUDA_VARIANT_END
}  // namespace collage::cuda
