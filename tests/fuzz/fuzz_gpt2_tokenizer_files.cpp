// Fuzz target: GPT-2 tokenizer files that are not GPT-2's: a fuzzed encoder.json and
// vocab.bpe (Gpt2Tokenizer::load), then encoding a fixed text with whatever loaded.
#include "data/text/gpt2_tokenizer.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace collage;
  fuzz::InputReader input(data, size);
  const std::string encoder = fuzz::write_file("encoder.json", input.take_until('\0'));
  const std::string merges = fuzz::write_file("vocab.bpe", input.rest());
  fuzz::refusals_allowed([&] {
    const Gpt2Tokenizer tokenizer = Gpt2Tokenizer::load(encoder, merges);
    const std::vector<int32_t> ids = tokenizer.encode("Hello, world! 123 \xc3\xa9t\xc3\xa9");
    tokenizer.decode(ids);
  });
  return 0;
}
