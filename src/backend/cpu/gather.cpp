// Row gather and its backward (backend.h, "encoder ops"): the MLM head reads the hidden states
// of the masked positions, the pooler those of the [CLS] rows.
//   gather_rows:      out (count, C) = inp[rows[k]] (a copy: no rounding)
//   scatter_add_rows: dinp[rows[k]] += dout[k]; the dout rows of one destination row are summed
//                     in fp32 in ascending k before the one rounding into dinp, so repeated
//                     rows give the same bits on every thread count and as kernels/gather.cu.
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <numeric>

#include "backend/cpu/kernels.h"
#include "backend/cpu/storage.h"
#include "core/error.h"

namespace collage::cpu {
namespace {

// The shapes are the contract's (backend_contract.h); the row indices are data, which only the
// cpu reads on the host: the cuda kernels must not be given a negative one.
void check_rows(const char* op, const int32_t* rows, int64_t count) {
  for (int64_t k = 0; k < count; k++) {
    COLLAGE_CHECK(rows[k] >= 0, "{}: rows[{}] = {} is negative", op, k, rows[k]);
  }
}

}  // namespace

template <typename S>
void gather_rows(CpuContext& cx, S* out, const S* inp, const int32_t* rows, int64_t count, int C) {
  check_rows("gather_rows", rows, count);
#pragma omp parallel for schedule(static) num_threads(cx.threads) if (count * C > (1 << 16))
  for (int64_t k = 0; k < count; k++) {
    std::memcpy(out + k * C, inp + int64_t(rows[k]) * C, size_t(C) * sizeof(S));
  }
}

// The k are grouped by destination row (a stable sort keeps ascending k within a group); each
// group is summed by one thread, so the groups' writes never overlap.
template <typename S>
void scatter_add_rows(CpuContext& cx, S* dinp, const S* dout, const int32_t* rows, int64_t count,
                      int C) {
  if (!dinp) return;
  check_rows("scatter_add_rows", rows, count);
  if (count == 0) return;
  std::vector<int32_t>& order = cx.rows_by_token;  // (count) k sorted by rows[k], stable
  order.resize(size_t(count));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [rows](int32_t a, int32_t b) { return rows[a] < rows[b]; });
  std::vector<int64_t>& group_starts = cx.token_groups;  // start of each row's group in order
  group_starts.clear();
  for (int64_t g = 0; g < count; g++) {
    if (g == 0 || rows[order[g]] != rows[order[g - 1]]) group_starts.push_back(g);
  }
  const int64_t groups = int64_t(group_starts.size());
  group_starts.push_back(count);
  Scratch scratch(cx.scratch);
  const PerThread sums_buf = scratch.per_thread(size_t(C), cx.threads);  // (C) fp32 sums

#pragma omp parallel for schedule(dynamic, 4) num_threads(cx.threads) if (count * C > (1 << 16))
  for (int64_t g = 0; g < groups; g++) {
    float* sums = sums_buf[omp_get_thread_num()];
    std::fill(sums, sums + C, 0.0f);
    for (int64_t m = group_starts[g]; m < group_starts[g + 1]; m++) {
      const S* src = dout + int64_t(order[m]) * C;
#pragma omp simd
      for (int c = 0; c < C; c++) sums[c] += load(src[c]);
    }
    S* dst = dinp + int64_t(rows[order[group_starts[g]]]) * C;
#pragma omp simd
    for (int c = 0; c < C; c++) store(dst[c], load(dst[c]) + sums[c]);
  }
}

#define COLLAGE_INSTANTIATE(S)                                                        \
  template void gather_rows(CpuContext&, S*, const S*, const int32_t*, int64_t, int); \
  template void scatter_add_rows(CpuContext&, S*, const S*, const int32_t*, int64_t, int);
COLLAGE_INSTANTIATE(bf16)
COLLAGE_INSTANTIATE(float)
#undef COLLAGE_INSTANTIATE

}  // namespace collage::cpu
