// Token (+ learned position) embedding lookup and its backward, vocab-parallel aware: this
// rank owns the rows [vocab_begin, vocab_end) of the word embedding; other tokens look up 0
// here (the sum over tensor-parallel ranks supplies them).
#include <omp.h>

#include <algorithm>
#include <numeric>

#include "backend/cpu/kernels.h"
#include "backend/cpu/storage.h"

namespace collage::cpu {

template <typename S>
void embedding_forward(CpuContext& cx, S* out, const int32_t* tokens, const S* wte, const S* wpe,
                       int B, int T, int C, int64_t vocab_begin, int64_t vocab_end) {
  const int64_t N = int64_t(B) * T;
#pragma omp parallel for schedule(static) num_threads(cx.threads)
  for (int64_t row = 0; row < N; row++) {
    S* out_row = out + row * C;  // (C)
    const int64_t token = tokens[row];
    const bool owned = token >= vocab_begin && token < vocab_end;
    const S* word = owned ? wte + (token - vocab_begin) * C : nullptr;
    const S* position = wpe ? wpe + (row % T) * C : nullptr;
    if (word && position) {
#pragma omp simd
      for (int c = 0; c < C; c++) store(out_row[c], load(word[c]) + load(position[c]));
    } else if (word || position) {  // a copy: storing a loaded value is exact
      const S* only = word ? word : position;
      std::copy(only, only + C, out_row);
    } else {
      std::fill(out_row, out_row + C, S{});
    }
  }
}

template <typename S>
void embedding_backward(CpuContext& cx, S* dwte, S* dwpe, const S* dout, const int32_t* tokens,
                        int B, int T, int C, int64_t vocab_begin, int64_t vocab_end) {
  const int64_t N = int64_t(B) * T;
  Scratch scratch(cx.scratch);
  const PerThread row_sum = scratch.per_thread(size_t(C), cx.threads);  // one fp32 row (C)

  if (dwte) {
    // Group the rows by token (stable: rows ascending within a group), so each token's rows
    // are summed in a fixed order by one thread: no two threads touch the same dwte row.
    std::vector<int32_t>& rows = cx.rows_by_token;
    rows.clear();
    for (int64_t row = 0; row < N; row++) {
      if (tokens[row] >= vocab_begin && tokens[row] < vocab_end) rows.push_back(int32_t(row));
    }
    std::stable_sort(rows.begin(), rows.end(),
                     [tokens](int32_t a, int32_t b) { return tokens[a] < tokens[b]; });
    std::vector<int64_t>& groups = cx.token_groups;  // group g is rows[groups[g], groups[g+1])
    groups.clear();
    for (size_t i = 0; i < rows.size(); i++) {
      if (i == 0 || tokens[rows[i]] != tokens[rows[i - 1]]) groups.push_back(int64_t(i));
    }
    groups.push_back(int64_t(rows.size()));
    const int64_t group_count = int64_t(groups.size()) - 1;

#pragma omp parallel for schedule(static) num_threads(cx.threads)
    for (int64_t g = 0; g < group_count; g++) {
      float* acc = row_sum[omp_get_thread_num()];
      std::fill(acc, acc + C, 0.0f);
      for (int64_t i = groups[g]; i < groups[g + 1]; i++) {
        const S* d = dout + int64_t(rows[i]) * C;
#pragma omp simd
        for (int c = 0; c < C; c++) acc[c] += load(d[c]);
      }
      S* grad = dwte + (int64_t(tokens[rows[groups[g]]]) - vocab_begin) * C;
#pragma omp simd
      for (int c = 0; c < C; c++) store(grad[c], load(grad[c]) + acc[c]);
    }
  }

  if (dwpe) {  // dwpe[t] += Σ_b dout[b, t]
#pragma omp parallel for schedule(static) num_threads(cx.threads)
    for (int t = 0; t < T; t++) {
      float* acc = row_sum[omp_get_thread_num()];
      std::fill(acc, acc + C, 0.0f);
      for (int b = 0; b < B; b++) {
        const S* d = dout + (int64_t(b) * T + t) * C;
#pragma omp simd
        for (int c = 0; c < C; c++) acc[c] += load(d[c]);
      }
      S* grad = dwpe + int64_t(t) * C;
#pragma omp simd
      for (int c = 0; c < C; c++) store(grad[c], load(grad[c]) + acc[c]);
    }
  }
}

template void embedding_forward(CpuContext&, bf16*, const int32_t*, const bf16*, const bf16*, int,
                                int, int, int64_t, int64_t);
template void embedding_forward(CpuContext&, float*, const int32_t*, const float*, const float*,
                                int, int, int, int64_t, int64_t);
template void embedding_backward(CpuContext&, bf16*, bf16*, const bf16*, const int32_t*, int, int,
                                 int, int64_t, int64_t);
template void embedding_backward(CpuContext&, float*, float*, const float*, const int32_t*, int,
                                 int, int, int64_t, int64_t);

}  // namespace collage::cpu
