#pragma once
// fp32 views of storage blocks for OpenBLAS sgemm. Debian's OpenBLAS has no bf16 GEMM, so a
// bf16 block is widened to fp32 in scratch (exact), multiplied with fp32 accumulation, and a
// destination block is rounded back once. For float storage a view is the caller's memory
// itself and nothing is copied. Blocks are small enough (a tile of output channels, one
// attention head) to stay in cache between widening and use.
#include <cblas.h>

#include <algorithm>
#include <cstdint>

#include "backend/cpu/storage.h"

namespace collage::cpu {

// A row-major fp32 matrix: element (r, c) at data[r * ld + c].
struct ConstView {
  const float* data;
  int64_t ld;
};
struct View {
  float* data;
  int64_t ld;
};

// Read-only fp32 view of the (rows, cols) block at src with leading dimension ld.
// bf16: widened into scratch (rows * cols floats).
template <typename S>
ConstView read_block(const S* src, int64_t rows, int64_t cols, int64_t ld, float* scratch) {
  if constexpr (is_fp32_storage<S>) {
    return {src, ld};
  } else {
    for (int64_t r = 0; r < rows; r++) widen(src + r * ld, scratch + r * cols, cols);
    return {scratch, cols};
  }
}

// Writable fp32 view of a destination block; keep = true widens its current contents (for
// `+=`), keep = false leaves the view's contents undefined. bf16: in scratch, rounded back by
// close_block.
template <typename S>
View open_block(S* dst, int64_t rows, int64_t cols, int64_t ld, float* scratch, bool keep) {
  if constexpr (is_fp32_storage<S>) {
    return {dst, ld};
  } else {
    if (keep) {
      for (int64_t r = 0; r < rows; r++) widen(dst + r * ld, scratch + r * cols, cols);
    }
    return {scratch, cols};
  }
}

// Zeros in the view's (rows, cols): a block about to be summed into, whose old contents do not
// count.
inline void zero_view(View view, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; r++) std::fill_n(view.data + r * view.ld, cols, 0.0f);
}

template <typename S>
void close_block(View view, S* dst, int64_t rows, int64_t cols, int64_t ld) {
  if constexpr (!is_fp32_storage<S>) {
    for (int64_t r = 0; r < rows; r++) narrow(view.data + r * view.ld, dst + r * ld, cols);
  } else {
    (void)view, (void)dst, (void)rows, (void)cols, (void)ld;  // the view was the block itself
  }
}

// c (M, N) = alpha · op(a) · op(b) + beta · c, op(a) (M, K), op(b) (K, N); single-threaded
// sgemm (callers parallelise over blocks with OpenMP, see matmul.cpp).
inline void gemm(bool transpose_a, bool transpose_b, int64_t M, int64_t N, int64_t K, float alpha,
                 ConstView a, ConstView b, float beta, View c) {
  if (M == 0 || N == 0) return;
  cblas_sgemm(CblasRowMajor, transpose_a ? CblasTrans : CblasNoTrans,
              transpose_b ? CblasTrans : CblasNoTrans, static_cast<int>(M), static_cast<int>(N),
              static_cast<int>(K), alpha, a.data, static_cast<int>(a.ld), b.data,
              static_cast<int>(b.ld), beta, c.data, static_cast<int>(c.ld));
}

}  // namespace collage::cpu
