// RoBERTa's dynamic masking (dynamic_masking.h).
#include "data/bert/dynamic_masking.h"

#include <algorithm>
#include <random>

#include "core/error.h"
#include "core/splitmix64.h"

namespace collage {

namespace {

// Uniform in [0, 1) from 53 random bits, and an integer in [0, n) by rejection: our own
// distributions, so the masks are the same with every standard library.
double uniform(std::mt19937_64& rng) { return double(rng() >> 11) * 0x1.0p-53; }

uint64_t below(std::mt19937_64& rng, uint64_t n) {
  const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  uint64_t x;
  do x = rng();
  while (x >= limit);
  return x % n;
}

}  // namespace

void remask_row(BertBatch& batch, int64_t b, const DynamicMasking& masking, int64_t epoch,
                int64_t sample_index) {
  COLLAGE_CHECK(b >= 0 && b < batch.size, "dynamic masking: row {} of a batch of {}", b,
                batch.size);
  COLLAGE_CHECK(masking.vocab_size > 0 && masking.probability >= 0 && masking.probability < 1,
                "dynamic masking: vocab size {} and probability {} are not usable",
                masking.vocab_size, masking.probability);
  const int S = batch.seq_len, P = batch.max_predictions;
  int32_t* ids = batch.input_ids.data() + b * S;
  const int32_t* real = batch.input_mask.data() + b * S;
  int32_t* positions = batch.masked_positions.data() + b * P;
  int32_t* labels = batch.masked_ids.data() + b * P;
  int32_t& count = batch.masked_counts[size_t(b)];

  // Undo the file's masks: the labels are the original tokens.
  for (int k = 0; k < count; k++) ids[positions[k]] = labels[k];

  std::vector<int32_t> maskable;
  for (int t = 0; t < S; t++) {
    const bool special =
        std::find(masking.special.begin(), masking.special.end(), ids[t]) != masking.special.end();
    if (real[t] && !special) maskable.push_back(t);
  }
  std::mt19937_64 rng(
      splitmix64(splitmix64(splitmix64(masking.seed) ^ uint64_t(epoch)) ^ uint64_t(sample_index)));
  const int n = int(maskable.size());
  int chosen = int(masking.probability * n + uniform(rng));
  chosen = std::min({chosen, n, P});
  // The first `chosen` of a partial Fisher-Yates shuffle: uniform without replacement.
  for (int k = 0; k < chosen; k++) std::swap(maskable[k], maskable[k + below(rng, n - k)]);
  std::sort(maskable.begin(), maskable.begin() + chosen);

  count = chosen;
  std::fill(positions, positions + P, 0);
  std::fill(labels, labels + P, 0);
  for (int k = 0; k < chosen; k++) {
    const int32_t t = maskable[k];
    positions[k] = t;
    labels[k] = ids[t];
    const double r = uniform(rng);
    if (r < 0.8) {
      ids[t] = masking.mask_token;
    } else if (r < 0.9) {
      ids[t] = int32_t(below(rng, uint64_t(masking.vocab_size)));
    }  // else: kept as it is
  }
}

}  // namespace collage
