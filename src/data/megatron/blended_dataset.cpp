// Blending (helpers.cpp build_blending_indices) and NeMo's dataset construction per split.
#include "data/megatron/blended_dataset.h"

#include <cmath>

#include "core/error.h"

namespace collage {
namespace {

// numpy's pairwise_sum for float64 (numpy/core/src/umath/loops_utils.h.src).
double pairwise_sum(const double* a, int64_t n) {
  if (n < 8) {
    double res = 0.0;
    for (int64_t i = 0; i < n; ++i) res += a[i];
    return res;
  }
  if (n <= 128) {
    double r[8];
    for (int j = 0; j < 8; ++j) r[j] = a[j];
    int64_t i = 8;
    for (; i < n - (n % 8); i += 8)
      for (int j = 0; j < 8; ++j) r[j] += a[i + j];
    double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; ++i) res += a[i];
    return res;
  }
  int64_t half = n / 2;
  half -= half % 8;
  return pairwise_sum(a, half) + pairwise_sum(a + half, n - half);
}

}  // namespace

double numpy_sum(const std::vector<double>& values) {
  return pairwise_sum(values.data(), static_cast<int64_t>(values.size()));
}

std::vector<int64_t> blend_num_samples(const std::vector<double>& weights, int64_t num_samples) {
  double sum = 0.0;
  for (double w : weights) sum += w;
  COLLAGE_CHECK(sum > 0, "blend weights must sum to more than 0");
  std::vector<int64_t> counts;
  for (double w : weights) {
    // Python: int(math.ceil(val * weight * 1.005)), evaluated left to right.
    counts.push_back(
        static_cast<int64_t>(std::ceil(static_cast<double>(num_samples) * (w / sum) * 1.005)));
  }
  return counts;
}

BlendedDataset::BlendedDataset(std::vector<std::shared_ptr<const GptSamples>> datasets,
                               const std::vector<double>& weights, int64_t size)
    : datasets_(std::move(datasets)) {
  const size_t num = datasets_.size();
  COLLAGE_CHECK(num >= 1 && num <= 255, "blend: need 1..255 datasets, got {}", num);
  COLLAGE_CHECK(weights.size() == num, "blend: {} weights for {} datasets", weights.size(), num);
  for (double w : weights)
    COLLAGE_CHECK(std::isfinite(w) && w >= 0, "blend: weight {} must be finite and >= 0", w);
  for (const auto& d : datasets_)
    COLLAGE_CHECK(d->seq_len() == datasets_[0]->seq_len(),
                  "blend: datasets have different seq_len ({} and {})", d->seq_len(),
                  datasets_[0]->seq_len());
  const double sum = numpy_sum(weights);
  COLLAGE_CHECK(sum > 0, "blend: weights sum to 0");
  std::vector<double> w(num);
  for (size_t d = 0; d < num; ++d) w[d] = weights[d] / sum;

  dataset_index_.resize(size);
  dataset_sample_index_.resize(size);
  std::vector<int64_t> drawn(num, 0);
  for (int64_t i = 0; i < size; ++i) {
    const double scale = std::max(static_cast<double>(i), 1.0);
    size_t best = 0;
    double best_error = w[0] * scale - static_cast<double>(drawn[0]);
    for (size_t d = 1; d < num; ++d) {
      const double error = w[d] * scale - static_cast<double>(drawn[d]);
      if (error > best_error) {
        best_error = error;
        best = d;
      }
    }
    dataset_index_[i] = static_cast<uint8_t>(best);
    dataset_sample_index_[i] = drawn[best]++;
  }
  for (size_t d = 0; d < num; ++d)
    COLLAGE_CHECK(drawn[d] <= datasets_[d]->size(),
                  "blend: needs {} samples from dataset {}, which has only {}", drawn[d], d,
                  datasets_[d]->size());
}

void BlendedDataset::get(int64_t i, int32_t* out) const {
  if (i < 0 || i >= size()) fail("blended dataset: sample {} out of range [0, {})", i, size());
  datasets_[dataset_index_[i]]->get(dataset_sample_index_[i], out);
}

std::shared_ptr<const GptSamples> build_gpt_samples(const std::vector<WeightedPrefix>& prefixes,
                                                    const std::string& splits,
                                                    const std::string& split_name,
                                                    int64_t num_samples, int64_t seq_len,
                                                    int64_t seed) {
  COLLAGE_CHECK(!prefixes.empty(), "no data prefixes given");
  const int k = split_index(split_name);
  auto one = [&](const std::string& prefix, int64_t n) {
    auto indexed = std::make_shared<const IndexedDataset>(prefix);
    const auto bounds = split_bounds(splits, indexed->num_sequences());
    if (bounds[k] == bounds[k + 1])
      fail("{}: split '{}' leaves no sequences for '{}' ({} sequences in total)", prefix, splits,
           split_name, indexed->num_sequences());
    return std::make_shared<const GPTDataset>(indexed, bounds[k], bounds[k + 1], n, seq_len, seed);
  };
  if (prefixes.size() == 1) return one(prefixes[0].prefix, num_samples);

  std::vector<double> weights;
  for (const auto& p : prefixes) weights.push_back(p.weight);
  const std::vector<int64_t> counts = blend_num_samples(weights, num_samples);
  std::vector<std::shared_ptr<const GptSamples>> datasets;
  int64_t total = 0;
  for (size_t d = 0; d < prefixes.size(); ++d) {
    datasets.push_back(one(prefixes[d].prefix, counts[d]));
    total += counts[d];
  }
  // NeMo passes the already normalised weights; BlendableDataset normalises them again.
  double sum = 0.0;
  for (double w : weights) sum += w;
  for (double& w : weights) w /= sum;
  return std::make_shared<const BlendedDataset>(std::move(datasets), weights, total);
}

}  // namespace collage
