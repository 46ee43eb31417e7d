// Scaled dot-product attention per (batch, head), causal and/or with a key padding mask
// (src/backend/backend.h; the cpu version is src/backend/cpu/attention.cpp). Head sizes 64 and
// 128 run on tensor cores (kernels/flash_attention.cu); every other size runs the fused
// flash-style kernels in plain SIMT CUDA below, with nothing of size T×T in memory: the forward
// saves each query's log-sum-exp, the backward recomputes the probabilities from it.
//
// Notation: S_ij = scale·q_i·k_j with scale = 1/√HS, query i sees key j when j ≤ i (causal)
// and key_mask[j] != 0; P_ij = exp(S_ij - lse_i) over the keys it sees, 0 elsewhere.
// A query that sees no key gets out 0, lse = -inf and zero gradients (as the cpu).
//
// Work split (all three kernels): a block serves rows of one (b, head), one warp a row; its
// 32 lanes take the 32 keys (or queries) of a tile for the dot products, then the head dims
// d = lane, lane + 32, ... (kDims of them: HS ≤ 32·kDims ≤ 256) for the weighted sums, which
// read the tile's 32 weights from shared memory. The block stages each 32-row tile of the
// other side in shared memory once for all its warps (bf16, exact; rows padded by 2 elements
// so the lanes' dot products, which walk 32 different rows, hit different banks).
//
//  forward, query-major: online softmax over key tiles. Per tile: scores, the tile max m',
//    p_j = exp(S_ij - m'), and the running sum and output accumulators are rescaled by
//    exp(m - m'). out_i = acc / Σ p (fp32, rounded once); lse_i = m + log Σ p.
//  backward, query-major (dq): pass 1 over the key tiles recomputes P_ij and
//    dP_ij = dout_i·v_j and sums D_i = Σ_j P_ij·dP_ij (from the recomputed probabilities,
//    not dout_i·out_i, as the cpu), saved in cx.scratch.attention_delta (B, NH, T); pass 2
//    recomputes them again and accumulates dq_i = scale·Σ_j dS_ij k_j, dS_ij = P_ij (dP_ij - D_i).
//  backward, key-major (dk, dv): per key j, over the query tiles that can see it,
//    dk_j = scale·Σ_i dS_ij q_i and dv_j = Σ_i P_ij dout_i, with P and dS recomputed from the
//    saved lse_i and D_i.
// Dropout on the probabilities (the _dropout entries; backend.h): Z_ij = P_ij·F_ij with
// F_ij = 1/(1 - p) or 0 from math::dropout_uniform(seed, offset + ((b·NH + h)·T + i)·T + j)
// (src/numerics/elementwise_math.h, the cpu's numbers). The forward weights v by Z but sums the
// undropped p for the softmax denominator, so lse is of the undropped scores; the backward
// uses dv_j = Σ_i Z_ij dout_i, dP_ij = F_ij·(dout_i·v_j) and dS = P (dP - D) with
// D_i = Σ_j P_ij dP_ij (= Σ_j Z_ij dZ_ij). Each lane draws its own (i, j)'s number; p = 0
// multiplies by 1 without drawing, which leaves the plain attention's bits unchanged.
// Each gradient element is a sum in fp32 in a fixed order, written to dqkv with one rounding:
// deterministic, no atomics. The exponentials are math::exp_approx (as the cpu), lse uses logf.
//
// Shapes: qkv (B, T, 3C), C = NH·HS, q at [0, C), k at [C, 2C), v at [2C, 3C), head h at
// [h·HS, (h+1)·HS); out, dout (B, T, C); lse (B, NH, T); key_mask (B, T) or null.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "backend/cuda/runtime/runtime.h"
#include "kernels/attention.cuh"
#include "kernels/column_sums.cuh"
#include "kernels/common.cuh"
#include "kernels/kernels.cuh"

namespace collage::cuda {
COLLAGE_CUDA_VARIANT_BEGIN
namespace {

constexpr int kTile = kWarpSize;     // keys (or queries) of a tile: one per lane
constexpr int kMaxRowsPerBlock = 4;  // warps of a block: rows sharing each staged tile
constexpr int kMaxHeadSize = 256;    // kDims ≤ 8 accumulators per lane
constexpr float kMinusInf = kAttentionMinusInf;
using Dropout = AttentionDropout;

// Row stride of a staged tile in bf16 elements: HS + 2 makes consecutive rows start in
// different banks whenever HS/2 + 1 is odd (HS = 8, 24, 40, 64, 128, 256, ...).
__host__ __device__ inline int tile_stride(int HS) { return HS + 2; }

// tile (rows, HS) in shared memory = rows [first, first + rows) of the (T, ·) matrix at `head`
// with row stride `row_stride`; all threads of the block take part. `vectorized`: HS % 8 == 0
// and `head` 16-byte aligned with a row stride of whole 16 bytes, so 8 elements a load.
__device__ void stage_tile(bf16_t* tile, const bf16_t* head, int64_t row_stride, int first,
                           int rows, int HS, bool vectorized) {
  const int stride = tile_stride(HS);
  if (vectorized) {
    const int chunks = HS / 8;
    for (int e = threadIdx.x; e < rows * chunks; e += blockDim.x) {
      const int r = e / chunks, c = e % chunks;
      const Packed128<bf16_t> packed = load128(head + (first + r) * row_stride + c * 8);
      for (int u = 0; u < 8; u++) tile[r * stride + c * 8 + u] = packed.values[u];
    }
  } else {
    for (int e = threadIdx.x; e < rows * HS; e += blockDim.x) {
      const int r = e / HS, d = e % HS;
      tile[r * stride + d] = head[(first + r) * row_stride + d];
    }
  }
}

// Σ_d a[d]·b[d] over d = 0 .. HS-1 in order, fp32.
__device__ inline float dot_row(const float* a, const bf16_t* b, int HS) {
  float sum = 0.0f;
  for (int d = 0; d < HS; d++) sum += a[d] * to_float(b[d]);
  return sum;
}

// Per-block shared memory of each kernel (bytes), laid out as the kernels carve it.
size_t forward_shared_bytes(int HS, int warps) {
  return 2 * size_t(kTile) * tile_stride(HS) * sizeof(bf16_t)  // k, v tiles
         + size_t(warps) * HS * sizeof(float)                  // q rows
         + size_t(warps) * kTile * sizeof(float);              // probabilities
}
size_t backward_query_shared_bytes(int HS, int warps) {
  return 2 * size_t(kTile) * tile_stride(HS) * sizeof(bf16_t)  // k, v tiles
         + 2 * size_t(warps) * HS * sizeof(float)              // q, dout rows
         + size_t(warps) * kTile * sizeof(float);              // dS
}
size_t backward_key_shared_bytes(int HS, int warps) {
  return 2 * size_t(kTile) * tile_stride(HS) * sizeof(bf16_t)  // q, dout tiles
         + 2 * size_t(kTile) * sizeof(float)                   // the tile's lse, D
         + 2 * size_t(warps) * HS * sizeof(float)              // k, v rows
         + 2 * size_t(warps) * kTile * sizeof(float);          // P, dS
}

// out (B, T, C), lse (B, NH, T). Block (row block, h, b), warp w: query row
// i = blockIdx.x·warps + w (the last block's spare warps only help stage tiles).
template <int kDims>
__global__ void attention_forward_kernel(bf16_t* out, float* lse, const bf16_t* qkv,
                                         const int32_t* key_mask, bool causal, int T, int NH,
                                         int HS, float scale, bool vectorized, Dropout dropout) {
  const int warps = blockDim.x / kWarpSize, warp = threadIdx.x / kWarpSize,
            lane = threadIdx.x % kWarpSize;
  const int h = blockIdx.y, b = blockIdx.z;
  const int row0 = blockIdx.x * warps, i = row0 + warp;
  const bool active = i < T;
  const HeadSlices head = head_slices(qkv, b, h, T, NH, HS);
  const int64_t C = head.C, row_stride = head.row_stride;
  const bf16_t *q_head = head.q, *k_head = head.k, *v_head = head.v;
  const int32_t* key_ok = key_mask ? key_mask + int64_t(b) * T : nullptr;

  COLLAGE_DYNAMIC_SHARED(bf16_t, shared);
  const int stride = tile_stride(HS);
  bf16_t* k_tile = shared;                                            // (kTile, stride)
  bf16_t* v_tile = k_tile + kTile * stride;                           // (kTile, stride)
  float* q_rows = reinterpret_cast<float*>(v_tile + kTile * stride);  // (warps, HS)
  float* p_rows = q_rows + warps * HS;                                // (warps, kTile)
  float* q = q_rows + warp * HS;
  float* p = p_rows + warp * kTile;

  if (active) {
    for (int d = lane; d < HS; d += kWarpSize) q[d] = to_float(q_head[i * row_stride + d]);
  }
  const int row_end = min(row0 + warps, T);
  const int block_keys = causal ? row_end : T;  // keys any row of the block can see
  const int visible_end = causal ? i + 1 : T;   // this row's
  float running_max = kMinusInf, total = 0.0f;
  float acc[kDims];
  for (int k = 0; k < kDims; k++) acc[k] = 0.0f;

  for (int k0 = 0; k0 < block_keys; k0 += kTile) {
    const int tile_keys = min(kTile, block_keys - k0);
    __syncthreads();  // the previous tile is consumed (and q is staged)
    stage_tile(k_tile, k_head, row_stride, k0, tile_keys, HS, vectorized);
    stage_tile(v_tile, v_head, row_stride, k0, tile_keys, HS, vectorized);
    __syncthreads();
    if (!active) continue;
    const int j = k0 + lane;
    const bool visible = j < visible_end && key_visible(key_ok, j);
    const float score = visible ? dot_row(q, k_tile + lane * stride, HS) * scale : kMinusInf;
    const float new_max = fmaxf(running_max, warp_max(score));
    if (new_max == kMinusInf) continue;  // nothing seen yet (uniform across the warp)
    const float prob = visible ? math::exp_approx(score - new_max) : 0.0f;
    const float correction =
        running_max == kMinusInf ? 0.0f : math::exp_approx(running_max - new_max);
    total = total * correction + warp_sum(prob);  // undropped: lse is of the softmax
    running_max = new_max;
    p[lane] = prob == 0.0f ? 0.0f : prob * dropout.factor(b, h, i, j, T, NH);
    __syncwarp();
    for (int k = 0; k < kDims; k++) {
      const int d = lane + k * kWarpSize;
      if (d >= HS) break;
      float sum = 0.0f;
      for (int jj = 0; jj < tile_keys; jj++) sum += p[jj] * to_float(v_tile[jj * stride + d]);
      acc[k] = acc[k] * correction + sum;
    }
    __syncwarp();  // p is read before the next tile overwrites it
  }
  if (!active) return;
  const bool sees_any = running_max != kMinusInf;
  bf16_t* o = out + (int64_t(b) * T + i) * C + int64_t(h) * HS;
  for (int k = 0; k < kDims; k++) {
    const int d = lane + k * kWarpSize;
    if (d < HS) o[d] = to_bf16(sees_any ? acc[k] / total : 0.0f);
  }
  if (lane == 0) {
    lse[(int64_t(b) * NH + h) * T + i] = sees_any ? running_max + logf(total) : kMinusInf;
  }
}

// dq part of dqkv (B, T, 3C) = scale·dS·k; delta (B, NH, T) = D. Rows as the forward.
template <int kDims>
__global__ void attention_backward_query_kernel(bf16_t* dqkv, float* delta, const bf16_t* dout,
                                                const bf16_t* qkv, const float* lse,
                                                const int32_t* key_mask, bool causal, int T, int NH,
                                                int HS, float scale, bool vectorized,
                                                Dropout dropout) {
  const int warps = blockDim.x / kWarpSize, warp = threadIdx.x / kWarpSize,
            lane = threadIdx.x % kWarpSize;
  const int h = blockIdx.y, b = blockIdx.z;
  const int row0 = blockIdx.x * warps, i = row0 + warp;
  const bool active = i < T;
  const HeadSlices head = head_slices(qkv, b, h, T, NH, HS);
  const int64_t C = head.C, row_stride = head.row_stride, head_offset = head.offset;
  const bf16_t *q_head = head.q, *k_head = head.k, *v_head = head.v;
  const bf16_t* dout_head = dout + int64_t(b) * T * C + int64_t(h) * HS;  // (T, HS), stride C
  const int32_t* key_ok = key_mask ? key_mask + int64_t(b) * T : nullptr;
  const int64_t stat = (int64_t(b) * NH + h) * T + i;  // index into lse, delta

  COLLAGE_DYNAMIC_SHARED(bf16_t, shared);
  const int stride = tile_stride(HS);
  bf16_t* k_tile = shared;                                            // (kTile, stride)
  bf16_t* v_tile = k_tile + kTile * stride;                           // (kTile, stride)
  float* q_rows = reinterpret_cast<float*>(v_tile + kTile * stride);  // (warps, HS)
  float* dout_rows = q_rows + warps * HS;                             // (warps, HS)
  float* ds_rows = dout_rows + warps * HS;                            // (warps, kTile)
  float* q = q_rows + warp * HS;
  float* dy = dout_rows + warp * HS;
  float* ds = ds_rows + warp * kTile;

  float row_lse = kMinusInf;
  if (active) {
    row_lse = lse[stat];
    for (int d = lane; d < HS; d += kWarpSize) {
      q[d] = to_float(q_head[i * row_stride + d]);
      dy[d] = to_float(dout_head[i * C + d]);
    }
  }
  // A query that saw no key (lse = -inf) sees none here either: zero gradient.
  const int visible_end = row_lse == kMinusInf ? 0 : causal ? i + 1 : T;
  const int row_end = min(row0 + warps, T);
  const int block_keys = causal ? row_end : T;

  // P_ij and dP_ij = F_ij·(dout_i·v_j) of this lane's key j = k0 + lane of the staged tile
  // (0 where hidden).
  auto probabilities = [&](int k0, float& prob, float& dprob) {
    const int j = k0 + lane;
    prob = 0.0f, dprob = 0.0f;
    if (j < visible_end && key_visible(key_ok, j)) {
      prob = math::exp_approx(dot_row(q, k_tile + lane * stride, HS) * scale - row_lse);
      dprob = dot_row(dy, v_tile + lane * stride, HS) * dropout.factor(b, h, i, j, T, NH);
    }
  };

  // Pass 1: D_i = Σ_j P_ij·dP_ij (each lane sums its keys over the tiles, then the warp).
  float lane_delta = 0.0f;
  for (int k0 = 0; k0 < block_keys; k0 += kTile) {
    const int tile_keys = min(kTile, block_keys - k0);
    __syncthreads();
    stage_tile(k_tile, k_head, row_stride, k0, tile_keys, HS, vectorized);
    stage_tile(v_tile, v_head, row_stride, k0, tile_keys, HS, vectorized);
    __syncthreads();
    if (!active) continue;
    float prob, dprob;
    probabilities(k0, prob, dprob);
    lane_delta += prob * dprob;
  }
  const float row_delta = active ? warp_sum(lane_delta) : 0.0f;
  if (active && lane == 0) delta[stat] = row_delta;

  // Pass 2: dq_i = scale·Σ_j P_ij (dP_ij - D_i) k_j.
  float acc[kDims];
  for (int k = 0; k < kDims; k++) acc[k] = 0.0f;
  for (int k0 = 0; k0 < block_keys; k0 += kTile) {
    const int tile_keys = min(kTile, block_keys - k0);
    __syncthreads();
    stage_tile(k_tile, k_head, row_stride, k0, tile_keys, HS, vectorized);
    stage_tile(v_tile, v_head, row_stride, k0, tile_keys, HS, vectorized);
    __syncthreads();
    if (!active || visible_end == 0) continue;
    float prob, dprob;
    probabilities(k0, prob, dprob);
    ds[lane] = prob * (dprob - row_delta);
    __syncwarp();
    for (int k = 0; k < kDims; k++) {
      const int d = lane + k * kWarpSize;
      if (d >= HS) break;
      float sum = 0.0f;
      for (int jj = 0; jj < tile_keys; jj++) sum += ds[jj] * to_float(k_tile[jj * stride + d]);
      acc[k] += sum;
    }
    __syncwarp();
  }
  if (!active) return;
  bf16_t* dq = dqkv + head_offset + i * row_stride;
  for (int k = 0; k < kDims; k++) {
    const int d = lane + k * kWarpSize;
    if (d < HS) dq[d] = to_bf16(scale * acc[k]);
  }
}

// dk, dv parts of dqkv (B, T, 3C) = scale·dSᵀ·q, Pᵀ·dout. Block (key block, h, b), warp w:
// key j = blockIdx.x·warps + w; lanes over the queries of a tile.
template <int kDims>
__global__ void attention_backward_key_kernel(bf16_t* dqkv, const bf16_t* dout, const bf16_t* qkv,
                                              const float* lse, const float* delta,
                                              const int32_t* key_mask, bool causal, int T, int NH,
                                              int HS, float scale, bool vectorized,
                                              Dropout dropout) {
  const int warps = blockDim.x / kWarpSize, warp = threadIdx.x / kWarpSize,
            lane = threadIdx.x % kWarpSize;
  const int h = blockIdx.y, b = blockIdx.z;
  const int key0 = blockIdx.x * warps, j = key0 + warp;
  const bool active = j < T;
  const HeadSlices head = head_slices(qkv, b, h, T, NH, HS);
  const int64_t C = head.C, row_stride = head.row_stride, head_offset = head.offset;
  const bf16_t *q_head = head.q, *k_head = head.k, *v_head = head.v;
  const bf16_t* dout_head = dout + int64_t(b) * T * C + int64_t(h) * HS;  // (T, HS), stride C
  const float* lse_head = lse + (int64_t(b) * NH + h) * T;                // (T)
  const float* delta_head = delta + (int64_t(b) * NH + h) * T;            // (T)
  // A hidden key is seen by no query: its gradients are zeros.
  const bool key_seen = active && key_visible(key_mask ? key_mask + int64_t(b) * T : nullptr, j);

  COLLAGE_DYNAMIC_SHARED(bf16_t, shared);
  const int stride = tile_stride(HS);
  bf16_t* q_tile = shared;                                                 // (kTile, stride)
  bf16_t* dout_tile = q_tile + kTile * stride;                             // (kTile, stride)
  float* tile_lse = reinterpret_cast<float*>(dout_tile + kTile * stride);  // (kTile)
  float* tile_delta = tile_lse + kTile;                                    // (kTile)
  float* k_rows = tile_delta + kTile;                                      // (warps, HS)
  float* v_rows = k_rows + warps * HS;                                     // (warps, HS)
  float* p_rows = v_rows + warps * HS;                                     // (warps, kTile)
  float* ds_rows = p_rows + warps * kTile;                                 // (warps, kTile)
  float* kj = k_rows + warp * HS;
  float* vj = v_rows + warp * HS;
  float* p = p_rows + warp * kTile;
  float* ds = ds_rows + warp * kTile;

  if (active) {
    for (int d = lane; d < HS; d += kWarpSize) {
      kj[d] = to_float(k_head[j * row_stride + d]);
      vj[d] = to_float(v_head[j * row_stride + d]);
    }
  }
  // Queries that can see a key of this block: all, or from its first key on if causal.
  const int first_query = causal ? key0 : 0;
  float dk_acc[kDims], dv_acc[kDims];
  for (int k = 0; k < kDims; k++) dk_acc[k] = 0.0f, dv_acc[k] = 0.0f;

  for (int i0 = first_query; i0 < T; i0 += kTile) {
    const int tile_queries = min(kTile, T - i0);
    __syncthreads();  // the previous tile is consumed (and k, v rows are staged)
    stage_tile(q_tile, q_head, row_stride, i0, tile_queries, HS, vectorized);
    stage_tile(dout_tile, dout_head, C, i0, tile_queries, HS, vectorized);
    for (int e = threadIdx.x; e < tile_queries; e += blockDim.x) {
      tile_lse[e] = lse_head[i0 + e];
      tile_delta[e] = delta_head[i0 + e];
    }
    __syncthreads();
    if (!key_seen) continue;
    const int i = i0 + lane;
    float prob = 0.0f, dprob = 0.0f, factor = 1.0f;
    // Query i sees key j: j visible (key_seen), j ≤ i if causal, and i saw some key at all.
    if (i < T && (!causal || j <= i) && tile_lse[lane] != kMinusInf) {
      // q_i·k_j in the order of the dq kernel (q first), so P is the same bits there and here.
      float score = 0.0f;
      const bf16_t* qi = q_tile + lane * stride;
      for (int d = 0; d < HS; d++) score += to_float(qi[d]) * kj[d];
      prob = math::exp_approx(score * scale - tile_lse[lane]);
      float dot = 0.0f;
      const bf16_t* dyi = dout_tile + lane * stride;
      for (int d = 0; d < HS; d++) dot += to_float(dyi[d]) * vj[d];
      factor = dropout.factor(b, h, i, j, T, NH);
      dprob = dot * factor;  // dP = F·dZ, as the dq kernel
    }
    p[lane] = prob * factor;                                             // Z, for dv
    ds[lane] = prob == 0.0f ? 0.0f : prob * (dprob - tile_delta[lane]);  // lanes past T: unstaged
    __syncwarp();
    for (int k = 0; k < kDims; k++) {
      const int d = lane + k * kWarpSize;
      if (d >= HS) break;
      float dk_sum = 0.0f, dv_sum = 0.0f;
      for (int ii = 0; ii < tile_queries; ii++) {
        dk_sum += ds[ii] * to_float(q_tile[ii * stride + d]);
        dv_sum += p[ii] * to_float(dout_tile[ii * stride + d]);
      }
      dk_acc[k] += dk_sum;
      dv_acc[k] += dv_sum;
    }
    __syncwarp();
  }
  if (!active) return;
  bf16_t* dk = dqkv + head_offset + C + j * row_stride;
  bf16_t* dv = dk + C;
  for (int k = 0; k < kDims; k++) {
    const int d = lane + k * kWarpSize;
    if (d >= HS) continue;
    dk[d] = to_bf16(scale * dk_acc[k]);
    dv[d] = to_bf16(dv_acc[k]);
  }
}

// The launch shape of all three kernels: warps = rows (or keys) per block, blocks cover
// (T / warps, NH, B); kDims accumulators per lane.
struct Shape {
  int warps;
  dim3 grid, block;
  int dims_per_lane;
};

Shape launch_shape(int B, int T, int NH, int HS) {
  const int warps = std::min(kMaxRowsPerBlock, T);
  const int dims = HS <= 32 ? 1 : HS <= 64 ? 2 : HS <= 128 ? 4 : 8;
  return {warps, dim3(unsigned(ceil_div(T, warps)), unsigned(NH), unsigned(B)),
          dim3(unsigned(warps * kWarpSize)), dims};
}

// What these kernels can launch, beyond the contract's positive sizes (backend_contract.h): the
// cuda backend's own limits (docs/ARCHITECTURE.md, "The Backend contract").
void check_shape(const CudaContext& cx, const char* op, int B, int T, int NH, int HS) {
  COLLAGE_KERNEL_CHECK(HS <= kMaxHeadSize, "%s: shape B=%d T=%d NH=%d HS=%d (need HS <= %d)", op, B,
                       T, NH, HS, kMaxHeadSize);
  COLLAGE_KERNEL_CHECK(NH <= 65535 && B <= 65535, "%s: B=%d NH=%d exceed the grid's y/z limit", op,
                       B, NH);
  const int warps = std::min(kMaxRowsPerBlock, T);
  const size_t shared = backward_key_shared_bytes(HS, warps);  // the largest of the three
  COLLAGE_KERNEL_CHECK(shared <= cx.max_shared_bytes,
                       "%s: HS=%d needs %zu bytes of shared memory, more than %zu", op, HS, shared,
                       cx.max_shared_bytes);
}

// Whether tiles can be staged 8 elements a load: HS % 8 == 0 (so rows and heads start at
// multiples of 16 bytes) and every base pointer 16-byte aligned.
template <typename... Pointers>
bool vectorizable(int HS, Pointers... pointers) {
  return HS % 8 == 0 && aligned16(pointers...);
}

template <int kDims>
void forward_launch(CudaContext& cx, const Shape& s, bf16_t* out, float* lse, const bf16_t* qkv,
                    const int32_t* key_mask, bool causal, int T, int NH, int HS, float scale,
                    const Dropout& dropout) {
  launch(cx, "attention_forward", attention_forward_kernel<kDims>, s.grid, s.block,
         forward_shared_bytes(HS, s.warps))(out, lse, qkv, key_mask, causal, T, NH, HS, scale,
                                            vectorizable(HS, qkv), dropout);
}

template <int kDims>
void backward_launch(CudaContext& cx, const Shape& s, bf16_t* dqkv, float* delta,
                     const bf16_t* dout, const bf16_t* qkv, const float* lse,
                     const int32_t* key_mask, bool causal, int T, int NH, int HS, float scale,
                     const Dropout& dropout) {
  const bool vectorized = vectorizable(HS, qkv, dout);
  launch(cx, "attention_backward (dq)", attention_backward_query_kernel<kDims>, s.grid, s.block,
         backward_query_shared_bytes(HS, s.warps))(dqkv, delta, dout, qkv, lse, key_mask, causal, T,
                                                   NH, HS, scale, vectorized, dropout);
  launch(cx, "attention_backward (dk, dv)", attention_backward_key_kernel<kDims>, s.grid, s.block,
         backward_key_shared_bytes(HS, s.warps))(dqkv, dout, qkv, lse, delta, key_mask, causal, T,
                                                 NH, HS, scale, vectorized, dropout);
}

// Whether a call may go to the tensor-core kernels: yes unless COLLAGE_ATTENTION=simt, which
// keeps every head size on the SIMT kernels below (to time or compare the two on one GPU).
bool tensor_cores_enabled() {
  static const bool simt_only = [] {
    const char* engine = std::getenv("COLLAGE_ATTENTION");
    return engine != nullptr && std::strcmp(engine, "simt") == 0;
  }();
  return !simt_only;
}

// p in [0, 1): checked by the contract (backend_contract.h).
Dropout make_dropout(float p, uint64_t seed, uint64_t offset) {
  Dropout dropout;
  dropout.p = p;
  dropout.keep_scale = math::dropout_keep_scale(p);
  dropout.seed = seed;
  dropout.offset = offset;
  return dropout;
}

}  // namespace

void attention_forward(CudaContext& cx, bf16_t* out, float* lse, const bf16_t* qkv,
                       const int32_t* key_mask, bool causal, int B, int T, int NH, int HS) {
  attention_forward_dropout(cx, out, lse, qkv, key_mask, causal, B, T, NH, HS, 0.0f, 0, 0);
}

void attention_forward_dropout(CudaContext& cx, bf16_t* out, float* lse, const bf16_t* qkv,
                               const int32_t* key_mask, bool causal, int B, int T, int NH, int HS,
                               float p, uint64_t seed, uint64_t offset) {
  const Dropout dropout = make_dropout(p, seed, offset);
  check_shape(cx, "attention_forward", B, T, NH, HS);
  if (tensor_cores_enabled() &&
      flash_attention_serves(HS, qkv, out))  // tensor cores (flash_attention.cu)
    return flash_attention_forward(cx, out, lse, qkv, key_mask, causal, B, T, NH, HS, dropout);
  const Shape s = launch_shape(B, T, NH, HS);
  const float scale = 1.0f / std::sqrt(float(HS));  // as the cpu
  switch (s.dims_per_lane) {
    case 1:
      return forward_launch<1>(cx, s, out, lse, qkv, key_mask, causal, T, NH, HS, scale, dropout);
    case 2:
      return forward_launch<2>(cx, s, out, lse, qkv, key_mask, causal, T, NH, HS, scale, dropout);
    case 4:
      return forward_launch<4>(cx, s, out, lse, qkv, key_mask, causal, T, NH, HS, scale, dropout);
    default:
      return forward_launch<8>(cx, s, out, lse, qkv, key_mask, causal, T, NH, HS, scale, dropout);
  }
}

namespace {

// The SIMT kernels' backward (any head size).
void backward_simt(CudaContext& cx, bf16_t* dqkv, float* delta, const bf16_t* dout,
                   const bf16_t* qkv, const float* lse, const int32_t* key_mask, bool causal, int B,
                   int T, int NH, int HS, const Dropout& dropout) {
  const Shape s = launch_shape(B, T, NH, HS);
  const float scale = 1.0f / std::sqrt(float(HS));
  switch (s.dims_per_lane) {
    case 1:
      return backward_launch<1>(cx, s, dqkv, delta, dout, qkv, lse, key_mask, causal, T, NH, HS,
                                scale, dropout);
    case 2:
      return backward_launch<2>(cx, s, dqkv, delta, dout, qkv, lse, key_mask, causal, T, NH, HS,
                                scale, dropout);
    case 4:
      return backward_launch<4>(cx, s, dqkv, delta, dout, qkv, lse, key_mask, causal, T, NH, HS,
                                scale, dropout);
    default:
      return backward_launch<8>(cx, s, dqkv, delta, dout, qkv, lse, key_mask, causal, T, NH, HS,
                                scale, dropout);
  }
}

}  // namespace

// `out` is read only by the tensor-core kernels, for D_i = dout_i·out_i.
void attention_backward(CudaContext& cx, bf16_t* dqkv, const bf16_t* dout, const bf16_t* out,
                        const bf16_t* qkv, const float* lse, const int32_t* key_mask, bool causal,
                        int B, int T, int NH, int HS, bf16_t* dqkv_sums) {
  attention_backward_dropout(cx, dqkv, dout, out, qkv, lse, key_mask, causal, B, T, NH, HS, 0.0f, 0,
                             0, dqkv_sums);
}

void attention_backward_dropout(CudaContext& cx, bf16_t* dqkv, const bf16_t* dout,
                                const bf16_t* out, const bf16_t* qkv, const float* lse,
                                const int32_t* key_mask, bool causal, int B, int T, int NH, int HS,
                                float p, uint64_t seed, uint64_t offset, bf16_t* dqkv_sums) {
  const Dropout dropout = make_dropout(p, seed, offset);
  if (!dqkv) return;  // null gradient: not computed
  check_shape(cx, "attention_backward", B, T, NH, HS);
  float* delta = scratch<float>(cx, cx.scratch.attention_delta, size_t(B) * NH * T);  // (B, NH, T)
  const int64_t N = int64_t(B) * T;
  const int C3 = 3 * NH * HS;
  if (tensor_cores_enabled() && flash_attention_serves(HS, qkv, dout) && aligned16(dqkv)) {
    // The column sums' first stage from the rows the kernels write, where every 32-row chunk
    // lies inside one sequence (a block's rows are one (b, h)'s); else the column sums after.
    const bool in_kernels = dqkv_sums && T % kColumnChunkRows == 0;
    float* partials = in_kernels ? column_partials(cx, 1, N, C3) : nullptr;
    flash_attention_backward(cx, dqkv, delta, dout, out, qkv, lse, key_mask, causal, B, T, NH, HS,
                             dropout, partials);
    if (in_kernels) return column_totals(cx, "attention_backward", partials, N, C3, dqkv_sums);
    return bias_backward(cx, dqkv_sums, dqkv, N, C3);
  }
  backward_simt(cx, dqkv, delta, dout, qkv, lse, key_mask, causal, B, T, NH, HS, dropout);
  bias_backward(cx, dqkv_sums, dqkv, N, C3);  // null dqkv_sums: nothing
}

COLLAGE_CUDA_VARIANT_END
}  // namespace collage::cuda
