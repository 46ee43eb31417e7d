#pragma once
// What the cpu attention's two engines share (attention.cpp: OpenBLAS sgemm on fp32;
// attention_onednn.cpp: oneDNN bf16 matmuls): the query blocks, which keys a query sees, and the
// dropout factors of a row. Both walk the same blocks and draw the same dropout numbers.
#include <algorithm>
#include <cstdint>

#include "backend/cpu/context.h"
#include "backend/cpu/kernels.h"

namespace collage::cpu {

// Queries go in blocks of kQueryBlock rows, so a block's scores (rows, keys) stay small even at
// T = 1024 and causal blocks only score the keys they can see: keys [0, i0 + rows).
constexpr int kQueryBlock = 64;

// The keys the block of queries [i0, i0 + rows) multiplies: all T, or causally those up to its
// last query.
inline int block_keys(int i0, int rows, int T, bool causal) { return causal ? i0 + rows : T; }

// Query i can see key j when j < end (end = i + 1 if causal) and key_ok[j] (the key mask).
inline int visible_end(int i, int keys, bool causal) {
  return causal ? std::min(i + 1, keys) : keys;
}

// key_ok (T) = 1 where the key is not masked; key_mask (T) may be null. The thread's slice of
// cx.key_visible, which the caller sized to threads · T.
inline int32_t* key_flags(CpuContext& cx, int thread, const int32_t* key_mask, int T) {
  int32_t* key_ok = cx.key_visible.data() + size_t(thread) * T;
  for (int j = 0; j < T; j++) key_ok[j] = key_mask ? key_mask[j] != 0 : 1;
  return key_ok;
}

// Dropout on the probabilities (p > 0): Z_ij = P_ij·F_ij with F_ij = 1/(1 - p) or 0 from
// dropout_uniform(seed, offset + ((b·NH + h)·T + i)·T + j) (backend.h); out = Z·v, and lse
// stays the log-sum-exp of the undropped scores. Writes the factors of query i's keys [0, keys).
inline void row_dropout_factors(float* factors, int keys, float p, uint64_t seed, uint64_t offset,
                                int64_t bh, int T, int i) {
  dropout_factors(factors, keys, p, seed, offset + (uint64_t(bh) * T + uint64_t(i)) * T);
}

}  // namespace collage::cpu
