// Rotary position embedding, GPT-NeoX "rotate half": within each head of q and k, the pair
// (x_i, x_{i+HS/2}) at position t rotates by the angle t·base^(-2i/HS):
//   (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin).
// v is copied. The backward applies the transposed rotation (the angle negated).
#include <algorithm>

#include "backend/cpu/kernels.h"
#include "backend/cpu/storage.h"
#include "numerics/rope_table.h"

namespace collage::cpu {
namespace {

// The table is computed once per (T, HS, base) by the function the cuda backend uses too
// (numerics/rope_table.h), so both rotate by the same values.
const RopeTable& rope_table(CpuContext& cx, int T, int HS, float base) {
  RopeTable& table = cx.rope;
  const int half = HS / 2;
  if (table.T == T && table.half == half && table.base == base) return table;
  table.T = T, table.half = half, table.base = base;
  fill_rope_table(T, HS, base, table.cos, table.sin);
  return table;
}

// Forward: out = R·in (out may alias in). Backward: out = Rᵀ·in.
template <typename S, bool kBackward>
void rotate(CpuContext& cx, S* out, const S* in, int B, int T, int NH, int HS, float base) {
  const RopeTable& table = rope_table(cx, T, HS, base);
  const int half = HS / 2;
  const int64_t C = int64_t(NH) * HS;
  const int64_t N = int64_t(B) * T;
#pragma omp parallel for schedule(static) num_threads(cx.threads)
  for (int64_t row = 0; row < N; row++) {
    const int t = int(row % T);
    const float* cos_t = table.cos.data() + size_t(t) * half;
    const float* sin_t = table.sin.data() + size_t(t) * half;
    const S* x = in + row * 3 * C;  // (3C): q, k, v
    S* y = out + row * 3 * C;
    for (int64_t head = 0; head < 2 * NH; head++) {  // the NH heads of q, then those of k
      const S* xh = x + head * HS;
      S* yh = y + head * HS;
#pragma omp simd
      for (int i = 0; i < half; i++) {
        const float x1 = load(xh[i]), x2 = load(xh[i + half]);
        if constexpr (kBackward) {
          store(yh[i], x1 * cos_t[i] + x2 * sin_t[i]);
          store(yh[i + half], x2 * cos_t[i] - x1 * sin_t[i]);
        } else {
          store(yh[i], x1 * cos_t[i] - x2 * sin_t[i]);
          store(yh[i + half], x2 * cos_t[i] + x1 * sin_t[i]);
        }
      }
    }
    const S* xv = x + 2 * C;
    S* yv = y + 2 * C;
    if (yv != xv) {
      std::copy(xv, xv + C, yv);
    }
  }
}

}  // namespace

template <typename S>
void rope_forward(CpuContext& cx, S* out, const S* qkv, int B, int T, int NH, int HS, float base) {
  rotate<S, false>(cx, out, qkv, B, T, NH, HS, base);
}

template <typename S>
void rope_backward(CpuContext& cx, S* dqkv, const S* dout, int B, int T, int NH, int HS,
                   float base) {
  rotate<S, true>(cx, dqkv, dout, B, T, NH, HS, base);
}

template void rope_forward(CpuContext&, bf16*, const bf16*, int, int, int, int, float);
template void rope_forward(CpuContext&, float*, const float*, int, int, int, int, float);
template void rope_backward(CpuContext&, bf16*, const bf16*, int, int, int, int, float);
template void rope_backward(CpuContext&, float*, const float*, int, int, int, int, float);

}  // namespace collage::cpu
