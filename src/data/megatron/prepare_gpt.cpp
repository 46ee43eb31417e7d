// prepare_gpt(): read documents in batches, tokenise each batch in parallel, write in order.
#include "data/megatron/prepare_gpt.h"

#include <fmt/format.h>
#include <omp.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <mutex>

#include "core/error.h"
#include "data/text/document_reader.h"
#include "data/text/gpt2_tokenizer.h"
#include "data/text/utf8.h"

namespace collage {
namespace {

using Clock = std::chrono::steady_clock;

// A batch holds up to this much text (or this many documents): enough work for every
// thread, small enough that the batch and its tokens stay a few hundred MB at most.
constexpr int64_t kBatchBytes = 64 << 20;
constexpr int64_t kBatchDocuments = 16384;
constexpr double kProgressSeconds = 2.0;

std::string human_count(int64_t n) {
  if (n >= 1'000'000) return fmt::format("{:.1f}M", n / 1e6);
  if (n >= 10'000) return fmt::format("{:.0f}k", n / 1e3);
  return std::to_string(n);
}

// Calls on_progress at most every kProgressSeconds, from whichever thread gets there.
class ProgressReporter {
 public:
  ProgressReporter(const PrepareProgressFn& on_progress, int64_t total, Clock::time_point start)
      : on_progress_(on_progress), total_(total), start_(start), last_(start) {}

  void document_done(int64_t file_bytes, int64_t tokens) {
    file_bytes_ += file_bytes;
    documents_ += 1;
    tokens_ += tokens;
    if (!on_progress_) return;
    std::unique_lock lock(mutex_, std::try_to_lock);
    if (!lock) return;  // another thread is reporting
    const auto now = Clock::now();
    if (std::chrono::duration<double>(now - last_).count() < kProgressSeconds) return;
    last_ = now;
    on_progress_({file_bytes_.load(), total_, documents_.load(), tokens_.load(),
                  std::chrono::duration<double>(now - start_).count()});
  }

 private:
  const PrepareProgressFn& on_progress_;
  const int64_t total_;
  const Clock::time_point start_;
  Clock::time_point last_;
  std::mutex mutex_;
  std::atomic<int64_t> file_bytes_{0}, documents_{0}, tokens_{0};
};

}  // namespace

std::string format_prepare_progress(const PrepareProgress& p) {
  const double mb = p.file_bytes_done / 1e6, total_mb = p.file_bytes_total / 1e6;
  const double rate = p.seconds > 0 ? mb / p.seconds : 0;
  const double percent = total_mb > 0 ? 100.0 * mb / total_mb : 100.0;
  const std::string eta =
      rate > 0 ? fmt::format("{:.0f} s", (total_mb - mb) / rate) : std::string("?");
  return fmt::format(
      "prepare-gpt: {:.1f}/{:.1f} MB ({:.0f}%), {:.1f} MB/s, {} documents, {} "
      "tokens, ETA {}",
      mb, total_mb, percent, rate, p.documents, human_count(p.tokens), eta);
}

void print_prepare_progress(const PrepareProgress& progress) {
  fmt::print(stderr, "{}\n", format_prepare_progress(progress));
  std::fflush(stderr);
}

PrepareStats prepare_gpt(const PrepareOptions& options, const PrepareProgressFn& on_progress) {
  const auto start = Clock::now();
  if (options.output_prefix.empty()) fail("prepare-gpt: no output prefix");
  DocumentReader reader(options.inputs, options.jsonl_key);
  const Gpt2Tokenizer tokenizer = Gpt2Tokenizer::load(options.vocab_file, options.merges_file);
  const int threads = options.threads > 0 ? options.threads : omp_get_max_threads();

  PrepareStats stats;
  stats.dtype = IndexedDatasetWriter::best_dtype(tokenizer.vocab_size());
  const auto parent = std::filesystem::path(options.output_prefix).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent);
  IndexedDatasetWriter writer(options.output_prefix, stats.dtype);
  ProgressReporter progress(on_progress, reader.total_file_bytes(), start);

  std::vector<SourceDocument> batch;
  std::vector<std::vector<int32_t>> tokens;  // [batch] ids of each document
  std::vector<int64_t> replaced;             // [batch] U+FFFD repairs in each document
  std::vector<std::string> errors;           // [batch] what went wrong inside the loop
  while (true) {
    batch.clear();
    if (!reader.read_batch(batch, kBatchBytes, kBatchDocuments)) break;
    const auto n = static_cast<int64_t>(batch.size());
    tokens.assign(n, {});
    replaced.assign(n, 0);
    errors.assign(n, {});
    // Documents differ wildly in size (a whole book vs a JSONL line): hand them out one
    // by one. Exceptions must not leave an OpenMP region, so they are kept per document.
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
    for (int64_t i = 0; i < n; ++i) {
      try {
        std::string& text = batch[i].text;
        if (utf8_valid_prefix(text) != text.size()) text = utf8_replace_invalid(text, &replaced[i]);
        tokenizer.encode_append(text, tokens[i]);
        if (options.append_eod && !tokens[i].empty()) tokens[i].push_back(tokenizer.eot_token());
        progress.document_done(batch[i].file_bytes, static_cast<int64_t>(tokens[i].size()));
      } catch (const std::exception& e) {
        errors[i] = e.what();
      }
    }
    for (int64_t i = 0; i < n; ++i) {
      if (!errors[i].empty()) fail("{}: {}", batch[i].origin, errors[i]);
      if (replaced[i] > 0) {
        fmt::print(stderr,
                   "prepare-gpt: warning: {}: not UTF-8, {} ill-formed byte sequence(s) "
                   "replaced by U+FFFD\n",
                   batch[i].origin, replaced[i]);
        stats.invalid_utf8 += replaced[i];
      }
      stats.bytes += static_cast<int64_t>(batch[i].text.size());
      if (tokens[i].empty()) {
        ++stats.empty_documents;
        continue;
      }
      writer.add_document(tokens[i]);
      ++stats.documents;
      stats.tokens += static_cast<int64_t>(tokens[i].size());
    }
  }
  if (stats.documents == 0) {
    fail("prepare-gpt: the inputs hold no non-empty document; nothing written to {}",
         options.output_prefix);
  }
  writer.finalize();
  stats.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return stats;
}

}  // namespace collage
