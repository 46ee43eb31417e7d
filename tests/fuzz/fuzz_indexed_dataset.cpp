// Fuzz target: a Megatron .idx with a .bin of a fuzzed size (IndexedDataset), then reading
// every sequence it accepts and scanning its token ids, as `collage inspect` does.
#include <vector>

#include "data/megatron/indexed_dataset.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace collage;
  fuzz::InputReader input(data, size);
  const uint32_t bin_bytes = input.take<uint16_t>();  // up to 64 KiB of tokens
  std::string bin(bin_bytes, '\0');
  for (size_t i = 0; i < bin.size(); i++) bin[i] = char(i * 7);
  fuzz::write_file("d.bin", bin);
  fuzz::write_file("d.idx", input.rest());
  fuzz::refusals_allowed([] {
    const IndexedDataset dataset((fuzz::scratch_dir() / "d").string());
    std::vector<int32_t> tokens;
    for (int64_t s = 0; s < dataset.num_sequences(); s++) {
      const int64_t length = dataset.sequence_lengths()[s];
      tokens.resize(size_t(length));
      dataset.read(s, 0, length, tokens.data());
    }
    dataset.max_token_id();
    dataset.check_token_ids(1 << 20);
  });
  return 0;
}
