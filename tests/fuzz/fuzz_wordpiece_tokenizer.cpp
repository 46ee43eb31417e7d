// Fuzz target: BERT's BasicTokenizer + WordPiece on arbitrary bytes (ill-formed UTF-8
// included) with bert-base-uncased's vocab.txt; every id must be in the vocabulary. The input
// after a NUL is also loaded as a vocab.txt of its own (WordpieceTokenizer::load).
#include <cstdlib>

#include "data/text/wordpiece_tokenizer.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace collage;
  static const WordpieceTokenizer bert_uncased =
      WordpieceTokenizer::load(COLLAGE_SOURCE_DIR "/data/assets/bert-uncased/vocab.txt");
  fuzz::InputReader input(data, size);
  const std::string_view text = input.take_until('\0');
  for (int32_t id : bert_uncased.encode(text))
    if (id < 0 || id >= bert_uncased.vocab_size()) std::abort();
  const std::string vocab = fuzz::write_file("vocab.txt", input.rest());
  fuzz::refusals_allowed([&] {
    const WordpieceTokenizer own = WordpieceTokenizer::load(vocab);
    for (int32_t id : own.encode(text))
      if (id < 0 || id >= own.vocab_size()) std::abort();
  });
  return 0;
}
