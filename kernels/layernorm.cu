// LayerNorm over the last dimension (src/backend/backend.h); the cpu version is
// src/backend/cpu/layernorm.cpp, whose math this follows expression for expression:
// statistics in fp32 in two passes (the mean, then the variance of the centred values, which
// does not cancel), rstd = 1/sqrt(var + eps), mean and rstd saved for the backward.
//
// Row work (forward, and the backward's dinp) runs one warp per row: each lane owns the
// chunks c = (lane + 32j)·W of the row, W = 8 (one Packed128) when C is a multiple of 8 and
// every pointer is 16-byte aligned, else W = 1; the lanes' fp32 partial sums meet in
// warp_sum. The forward keeps a lane's chunks in registers between its three passes when the
// row is at most 2048 wide. The cpu sums a row in SIMD lanes, so the statistics agree to
// rounding, not bits (tests/cuda/layernorm_test.cpp states the tolerances). The parameter gradients
// are column sums over the rows: kernels/column_sums.cuh, deterministic without float atomics.
#include "kernels/column_sums.cuh"
#include "kernels/common.cuh"
#include "kernels/kernels.cuh"

namespace collage::cuda {
COLLAGE_CUDA_VARIANT_BEGIN
namespace {

constexpr int kLayernormThreads = 256;
constexpr int kRowsPerBlock = kLayernormThreads / kWarpSize;  // a warp per row

// The most 128-bit chunks a lane holds of a row in registers (layernorm_forward_kernel's
// kLaneChunks): rows up to 8·32·8 = 2048 columns (GPT-2 to GPT 1.3B, BERT); wider rows read
// their chunks again in each pass.
constexpr int kMaxLaneChunks = 8;

// One warp per row of x (N, C): out = (x - mean)·rstd·weight + bias (bias may be null);
// mean, rstd (N) written when not null. kResidual: x is residual = rn(inp + b), stored by the
// first pass and normalised from its rounded values (what add() then layernorm_forward() do);
// otherwise x is inp and b, residual are unused.
// kLaneChunks > 0 (W = 8, C ≤ kLaneChunks·256): the lane keeps its chunks of x as bf16 in
// registers, so the second and third passes read no memory; the first pass's loads are the
// kernel's only dependent trip to memory before its stores. 0: each pass loads them again. The
// same operations in the same order either way, so the same bits.
template <int W, bool kResidual, int kLaneChunks>
__global__ void layernorm_forward_kernel(bf16_t* out, float* mean, float* rstd, bf16_t* residual,
                                         const bf16_t* inp, const bf16_t* b, const bf16_t* weight,
                                         const bf16_t* bias, int64_t N, int C, float eps) {
  static_assert(kLaneChunks == 0 || W == Packed128<bf16_t>::size, "rows are held as Packed128");
  // This warp's row; this lane's chunks start at lane·W and step by a warp's W·32.
  const int lane = threadIdx.x % kWarpSize;
  const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarpSize;
  if (row >= N) return;  // the whole warp leaves together
  const int first = lane * W, step = kWarpSize * W;
  const bf16_t* x = (kResidual ? residual : inp) + row * C;  // (C)
  bf16_t* y = out + row * C;                                 // (C)

  // visit(j, c) for this lane's chunks c = first + j·step < C, in order.
  auto for_lane_chunks = [&](auto visit) {
    if constexpr (kLaneChunks > 0) {
      COLLAGE_UNROLL
      for (int j = 0; j < kLaneChunks; j++)
        if (first + j * step < C) visit(j, first + j * step);
    } else {
      for (int c = first, j = 0; c < C; c += step, j++) visit(j, c);
    }
  };
  Packed128<bf16_t> held[kLaneChunks > 0 ? kLaneChunks : 1];  // kLaneChunks > 0: chunk j of x
  // Chunk j (at column c) of x after the first pass.
  auto chunk_of_x = [&](int j, int c) {
    if constexpr (kLaneChunks > 0) {
      Chunk<W> v;
      for (int k = 0; k < W; k++) v.v[k] = to_float(held[j].values[k]);
      return v;
    } else {
      return load_chunk<W>(x + c);  // each lane reads back only the chunks it wrote itself
    }
  };

  float total = 0.0f;
  for_lane_chunks([&](int j, int c) {
    Chunk<W> v;
    if constexpr (kLaneChunks > 0) {  // the chunk as bf16 into held[j] (W = 8), then as fp32
      if constexpr (kResidual) {
        const Chunk<W> va = load_chunk<W>(inp + row * C + c), vb = load_chunk<W>(b + row * C + c);
        for (int k = 0; k < W; k += 2)
          to_bf16_pair(held[j].values[k], held[j].values[k + 1], va.v[k] + vb.v[k],
                       va.v[k + 1] + vb.v[k + 1]);
        store128(residual + row * C + c, held[j]);
      } else {
        held[j] = load128(x + c);
      }
      v = chunk_of_x(j, c);
    } else if constexpr (kResidual) {
      const Chunk<W> va = load_chunk<W>(inp + row * C + c), vb = load_chunk<W>(b + row * C + c);
      for (int k = 0; k < W; k++) v.v[k] = to_float(to_bf16(va.v[k] + vb.v[k]));
      store_chunk(residual + row * C + c, v);  // exact: v is already rounded
    } else {
      v = load_chunk<W>(x + c);
    }
    for (int k = 0; k < W; k++) total += v.v[k];
  });
  const float m = warp_sum(total) / C;
  float squares = 0.0f;
  for_lane_chunks([&](int j, int c) {
    const Chunk<W> v = chunk_of_x(j, c);
    for (int k = 0; k < W; k++) {
      const float d = v.v[k] - m;
      squares += d * d;
    }
  });
  const float s = 1.0f / sqrtf(warp_sum(squares) / C + eps);
  for_lane_chunks([&](int j, int c) {
    const Chunk<W> v = chunk_of_x(j, c), w = load_chunk<W>(weight + c);
    Chunk<W> result;
    if (bias) {
      const Chunk<W> bb = load_chunk<W>(bias + c);
      for (int k = 0; k < W; k++) result.v[k] = (v.v[k] - m) * s * w.v[k] + bb.v[k];
    } else {
      for (int k = 0; k < W; k++) result.v[k] = (v.v[k] - m) * s * w.v[k];
    }
    store_chunk(y + c, result);
  });
  if (lane == 0) {
    if (mean) mean[row] = m;
    if (rstd) rstd[row] = s;
  }
}

// dinp += rstd·(g - mean(g) - x̂·mean(g·x̂)) for one row, by one warp (x̂ = (x - mean)·rstd,
// g = dout·weight).
template <int W>
__device__ __forceinline__ void dinp_row(bf16_t* dinp, const bf16_t* dout, const bf16_t* inp,
                                         const bf16_t* weight, const float* mean, const float* rstd,
                                         int64_t row, int C) {
  // This lane's chunks start at lane·W and step by a warp's W·32.
  const int lane = threadIdx.x % kWarpSize;
  const int first = lane * W, step = kWarpSize * W;
  const bf16_t* x = inp + row * C;    // (C)
  const bf16_t* dy = dout + row * C;  // (C)
  bf16_t* dx = dinp + row * C;        // (C)
  const float m = mean[row], s = rstd[row];

  float g_sum = 0.0f, gx_sum = 0.0f;
  for (int c = first; c < C; c += step) {
    const Chunk<W> vx = load_chunk<W>(x + c), vdy = load_chunk<W>(dy + c),
                   vw = load_chunk<W>(weight + c);
    for (int k = 0; k < W; k++) {
      const float g = vdy.v[k] * vw.v[k];
      g_sum += g;
      gx_sum += g * (vx.v[k] - m) * s;
    }
  }
  const float g_mean = warp_sum(g_sum) / C, gx_mean = warp_sum(gx_sum) / C;
  for (int c = first; c < C; c += step) {
    const Chunk<W> vx = load_chunk<W>(x + c), vdy = load_chunk<W>(dy + c),
                   vw = load_chunk<W>(weight + c);
    Chunk<W> vdx = load_chunk<W>(dx + c);
    for (int k = 0; k < W; k++) {
      const float g = vdy.v[k] * vw.v[k];
      const float xhat = (vx.v[k] - m) * s;
      vdx.v[k] = vdx.v[k] + s * (g - g_mean - xhat * gx_mean);
    }
    store_chunk(dx + c, vdx);
  }
}

// The column sums of the parameter gradients: [0] dout·x̂ (dweight), [1] dout (dbias), and
// with kDinpSums [2] dinp after the add (dinp_sums: the terms of bias.cu's BiasTerms, so the
// same bits).
template <bool kDinpSums>
struct LayernormTerms {
  static constexpr int kSums = kDinpSums ? 3 : 2;
  const bf16_t* dout;  // (N, C)
  const bf16_t* inp;   // (N, C)
  const float* mean;   // (N)
  const float* rstd;   // (N)
  const bf16_t* dinp;  // (N, C), read with kDinpSums only
  int C;
  __device__ void operator()(int64_t row, int c, float* sums) const {
    const float d = to_float(dout[row * C + c]);
    sums[0] += d * (to_float(inp[row * C + c]) - mean[row]) * rstd[row];
    sums[1] += d;
    if constexpr (kDinpSums) sums[2] += to_float(dinp[row * C + c]);
  }
};

// The backward over one chunk of kColumnChunkRows rows (kernels/column_sums.cuh) a block, in
// two parts:
//  1. if dinp is not null, a warp per row: with x̂ = (x - mean)·rstd and g = dout·weight,
//       dinp += rstd·(g - mean(g) - x̂·mean(g·x̂));
//  2. if partials is not null, the chunk's column sums of dout·x̂ and dout, and with
//     kDinpSums of the dinp rows part 1 has just written, a thread per column (column_sums's
//     stage 1, the same sums in the same order), from the rows part 1 has just read or written:
//     from L2 rather than DRAM. Stage 2 is column_totals.
// It was a dinp kernel and column_sums's two: at GPT-2 124M, 16 × 1024, the second read of
// dout and x was 50 MB a layernorm, ~0.4 ms over the step's 25 (predicted; the family took
// 2.30 ms on an H200 after it, 2.84 on an H100 before: docs/ARCHITECTURE.md, "Measured on an
// H200").
constexpr int kBackwardThreads = kColumnChunkRows * kWarpSize;  // a warp per row of the chunk
template <int W, bool kDinpSums>
__global__ void __launch_bounds__(kBackwardThreads)
    layernorm_backward_kernel(bf16_t* dinp, float* partials, const bf16_t* dout, const bf16_t* inp,
                              const bf16_t* weight, const float* mean, const float* rstd, int64_t N,
                              int C) {
  const int64_t chunk = blockIdx.x;
  const int64_t row = chunk * kColumnChunkRows + threadIdx.x / kWarpSize;  // this warp's
  if (dinp && row < N) dinp_row<W>(dinp, dout, inp, weight, mean, rstd, row, C);
  if (!partials) return;
  if constexpr (kDinpSums) __syncthreads();  // every warp's dinp row written, visible to all
  chunk_column_partials(partials, LayernormTerms<kDinpSums>{dout, inp, mean, rstd, dinp, C}, chunk,
                        gridDim.x, N, C, int(threadIdx.x), kBackwardThreads);
}

// The kernel and its column totals, with or without dinp's sums.
template <bool kDinpSums>
void backward(CudaContext& cx, bf16_t* dinp, bf16_t* dweight, bf16_t* dbias, const bf16_t* dout,
              const bf16_t* inp, const bf16_t* weight, const float* mean, const float* rstd,
              int64_t N, int C, bf16_t* dinp_sums) {
  const char* op = "layernorm_backward";
  const bool sums = dweight || dbias || kDinpSums;
  float* partials = sums ? column_partials(cx, LayernormTerms<kDinpSums>::kSums, N, C) : nullptr;
  const dim3 grid(unsigned(column_chunks(N))), block(kBackwardThreads);
  if (C % Packed128<bf16_t>::size == 0 && aligned16(dout, inp, weight) &&
      (!dinp || aligned16(dinp))) {
    launch(cx, op, layernorm_backward_kernel<Packed128<bf16_t>::size, kDinpSums>, grid, block)(
        dinp, partials, dout, inp, weight, mean, rstd, N, C);
  } else {
    launch(cx, op, layernorm_backward_kernel<1, kDinpSums>, grid, block)(dinp, partials, dout, inp,
                                                                         weight, mean, rstd, N, C);
  }
  if (!sums) return;
  if constexpr (kDinpSums) {
    column_totals(cx, op, partials, N, C, dweight, dbias, dinp_sums);
  } else {
    column_totals(cx, op, partials, N, C, dweight, dbias);
  }
}

// Launches layernorm_forward_kernel with its row held in registers when the row fits
// (kLaneChunks = ⌈C / 256⌉ ≤ kMaxLaneChunks), else reading it again in each pass.
template <int W, bool kResidual, int kLaneChunks = 1>
void launch_forward(CudaContext& cx, const char* op, dim3 grid, dim3 block, int lane_chunks,
                    bf16_t* out, float* mean, float* rstd, bf16_t* residual, const bf16_t* inp,
                    const bf16_t* b, const bf16_t* weight, const bf16_t* bias, int64_t N, int C,
                    float eps) {
  if constexpr (kLaneChunks <= kMaxLaneChunks) {
    if (lane_chunks != kLaneChunks)
      return launch_forward<W, kResidual, kLaneChunks + 1>(cx, op, grid, block, lane_chunks, out,
                                                           mean, rstd, residual, inp, b, weight,
                                                           bias, N, C, eps);
    launch(cx, op, layernorm_forward_kernel<W, kResidual, kLaneChunks>, grid, block)(
        out, mean, rstd, residual, inp, b, weight, bias, N, C, eps);
  } else {
    launch(cx, op, layernorm_forward_kernel<W, kResidual, 0>, grid, block)(
        out, mean, rstd, residual, inp, b, weight, bias, N, C, eps);
  }
}

template <bool kResidual>
void forward(CudaContext& cx, const char* op, bf16_t* out, float* mean, float* rstd,
             bf16_t* residual, const bf16_t* inp, const bf16_t* b, const bf16_t* weight,
             const bf16_t* bias, int64_t N, int C, float eps) {
  if (N == 0) return;  // shapes and tensors: checked by the contract (backend_contract.h)
  constexpr int kVector = Packed128<bf16_t>::size;
  const bool vector = C % kVector == 0 && aligned16(out, inp, weight) &&
                      (!bias || aligned16(bias)) && (!kResidual || aligned16(residual, b));
  const dim3 grid(unsigned(ceil_div(N, kRowsPerBlock))), block(kLayernormThreads);
  if (vector) {
    const int lane_chunks = int(ceil_div(C, kWarpSize * kVector));  // > 0: C > 0 here
    launch_forward<kVector, kResidual>(cx, op, grid, block, lane_chunks, out, mean, rstd, residual,
                                       inp, b, weight, bias, N, C, eps);
  } else {
    launch(cx, op, layernorm_forward_kernel<1, kResidual, 0>, grid, block)(
        out, mean, rstd, residual, inp, b, weight, bias, N, C, eps);
  }
}

}  // namespace

void layernorm_forward(CudaContext& cx, bf16_t* out, float* mean, float* rstd, const bf16_t* inp,
                       const bf16_t* weight, const bf16_t* bias, int64_t N, int C, float eps) {
  forward<false>(cx, "layernorm_forward", out, mean, rstd, nullptr, inp, nullptr, weight, bias, N,
                 C, eps);
}

void residual_layernorm_forward(CudaContext& cx, bf16_t* residual, bf16_t* out, float* mean,
                                float* rstd, const bf16_t* a, const bf16_t* b, const bf16_t* weight,
                                const bf16_t* bias, int64_t N, int C, float eps) {
  forward<true>(cx, "residual_layernorm_forward", out, mean, rstd, residual, a, b, weight, bias, N,
                C, eps);
}

void layernorm_backward(CudaContext& cx, bf16_t* dinp, bf16_t* dweight, bf16_t* dbias,
                        const bf16_t* dout, const bf16_t* inp, const bf16_t* weight,
                        const float* mean, const float* rstd, int64_t N, int C, bf16_t* dinp_sums) {
  if (N == 0 || C == 0 || (!dinp && !dweight && !dbias)) return;  // nothing to compute
  // The contract made sure dinp is set when dinp_sums is.
  if (dinp_sums)
    return backward<true>(cx, dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, dinp_sums);
  backward<false>(cx, dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, nullptr);
}

COLLAGE_CUDA_VARIANT_END
}  // namespace collage::cuda
