#pragma once
// What the two attention kernel files share: kernels/attention.cu (the SIMT kernels, any head
// size, and the exported entries) and kernels/flash_attention.cu (tensor cores, head sizes 64
// and 128). The notation, the masks and the dropout numbering are attention.cu's header's.
#include <cstdint>
#include <limits>

#include "kernels/common.cuh"

namespace collage::cuda {
COLLAGE_CUDA_VARIANT_BEGIN

constexpr float kAttentionMinusInf = -std::numeric_limits<float>::infinity();

__device__ __forceinline__ bool key_visible(const int32_t* key_ok, int j) {
  return key_ok == nullptr || key_ok[j] != 0;
}

// The dropout of one call: F_ij of (b, h, i, j) is 1/(1 - p) or 0 from
// math::dropout_uniform(seed, offset + ((b·NH + h)·T + i)·T + j); 1 when p = 0.
struct AttentionDropout {
  float p = 0.0f, keep_scale = 1.0f;
  uint64_t seed = 0, offset = 0;
  __device__ float factor(int b, int h, int i, int j, int T, int NH) const {
    if (p == 0.0f) return 1.0f;
    const uint64_t element =
        offset + ((uint64_t(b) * NH + uint64_t(h)) * T + uint64_t(i)) * T + uint64_t(j);
    return math::dropout_factor(math::dropout_uniform(seed, element), p, keep_scale);
  }
  // F of (i, j) and (i, j + 1), the same numbers as factor(): one Philox evaluation when both
  // elements fall in one block of four (element % 4 != 3), two otherwise.
  struct Pair {
    float first, second;
  };
  __device__ Pair factors(int b, int h, int i, int j, int T, int NH) const {
    if (p == 0.0f) return {1.0f, 1.0f};
    const uint64_t element =
        offset + ((uint64_t(b) * NH + uint64_t(h)) * T + uint64_t(i)) * T + uint64_t(j);
    const unsigned word = unsigned(element & 3);
    const math::Philox4x32 block = math::dropout_block(seed, element >> 2);
    const float first = math::uniform_from_bits(block.v[word]);
    const float second = word != 3 ? math::uniform_from_bits(block.v[word + 1])
                                   : math::dropout_uniform(seed, element + 1);
    return {math::dropout_factor(first, p, keep_scale),
            math::dropout_factor(second, p, keep_scale)};
  }
};

// Where one (batch b, head h) lives: its q, k, v rows (T, HS) at row stride 3C in qkv (B, T, 3C)
// and its rows of out/dout (T, HS) at row stride C; offset is q's offset in qkv (also dqkv's).
struct HeadSlices {
  int64_t C, row_stride, offset;
  const bf16_t *q, *k, *v;
};
__device__ __forceinline__ HeadSlices head_slices(const bf16_t* qkv, int b, int h, int T, int NH,
                                                  int HS) {
  HeadSlices s;
  s.C = int64_t(NH) * HS;
  s.row_stride = 3 * s.C;
  s.offset = int64_t(b) * T * s.row_stride + int64_t(h) * HS;
  s.q = qkv + s.offset;
  s.k = s.q + s.C;
  s.v = s.q + 2 * s.C;
  return s;
}

// ---- flash_attention.cu: the tensor-core kernels ----
// Whether they serve this call: HS 64 or 128 and every tensor 16-byte aligned.
bool flash_attention_serves(int HS, const void* qkv, const void* other);
// As attention_forward_dropout / attention_backward_dropout (kernels.cuh); `delta` (B, NH, T)
// is scratch for D_i. `sum_partials`, if not null (needs T % kColumnChunkRows == 0): the first
// stage of Σ_rows dqkv (kernels/column_sums.cuh, (chunks, 3·NH·HS)), formed from the rows the
// kernels write; column_totals adds them.
void flash_attention_forward(CudaContext& cx, bf16_t* out, float* lse, const bf16_t* qkv,
                             const int32_t* key_mask, bool causal, int B, int T, int NH, int HS,
                             const AttentionDropout& dropout);
void flash_attention_backward(CudaContext& cx, bf16_t* dqkv, float* delta, const bf16_t* dout,
                              const bf16_t* out, const bf16_t* qkv, const float* lse,
                              const int32_t* key_mask, bool causal, int B, int T, int NH, int HS,
                              const AttentionDropout& dropout, float* sum_partials);

COLLAGE_CUDA_VARIANT_END
}  // namespace collage::cuda
