// Token (+ learned position) embedding lookup and its backward (src/backend/backend.h),
// vocab-parallel aware: this rank owns the word embedding rows [vocab_begin, vocab_end); other
// tokens look up 0 here (the sum over tensor-parallel ranks supplies them). The cpu version is
// src/backend/cpu/embedding.cpp; both directions are bit-identical to it.
//
// Forward: one thread per (row, chunk of W channels), W = 8 (one Packed128) when C is a
// multiple of 8 and every pointer is 16-byte aligned, else W = 1; out = rn(word + position),
// or a copy of the one that exists, or 0.
//
// Backward, deterministic without float atomics, in the cpu's order:
//  1. sort_rows_kernel (one block): the owned rows, stably sorted by token with an LSD radix
//     sort (8 bits a pass, as many passes as the owned vocab range needs), then the start of
//     each token's group of rows. Everything stays on the device (the host never reads tokens).
//  2. group_sums_kernel: each (group, channel chunk) sums its group's dout rows in fp32 in
//     ascending row order and adds the sum to the token's dwte row with one rounding: the
//     cpu's grouping and order, so the same bits.
//  3. position_sums_kernel: dwpe[t] += Σ_b dout[b, t], b ascending (the cpu's order).
#include <algorithm>

#include "backend/cuda/runtime/runtime.h"
#include "kernels/common.cuh"
#include "kernels/kernels.cuh"

namespace collage::cuda {
COLLAGE_CUDA_VARIANT_BEGIN
namespace {

constexpr int kEmbeddingThreads = 256;
constexpr int64_t kMaxEmbeddingBlocks = 4096;     // grid-stride beyond (derived from sizes only)
constexpr int kVector = Packed128<bf16_t>::size;  // 8 bf16 in one 128-bit access

// Radix sort of the rows by token: one block, a thread per digit.
constexpr int kRadixBits = 8;
constexpr int kDigits = 1 << kRadixBits;
constexpr int kSortThreads = kDigits;
constexpr int kSortWarps = kSortThreads / kWarpSize;
// Group sums: a block handles groups blockIdx.x, blockIdx.x + gridDim.x, ... (at most this many
// blocks; the group count is only known on the device).
constexpr int64_t kMaxGroupBlocks = 1024;

// W channels copied or zeroed bit for bit (the cpu's std::copy / std::fill).
template <int W>
__device__ __forceinline__ void copy_chunk(bf16_t* out, const bf16_t* in) {
  if constexpr (W == kVector) {
    store128(out, load128(in));
  } else {
    *out = *in;
  }
}
template <int W>
__device__ __forceinline__ void zero_chunk(bf16_t* out) {
  if constexpr (W == kVector) {
    Packed128<bf16_t> packed;
    for (int k = 0; k < W; k++) packed.values[k] = math::bf16_from_bits(0);
    store128(out, packed);
  } else {
    *out = math::bf16_from_bits(0);
  }
}

// ---- forward ----

// out (N, C) with N = B·T rows: the thread owns channels [c, c + W) of one row.
template <int W>
__global__ void embedding_forward_kernel(bf16_t* out, const int32_t* tokens, const bf16_t* wte,
                                         const bf16_t* wpe, int64_t N, int T, int C,
                                         int64_t vocab_begin, int64_t vocab_end) {
  const int chunks_per_row = C / W;
  const int64_t first = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t item = first; item < N * chunks_per_row; item += stride) {
    const int64_t row = item / chunks_per_row;
    const int c = int(item % chunks_per_row) * W;
    const int64_t token = tokens[row];
    const bool owned = token >= vocab_begin && token < vocab_end;
    const bf16_t* word = owned ? wte + (token - vocab_begin) * C + c : nullptr;  // (W)
    const bf16_t* position = wpe ? wpe + (row % T) * C + c : nullptr;            // (W)
    bf16_t* out_chunk = out + row * C + c;
    if (word && position) {
      const Chunk<W> w = load_chunk<W>(word), p = load_chunk<W>(position);
      Chunk<W> sum;
      for (int k = 0; k < W; k++) sum.v[k] = w.v[k] + p.v[k];
      store_chunk<W>(out_chunk, sum);
    } else if (word || position) {  // a copy: storing a loaded value is exact
      copy_chunk<W>(out_chunk, word ? word : position);
    } else {
      zero_chunk<W>(out_chunk);
    }
  }
}

// ---- backward: sorting the owned rows by token ----

// The number of set bits (no __popc in the emulator).
__device__ __forceinline__ int bit_count(uint32_t x) {
  x = x - ((x >> 1) & 0x55555555u);
  x = (x & 0x33333333u) + ((x >> 2) & 0x33333333u);
  x = (x + (x >> 4)) & 0x0f0f0f0fu;
  return int((x * 0x01010101u) >> 24);
}

// The owned-vocabulary index of `row`'s token, or -1 if this rank does not own it.
__device__ __forceinline__ int32_t owned_key(const int32_t* tokens, int32_t row,
                                             int64_t vocab_begin, int64_t vocab_end) {
  const int64_t token = tokens[row];
  return token >= vocab_begin && token < vocab_end ? int32_t(token - vocab_begin) : -1;
}

// One block of kSortThreads. Writes the rows (N) whose token is owned, stably sorted by token,
// to sorted (rows_a or rows_b: pass p writes rows_a for even p, rows_b for odd p, the host
// knows which is last), group_starts[g] = the first sorted position of group g (one group per
// distinct token, g < G) with group_starts[G] = the owned row count, and counts = {owned rows,
// G}. Pass 0 reads the rows 0..N-1 implicitly and drops the rows of tokens owned elsewhere;
// pass p orders by key bits [8p, 8p + 8). Each pass: a histogram of the digits, its exclusive
// prefix sum (where each digit's rows start), then the rows in tiles of kSortThreads, in
// order; within a tile a row's place is the rows of its digit in earlier warps plus its rank
// among the lanes of its warp with the same digit (found with one ballot per digit bit), so
// equal digits keep their order: a stable pass.
__global__ void sort_rows_kernel(int32_t* counts, int32_t* rows_a, int32_t* rows_b,
                                 int32_t* group_starts, const int32_t* tokens, int32_t N,
                                 int64_t vocab_begin, int64_t vocab_end, int passes) {
  __shared__ int32_t digit_next[kDigits];  // where the next row of each digit goes
  __shared__ int32_t warp_digit_counts[kSortWarps][kDigits];  // this tile's rows per warp/digit
  __shared__ int32_t warp_totals[kSortWarps];
  __shared__ int32_t shared_count;
  const int tid = threadIdx.x, lane = tid % kWarpSize, warp = tid / kWarpSize;
  const uint32_t lanes_below = (1u << lane) - 1u;

  for (int d = tid; d < kDigits; d += blockDim.x)
    for (int w = 0; w < kSortWarps; w++) warp_digit_counts[w][d] = 0;

  const int32_t* in = nullptr;  // pass 0: the rows 0..N-1
  int32_t in_count = N;
  for (int pass = 0; pass < passes; pass++) {
    int32_t* out = pass % 2 == 0 ? rows_a : rows_b;
    const int shift = kRadixBits * pass;
    // The digit of input position i, or -1 for a row this rank does not own (pass 0 only).
    auto digit_at = [&](int32_t i, int32_t& row) {
      row = in ? in[i] : i;
      const int32_t key = owned_key(tokens, row, vocab_begin, vocab_end);
      return key < 0 ? -1 : (key >> shift) & (kDigits - 1);
    };

    for (int d = tid; d < kDigits; d += blockDim.x) digit_next[d] = 0;
    __syncthreads();
    for (int32_t i = tid; i < in_count; i += blockDim.x) {
      int32_t row;
      const int digit = digit_at(i, row);
      if (digit >= 0) atomicAdd(&digit_next[digit], 1);  // integer counts: order-free
    }
    __syncthreads();
    if (tid == 0) {
      int32_t total = 0;
      for (int d = 0; d < kDigits; d++) {
        const int32_t count = digit_next[d];
        digit_next[d] = total;
        total += count;
      }
      shared_count = total;
    }
    __syncthreads();
    const int32_t out_count = shared_count;

    for (int32_t tile = 0; tile < in_count; tile += blockDim.x) {  // uniform over the block
      const int32_t i = tile + tid;
      int32_t row = 0;
      const int digit = i < in_count ? digit_at(i, row) : -1;
      // The lanes of this warp with the same digit.
      uint32_t peers = __ballot_sync(0xffffffffu, digit >= 0);
      for (int b = 0; b < kRadixBits; b++) {
        const bool bit = (digit >> b) & 1;
        const uint32_t set = __ballot_sync(0xffffffffu, bit);
        peers &= bit ? set : ~set;
      }
      const int rank = bit_count(peers & lanes_below);
      if (digit >= 0 && rank == 0) warp_digit_counts[warp][digit] = bit_count(peers);
      __syncthreads();
      if (digit >= 0) {
        int32_t place = digit_next[digit] + rank;
        for (int w = 0; w < warp; w++) place += warp_digit_counts[w][digit];
        out[place] = row;
      }
      __syncthreads();
      for (int d = tid; d < kDigits; d += blockDim.x) {
        for (int w = 0; w < kSortWarps; w++) {
          digit_next[d] += warp_digit_counts[w][d];
          warp_digit_counts[w][d] = 0;
        }
      }
      __syncthreads();
    }
    in = out;
    in_count = out_count;
  }

  // The group starts: sorted positions whose token differs from the previous position's, in
  // order (a ballot-based ordered compaction, tile by tile).
  const int32_t* sorted = in;
  int32_t group_count = 0;  // every thread keeps the same running count
  for (int32_t tile = 0; tile < in_count; tile += blockDim.x) {
    const int32_t i = tile + tid;
    const bool start = i < in_count && (i == 0 || tokens[sorted[i]] != tokens[sorted[i - 1]]);
    const uint32_t starts = __ballot_sync(0xffffffffu, start);
    if (lane == 0) warp_totals[warp] = bit_count(starts);
    __syncthreads();
    int32_t place = group_count + bit_count(starts & lanes_below);
    for (int w = 0; w < kSortWarps; w++) {
      if (w < warp) place += warp_totals[w];
      group_count += warp_totals[w];
    }
    if (start) group_starts[place] = i;
    __syncthreads();
  }
  if (tid == 0) {
    group_starts[group_count] = in_count;
    counts[0] = in_count;
    counts[1] = group_count;
  }
}

// ---- backward: the sums ----

// dwte[token of group g] += Σ over the group's rows (ascending) of dout[row], fp32. The block
// handles groups blockIdx.x + k·gridDim.x; the thread owns channels [c, c + W).
template <int W>
__global__ void group_sums_kernel(bf16_t* dwte, const bf16_t* dout, const int32_t* tokens,
                                  const int32_t* counts, const int32_t* sorted,
                                  const int32_t* group_starts, int C, int64_t vocab_begin) {
  const int c = (int(blockIdx.y) * blockDim.x + threadIdx.x) * W;
  if (c >= C) return;
  const int32_t group_count = counts[1];
  for (int32_t g = blockIdx.x; g < group_count; g += gridDim.x) {
    const int32_t begin = group_starts[g], end = group_starts[g + 1];
    Chunk<W> acc;
    for (int k = 0; k < W; k++) acc.v[k] = 0.0f;
    for (int32_t position = begin; position < end; position++) {
      const Chunk<W> d = load_chunk<W>(dout + int64_t(sorted[position]) * C + c);
      for (int k = 0; k < W; k++) acc.v[k] += d.v[k];
    }
    bf16_t* grad = dwte + (int64_t(tokens[sorted[begin]]) - vocab_begin) * C + c;  // (W)
    const Chunk<W> old = load_chunk<W>(grad);
    for (int k = 0; k < W; k++) acc.v[k] = old.v[k] + acc.v[k];
    store_chunk<W>(grad, acc);
  }
}

// dwpe (T, C) += Σ_b dout[b, t], b ascending: the thread owns channels [c, c + W) of one t.
template <int W>
__global__ void position_sums_kernel(bf16_t* dwpe, const bf16_t* dout, int B, int T, int C) {
  const int chunks_per_row = C / W;
  const int64_t first = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t item = first; item < int64_t(T) * chunks_per_row; item += stride) {
    const int64_t t = item / chunks_per_row;
    const int c = int(item % chunks_per_row) * W;
    Chunk<W> acc;
    for (int k = 0; k < W; k++) acc.v[k] = 0.0f;
    for (int b = 0; b < B; b++) {
      const Chunk<W> d = load_chunk<W>(dout + (int64_t(b) * T + t) * C + c);
      for (int k = 0; k < W; k++) acc.v[k] += d.v[k];
    }
    bf16_t* grad = dwpe + t * C + c;
    const Chunk<W> old = load_chunk<W>(grad);
    for (int k = 0; k < W; k++) acc.v[k] = old.v[k] + acc.v[k];
    store_chunk<W>(grad, acc);
  }
}

// Blocks for `items` work items of kEmbeddingThreads each, grid-stride beyond the cap.
dim3 elementwise_grid(int64_t items) {
  return dim3(unsigned(std::min(ceil_div(items, kEmbeddingThreads), kMaxEmbeddingBlocks)));
}

// Radix passes for keys in [0, range): enough 8-bit digits for range − 1, at least one (pass
// 0 also drops the rows this rank does not own).
int radix_passes(int64_t range) {
  int passes = 1;
  while (passes * kRadixBits < 32 && (int64_t(1) << (passes * kRadixBits)) < range) passes++;
  return passes;
}

}  // namespace

void embedding_forward(CudaContext& cx, bf16_t* out, const int32_t* tokens, const bf16_t* wte,
                       const bf16_t* wpe, int B, int T, int C, int64_t vocab_begin,
                       int64_t vocab_end) {
  // B·T <= 2^31 - 1 and the owned range fit int32 (the contract, backend_contract.h).
  const int64_t N = int64_t(B) * T;
  if (N == 0 || C == 0) return;
  // The 128-bit path needs every row start 16-byte aligned (C a multiple of 8).
  const bool vector =
      C % kVector == 0 && aligned16(out) && (!wte || aligned16(wte)) && (!wpe || aligned16(wpe));
  if (vector) {
    launch(cx, "embedding_forward", embedding_forward_kernel<kVector>,
           elementwise_grid(N * (C / kVector)),
           dim3(kEmbeddingThreads))(out, tokens, wte, wpe, N, T, C, vocab_begin, vocab_end);
  } else {
    launch(cx, "embedding_forward", embedding_forward_kernel<1>, elementwise_grid(N * C),
           dim3(kEmbeddingThreads))(out, tokens, wte, wpe, N, T, C, vocab_begin, vocab_end);
  }
}

void embedding_backward(CudaContext& cx, bf16_t* dwte, bf16_t* dwpe, const bf16_t* dout,
                        const int32_t* tokens, int B, int T, int C, int64_t vocab_begin,
                        int64_t vocab_end) {
  const int64_t N = int64_t(B) * T;  // checked by the contract, as in embedding_forward
  if (N == 0 || C == 0) return;

  if (dwte && vocab_end > vocab_begin) {  // null gradient: not computed
    // scratch.embedding_rows (int32): counts (4, two used), rows_a (N), rows_b (N),
    // group_starts (N + 1).
    int32_t* base = scratch<int32_t>(cx, cx.scratch.embedding_rows, size_t(4 + 3 * N + 1));
    int32_t* counts = base;
    int32_t* rows_a = base + 4;
    int32_t* rows_b = rows_a + N;
    int32_t* group_starts = rows_b + N;
    const int passes = radix_passes(vocab_end - vocab_begin);
    launch(cx, "embedding_backward (sort rows by token)", sort_rows_kernel, dim3(1),
           dim3(kSortThreads))(counts, rows_a, rows_b, group_starts, tokens, int32_t(N),
                               vocab_begin, vocab_end, passes);
    const int32_t* sorted = (passes - 1) % 2 == 0 ? rows_a : rows_b;

    const bool vector = C % kVector == 0 && aligned16(dwte, dout);
    const int W = vector ? kVector : 1;
    // A thread per chunk of W channels (a warp at least), channel tiles in blockIdx.y.
    const int chunks = C / W;
    const int threads =
        int(std::min<int64_t>(ceil_div(chunks, kWarpSize) * kWarpSize, kEmbeddingThreads));
    const dim3 grid(unsigned(std::min(N, kMaxGroupBlocks)), unsigned(ceil_div(chunks, threads)));
    if (vector) {
      launch(cx, "embedding_backward (dwte)", group_sums_kernel<kVector>, grid, dim3(threads))(
          dwte, dout, tokens, counts, sorted, group_starts, C, vocab_begin);
    } else {
      launch(cx, "embedding_backward (dwte)", group_sums_kernel<1>, grid, dim3(threads))(
          dwte, dout, tokens, counts, sorted, group_starts, C, vocab_begin);
    }
  }

  if (dwpe) {
    if (C % kVector == 0 && aligned16(dwpe, dout)) {
      launch(cx, "embedding_backward (dwpe)", position_sums_kernel<kVector>,
             elementwise_grid(int64_t(T) * (C / kVector)),
             dim3(kEmbeddingThreads))(dwpe, dout, B, T, C);
    } else {
      launch(cx, "embedding_backward (dwpe)", position_sums_kernel<1>,
             elementwise_grid(int64_t(T) * C), dim3(kEmbeddingThreads))(dwpe, dout, B, T, C);
    }
  }
}

COLLAGE_CUDA_VARIANT_END
}  // namespace collage::cuda
