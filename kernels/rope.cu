// Rotary position embedding, GPT-NeoX "rotate half" (src/backend/backend.h; the cpu version is
// src/backend/cpu/rope.cpp): within each head of q and k, the pair (x_i, x_{i+HS/2}) at
// position t rotates by the angle t·base^(-2i/HS):
//   forward  (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin),   v copied;
//   backward dqkv = Rᵀ·dout:  (d1, d2) = (x1 cos + x2 sin, x2 cos - x1 sin),    dv = dout_v.
//
// Elementwise, so bit-identical to the cpu backend: the cos/sin table is the cpu's own
// (numerics/rope_table.h, angles in double), uploaded once per (T, HS, base) into
// cx.scratch.rope_table, and every output is the same fp32 expression, evaluated in the same
// order, rounded once (nvcc builds with -fmad=false, g++ with -ffp-contract=off, so neither
// contracts the products into fmas).
//
// One thread per item of a row: the NH·HS/2 pairs of q, the NH·HS/2 pairs of k, then the C
// elements of v, so each row (3C) is 2C items and a launch covers (B·T, 2C) items.
#include <vector>

#include "backend/cuda/runtime/runtime.h"
#include "kernels/common.cuh"
#include "kernels/kernels.cuh"
#include "numerics/rope_table.h"

namespace collage::cuda {
COLLAGE_CUDA_VARIANT_BEGIN
namespace {

constexpr int kRopeBlock = 256;

// out (N, 3C) = R·in for q and k, in for v (forward; out may alias in: each thread reads its
// pair before writing it); out (N, 3C) = Rᵀ·in (backward). cos_table, sin_table (T, HS/2).
template <bool kBackward>
__global__ void rope_kernel(bf16_t* out, const bf16_t* in, const float* cos_table,
                            const float* sin_table, int64_t N, int T, int NH, int HS) {
  // Thread -> (row, item): items [0, C) are pairs (head of q or k, i), [C, 2C) elements of v.
  const int64_t C = int64_t(NH) * HS;
  const int64_t item = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (item >= N * 2 * C) return;
  const int64_t row = item / (2 * C);
  const int64_t column = item % (2 * C);
  const bf16_t* x = in + row * 3 * C;  // (3C): q, k, v
  bf16_t* y = out + row * 3 * C;
  if (column >= C) {  // v: copied, forward and backward
    const int64_t c = 2 * C + (column - C);
    y[c] = x[c];
    return;
  }
  const int half = HS / 2;
  const int64_t head = column / half;  // 0 .. 2NH: the heads of q, then those of k
  const int i = int(column % half);
  const int t = int(row % T);
  const float cos_ti = cos_table[int64_t(t) * half + i];
  const float sin_ti = sin_table[int64_t(t) * half + i];
  const int64_t first = head * HS + i, second = first + half;
  const float x1 = to_float(x[first]), x2 = to_float(x[second]);
  // The cpu's expressions, term for term (src/backend/cpu/rope.cpp).
  if constexpr (kBackward) {
    y[first] = to_bf16(x1 * cos_ti + x2 * sin_ti);
    y[second] = to_bf16(x2 * cos_ti - x1 * sin_ti);
  } else {
    y[first] = to_bf16(x1 * cos_ti - x2 * sin_ti);
    y[second] = to_bf16(x2 * cos_ti + x1 * sin_ti);
  }
}

// The device table (cos then sin, each (T, HS/2)) for this shape, uploaded when the shape
// changes. The buffer only grows, so an unchanged shape keeps its contents.
const float* rope_table(CudaContext& cx, int T, int HS, float base) {
  const size_t entries = size_t(T) * (HS / 2);
  float* table = scratch<float>(cx, cx.scratch.rope_table, 2 * entries);
  if (cx.rope_T != T || cx.rope_HS != HS || cx.rope_base != base) {
    std::vector<float> cos, sin;
    fill_rope_table(T, HS, base, cos, sin);
    upload(cx, table, cos.data(), entries * sizeof(float));
    upload(cx, table + entries, sin.data(), entries * sizeof(float));
    cx.rope_T = T, cx.rope_HS = HS, cx.rope_base = base;
  }
  return table;
}

template <bool kBackward>
void rotate(CudaContext& cx, const char* op, bf16_t* out, const bf16_t* in, int B, int T, int NH,
            int HS, float base) {
  // Sizes, an even HS and the tensors: checked by the contract (backend_contract.h).
  const int64_t N = int64_t(B) * T, items = N * 2 * NH * HS;
  if (items == 0) return;
  const float* table = rope_table(cx, T, HS, base);
  const int64_t entries = int64_t(T) * (HS / 2);
  launch(cx, op, rope_kernel<kBackward>, dim3(unsigned(ceil_div(items, kRopeBlock))),
         dim3(kRopeBlock))(out, in, table, table + entries, N, T, NH, HS);
}

}  // namespace

void rope_forward(CudaContext& cx, bf16_t* out, const bf16_t* qkv, int B, int T, int NH, int HS,
                  float base) {
  rotate<false>(cx, "rope_forward", out, qkv, B, T, NH, HS, base);
}

void rope_backward(CudaContext& cx, bf16_t* dqkv, const bf16_t* dout, int B, int T, int NH, int HS,
                   float base) {
  if (!dqkv) return;  // null gradient: not computed
  rotate<true>(cx, "rope_backward", dqkv, dout, B, T, NH, HS, base);
}

COLLAGE_CUDA_VARIANT_END
}  // namespace collage::cuda
