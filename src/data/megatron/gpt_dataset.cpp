// GPTDataset index construction (NeMo r1.22 gpt_dataset.py _build_index_mappings +
// helpers.cpp build_sample_idx), split parsing, and sample assembly. docs/DATA.md §4.
#include "data/megatron/gpt_dataset.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <numeric>
#include <span>

#include "core/error.h"
#include "data/megatron/numpy_random.h"

namespace collage {

std::array<int64_t, 4> split_bounds(const std::string& splits, int64_t num_sequences) {
  COLLAGE_CHECK(num_sequences >= 0, "split '{}': negative sequence count {}", splits,
                num_sequences);
  // Values separated by ',' (or by '/' when there is no ','), like Megatron.
  const char sep = splits.find(',') != std::string::npos ? ',' : '/';
  std::vector<double> weights;
  size_t start = 0;
  while (true) {
    const size_t end = splits.find(sep, start);
    const std::string part =
        splits.substr(start, end == std::string::npos ? std::string::npos : end - start);
    const char* text = part.c_str();
    char* rest = nullptr;
    errno = 0;
    const double w = std::strtod(text, &rest);
    while (rest && (*rest == ' ' || *rest == '\t')) ++rest;
    if (rest == text || *rest != '\0' || errno == ERANGE)
      fail("split '{}': '{}' is not a number (expected e.g. '980,10,10')", splits, part);
    if (!std::isfinite(w) || w < 0)
      fail("split '{}': weight {} must be finite and >= 0", splits, part);
    weights.push_back(w);
    if (end == std::string::npos) break;
    start = end + 1;
  }
  if (weights.size() > 3)
    fail("split '{}': at most 3 weights (train, valid, test), got {}", splits, weights.size());
  weights.resize(3, 0.0);
  const double sum = weights[0] + weights[1] + weights[2];  // Python's sum(), left to right
  if (!(sum > 0)) fail("split '{}': the weights sum to 0", splits);

  std::array<int64_t, 4> bounds{0, 0, 0, 0};
  for (int k = 0; k < 3; ++k) {
    // Python: int(round(w / sum * float(N))); round() is round-half-even like nearbyint.
    const double share = weights[k] / sum * static_cast<double>(num_sequences);
    bounds[k + 1] = bounds[k] + static_cast<int64_t>(std::nearbyint(share));
  }
  const int64_t diff = bounds[3] - num_sequences;
  for (int k = 1; k < 4; ++k) bounds[k] -= diff;
  for (int k = 0; k < 3; ++k)
    if (bounds[k + 1] < bounds[k])
      fail("split '{}' over {} sequences gives decreasing bounds {},{},{},{}", splits,
           num_sequences, bounds[0], bounds[1], bounds[2], bounds[3]);
  return bounds;
}

int split_index(const std::string& split_name) {
  if (split_name == "train") return 0;
  if (split_name == "valid" || split_name == "validation") return 1;
  if (split_name == "test") return 2;
  fail("split name '{}': expected train, valid or test", split_name);
}

namespace {

// doc_idx for `epochs` epochs: the documents tiled, shuffled as one array.
void append_shuffled_epochs(std::vector<int32_t>& doc_idx, int64_t first, int64_t end,
                            int64_t epochs, NumpyRandomState& rng) {
  const size_t start = doc_idx.size();
  for (int64_t e = 0; e < epochs; ++e)
    for (int64_t d = first; d < end; ++d) doc_idx.push_back(static_cast<int32_t>(d));
  rng.shuffle(std::span<int32_t>(doc_idx.data() + start, doc_idx.size() - start));
}

// arange(begin, end) shuffled, appended.
void append_shuffled_range(std::vector<int64_t>& out, int64_t begin, int64_t end,
                           NumpyRandomState& rng) {
  const size_t start = out.size();
  for (int64_t i = begin; i < end; ++i) out.push_back(i);
  rng.shuffle(std::span<int64_t>(out.data() + start, out.size() - start));
}

}  // namespace

GPTDataset::GPTDataset(std::shared_ptr<const IndexedDataset> dataset, int64_t first_sequence,
                       int64_t end_sequence, int64_t num_samples, int64_t seq_len, int64_t seed)
    : dataset_(std::move(dataset)), seq_len_(seq_len) {
  const std::string& name = dataset_->prefix();
  COLLAGE_CHECK(0 <= first_sequence && first_sequence < end_sequence &&
                    end_sequence <= dataset_->num_sequences(),
                "{}: sequence range [{}, {}) is empty or outside [0, {})", name, first_sequence,
                end_sequence, dataset_->num_sequences());
  COLLAGE_CHECK(seq_len >= 1, "{}: seq_len must be >= 1, got {}", name, seq_len);
  COLLAGE_CHECK(num_samples >= 0, "{}: num_samples must be >= 0, got {}", name, num_samples);
  COLLAGE_CHECK(0 <= seed && seed <= 0xffffffffLL,
                "{}: seed {} is outside numpy's seed range 0 .. 2^32-1", name, seed);

  const auto sizes = dataset_->sequence_lengths();
  for (int64_t d = first_sequence; d < end_sequence; ++d) tokens_per_epoch_ += sizes[d];
  COLLAGE_CHECK(tokens_per_epoch_ > 0, "{}: sequences [{}, {}) hold no tokens", name,
                first_sequence, end_sequence);

  // Smallest E >= 1 with (E * tokens_per_epoch - 1) // S >= num_samples (each sample reads
  // S+1), i.e. E * tokens_per_epoch >= num_samples * S + 1: computed, not searched, and
  // refused before it overflows.
  COLLAGE_CHECK(num_samples <= (std::numeric_limits<int64_t>::max() - tokens_per_epoch_) / seq_len,
                "{}: {} samples of {} tokens are more than 64-bit token counts can address", name,
                num_samples, seq_len);
  num_epochs_ =
      std::max<int64_t>(1, (num_samples * seq_len + tokens_per_epoch_) / tokens_per_epoch_);
  // Pretraining reads its data a few times, tests a few dozen; a hundred thousand passes mean
  // a split that holds (almost) nothing, and building their index would take seconds and
  // gigabytes (found by tests/fuzz/fuzz_gpt_dataset). Refused, saying why.
  constexpr int64_t kMaxEpochs = 100000;
  COLLAGE_CHECK(num_epochs_ <= kMaxEpochs,
                "{}: {} samples of {} tokens need {} passes over the {} tokens of sequences "
                "[{}, {}), more than {}: this split is almost surely not the data meant (check "
                "data.split and the dataset prefix)",
                name, num_samples, seq_len, num_epochs_, tokens_per_epoch_, first_sequence,
                end_sequence, kMaxEpochs);
  const int64_t num_docs = end_sequence - first_sequence;
  COLLAGE_CHECK(num_epochs_ * num_docs <= std::numeric_limits<int32_t>::max(),
                "{}: {} samples of {} tokens need {} epochs of {} sequences, too many for an "
                "int32 document index",
                name, num_samples, seq_len, num_epochs_, num_docs);

  // A short last epoch gets its own shuffle so its few samples are not mixed into the rest.
  int64_t samples_before_last_epoch = 0;
  if (num_epochs_ > 1) {
    samples_before_last_epoch = ((num_epochs_ - 1) * tokens_per_epoch_ - 1) / seq_len;
    const int64_t last_epoch_samples = num_samples - samples_before_last_epoch;
    const int64_t samples_per_epoch = (tokens_per_epoch_ - 1) / seq_len;
    // Python: int(0.80 * samples_per_epoch), truncation toward zero of a double.
    separate_last_epoch_ =
        last_epoch_samples < static_cast<int64_t>(0.80 * static_cast<double>(samples_per_epoch));
  }

  NumpyRandomState rng(static_cast<uint32_t>(seed));
  doc_idx_.reserve(num_epochs_ * num_docs);
  if (separate_last_epoch_) {
    append_shuffled_epochs(doc_idx_, first_sequence, end_sequence, num_epochs_ - 1, rng);
    append_shuffled_epochs(doc_idx_, first_sequence, end_sequence, 1, rng);
  } else {
    append_shuffled_epochs(doc_idx_, first_sequence, end_sequence, num_epochs_, rng);
  }

  build_sample_idx();

  const int64_t total = static_cast<int64_t>(sample_idx_.size() / 2) - 1;
  const int64_t first_block = separate_last_epoch_ ? samples_before_last_epoch : total;
  shuffle_idx_.reserve(total);
  append_shuffled_range(shuffle_idx_, 0, first_block, rng);
  if (first_block != total) append_shuffled_range(shuffle_idx_, first_block, total, rng);
}

// helpers.cpp build_sample_idx with drop_last: walk doc_idx taking seq_len+1 tokens per
// sample; a sample that ends inside a document records offset end-1, so the next sample
// starts on the previous sample's last token.
void GPTDataset::build_sample_idx() {
  const auto sizes = dataset_->sequence_lengths();
  const int64_t num_samples = (num_epochs_ * tokens_per_epoch_ - 1) / seq_len_;
  sample_idx_.assign(2 * (num_samples + 1), 0);
  int64_t doc_pos = 0;  // index into doc_idx_
  int64_t offset = 0;   // token offset inside doc_idx_[doc_pos]
  for (int64_t s = 1; s <= num_samples; ++s) {
    int64_t remaining = seq_len_ + 1;
    while (remaining != 0) {
      const int64_t doc_length = sizes[doc_idx_[doc_pos]] - offset;
      remaining -= doc_length;
      if (remaining <= 0) {
        offset += remaining + doc_length - 1;
        remaining = 0;
      } else {
        ++doc_pos;
        COLLAGE_CHECK(doc_pos < static_cast<int64_t>(doc_idx_.size()),
                      "internal: sample index walk ran past the document index");
        offset = 0;
      }
    }
    sample_idx_[2 * s] = doc_pos;
    sample_idx_[2 * s + 1] = offset;
  }
}

void GPTDataset::get(int64_t i, int32_t* out) const {
  if (i < 0 || i >= size())
    fail("{}: sample {} out of range [0, {})", dataset_->prefix(), i, size());
  const int64_t row = shuffle_idx_[i];
  const int64_t doc_f = sample_idx_[2 * row], off_f = sample_idx_[2 * row + 1];
  const int64_t doc_l = sample_idx_[2 * row + 2], off_l = sample_idx_[2 * row + 3];
  const auto sizes = dataset_->sequence_lengths();
  int64_t n = 0;  // tokens written so far
  if (doc_f == doc_l) {
    n = off_l - off_f + 1;
    dataset_->read(doc_idx_[doc_f], off_f, n, out);
  } else {
    // Rest of the first document, whole documents in between, head of the last one.
    const int64_t first_len = sizes[doc_idx_[doc_f]] - off_f;
    dataset_->read(doc_idx_[doc_f], off_f, first_len, out);
    n = first_len;
    for (int64_t d = doc_f + 1; d < doc_l; ++d) {
      dataset_->read(doc_idx_[d], 0, sizes[doc_idx_[d]], out + n);
      n += sizes[doc_idx_[d]];
    }
    dataset_->read(doc_idx_[doc_l], 0, off_l + 1, out + n);
    n += off_l + 1;
  }
  COLLAGE_CHECK(n == seq_len_ + 1, "internal: sample {} has {} tokens, expected {}", i, n,
                seq_len_ + 1);
}

}  // namespace collage
