// Fuzz target: the text and JSONL documents `prepare-gpt` reads (DocumentReader), the same
// bytes as a .txt and as a .jsonl file.
#include <vector>

#include "data/text/document_reader.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace collage;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  for (const char* name : {"docs.txt", "docs.jsonl"}) {
    const std::string path = fuzz::write_file(name, bytes);
    fuzz::refusals_allowed([&] {
      DocumentReader reader({path}, "text");
      std::vector<SourceDocument> batch;
      while (reader.read_batch(batch, 1 << 16, 64)) batch.clear();
    });
  }
  return 0;
}
