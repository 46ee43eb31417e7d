// Fuzz target: GPTDataset's index building (doc_idx, sample_idx, shuffle_idx) over a fuzzed
// .idx, with a fuzzed split, sequence length, sample count and seed, then reading samples.
#include <memory>
#include <vector>

#include "data/gpt_dataset.h"
#include "fuzz_input.h"

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
    const GPTDataset samples(dataset, bounds[split], bounds[split + 1], num_samples, seq_len, seed);
    std::vector<int32_t> sample(size_t(seq_len) + 1);
    for (int64_t i = 0; i < samples.size() && i < 8; i++) samples.get(i, sample.data());
  });
  return 0;
}
