// Fuzz target: GPTDataset's index building (doc_idx, sample_idx, shuffle_idx) over a fuzzed
// .idx, with a fuzzed split, sequence length, sample count and seed, then reading samples.
#include <algorithm>
#include <memory>
#include <vector>

#include "data/megatron/gpt_dataset.h"
#include "fuzz_input.h"

namespace {

// Index building is linear in the document index it shuffles, (passes over the split) × (its
// sequences): 2.2 million entries take 0.14 s in a release build, which is legit, but 1.5 s
// under the sanitizers, past the fuzzer's one-second budget (found by this target: 80,800
// passes over 27 short sequences). Inputs whose index would be larger than kMaxIndex are left
// out, so that what the fuzzer times is collage's work on its input, not a legit big index.
constexpr int64_t kMaxIndex = int64_t{1} << 20;

// The document index GPTDataset would build: its passes (the smallest E with E · tokens >
// samples · seq_len, docs/DATA.md §4) times the split's sequences. 0 when GPTDataset would refuse
// the range or an empty split itself, so those inputs still reach it.
int64_t index_entries(const collage::IndexedDataset& dataset, int64_t first, int64_t end,
                      int64_t num_samples, int64_t seq_len) {
  if (first < 0 || first >= end || end > dataset.num_sequences() || seq_len < 1) return 0;
  const auto sizes = dataset.sequence_lengths();
  int64_t tokens = 0;
  for (int64_t d = first; d < end; d++) tokens += sizes[d];
  if (tokens <= 0) return 0;
  const int64_t passes = std::max<int64_t>(1, (num_samples * seq_len + tokens) / tokens);
  return passes * (end - first);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace collage;
  fuzz::InputReader input(data, size);
  const int64_t seq_len = int64_t(input.take<uint16_t>() % 4096);
  const int64_t num_samples = int64_t(input.take<uint32_t>() % 100000);
  const int64_t seed = input.take<uint32_t>();
  const int split = input.take<uint8_t>() % 3;
  const std::string splits(input.take_until('\n', 32));
  const uint32_t bin_bytes = input.take<uint16_t>();
  fuzz::write_file("g.bin", std::string(bin_bytes, '\1'));
  fuzz::write_file("g.idx", input.rest());
  fuzz::refusals_allowed([&] {
    auto dataset = std::make_shared<const IndexedDataset>((fuzz::scratch_dir() / "g").string());
    const auto bounds = split_bounds(splits, dataset->num_sequences());
    if (index_entries(*dataset, bounds[split], bounds[split + 1], num_samples, seq_len) > kMaxIndex)
      return;
    const GPTDataset samples(dataset, bounds[split], bounds[split + 1], num_samples, seq_len, seed);
    std::vector<int32_t> sample(size_t(seq_len) + 1);
    for (int64_t i = 0; i < samples.size() && i < 8; i++) samples.get(i, sample.data());
  });
  return 0;
}
