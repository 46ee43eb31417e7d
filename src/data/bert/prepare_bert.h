#pragma once
// Corpus preparation for BERT pretraining: text -> WordPiece -> sentence-pair instances with
// masked-LM labels -> HDF5 shards in the layout of NVIDIA DeepLearningExamples'
// create_pretraining_data.py (which src/data/bert/bert_hdf5.h reads; the writer is
// src/data/bert/bert_hdf5_writer.h). The algorithm is that script's (Google's BERT recipe):
//
// Input. Text files, one sentence per line, a blank line between documents; each line is
// tokenised on its own (a line whose tokens are empty is skipped, a line of only spaces
// ends the document); a file's end also ends its document.
//
// Instances. Each document is visited dupe_factor times (each visit masks differently):
//   target = S - 3, or with probability short_seq_prob a random length in [2, S - 3];
//   sentences accumulate into a chunk until its tokens reach the target (or the document
//   ends); A = the chunk's first a_end sentences (a_end random in [1, sentences - 1]);
//   with probability 1/2 (always for a one-sentence chunk) B = sentences of a random other
//   document from a random start until B reaches target - |A| ("random next", label 1), and
//   the chunk's unused sentences are put back; otherwise B = the rest of the chunk (label 0);
//   the pair is truncated to S - 3 tokens, one token at a time from the longer side, at its
//   front or back with probability 1/2; tokens = [CLS] A [SEP] B [SEP], segment ids 0 up to
//   the first [SEP], 1 after.
// Masked LM. k = min(P, max(1, round(L * masked_lm_prob))) of the L tokens, never [CLS] or
//   [SEP], drawn without replacement; each becomes [MASK] (80%), stays (10%) or becomes a
//   uniformly random vocabulary id (10%); labels are the original ids, sorted by position.
// Output. All instances are shuffled together, then cut into shards of shard_size rows.
//
// Randomness. std::mt19937_64 with the distributions of BertRandom (written here, so the
// output is the same with every compiler and standard library). Document d's visit v draws
// from its own generator, seeded by bert_stream_seed(seed, v, d), so instances are built in
// parallel and the output does not depend on the thread count; the final shuffle uses
// bert_stream_seed(seed, kShuffleStream, 0). (The Python script threads one generator
// through all documents; its output is not reproduced bit for bit, only its distribution.)
//
// Memory. The tokenised corpus (4 bytes a token) and every instance (about 4 * (L + 2k) + 24
// bytes) are held in memory until the shards are written, as the Python script holds them: for
// a corpus larger than memory, split the text into parts and run once per part (NVIDIA's
// recipe does the same).
#include <cstdint>
#include <functional>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace collage {

class WordpieceTokenizer;

struct PrepareBertOptions {
  // Text files (globs and directories are expanded by expand_bert_inputs()).
  std::vector<std::string> inputs;
  std::string output_dir;  // receives part_00000.hdf5, part_00001.hdf5, ...
  std::string vocab_file = "data/assets/bert-uncased/vocab.txt";
  int max_seq_length = 128;          // S
  int max_predictions_per_seq = 20;  // P
  double masked_lm_prob = 0.15;
  int dupe_factor = 5;
  double short_seq_prob = 0.1;
  int64_t shard_size = 100000;  // instances per output file (the last one may hold fewer)
  uint64_t seed = 12345;
  int threads = 0;  // 0: OpenMP's default (OMP_NUM_THREADS or all cores)
};

// Checks the options' ranges, naming the option; throws Error.
void validate_prepare_bert_options(const PrepareBertOptions& options);

// The inputs as files: a name containing * ? or [ that is not an existing file is a glob(3)
// pattern (its matches sorted); a directory stands for the regular files directly in it,
// sorted by name. Throws Error for a pattern with no match, a missing file, an empty result.
std::vector<std::string> expand_bert_inputs(const std::vector<std::string>& inputs);

// ---------------------------------------------------------------------------------------
// Random numbers.

// splitmix64 mixing of (seed, a, b): the seed of one independent generator stream.
uint64_t bert_stream_seed(uint64_t seed, uint64_t a, uint64_t b);
constexpr uint64_t kShuffleStream = ~uint64_t{0};  // `a` of the final shuffle's stream

class BertRandom {
 public:
  explicit BertRandom(uint64_t seed) : engine_(seed) {}
  // Uniform in [0, 1) from the top 53 bits of one draw (Python's random() resolution).
  double uniform() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }
  // Uniform integer in [lo, hi], both included (Python's randint); unbiased (rejection).
  int64_t randint(int64_t lo, int64_t hi);
  // Fisher-Yates from the back, as Python's random.shuffle: v[i] swaps with v[randint(0, i)].
  template <typename T>
  void shuffle(std::span<T> v) {
    for (size_t i = v.size(); i-- > 1;) std::swap(v[i], v[static_cast<size_t>(randint(0, i))]);
  }

 private:
  std::mt19937_64 engine_;
};

// ---------------------------------------------------------------------------------------
// The tokenised corpus: documents of sentences of token ids, flat.

struct BertCorpus {
  std::vector<int32_t> tokens;              // every sentence's ids, back to back
  std::vector<int64_t> sentence_starts{0};  // (sentences + 1) offsets into tokens
  std::vector<int64_t> document_starts{0};  // (documents + 1) offsets into sentences
  int64_t open_sentences = 0;               // sentences of the document not yet ended

  int64_t num_documents() const { return static_cast<int64_t>(document_starts.size()) - 1; }
  int64_t num_sentences() const { return static_cast<int64_t>(sentence_starts.size()) - 1; }
  int64_t document_sentences(int64_t d) const {
    return document_starts[d + 1] - document_starts[d];
  }
  // Sentence s of document d.
  std::span<const int32_t> sentence(int64_t d, int64_t s) const;

  // Appends a sentence (non-empty) to the open document.
  void add_sentence(std::span<const int32_t> ids);
  // Ends the open document; a document without sentences is not kept.
  void end_document();
};

// Tokenises `files` (see "Input" above) with `threads` threads; the result does not depend on
// the thread count. `on_bytes(bytes done, bytes total, documents ended)` is called between
// batches of lines.
BertCorpus tokenize_bert_corpus(
    const std::vector<std::string>& files, const WordpieceTokenizer& tokenizer, int threads,
    const std::function<void(int64_t, int64_t, int64_t)>& on_bytes = {});

// ---------------------------------------------------------------------------------------
// Instances, flat: instance i has tokens[token_starts[i] .. token_starts[i+1]) (its length
// L <= S, before padding), segment B from position b_starts[i] (after the first [SEP]), and
// masked positions / original ids [masked_starts[i] .. masked_starts[i+1]).

struct BertSpecialIds {
  int32_t cls = 101, sep = 102, mask = 103;
  int32_t vocab_size = 30522;
  // [CLS], [SEP], [MASK] of `tokenizer`; throws Error naming `vocab_file` if one is missing.
  static BertSpecialIds of(const WordpieceTokenizer& tokenizer, const std::string& vocab_file);
};

struct BertInstances {
  std::vector<int32_t> tokens;
  std::vector<int64_t> token_starts{0};
  std::vector<int32_t> b_starts;
  std::vector<int32_t> masked_positions;
  std::vector<int32_t> masked_ids;
  std::vector<int64_t> masked_starts{0};
  std::vector<uint8_t> next_sentence_labels;  // 1: B is a random next

  int64_t size() const { return static_cast<int64_t>(b_starts.size()); }
  std::span<const int32_t> instance_tokens(int64_t i) const;
  std::span<const int32_t> instance_masked_positions(int64_t i) const;
  std::span<const int32_t> instance_masked_ids(int64_t i) const;
  void append(const BertInstances& other);
};

// Removes tokens from the longer of a[a_begin, a_end) and b[b_begin, b_end) (b on a tie),
// one at a time, at the front or the back with probability 1/2 each, until the two hold at
// most max_tokens together.
void truncate_seq_pair(int64_t& a_begin, int64_t& a_end, int64_t& b_begin, int64_t& b_end,
                       int64_t max_tokens, BertRandom& rng);

// Masks `tokens` in place (see "Masked LM" above); positions (sorted) and original ids are
// appended to `positions` and `labels`.
void create_masked_lm_predictions(std::span<int32_t> tokens, double masked_lm_prob,
                                  int max_predictions, const BertSpecialIds& special,
                                  BertRandom& rng, std::vector<int32_t>& positions,
                                  std::vector<int32_t>& labels);

// Appends the instances of one visit of document `document` to `out` (see "Instances").
void create_instances_from_document(const BertCorpus& corpus, int64_t document,
                                    const PrepareBertOptions& options,
                                    const BertSpecialIds& special, BertRandom& rng,
                                    BertInstances& out);

// Every visit of every document, in (visit, document) order, `threads` threads; the result
// does not depend on the thread count. `on_done(visits done, visits total, instances)` is
// called between blocks of documents.
BertInstances create_bert_instances(
    const BertCorpus& corpus, const PrepareBertOptions& options, const BertSpecialIds& special,
    int threads, const std::function<void(int64_t, int64_t, int64_t)>& on_done = {});

// ---------------------------------------------------------------------------------------
// The whole command.

struct PrepareBertStats {
  int64_t files = 0, bytes = 0;  // input
  int64_t documents = 0, sentences = 0, tokens = 0;
  int64_t instances = 0, random_next = 0, masked = 0;
  int64_t instance_tokens = 0;             // sum of L (before padding)
  std::vector<std::string> shards;         // written, in order
  std::vector<std::string> removed_stale;  // part_*.hdf5 of an earlier run beyond the new last
  double tokenize_seconds = 0, instance_seconds = 0, write_seconds = 0, seconds = 0;
};

struct PrepareBertProgress {
  enum Phase { kTokenizing, kInstances, kWriting } phase = kTokenizing;
  int64_t done = 0, total = 0;  // bytes, document visits or shards, by phase
  int64_t documents = 0;        // tokenised so far
  int64_t instances = 0;        // created so far
  double seconds = 0;           // since the phase began
};
using PrepareBertProgressFn = std::function<void(const PrepareBertProgress&)>;

// "prepare-bert: tokenizing 45.2/120.0 MB (38%), 12.3 MB/s, 1234 documents"
std::string format_prepare_bert_progress(const PrepareBertProgress& progress);
void print_prepare_bert_progress(const PrepareBertProgress& progress);  // one line, stderr

// Runs the whole preparation; `on_progress` is called at most every 2 s per phase, from the
// calling thread. Each shard is written under a temporary name in output_dir and renamed when
// complete. Throws Error naming the file and option for bad input.
PrepareBertStats prepare_bert(
    const PrepareBertOptions& options,
    const PrepareBertProgressFn& on_progress = print_prepare_bert_progress);

// "part_00042.hdf5"
std::string bert_shard_name(int64_t index);

}  // namespace collage
