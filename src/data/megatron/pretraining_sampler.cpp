// MegatronPretrainingSampler's index arithmetic.
#include "data/megatron/pretraining_sampler.h"

#include "core/error.h"

namespace collage {

std::vector<int64_t> micro_batch_sample_indices(int64_t consumed_samples, int64_t micro_batch_size,
                                                int64_t dp_size, int64_t dp_rank,
                                                int64_t total_samples) {
  COLLAGE_CHECK(micro_batch_size >= 1 && dp_size >= 1 && 0 <= dp_rank && dp_rank < dp_size,
                "sampler: bad micro_batch_size {} / dp_size {} / dp_rank {}", micro_batch_size,
                dp_size, dp_rank);
  COLLAGE_CHECK(consumed_samples >= 0, "sampler: negative consumed_samples {}", consumed_samples);
  const int64_t global = micro_batch_size * dp_size;
  if (consumed_samples + global > total_samples)
    fail("sampler: the micro-batch of samples [{}, {}) goes past the {} samples available",
         consumed_samples, consumed_samples + global, total_samples);
  std::vector<int64_t> indices(micro_batch_size);
  for (int64_t k = 0; k < micro_batch_size; ++k)
    indices[k] = consumed_samples + dp_rank * micro_batch_size + k;
  return indices;
}

void read_samples(const GptSamples& samples, const std::vector<int64_t>& indices, int32_t* out) {
  const int64_t row = samples.seq_len() + 1;
  for (size_t k = 0; k < indices.size(); ++k) samples.get(indices[k], out + k * row);
}

}  // namespace collage
