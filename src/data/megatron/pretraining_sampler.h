#pragma once
// Which dataset indices a data-parallel rank reads next (NeMo MegatronPretrainingSampler,
// Megatron's sampler is the same): indices consumed_samples, consumed_samples+1, ... are cut
// into global micro-batches of micro_batch_size * dp_size; DP rank r takes the slice
// [r * micro_batch_size, (r+1) * micro_batch_size) of each. TP ranks of one replica read the
// same indices. After each micro-batch, consumed_samples grows by micro_batch_size * dp_size.
#include <cstdint>
#include <vector>

#include "data/megatron/gpt_dataset.h"

namespace collage {

// The micro_batch_size indices DP rank `dp_rank` reads for the global micro-batch starting at
// consumed_samples. total_samples bounds the walk (the sampler stops there, dropping a
// partial last micro-batch); asking past it throws Error.
std::vector<int64_t> micro_batch_sample_indices(int64_t consumed_samples, int64_t micro_batch_size,
                                                int64_t dp_size, int64_t dp_rank,
                                                int64_t total_samples);

// Reads the samples `indices` of `samples` into out: (indices.size(), seq_len + 1) row-major.
void read_samples(const GptSamples& samples, const std::vector<int64_t>& indices, int32_t* out);

}  // namespace collage
