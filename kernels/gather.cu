// Row gather and its backward (src/backend/backend.h, "encoder ops"; the cpu version is
// src/backend/cpu/gather.cpp):
//   gather_rows:      out (count, C) = inp[rows[k]]; a copy, 8 elements a 128-bit load when C
//                     is a multiple of 8 and the pointers are 16-byte aligned.
//   scatter_add_rows: dinp[rows[k]] += dout[k] (count, C). Deterministic with repeated rows and
//                     no atomics: the first k of each destination row owns it and sums the dout
//                     rows of all k' ≥ k with that row in fp32 in ascending k', then adds the
//                     sum with one rounding. The cpu sums the same terms in the same order, so
//                     the bits are the cpu's.
#include <algorithm>

#include "kernels/common.cuh"
#include "kernels/kernels.cuh"

namespace collage::cuda {
COLLAGE_CUDA_VARIANT_BEGIN
namespace {

constexpr int kGatherThreads = 256;
constexpr int64_t kMaxGatherBlocks = 4096;
constexpr int kScatterThreads = 256;  // the most columns (threads) of a scatter block
constexpr int kScatterWarps = kScatterThreads / kWarpSize;

// The number of set bits (no __popc in the emulator).
__device__ __forceinline__ int bit_count(uint32_t x) {
  x = x - ((x >> 1) & 0x55555555u);
  x = (x & 0x33333333u) + ((x >> 2) & 0x33333333u);
  x = (x + (x >> 4)) & 0x0f0f0f0fu;
  return int((x * 0x01010101u) >> 24);
}

// Work item e of count·C/W: row k = e / (C/W), elements [c, c + W) with c = (e % (C/W))·W.
template <int W>
__global__ void gather_rows_kernel(bf16_t* out, const bf16_t* inp, const int32_t* rows,
                                   int64_t count, int C) {
  const int chunks = C / W;
  const int64_t items = count * chunks;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < items; e += stride) {
    const int64_t k = e / chunks;
    const int c = int(e % chunks) * W;
    const bf16_t* src = inp + int64_t(rows[k]) * C + c;
    bf16_t* dst = out + k * C + c;
    if constexpr (W == Packed128<bf16_t>::size) {
      store128(dst, load128(src));
    } else {
      *dst = *src;
    }
  }
}

// Block (k, column block): destination row rows[k], the thread's column
// c = blockIdx.y·blockDim.x + threadIdx.x. blockDim.x is a multiple of 32 (whole warps ballot).
__global__ void scatter_add_rows_kernel(bf16_t* dinp, const bf16_t* dout, const int32_t* rows,
                                        int64_t count, int C) {
  __shared__ int32_t matches[kScatterThreads];     // this chunk's k' with rows[k'] == row
  __shared__ int32_t warp_matches[kScatterWarps];  // how many of them each warp found
  __shared__ int32_t owned_elsewhere;
  const int64_t k = blockIdx.x;
  const int32_t row = rows[k];
  const int c = blockIdx.y * blockDim.x + threadIdx.x;
  const int warps = blockDim.x / kWarpSize, warp = threadIdx.x / kWarpSize,
            lane = threadIdx.x % kWarpSize;

  // An earlier k' with the same row owns it (uniform across the block: all return or none).
  if (threadIdx.x == 0) owned_elsewhere = 0;
  __syncthreads();
  for (int64_t e = threadIdx.x; e < k; e += blockDim.x) {
    if (rows[e] == row) owned_elsewhere = 1;  // every writer writes the same value
  }
  __syncthreads();
  if (owned_elsewhere) return;

  // The k' ≥ k with this row, a chunk of blockDim.x at a time, compacted in ascending order
  // into `matches` (a ballot per warp, then the warps' counts), then summed by every column.
  float sum = 0.0f;
  for (int64_t base = k; base < count; base += blockDim.x) {
    const int64_t e = base + threadIdx.x;
    const bool match = e < count && rows[e] == row;
    const uint32_t ballot = __ballot_sync(0xffffffffu, match);
    if (lane == 0) warp_matches[warp] = bit_count(ballot);
    __syncthreads();
    int before = 0, total = 0;
    for (int w = 0; w < warps; w++) {
      if (w < warp) before += warp_matches[w];
      total += warp_matches[w];
    }
    if (match) matches[before + bit_count(ballot & ((1u << lane) - 1u))] = int32_t(e);
    __syncthreads();
    if (c < C) {
      for (int m = 0; m < total; m++) sum += to_float(dout[int64_t(matches[m]) * C + c]);
    }
    __syncthreads();  // matches and warp_matches are read before the next chunk writes them
  }
  if (c < C) {
    bf16_t* dst = dinp + int64_t(row) * C + c;
    *dst = to_bf16(to_float(*dst) + sum);
  }
}

}  // namespace

void gather_rows(CudaContext& cx, bf16_t* out, const bf16_t* inp, const int32_t* rows,
                 int64_t count, int C) {
  if (count == 0) return;  // count, C and the tensors: checked by the contract (backend.h)
  const bool vectorized = C % 8 == 0 && aligned16(out, inp);
  const int64_t items = count * (vectorized ? C / 8 : C);
  const int64_t blocks = std::min(ceil_div(items, kGatherThreads), kMaxGatherBlocks);
  if (vectorized) {
    launch(cx, "gather_rows", gather_rows_kernel<8>, dim3(unsigned(blocks)), dim3(kGatherThreads))(
        out, inp, rows, count, C);
  } else {
    launch(cx, "gather_rows", gather_rows_kernel<1>, dim3(unsigned(blocks)), dim3(kGatherThreads))(
        out, inp, rows, count, C);
  }
}

void scatter_add_rows(CudaContext& cx, bf16_t* dinp, const bf16_t* dout, const int32_t* rows,
                      int64_t count, int C) {
  if (!dinp) return;  // null gradient: not computed
  if (count == 0) return;
  // Whole warps, no more than the columns need (rounded up to 32), at most kScatterThreads.
  const int threads = int(std::min<int64_t>(kScatterThreads, ceil_div(C, kWarpSize) * kWarpSize));
  const int column_blocks = int(ceil_div(C, threads));
  // The grid's y limit: a limit of this kernel, not of the contract (docs/ARCHITECTURE.md,
  // "The Backend contract").
  COLLAGE_KERNEL_CHECK(column_blocks <= 65535, "scatter_add_rows: C = %d is too wide", C);
  launch(cx, "scatter_add_rows", scatter_add_rows_kernel,
         dim3(unsigned(count), unsigned(column_blocks)),
         dim3(unsigned(threads)))(dinp, dout, rows, count, C);
}

COLLAGE_CUDA_VARIANT_END
}  // namespace collage::cuda
