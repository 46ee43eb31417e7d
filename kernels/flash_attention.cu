// Attention on tensor cores, FlashAttention-2 style (Dao, 2023), for head sizes 64 and 128: the
// op of kernels/attention.cu (whose header has the notation, the masks and the dropout), with
// the six products S = q·kᵀ, Z·v, dP = dout·vᵀ, dS·k, Zᵀ·dout and dSᵀ·q on
// mma.m16n8k16 (kernels/mma.cuh): bf16 operands, fp32 accumulation. attention.cu sends a call
// here when flash_attention_serves() it; other head sizes stay on its SIMT kernels.
//
// Work split (WorkSplit below, one per kernel and head size). Forward: a block takes kBlockRows
// queries of one (b, h), each of its 4 warps kWarpRows of them (one or two m-tiles of 16); the
// block stages each tile of kTile keys of k and v in shared memory (bf16 rows padded by 8
// elements, so the 8 row addresses of an ldmatrix fall in different banks) and the warps read
// their B fragments from it with ldmatrix. Backward: a block takes kBlockRows keys, a warp
// kWarpRows, and the block stages tiles of kTile queries of q and dout with their lse and D.
// The block's own rows (q; k and v) stay in shared memory too, read with ldmatrix at each use.
// Tiles are double-buffered: cp.async (kernels/async_copy.cuh) fetches the next while the warps
// multiply the current, one barrier per tile. Under a causal mask a warp skips the tiles none of
// its rows sees. The split changes no bit of dk or dv (each element's terms meet the tensor
// cores 16 at a time in query order whatever the tiles), and none of out or lse as long as the
// forward's kTile stays (its online softmax rescales once per tile); dq's bits depend on the
// backward's kBlockRows (its sum over each key block is rounded to fp32 before the next adds).
// Fragments (src/simt/warp_matrix.h): a lane holds rows g = lane/4 and g + 8 of an m-tile's 16,
// columns 2t and 2t + 1 (t = lane % 4) of every 8-column block; softmax statistics of a row are
// reduced over the 4 lanes t = 0..3 that hold it.
//
//  forward: online softmax over the key tiles (as attention.cu), lse saved.
//  backward, two launches: D_i = dout_i·out_i (saved in `delta`); then one kernel that, per
//    query tile, recomputes Pᵀ and dPᵀ (from k·qᵀ and v·doutᵀ), accumulates Zᵀ·dout and dSᵀ·q
//    in registers, and adds the block's part of dS·k to dq in turn with the other key blocks
//    (kernels/turns.cuh): five products a pair of tiles, where a dq kernel of its own had to
//    recompute P and dP (seven).
// Deterministic: every sum has a fixed order, and no float atomics.
//
// Numbers. The products' operands q, k, v, dout are bf16 already. The left factor of Z·v, dS·k,
// Zᵀ·dout and dSᵀ·q is computed in fp32 and rounded to bf16 for the tensor cores (as
// FlashAttention and cuDNN do): each term then carries a relative error ≤ 2^-8, so an output
// or gradient element differs from the SIMT kernels' and the cpu's by at most 2^-8 of the sum
// of its terms' magnitudes, plus what D from the bf16 out adds to dS
// (tests/cuda/flash_attention_test.cpp derives and checks exactly that bound). The softmax
// denominator and D sum fp32 values; exponentials are exp2_flushed (softmax_exp), lse uses logf.
#include <algorithm>
#include <cmath>

#include "kernels/async_copy.cuh"
#include "kernels/attention.cuh"
#include "kernels/column_sums.cuh"
#include "kernels/mma.cuh"
#include "kernels/turns.cuh"

namespace collage::cuda {
COLLAGE_CUDA_VARIANT_BEGIN
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * kWarpSize;

// How a kernel cuts its work: each warp owns kWarpTiles m-tiles of 16 rows (queries in the
// forward, keys in the backward), so a block owns kBlockRows; the other side (keys, or queries)
// is staged kTile rows at a time. With two m-tiles a warp multiplies each B fragment it loads
// into both (half the ldmatrix per mma, twice the independent accumulators), for twice the
// accumulator registers.
// The kernels take a split as its two numbers, not as this type: nvcc's generated host stubs
// spell a kernel's type arguments without their namespaces and then do not compile.
template <int kWarpTilesOf, int kTileOf>
struct WorkSplit {
  static constexpr int kWarpTiles = kWarpTilesOf;
  static constexpr int kWarpRows = 16 * kWarpTiles;
  static constexpr int kBlockRows = kWarps * kWarpRows;
  static constexpr int kTile = kTileOf;
};
// Every kernel keeps its A operand rows (q; k and v) in shared memory and reads them at each
// use rather than holding them as register fragments: fewer registers per thread, so more
// resident warps to hide the latencies that bound these kernels. Two m-tiles a warp
// (FlashAttention-2's 32-row warps) took 242-255 registers, and on an H200 they were slower in
// every kernel (forward 2.45 -> 4.04 ms a 124M step), as were more blocks an SM bought with
// spills or smaller tiles (docs/ARCHITECTURE.md, "Where the attention kernels stand").
// Registers on sm_90 (ptxas): forward 128 at HS 64 (4 blocks an SM), 166 at HS 128 (3, a 32-key
// tile so that 3 blocks' shared memory fits); backward 157 (3) and 248 (2).
template <int kHeadSize>
using ForwardSplit = WorkSplit<1, kHeadSize == 64 ? 64 : 32>;  // queries; keys a tile
template <int kHeadSize>
using BackwardSplit = WorkSplit<1, 32>;  // keys; queries a tile

template <int kHeadSize>
constexpr int kStride = kHeadSize + 8;  // row stride of a staged tile, bf16 elements

// Starts copying rows [first, first + kTileRows) of a (T, HS) matrix at `head` (row stride
// `row_stride`) into `tile` (kTileRows, kStride) with cp.async (kernels/async_copy.cuh); rows
// past T become zeros (0·v must stay 0, not NaN). The caller commits and waits.
// A thread copies the 16-byte chunk c = tid % (HS/8) of the rows tid / (HS/8) + pass·kPassRows:
// its source steps by one pass's rows, so each copy costs a 64-bit add, a compare and two
// selects, where indexing every chunk afresh (row = e / chunks, a 64-bit multiply by the row
// stride) took ~14 instructions a copy, ~1/8 of the forward's loop (PTX).
template <int kHeadSize, int kTileRows>
__device__ __forceinline__ void stage_async(bf16_t* tile, const bf16_t* head, int64_t row_stride,
                                            int first, int T) {
  constexpr int kChunks = kHeadSize / 8;         // 16-byte chunks per row
  constexpr int kPassRows = kThreads / kChunks;  // rows the block copies in one pass
  static_assert(kThreads % kChunks == 0 && kTileRows % kPassRows == 0,
                "every thread copies as many chunks, of one column");
  const int tile_row = int(threadIdx.x) / kChunks, column = int(threadIdx.x) % kChunks * 8;
  const int row = first + tile_row;
  bf16_t* destination = tile + tile_row * kStride<kHeadSize> + column;
  int64_t offset = row * row_stride + column;  // of (row + pass·kPassRows, column) in head
  COLLAGE_UNROLL
  for (int pass = 0; pass < kTileRows / kPassRows; pass++) {
    const bool inside = row + pass * kPassRows < T;
    copy_async_16(destination + pass * kPassRows * kStride<kHeadSize>,
                  inside ? head + offset : head, inside);
    offset += kPassRows * row_stride;
  }
}

// The A fragment of rows [row0, row0 + 16), columns [16·step, 16·step + 16) of a staged tile.
template <int kHeadSize>
__device__ __forceinline__ FragmentA load_a(const bf16_t* tile, int row0, int step) {
  const int lane = threadIdx.x % kWarpSize;
  FragmentA a;
  ldmatrix<4, false>(a.r,
                     tile + (row0 + lane % 16) * kStride<kHeadSize> + step * 16 + (lane / 16) * 8);
  return a;
}

// B fragments of the n-blocks [n0, n0 + 8) and [n0 + 8, n0 + 16) at k-step `step`, from a tile
// whose rows are n and columns k (k rows for q·kᵀ, q rows for k·qᵀ, ...).
template <int kHeadSize>
__device__ __forceinline__ void load_b_rows(FragmentB& first, FragmentB& second, const bf16_t* tile,
                                            int n0, int step) {
  const int lane = threadIdx.x % kWarpSize;
  uint32_t r[4];
  ldmatrix<4, false>(r, tile + (n0 + (lane / 16) * 8 + lane % 8) * kStride<kHeadSize> + step * 16 +
                            ((lane / 8) % 2) * 8);
  first.r[0] = r[0], first.r[1] = r[1], second.r[0] = r[2], second.r[1] = r[3];
}

// B fragments of the n-blocks [n0, n0 + 8) and [n0 + 8, n0 + 16) for the k rows
// [k0, k0 + 16), from a tile whose rows are k and columns n (v rows for Z·v, ...).
template <int kHeadSize>
__device__ __forceinline__ void load_b_columns(FragmentB& first, FragmentB& second,
                                               const bf16_t* tile, int k0, int n0) {
  const int lane = threadIdx.x % kWarpSize;
  uint32_t r[4];
  ldmatrix<4, true>(
      r, tile + (k0 + lane % 8 + ((lane / 8) % 2) * 8) * kStride<kHeadSize> + n0 + (lane / 16) * 8);
  first.r[0] = r[0], first.r[1] = r[1], second.r[0] = r[2], second.r[1] = r[3];
}

// acc[m][nb] += a_m·tileᵀ over the kN rows of `tile` (n) and kHeadSize columns (k), with a_m
// the rows [a_row0 + 16m, a_row0 + 16m + 16) of the staged `a_tile`, read at each k-step:
// S = q·kᵀ, dP = dout·vᵀ and their transposes k·qᵀ, v·doutᵀ. Each B fragment serves all kM
// m-tiles.
template <int kHeadSize, int kN, int kM>
__device__ __forceinline__ void multiply_by_rows(FragmentC (&acc)[kM][kN / 8], const bf16_t* a_tile,
                                                 int a_row0, const bf16_t* tile) {
  COLLAGE_UNROLL
  for (int step = 0; step < kHeadSize / 16; step++) {
    FragmentA a[kM];
    COLLAGE_UNROLL
    for (int m = 0; m < kM; m++) a[m] = load_a<kHeadSize>(a_tile, a_row0 + 16 * m, step);
    COLLAGE_UNROLL
    for (int nb = 0; nb < kN / 8; nb += 2) {
      FragmentB first, second;
      load_b_rows<kHeadSize>(first, second, tile, nb * 8, step);
      COLLAGE_UNROLL
      for (int m = 0; m < kM; m++) {
        mma(acc[m][nb], a[m], first);
        mma(acc[m][nb + 1], a[m], second);
      }
    }
  }
}

// acc[m][nd] += rn(left[m]) · tile over kK rows of `tile` (k) and kHeadSize columns (n),
// left[m] the (16, kK) fp32 accumulators of m-tile m rounded to bf16 A fragments: Z·v, dS·k,
// Zᵀ·dout, dSᵀ·q. Each B fragment serves all kM m-tiles.
template <int kHeadSize, int kK, int kM>
__device__ __forceinline__ void multiply_rounded(FragmentC (&acc)[kM][kHeadSize / 8],
                                                 const FragmentC (&left)[kM][kK / 8],
                                                 const bf16_t* tile) {
  COLLAGE_UNROLL
  for (int kk = 0; kk < kK / 16; kk++) {
    FragmentA a[kM];
    COLLAGE_UNROLL
    for (int m = 0; m < kM; m++) {
      const FragmentC *low = &left[m][2 * kk], *high = &left[m][2 * kk + 1];
      a[m].r[0] = pack_bf16(low->v[0], low->v[1]);
      a[m].r[1] = pack_bf16(low->v[2], low->v[3]);
      a[m].r[2] = pack_bf16(high->v[0], high->v[1]);
      a[m].r[3] = pack_bf16(high->v[2], high->v[3]);
    }
    COLLAGE_UNROLL
    for (int nd = 0; nd < kHeadSize / 8; nd += 2) {
      FragmentB first, second;
      load_b_columns<kHeadSize>(first, second, tile, kk * 16, nd * 8);
      COLLAGE_UNROLL
      for (int m = 0; m < kM; m++) {
        mma(acc[m][nd], a[m], first);
        mma(acc[m][nd + 1], a[m], second);
      }
    }
  }
}

// e^(a·x - b) for the softmax, as 2^(x·a' - b') with a' = a·log2 e and b' = b·log2 e prepared
// once per row or call: one fused multiply-add and one MUFU.EX2 (exp2_flushed, kernels/mma.cuh:
// ~2 ulp, results below 2^-126 flushed to 0) per score, where math::exp_approx is a polynomial
// of ~25 instructions and exp2f four; the score work per element, not the tensor cores, bounds
// these kernels. e^-inf = 0, which masks hidden scores without a test. The emulator uses fmaf
// and glibc's exp2f: an ulp or two of fp32 from the GPU's, far inside the tests' bounds.
constexpr float kLog2e = 1.4426950408889634f;
__device__ __forceinline__ float softmax_exp(float x, float a_log2e, float b_log2e) {
  return exp2_flushed(fmaf(x, a_log2e, -b_log2e));
}

// F_ij of dropout, kept out of line on the GPU: inlined into the unrolled fragment loops, the
// Philox rounds would take the registers the accumulators need (and a call costs nothing
// when p = 0, where it is never made). The pair form serves a lane's two adjacent columns
// (j, j + 1) of one row, usually with one Philox evaluation for both.
#if defined(__CUDACC__)
#define COLLAGE_OUT_OF_LINE __device__ __noinline__
#else
#define COLLAGE_OUT_OF_LINE inline
#endif
COLLAGE_OUT_OF_LINE float dropout_factor(const AttentionDropout& dropout, int b, int h, int i,
                                         int j, int T, int NH) {
  return dropout.factor(b, h, i, j, T, NH);
}
COLLAGE_OUT_OF_LINE AttentionDropout::Pair dropout_factor_pair(const AttentionDropout& dropout,
                                                               int b, int h, int i, int j, int T,
                                                               int NH) {
  return dropout.factors(b, h, i, j, T, NH);
}

// out[k] = w[(k + shift) % 4], in two stages of selects (no indexing by a lane's value, which
// would put the array in local memory).
__device__ __forceinline__ void rotate4(uint32_t (&out)[4], const uint32_t (&w)[4], int shift) {
  uint32_t half[4];
  COLLAGE_UNROLL
  for (int k = 0; k < 4; k++) half[k] = (shift & 1) ? w[(k + 1) % 4] : w[k];
  COLLAGE_UNROLL
  for (int k = 0; k < 4; k++) out[k] = (shift & 2) ? half[(k + 2) % 4] : half[k];
}

// F of a lane's four elements of one n-block of the forward's fragments: its queries `query` and
// query + 8 (rows g and g + 8) and keys `key` and key + 1 (columns 2t, 2t + 1), in the fragment's
// order (query, key), (query, key + 1), (query + 8, key), (query + 8, key + 1); the numbers of
// AttentionDropout::factor(). The four lanes t = 0..3 of a row g hold 8 consecutive keys, two
// Philox blocks a query when T and the call's offset are multiples of 4 (the caller's test), four
// blocks for the two queries: lane t computes the one of query + 8·(t / 2) and keys from
// key - 2t + 4·(t % 2), and each lane reads the two it needs, all four words each, from lanes
// t / 2 and 2 + t / 2 of its row: one Philox evaluation for four elements instead of two (as
// dropout_factor_pair draws them). Every lane of the warp calls it; out of line as
// dropout_factor.
struct Factors4 {
  float v[4];
};
COLLAGE_OUT_OF_LINE Factors4 dropout_factors_query_major(const AttentionDropout& dropout, int b,
                                                         int h, int query, int key, int T, int NH) {
  const int lane = int(threadIdx.x % kWarpSize), t = lane % 4;
  const uint64_t element =
      dropout.offset + ((uint64_t(b) * NH + uint64_t(h)) * T + uint64_t(query + 8 * (t / 2))) * T +
      uint64_t(key - 2 * t + 4 * (t % 2));
  const math::Philox4x32 block = math::dropout_block(dropout.seed, element >> 2);
  Factors4 f;
  COLLAGE_UNROLL
  for (int row = 0; row < 2; row++) {  // query, query + 8: the blocks of lanes t / 2 + 2·row
    const int source = lane - t + t / 2 + 2 * row;
    uint32_t word[4];
    COLLAGE_UNROLL
    for (int k = 0; k < 4; k++) word[k] = __shfl_sync(0xffffffffu, block.v[k], source);
    const uint32_t mine[2] = {(t & 1) ? word[2] : word[0], (t & 1) ? word[3] : word[1]};
    COLLAGE_UNROLL
    for (int c = 0; c < 2; c++)
      f.v[2 * row + c] =
          math::dropout_factor(math::uniform_from_bits(mine[c]), dropout.p, dropout.keep_scale);
  }
  return f;
}

// F of a lane's four elements of one n-block of the backward's transposed fragments: its keys
// `key` and key + 8 (rows g and g + 8) and queries i and i + 1 (columns 2t, 2t + 1), in the
// fragment's order (key, i), (key, i + 1), (key + 8, i), (key + 8, i + 1); the numbers of
// AttentionDropout::factor(). The four lanes g = 4q..4q + 3 of a column t hold four consecutive
// keys (and those 8 on), whose uniforms for one query are the four words of one Philox block
// when T and the call's offset are multiples of 4 (the caller's test). So each of the four
// computes one of the blocks they need, lane a = g % 4 the one of query i + a / 2 and keys from
// key - a + 8·(a % 2), and they trade words by shuffles: one Philox evaluation for four elements
// instead of four. Every lane of the warp calls it; out of line as dropout_factor.
COLLAGE_OUT_OF_LINE Factors4 dropout_factors_key_major(const AttentionDropout& dropout, int b,
                                                       int h, int i, int key, int T, int NH) {
  const int lane = int(threadIdx.x % kWarpSize), a = (lane / 4) % 4;
  const int first_lane = lane - 4 * a;  // of the four: g = 4q, column t
  const uint64_t element = dropout.offset +
                           ((uint64_t(b) * NH + uint64_t(h)) * T + uint64_t(i + a / 2)) * T +
                           uint64_t(key - a + 8 * (a % 2));
  const math::Philox4x32 block = math::dropout_block(dropout.seed, element >> 2);
  // Round k: lane a reads from lane r = (a - k) % 4, which sends word (r + k) % 4 = a of its
  // block; so got[k] is word a of block (a - k) % 4.
  uint32_t send[4], got[4];
  rotate4(send, block.v, a);
  COLLAGE_UNROLL
  for (int k = 0; k < 4; k++)
    got[k] = __shfl_sync(0xffffffffu, send[k], first_lane + 4 * ((a - k) & 3));
  // Word a of block r is got[(a - r) % 4]: reversed, got[(-m) % 4] is that of block (a + m) % 4,
  // then rotated by -a.
  const uint32_t reversed[4] = {got[0], got[3], got[2], got[1]};
  uint32_t word[4];  // word a of block r: query i + r / 2, key + 8·(r % 2)
  rotate4(word, reversed, (4 - a) & 3);
  Factors4 f;
  const uint32_t in_fragment_order[4] = {word[0], word[2], word[1], word[3]};
  COLLAGE_UNROLL
  for (int e = 0; e < 4; e++)
    f.v[e] = math::dropout_factor(math::uniform_from_bits(in_fragment_order[e]), dropout.p,
                                  dropout.keep_scale);
  return f;
}

// The sum over the 4 lanes that hold one row (t = 0..3), in a fixed order.
__device__ __forceinline__ float quad_sum(float value) {
  value += __shfl_xor_sync(0xffffffffu, value, 1);
  return value + __shfl_xor_sync(0xffffffffu, value, 2);
}
__device__ __forceinline__ float quad_max(float value) {
  value = fmaxf(value, __shfl_xor_sync(0xffffffffu, value, 1));
  return fmaxf(value, __shfl_xor_sync(0xffffffffu, value, 2));
}

// Column j of element e (0..3) of n-block nb, for the lane's t; its row is g + 8·(e / 2).
__device__ __forceinline__ int fragment_column(int nb, int e) {
  return nb * 8 + 2 * (threadIdx.x % 4) + (e % 2);
}

// dst (two bf16 at an even element) = rn(scale·value) for each of the pair, in one 32-bit store;
// the old contents are not read (backend.h: input gradients are written).
__device__ __forceinline__ void write_pair(bf16_t* dst, float scale, float first, float second) {
  store_bf16_pair(dst, scale * first, scale * second);
}

// The first stage of Σ_rows dqkv (the qkv bias gradient; kernels/column_sums.cuh) for the rows a
// block owns of one part (q, k or v) of one head: `stored` (kBlockRows, kStride) holds them as
// they were written (bf16), the block's first row being row0 of sequence b; partials (chunks, C3)
// gets each 32-row chunk's column sums in row order at columns column0 + d, the terms and order
// of column_partials_kernel, so the same bits. Needs T % kColumnChunkRows == 0 (no chunk
// straddles two sequences); chunks from T on are not the block's.
template <int kHeadSize, int kBlockRows>
__device__ __forceinline__ void chunk_sums_of_rows(float* partials, const bf16_t* stored, int b,
                                                   int row0, int T, int64_t C3, int column0) {
  constexpr int kChunks = kBlockRows / kColumnChunkRows;
  static_assert(kBlockRows % kColumnChunkRows == 0, "a block's rows are whole chunks");
  for (int e = int(threadIdx.x); e < kChunks * kHeadSize; e += kThreads) {
    const int j = e / kHeadSize, d = e % kHeadSize;
    const int first = row0 + j * kColumnChunkRows;
    if (first >= T) continue;
    float sum = 0.0f;
    for (int r = 0; r < kColumnChunkRows; r++)
      sum += to_float(stored[(j * kColumnChunkRows + r) * kStride<kHeadSize> + d]);
    const int64_t chunk = (int64_t(b) * T + first) / kColumnChunkRows;
    partials[chunk * C3 + column0 + d] = sum;
  }
}

// The tiles of two (T, HS) matrices that a kernel walks together (k and v in the forward, q and
// dout in the backward), double-buffered: while the warps work on the tiles in one buffer,
// cp.async fills the other with the next. Shared memory holds first(0), second(0), first(1),
// second(1), each (kTileRows, kStride).
template <int kHeadSize, int kTileRows>
struct TilePairs {
  static constexpr int kElements = kTileRows * kStride<kHeadSize>;
  bf16_t* shared;
  const bf16_t* first_rows;  // row stride first_stride
  int64_t first_stride;
  const bf16_t* second_rows;  // row stride second_stride
  int64_t second_stride;
  __device__ bf16_t* first(int buffer) const { return shared + 2 * buffer * kElements; }
  __device__ bf16_t* second(int buffer) const { return shared + (2 * buffer + 1) * kElements; }
  __device__ bf16_t* end() const { return shared + 4 * kElements; }  // what follows in shared
  // Starts copying rows [row0, row0 + kTileRows) of both into `buffer` (one commit group).
  __device__ void start(int row0, int buffer, int T) const {
    stage_async<kHeadSize, kTileRows>(first(buffer), first_rows, first_stride, row0, T);
    stage_async<kHeadSize, kTileRows>(second(buffer), second_rows, second_stride, row0, T);
    copy_async_commit();
  }
  // At the top of the loop over the tiles: waits until the tiles at row0 (in `buffer`) have
  // landed and every warp is done with the previous ones, then starts the next (below
  // row_end) into the other buffer.
  __device__ void next(int row0, int row_end, int buffer, int T) const {
    copy_async_wait<0>();
    __syncthreads();
    if (row0 + kTileRows < row_end) start(row0 + kTileRows, buffer ^ 1, T);
  }
};

// Where a block works: its block of kBlockRows rows (queries in the forward, keys in the
// backward) and its (b, h). The grid is one-dimensional, ordered by row block from the last down
// to 0, then by head (b·NH + h): every head's last row block starts first, then every head's
// second-last, and so on. Under a causal mask the forward's last query block has the most key
// tiles, so the longest blocks start first and the short ones fill the end; ordered by head, the
// last heads' long blocks would start last and run on with the GPU half idle (a list-scheduling
// model of the 124M shape, 528 block slots: 60 tile-times against 50, ideal 49.5). The backward
// needs this order for its turns (flash_backward_kernel).
struct GridPlace {
  int row_block, row_blocks, b, h;
};
__device__ __forceinline__ GridPlace grid_place(int T, int kBlockRows, int NH) {
  const int row_blocks = int(ceil_div(T, kBlockRows)), heads = int(gridDim.x) / row_blocks;
  const int head = int(blockIdx.x) % heads;  // b·NH + h
  return {row_blocks - 1 - int(blockIdx.x) / heads, row_blocks, head / NH, head % NH};
}

// The rows this lane holds in each of a warp's kM m-tiles (fragment rows g and g + 8), the
// warp's first row being `first`: queries in the forward, keys in the backward.
template <int kM>
__device__ __forceinline__ void lane_rows(int (&rows)[kM][2], int first) {
  const int g = int(threadIdx.x % kWarpSize) / 4;
  COLLAGE_UNROLL
  for (int m = 0; m < kM; m++) rows[m][0] = first + 16 * m + g, rows[m][1] = rows[m][0] + 8;
}

// The first key past every query of a warp whose first row is `row0` (kWarpRows rows): under a
// causal mask, a key tile starting there or later holds no key any of them sees, and the warp
// skips it (without the test such a tile would only add zeros, or, in the forward, rescale by
// e^0 computed with rounding).
template <int kWarpRows>
__device__ __forceinline__ int keys_seen_end(int row0, bool causal, int T) {
  return causal ? min(T, row0 + kWarpRows) : T;
}

// out (B, T, C), lse (B, NH, T). Block (query block, b, h) (grid_place). The blocks an SM that its
// shared memory allows (4 at HS 64, 3 at HS 128) are asked of the register allocator too: left to
// itself, nvcc gives the separate mask loop 168 registers at HS 64 (3 blocks).
template <int kHeadSize, int kWarpTiles, int kTileRows>
__global__ void __launch_bounds__(kThreads, kHeadSize == 64 ? 4 : 3)
    flash_forward_kernel(bf16_t* out, float* lse, const bf16_t* qkv, const int32_t* key_mask,
                         bool causal, int T, int NH, float scale, AttentionDropout dropout) {
  using Split = WorkSplit<kWarpTiles, kTileRows>;
  constexpr int kM = Split::kWarpTiles, kTile = Split::kTile;
  constexpr int kDimBlocks = kHeadSize / 8, kKeyBlocks = kTile / 8;
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const GridPlace place = grid_place(T, Split::kBlockRows, NH);
  const int b = place.b, h = place.h;
  const int q0 = place.row_block * Split::kBlockRows;
  const int warp_row0 = warp * Split::kWarpRows;  // in the block
  int rows[kM][2];                                // this lane's queries
  lane_rows(rows, q0 + warp_row0);
  const HeadSlices head = head_slices(qkv, b, h, T, NH, kHeadSize);
  const int32_t* key_ok = key_mask ? key_mask + int64_t(b) * T : nullptr;

  // The block's q rows (kBlockRows, kStride), staged once; then the key tiles.
  COLLAGE_DYNAMIC_SHARED(bf16_t, shared);
  bf16_t* q_rows = shared;
  const TilePairs<kHeadSize, kTile> tiles{q_rows + Split::kBlockRows * kStride<kHeadSize>, head.k,
                                          head.row_stride, head.v, head.row_stride};
  const int key_end = causal ? min(T, q0 + Split::kBlockRows) : T;  // keys any row sees
  const int warp_key_end = keys_seen_end<Split::kWarpRows>(q0 + warp_row0, causal, T);
  stage_async<kHeadSize, Split::kBlockRows>(q_rows, head.q, head.row_stride, q0, T);
  tiles.start(0, 0, T);  // the same commit group: the loop's first wait covers all

  const float scale_log2e = scale * kLog2e;
  float running_max[kM][2], lane_sum[kM][2];  // of q·k, unscaled; this lane's share of Σ p
  COLLAGE_UNROLL
  for (int m = 0; m < kM; m++)
    running_max[m][0] = running_max[m][1] = kAttentionMinusInf, lane_sum[m][0] = lane_sum[m][1] = 0;
  FragmentC o[kM][kDimBlocks];
  for (int k0 = 0, buffer = 0; k0 < key_end; k0 += kTile, buffer ^= 1) {
    tiles.next(k0, key_end, buffer, T);
    if constexpr (Split::kTile < Split::kBlockRows) {  // else every warp sees every tile
      if (k0 >= warp_key_end) continue;                // the same for every lane of the warp
    }
    const bf16_t *k_tile = tiles.first(buffer), *v_tile = tiles.second(buffer);
    FragmentC s[kM][kKeyBlocks];
    multiply_by_rows<kHeadSize, kTile, kM>(s, q_rows, warp_row0, k_tile);
    COLLAGE_UNROLL
    for (int m = 0; m < kM; m++) {
      // Scores, -inf where hidden: only tiles that reach past T, past the m-tile's first row
      // (causal) or under a key mask test each key.
      const bool tile_masked =
          key_ok != nullptr || k0 + kTile > T || (causal && k0 + kTile - 1 > rows[m][0] - lane / 4);
      if (tile_masked) {
        // Key j = first + c (c = 8nb + e % 2) is hidden from row r where c ≥ room[r]: past T,
        // or past the row under a causal mask; and where the key mask hides it.
        const int first = k0 + fragment_column(0, 0);
        int room[2];
        COLLAGE_UNROLL
        for (int r = 0; r < 2; r++) room[r] = (causal ? min(T, rows[m][r] + 1) : T) - first;
        COLLAGE_UNROLL
        for (int nb = 0; nb < kKeyBlocks; nb++) {
          COLLAGE_UNROLL
          for (int e = 0; e < 4; e++) {
            const int c = nb * 8 + e % 2;
            const bool visible = c < room[e / 2] && key_visible(key_ok, first + c);
            s[m][nb].v[e] = visible ? s[m][nb].v[e] : kAttentionMinusInf;  // scaled in the exp
          }
        }
      }
      float tile_max[2] = {kAttentionMinusInf, kAttentionMinusInf};
      COLLAGE_UNROLL
      for (int nb = 0; nb < kKeyBlocks; nb++) {
        COLLAGE_UNROLL
        for (int e = 0; e < 4; e++) tile_max[e / 2] = fmaxf(tile_max[e / 2], s[m][nb].v[e]);
      }
      float correction[2], shift[2];
      COLLAGE_UNROLL
      for (int r = 0; r < 2; r++) {
        const float new_max = fmaxf(running_max[m][r], quad_max(tile_max[r]));
        // A row that has seen no key yet keeps max -inf; shifting by 0 then gives e^-inf = 0
        // instead of e^(-inf + inf) = NaN.
        shift[r] = (new_max == kAttentionMinusInf ? 0.0f : new_max) * scale_log2e;
        correction[r] = softmax_exp(running_max[m][r], scale_log2e, shift[r]);
        running_max[m][r] = new_max;
        lane_sum[m][r] *= correction[r];
      }
      // p = e^(scale·(q·k - m)) (0 where hidden) into the sum; then Z = p·F replaces S for Z·v.
      COLLAGE_UNROLL
      for (int nb = 0; nb < kKeyBlocks; nb++) {
        COLLAGE_UNROLL
        for (int e = 0; e < 4; e++) {
          const float p = softmax_exp(s[m][nb].v[e], scale_log2e, shift[e / 2]);
          lane_sum[m][e / 2] += p;
          s[m][nb].v[e] = p;
        }
      }
      if (dropout.p != 0.0f) {
        // Four lanes share their Philox blocks where the blocks line up with the keys.
        const bool shared = T % 4 == 0 && dropout.offset % 4 == 0;
        COLLAGE_UNROLL
        for (int nb = 0; nb < kKeyBlocks; nb++) {
          if (shared) {
            const Factors4 f = dropout_factors_query_major(dropout, b, h, rows[m][0],
                                                           k0 + fragment_column(nb, 0), T, NH);
            COLLAGE_UNROLL
            for (int e = 0; e < 4; e++) s[m][nb].v[e] *= f.v[e];
          } else {
            COLLAGE_UNROLL
            for (int r = 0; r < 2; r++) {  // elements 2r, 2r + 1: row rows[m][r], columns j, j + 1
              float &first = s[m][nb].v[2 * r], &second = s[m][nb].v[2 * r + 1];
              if (first == 0.0f && second == 0.0f) continue;
              const AttentionDropout::Pair f = dropout_factor_pair(
                  dropout, b, h, rows[m][r], k0 + fragment_column(nb, 0), T, NH);
              first *= f.first;
              second *= f.second;
            }
          }
        }
      }
      COLLAGE_UNROLL
      for (int nd = 0; nd < kDimBlocks; nd++) {
        o[m][nd].v[0] *= correction[0], o[m][nd].v[1] *= correction[0];
        o[m][nd].v[2] *= correction[1], o[m][nd].v[3] *= correction[1];
      }
    }
    multiply_rounded<kHeadSize, kTile, kM>(o, s, v_tile);
  }

  const int64_t C = head.C;
  COLLAGE_UNROLL
  for (int m = 0; m < kM; m++) {
    COLLAGE_UNROLL
    for (int r = 0; r < 2; r++) {
      const float total = quad_sum(lane_sum[m][r]);
      const int i = rows[m][r];
      if (i >= T) continue;
      const bool sees_any = running_max[m][r] != kAttentionMinusInf;
      bf16_t* o_row = out + (int64_t(b) * T + i) * C + int64_t(h) * kHeadSize;
      COLLAGE_UNROLL
      for (int nd = 0; nd < kDimBlocks; nd++) {
        const int d = fragment_column(nd, 0);
        o_row[d] = to_bf16(sees_any ? o[m][nd].v[2 * r] / total : 0.0f);
        o_row[d + 1] = to_bf16(sees_any ? o[m][nd].v[2 * r + 1] / total : 0.0f);
      }
      if (lane % 4 == 0)
        lse[(int64_t(b) * NH + h) * T + i] =
            sees_any ? running_max[m][r] * scale + logf(total) : kAttentionMinusInf;
    }
  }
}

// delta (B, NH, T) = D_i = dout_i·out_i from the bf16 out, and the turn counters of the
// backward's dq sums (B, NH, query tiles, kWarps) set to 0 for it. Block (query tile, h, b):
// kTile queries, 4 lanes a row; lane t of a row sums its columns 2t, 2t + 1, 2t + 8, ... and the
// quad adds the four shares, in the order of a tensor-core fragment's lanes. (The cpu and the SIMT
// kernels sum D_i = Σ_j P_ij·dP_ij, equal to dout_i·out_i since out_i = Σ_j Z_ij v_j; from out
// it costs one pass over HS values instead of a second pass over the keys, as
// FlashAttention-2 does.)
template <int kHeadSize, int kTile>
__global__ void __launch_bounds__(kThreads)
    flash_backward_delta_kernel(float* delta, int* turns, const bf16_t* dout, const bf16_t* out,
                                int T, int NH) {
  static_assert(kThreads == 4 * kTile, "a quad of lanes a query");
  const int tile = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int i = tile * kTile + int(threadIdx.x) / 4, t = int(threadIdx.x) % 4;
  const int64_t C = int64_t(NH) * kHeadSize;
  float share = 0.0f;
  if (i < T) {
    const int64_t row = (int64_t(b) * T + i) * C + int64_t(h) * kHeadSize;
    const bf16_t *dy_row = dout + row, *out_row = out + row;
    COLLAGE_UNROLL
    for (int d = 2 * t; d < kHeadSize; d += 8)
      share += to_float(dy_row[d]) * to_float(out_row[d]) +
               to_float(dy_row[d + 1]) * to_float(out_row[d + 1]);
  }
  const float row_delta = quad_sum(share);
  const int64_t head = int64_t(b) * NH + h;
  if (t == 0 && i < T) delta[head * T + i] = row_delta;
  if (threadIdx.x < kWarps) turns[(head * gridDim.x + tile) * kWarps + threadIdx.x] = 0;
}

// Zᵀ = (P·F)ᵀ into s and dSᵀ = (P (F·dZ - D))ᵀ into dp, for 16 keys (an m-tile) and the staged
// query tile at i0: s holds their k·qᵀ and dp their v·doutᵀ on entry (0 where query i does not
// see key j on return). row_lse holds lse·log2 e and row_delta D of the tile's queries.
template <int kQueryBlocks>
__device__ __forceinline__ void transposed_z_and_ds(FragmentC (&s)[kQueryBlocks],
                                                    FragmentC (&dp)[kQueryBlocks],
                                                    const int (&keys)[2], const bool (&key_seen)[2],
                                                    const float* row_lse, const float* row_delta,
                                                    int i0, int b, int h, const int32_t* key_ok,
                                                    bool causal, int T, int NH, float scale_log2e,
                                                    const AttentionDropout& dropout) {
  constexpr int kTile = kQueryBlocks * 8;
  const int lane = int(threadIdx.x % kWarpSize);
  // Queries before the m-tile's first key or past T, a key mask, or a query that saw nothing
  // need the per-element test.
  const bool tile_masked = !key_seen[0] || !key_seen[1] || key_ok != nullptr || i0 + kTile > T ||
                           (causal && keys[1] - lane / 4 + 7 > i0);
  // P. Two loops rather than one with `!tile_masked || ...`: with the test inside, nvcc branches
  // around every exponential (BSSY, BRA, BSYNC an element in the SASS), masked tile or not.
  if (tile_masked) {
    COLLAGE_UNROLL
    for (int nb = 0; nb < kQueryBlocks; nb++) {
      COLLAGE_UNROLL
      for (int e = 0; e < 4; e++) {
        const int r = e / 2, j = keys[r], ii = fragment_column(nb, e), i = i0 + ii;
        const float lse_log2e = row_lse[ii];  // -inf only here (a key mask, past T)
        const bool visible =
            key_seen[r] && i < T && (!causal || j <= i) && lse_log2e != kAttentionMinusInf;
        s[nb].v[e] = visible ? softmax_exp(s[nb].v[e], scale_log2e, lse_log2e) : 0.0f;
      }
    }
  } else {
    COLLAGE_UNROLL
    for (int nb = 0; nb < kQueryBlocks; nb++) {
      COLLAGE_UNROLL
      for (int e = 0; e < 4; e++)
        s[nb].v[e] = softmax_exp(s[nb].v[e], scale_log2e, row_lse[fragment_column(nb, e)]);
    }
  }
  // Z = P·F for dv; dS = P (F·dZ - D) for dk. Without dropout (F = 1) the second loop gives
  // the first's values (x·1 = x exactly) without its branch around the dropout call and its
  // predicated load of D, which nvcc kept for every element even at p = 0 (the H100 run's
  // SASS: ~13 instructions an element; the PTX now has 4).
  if (dropout.p != 0.0f) {
    // Four lanes share their Philox blocks where the blocks line up with the keys.
    const bool shared = T % 4 == 0 && dropout.offset % 4 == 0;
    COLLAGE_UNROLL
    for (int nb = 0; nb < kQueryBlocks; nb++) {
      Factors4 factor;
      if (shared) {
        factor =
            dropout_factors_key_major(dropout, b, h, i0 + fragment_column(nb, 0), keys[0], T, NH);
      } else {
        COLLAGE_UNROLL
        for (int e = 0; e < 4; e++)
          factor.v[e] =
              s[nb].v[e] != 0.0f
                  ? dropout_factor(dropout, b, h, i0 + fragment_column(nb, e), keys[e / 2], T, NH)
                  : 1.0f;
      }
      COLLAGE_UNROLL
      for (int e = 0; e < 4; e++) {  // F where P = 0 changes nothing: Z and dS are 0 there
        const int ii = fragment_column(nb, e);
        const float p = s[nb].v[e];
        s[nb].v[e] = p * factor.v[e];
        dp[nb].v[e] = p == 0.0f ? 0.0f : p * (dp[nb].v[e] * factor.v[e] - row_delta[ii]);
      }
    }
  } else if (tile_masked) {
    COLLAGE_UNROLL
    for (int nb = 0; nb < kQueryBlocks; nb++) {
      const int ii = fragment_column(nb, 0);  // the lane's queries ii and ii + 1 of the tile
      const float delta[2] = {row_delta[ii], row_delta[ii + 1]};
      COLLAGE_UNROLL
      for (int e = 0; e < 4; e++) {
        const float p = s[nb].v[e];
        dp[nb].v[e] = p == 0.0f ? 0.0f : p * (dp[nb].v[e] - delta[e % 2]);
      }
    }
  } else {
    // On a tile without hidden pairs, P = 0 only by underflow, and dS = 0·(dP - D) is then ±0,
    // which adds nothing to the fp32 sums of dSᵀ·q and dS·k (from +0, a sum of ±0 terms stays
    // +0): the bits of dS = 0 without the test's two instructions an element. Only a non-finite
    // dout·v would show, as it does on the cpu (whose P never reaches 0).
    COLLAGE_UNROLL
    for (int nb = 0; nb < kQueryBlocks; nb++) {
      const int ii = fragment_column(nb, 0);
      const float delta[2] = {row_delta[ii], row_delta[ii + 1]};
      COLLAGE_UNROLL
      for (int e = 0; e < 4; e++) dp[nb].v[e] = s[nb].v[e] * (dp[nb].v[e] - delta[e % 2]);
    }
  }
}

// The backward's shared memory beyond the staged rows and tiles (staged_bytes): the tiles' lse
// and D (2 buffers each), the block's rn(dSᵀ) of the current tile (kBlockRows keys, kDsStride),
// and the finished dq rows of a tile for their column sums (kTile, kStride).
template <int kTile>
constexpr int kDsStride = kTile + 8;  // bf16: ldmatrix's 8 row addresses in different banks
template <int kHeadSize, typename Split>
size_t backward_extra_bytes() {
  const size_t stats = 4 * size_t(Split::kTile) * sizeof(float);
  const size_t ds_t = size_t(Split::kBlockRows) * kDsStride<Split::kTile> * sizeof(bf16_t);
  const size_t dq_rows = size_t(Split::kTile) * kStride<kHeadSize> * sizeof(bf16_t);
  return stats + ds_t + dq_rows;
}

// part += rn(dS)·k over the block's kKeys keys for one warp's share of a query tile: queries
// [query0, query0 + 16) and head columns [column0, column0 + HS/2). ds_t holds rn(dSᵀ)
// (kKeys, kDsStride), read transposed into A fragments; k_rows the block's keys (kKeys, kStride).
template <int kHeadSize, int kKeys, int kTile>
__device__ __forceinline__ void ds_times_keys(FragmentC (&part)[kHeadSize / 16], const bf16_t* ds_t,
                                              const bf16_t* k_rows, int query0, int column0) {
  const int lane = threadIdx.x % kWarpSize;
  COLLAGE_UNROLL
  for (int kk = 0; kk < kKeys / 16; kk++) {
    // Matrix l / 8 of the A fragment (queries × keys) is the transpose of the 8×8 block at keys
    // kk·16 + 8·(l / 16), queries query0 + 8·((l / 8) % 2) of ds_t (mma.cuh's fragment order).
    FragmentA a;
    ldmatrix<4, true>(a.r, ds_t + (kk * 16 + lane % 8 + (lane / 16) * 8) * kDsStride<kTile> +
                               query0 + ((lane / 8) % 2) * 8);
    COLLAGE_UNROLL
    for (int nd = 0; nd < kHeadSize / 16; nd += 2) {
      FragmentB first, second;
      load_b_columns<kHeadSize>(first, second, k_rows, kk * 16, column0 + nd * 8);
      mma(part[nd], a, first);
      mma(part[nd + 1], a, second);
    }
  }
}

// dq, dk, dv parts of dqkv (B, T, 3C): scale·dS·k, scale·dSᵀ·q, Zᵀ·dout. Block (key block, b,
// h) in grid_place()'s order: every head's last key block starts first, then every head's
// second-last, and so on.
// For each query tile the block sees, the warps recompute Pᵀ and dPᵀ of their keys and add to
// dk and dv (in registers, over the tiles), then stage rn(dSᵀ) of the block's keys so that each
// warp can multiply a quarter of the tile's dq part, dS·k over the block's keys: queries
// 16·(warp % 2) onward, head columns HS/2·(warp / 2) onward.
// dq sums those parts over the key blocks that see the tile, in a fixed order, without float
// atomics (kernels/turns.cuh): from the last such key block down to key block 0, each adding its
// part to the running sum in `dq_sums` (B, NH, query tiles·kTile, HS) when the tile's counter
// in `turns` (B, NH, query tiles, kWarps; 0 on entry, flash_backward_delta_kernel) says it is
// its turn. A block's predecessor in every order is key block + 1 of its head, B·NH blocks
// earlier in the grid, so it started first (turns.cuh, "Progress") and is well ahead: a
// successor rarely waits, even without a causal mask, where every key block sees every tile.
// Key block 0 takes the last turn and writes dq. (Under a causal mask key block k has
// 2·(⌈T/64⌉ - k) tiles to do, so this order starts the short blocks first; ordered by head
// instead, the last heads' long blocks would start last and run alone at the end: a model of
// the 124M shape's schedule ends 5% later that way.)
template <int kHeadSize, int kWarpTiles, int kTileRows>
__global__ void __launch_bounds__(kThreads)
    flash_backward_kernel(bf16_t* dqkv, const bf16_t* dout, const bf16_t* qkv, const float* lse,
                          const float* delta, const int32_t* key_mask, bool causal, int T, int NH,
                          float scale, AttentionDropout dropout, float* dq_sums, int* turns,
                          float* sum_partials) {
  using Split = WorkSplit<kWarpTiles, kTileRows>;
  constexpr int kM = Split::kWarpTiles, kTile = Split::kTile;
  static_assert(kM == 1 && kWarps == 4 && kTile == 32 && kTile == kColumnChunkRows,
                "a warp's dq share is 16 queries of a 32-query tile and half the head; a tile "
                "is one chunk of the bias sums");
  constexpr int kDimBlocks = kHeadSize / 8, kQueryBlocks = kTile / 8;
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const GridPlace place = grid_place(T, Split::kBlockRows, NH);
  const int b = place.b, h = place.h, key_block = place.row_block, key_blocks = place.row_blocks;
  const int key0 = key_block * Split::kBlockRows;
  const int warp_row0 = warp * Split::kWarpRows;  // in the block
  int keys[kM][2];                                // this lane's keys
  lane_rows(keys, key0 + warp_row0);
  const HeadSlices head = head_slices(qkv, b, h, T, NH, kHeadSize);
  const int64_t C = head.C;
  const bf16_t* dout_head = dout + int64_t(b) * T * C + int64_t(h) * kHeadSize;  // stride C
  const int32_t* key_ok = key_mask ? key_mask + int64_t(b) * T : nullptr;
  const float* lse_head = lse + (int64_t(b) * NH + h) * T;
  const float* delta_head = delta + (int64_t(b) * NH + h) * T;
  const int query_tiles = ceil_div(T, kTile);
  float* head_dq_sums = dq_sums + (int64_t(b) * NH + h) * query_tiles * kTile * kHeadSize;
  int* head_turns = turns + (int64_t(b) * NH + h) * query_tiles * kWarps;

  // Shared memory: the block's k and v rows (kBlockRows, kStride) each, staged once; the query
  // tiles of q and dout (TilePairs); their lse (2, kTile) and D (2, kTile); rn(dSᵀ) of the tile
  // (kBlockRows, kDsStride); a tile's dq rows as written (kTile, kStride).
  COLLAGE_DYNAMIC_SHARED(bf16_t, shared);
  bf16_t* k_rows = shared;
  bf16_t* v_rows = k_rows + Split::kBlockRows * kStride<kHeadSize>;
  const TilePairs<kHeadSize, kTile> tiles{v_rows + Split::kBlockRows * kStride<kHeadSize>, head.q,
                                          head.row_stride, dout_head, C};
  float* stats = reinterpret_cast<float*>(tiles.end());
  auto tile_lse = [&](int buffer) { return stats + buffer * kTile; };
  auto tile_delta = [&](int buffer) { return stats + (2 + buffer) * kTile; };
  bf16_t* ds_t = reinterpret_cast<bf16_t*>(stats + 4 * kTile);
  bf16_t* dq_rows = ds_t + Split::kBlockRows * kDsStride<kTile>;
  stage_async<kHeadSize, Split::kBlockRows>(k_rows, head.k, head.row_stride, key0, T);
  stage_async<kHeadSize, Split::kBlockRows>(v_rows, head.v, head.row_stride, key0, T);
  // A hidden key is seen by no query: its gradients get nothing added.
  bool key_seen[kM][2];
  COLLAGE_UNROLL
  for (int m = 0; m < kM; m++) {
    COLLAGE_UNROLL
    for (int r = 0; r < 2; r++) key_seen[m][r] = keys[m][r] < T && key_visible(key_ok, keys[m][r]);
  }

  // Thread tid < kTile holds lse·log2 e and D of query i0 + tid (-inf and 0 past T), loaded a
  // tile ahead into registers and stored when the warps are done with the tile.
  auto lse_of = [&](int i) { return i < T ? lse_head[i] * kLog2e : kAttentionMinusInf; };
  auto delta_of = [&](int i) { return i < T ? delta_head[i] : 0.0f; };

  const float scale_log2e = scale * kLog2e;
  FragmentC dk[kM][kDimBlocks], dv[kM][kDimBlocks];
  const int first_query = causal ? key0 : 0;  // queries before the block's first key see none
  // Under a causal mask, a query tile that ends at or before the warp's first key holds no
  // query that sees one of its keys: the warp skips its products (its rows of dSᵀ are 0).
  const int warp_first_query = causal ? key0 + warp_row0 : 0;
  // This warp's share of a tile's dq (ds_times_keys) and the lane's place in it.
  const int share_query0 = 16 * (warp % 2), share_column0 = (kHeadSize / 2) * (warp / 2);
  const int g = lane / 4, t = lane % 4;
  const int tid = int(threadIdx.x);
  tiles.start(first_query, 0, T);  // the same commit group as k and v: the first wait covers all
  if (tid < kTile)
    tile_lse(0)[tid] = lse_of(first_query + tid), tile_delta(0)[tid] = delta_of(first_query + tid);
  for (int i0 = first_query, buffer = 0; i0 < T; i0 += kTile, buffer ^= 1) {
    tiles.next(i0, T, buffer, T);
    const bool more = i0 + kTile < T;
    float next_lse = kAttentionMinusInf, next_delta = 0.0f;
    if (more && tid < kTile)
      next_lse = lse_of(i0 + kTile + tid), next_delta = delta_of(i0 + kTile + tid);
    bf16_t* warp_ds_t = ds_t + warp_row0 * kDsStride<kTile>;
    const bf16_t *q_rows = tiles.first(buffer), *dy_rows = tiles.second(buffer);
    // Skipped by the whole warp (kTile < kBlockRows: else every warp sees every tile).
    if (kTile >= Split::kBlockRows || i0 + kTile > warp_first_query) {
      const float *row_lse = tile_lse(buffer), *row_delta = tile_delta(buffer);
      FragmentC s[kM][kQueryBlocks], dp[kM][kQueryBlocks];  // k·qᵀ, v·doutᵀ: (16 keys, kTile)
      multiply_by_rows<kHeadSize, kTile, kM>(s, k_rows, warp_row0, q_rows);
      multiply_by_rows<kHeadSize, kTile, kM>(dp, v_rows, warp_row0, dy_rows);
      COLLAGE_UNROLL
      for (int m = 0; m < kM; m++)
        transposed_z_and_ds(s[m], dp[m], keys[m], key_seen[m], row_lse, row_delta, i0, b, h, key_ok,
                            causal, T, NH, scale_log2e, dropout);
      multiply_rounded<kHeadSize, kTile, kM>(dv, s, dy_rows);
      multiply_rounded<kHeadSize, kTile, kM>(dk, dp, q_rows);
      COLLAGE_UNROLL
      for (int nb = 0; nb < kQueryBlocks; nb++) {  // the same bf16 as dSᵀ·q's A fragments
        store_bf16_pair(warp_ds_t + g * kDsStride<kTile> + nb * 8 + 2 * t, dp[0][nb].v[0],
                        dp[0][nb].v[1]);
        store_bf16_pair(warp_ds_t + (g + 8) * kDsStride<kTile> + nb * 8 + 2 * t, dp[0][nb].v[2],
                        dp[0][nb].v[3]);
      }
    } else {
      COLLAGE_UNROLL
      for (int nb = 0; nb < kQueryBlocks; nb++) {
        store_bf16_pair(warp_ds_t + g * kDsStride<kTile> + nb * 8 + 2 * t, 0.0f, 0.0f);
        store_bf16_pair(warp_ds_t + (g + 8) * kDsStride<kTile> + nb * 8 + 2 * t, 0.0f, 0.0f);
      }
    }
    // This key block's part of the warp's share of dq is added in turn: the tile's key blocks
    // from `last` (causal: the one holding its last query) down to 0. The running sum of the
    // blocks before it is fetched before the barrier, so that its loads fly while the warps wait
    // there and multiply dS·k.
    const int tile = i0 / kTile;
    const int last =
        causal ? min(key_blocks - 1, (i0 + kTile - 1) / Split::kBlockRows) : key_blocks - 1;
    int* counter = head_turns + tile * kWarps + warp;
    // The lane's pairs: rows share_query0 + g + 8r of the tile, columns share_column0 + 8nd + 2t.
    float* sums =
        head_dq_sums + (int64_t(i0) + share_query0 + g) * kHeadSize + share_column0 + 2 * t;
    const bool adds = key_block < last;  // not the tile's first turn
    float2 running[kDimBlocks / 2][2] = {};
    if (adds) {
      wait_for_turn(counter, last - key_block);
      COLLAGE_UNROLL
      for (int nd = 0; nd < kDimBlocks / 2; nd++) {
        COLLAGE_UNROLL
        for (int r = 0; r < 2; r++)
          running[nd][r] = load_sum_pair(sums + 8 * r * kHeadSize + 8 * nd);
      }
    }
    __syncthreads();  // the block's dSᵀ staged
    FragmentC part[kDimBlocks / 2];
    ds_times_keys<kHeadSize, Split::kBlockRows, kTile>(part, ds_t, k_rows, share_query0,
                                                       share_column0);
    if (adds) {
      COLLAGE_UNROLL
      for (int nd = 0; nd < kDimBlocks / 2; nd++) {
        COLLAGE_UNROLL
        for (int r = 0; r < 2; r++) {
          part[nd].v[2 * r] = running[nd][r].x + part[nd].v[2 * r];
          part[nd].v[2 * r + 1] = running[nd][r].y + part[nd].v[2 * r + 1];
        }
      }
    }
    if (key_block > 0) {
      COLLAGE_UNROLL
      for (int nd = 0; nd < kDimBlocks / 2; nd++) {
        COLLAGE_UNROLL
        for (int r = 0; r < 2; r++)
          store_sum_pair(sums + 8 * r * kHeadSize + 8 * nd, part[nd].v[2 * r],
                         part[nd].v[2 * r + 1]);
      }
      pass_turn(counter);
    } else {  // the last turn: dq = scale·Σ, written (and kept for the bias sums)
      COLLAGE_UNROLL
      for (int r = 0; r < 2; r++) {
        const int row = share_query0 + g + 8 * r;  // in the tile
        if (i0 + row >= T) continue;
        bf16_t* dq_row = dqkv + head.offset + (i0 + row) * head.row_stride + share_column0;
        COLLAGE_UNROLL
        for (int nd = 0; nd < kDimBlocks / 2; nd++) {
          const int d = fragment_column(nd, 0);
          write_pair(dq_row + d, scale, part[nd].v[2 * r], part[nd].v[2 * r + 1]);
          if (sum_partials)
            write_pair(dq_rows + row * kStride<kHeadSize> + share_column0 + d, scale,
                       part[nd].v[2 * r], part[nd].v[2 * r + 1]);
        }
      }
      if (sum_partials) {  // the same for the whole block
        __syncthreads();
        chunk_sums_of_rows<kHeadSize, kTile>(sum_partials, dq_rows, b, i0, T, 3 * C, h * kHeadSize);
      }
    }
    if (more && tid < kTile)
      tile_lse(buffer ^ 1)[tid] = next_lse, tile_delta(buffer ^ 1)[tid] = next_delta;
  }
  COLLAGE_UNROLL
  for (int m = 0; m < kM; m++) {
    COLLAGE_UNROLL
    for (int r = 0; r < 2; r++) {
      if (keys[m][r] >= T) continue;
      bf16_t* dk_row = dqkv + head.offset + C + keys[m][r] * head.row_stride;
      bf16_t* dv_row = dk_row + C;
      COLLAGE_UNROLL
      for (int nd = 0; nd < kDimBlocks; nd++) {
        const int d = fragment_column(nd, 0);
        write_pair(dk_row + d, scale, dk[m][nd].v[2 * r], dk[m][nd].v[2 * r + 1]);
        write_pair(dv_row + d, 1.0f, dv[m][nd].v[2 * r], dv[m][nd].v[2 * r + 1]);
      }
    }
  }
  if (!sum_partials) return;  // the same for the whole block
  // The block's dk and dv rows as written, into the memory of the staged rows and tiles (every
  // warp is past its last read of them after the barrier), then their chunk sums.
  __syncthreads();
  bf16_t* stored_k = shared;                                             // (kBlockRows, kStride)
  bf16_t* stored_v = stored_k + Split::kBlockRows * kStride<kHeadSize>;  // (kBlockRows, kStride)
  COLLAGE_UNROLL
  for (int m = 0; m < kM; m++) {
    COLLAGE_UNROLL
    for (int r = 0; r < 2; r++) {
      const int row = keys[m][r] - key0;
      COLLAGE_UNROLL
      for (int nd = 0; nd < kDimBlocks; nd++) {
        const int d = fragment_column(nd, 0);
        write_pair(stored_k + row * kStride<kHeadSize> + d, scale, dk[m][nd].v[2 * r],
                   dk[m][nd].v[2 * r + 1]);
        write_pair(stored_v + row * kStride<kHeadSize> + d, 1.0f, dv[m][nd].v[2 * r],
                   dv[m][nd].v[2 * r + 1]);
      }
    }
  }
  __syncthreads();
  chunk_sums_of_rows<kHeadSize, Split::kBlockRows>(sum_partials, stored_k, b, key0, T, 3 * C,
                                                   int(C) + h * kHeadSize);
  chunk_sums_of_rows<kHeadSize, Split::kBlockRows>(sum_partials, stored_v, b, key0, T, 3 * C,
                                                   2 * int(C) + h * kHeadSize);
}

// Shared memory: the block's own one (forward) or two (backward) (kBlockRows, kStride)
// matrices, then two buffers of two tiles (TilePairs); the backward's extra (above) follows.
template <int kHeadSize, typename Split>
size_t staged_bytes(int own_matrices) {
  return (own_matrices * size_t(Split::kBlockRows) + 4 * size_t(Split::kTile)) *
         kStride<kHeadSize> * sizeof(bf16_t);
}

// One block a (row block, b, h), in grid_place()'s order.
template <typename Split>
dim3 grid_of(int B, int T, int NH) {
  return dim3(unsigned(ceil_div(T, Split::kBlockRows) * NH * B));
}

template <int kHeadSize, typename Split = ForwardSplit<kHeadSize>>
void forward_launch(CudaContext& cx, bf16_t* out, float* lse, const bf16_t* qkv,
                    const int32_t* key_mask, bool causal, int B, int T, int NH,
                    const AttentionDropout& dropout) {
  const float scale = 1.0f / std::sqrt(float(kHeadSize));  // as the cpu
  launch(cx, "attention_forward", flash_forward_kernel<kHeadSize, Split::kWarpTiles, Split::kTile>,
         grid_of<Split>(B, T, NH), dim3(kThreads),
         staged_bytes<kHeadSize, Split>(1))(out, lse, qkv, key_mask, causal, T, NH, scale, dropout);
}

template <int kHeadSize, typename Split = BackwardSplit<kHeadSize>>
void backward_launch(CudaContext& cx, bf16_t* dqkv, float* delta, const bf16_t* dout,
                     const bf16_t* out, const bf16_t* qkv, const float* lse,
                     const int32_t* key_mask, bool causal, int B, int T, int NH,
                     const AttentionDropout& dropout, float* sum_partials) {
  const float scale = 1.0f / std::sqrt(float(kHeadSize));
  // dq's running sums (B, NH, query tiles·kTile, HS) fp32, then their turn counters (B, NH,
  // query tiles, kWarps), in one scratch buffer.
  const int query_tiles = ceil_div(T, Split::kTile);
  const size_t sums = size_t(B) * NH * query_tiles * Split::kTile * kHeadSize;
  const size_t counters = size_t(B) * NH * query_tiles * kWarps;
  float* dq_sums = scratch<float>(cx, cx.scratch.attention_dq, sums + counters);
  int* turns = reinterpret_cast<int*>(dq_sums + sums);
  launch(cx, "attention_backward (D)", flash_backward_delta_kernel<kHeadSize, Split::kTile>,
         dim3(unsigned(query_tiles), unsigned(NH), unsigned(B)), dim3(kThreads),
         0)(delta, turns, dout, out, T, NH);
  launch(cx, "attention_backward",
         flash_backward_kernel<kHeadSize, Split::kWarpTiles, Split::kTile>,
         grid_of<Split>(B, T, NH), dim3(kThreads),
         staged_bytes<kHeadSize, Split>(2) + backward_extra_bytes<kHeadSize, Split>())(
      dqkv, dout, qkv, lse, delta, key_mask, causal, T, NH, scale, dropout, dq_sums, turns,
      sum_partials);
}
}  // namespace

bool flash_attention_serves(int HS, const void* qkv, const void* other) {
  return (HS == 64 || HS == 128) && aligned16(qkv, other);
}

void flash_attention_forward(CudaContext& cx, bf16_t* out, float* lse, const bf16_t* qkv,
                             const int32_t* key_mask, bool causal, int B, int T, int NH, int HS,
                             const AttentionDropout& dropout) {
  if (HS == 64) return forward_launch<64>(cx, out, lse, qkv, key_mask, causal, B, T, NH, dropout);
  return forward_launch<128>(cx, out, lse, qkv, key_mask, causal, B, T, NH, dropout);
}

void flash_attention_backward(CudaContext& cx, bf16_t* dqkv, float* delta, const bf16_t* dout,
                              const bf16_t* out, const bf16_t* qkv, const float* lse,
                              const int32_t* key_mask, bool causal, int B, int T, int NH, int HS,
                              const AttentionDropout& dropout, float* sum_partials) {
  if (HS == 64)
    return backward_launch<64>(cx, dqkv, delta, dout, out, qkv, lse, key_mask, causal, B, T, NH,
                               dropout, sum_partials);
  return backward_launch<128>(cx, dqkv, delta, dout, out, qkv, lse, key_mask, causal, B, T, NH,
                              dropout, sum_partials);
}

COLLAGE_CUDA_VARIANT_END
}  // namespace collage::cuda
