// prepare_bert(): text -> WordPiece sentences -> instances -> shuffled HDF5 shards. The
// algorithm is described in prepare_bert.h.
#include "data/bert/prepare_bert.h"

#include <fmt/format.h>
#include <glob.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <numeric>
#include <regex>
#include <string_view>

#include "core/error.h"
#include "data/bert/bert_hdf5_writer.h"
#include "data/text/wordpiece_tokenizer.h"

namespace collage {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr double kProgressSeconds = 2.0;
// A tokenising batch: enough lines for every thread, few enough MB to keep the text small.
constexpr int64_t kBatchBytes = 8 << 20;
// Documents per parallel block of instance creation (progress is reported between blocks).
constexpr int64_t kInstanceBlock = 4096;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::string human_count(int64_t n) {
  if (n >= 1'000'000) return fmt::format("{:.1f}M", n / 1e6);
  if (n >= 10'000) return fmt::format("{:.0f}k", n / 1e3);
  return std::to_string(n);
}

// Python's str.strip() on ASCII whitespace: what decides that a line is blank.
std::string_view strip_ascii_space(std::string_view s) {
  constexpr std::string_view kSpace = " \t\n\r\v\f";
  const size_t first = s.find_first_not_of(kSpace);
  if (first == std::string_view::npos) return {};
  return s.substr(first, s.find_last_not_of(kSpace) - first + 1);
}

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Calls a progress function at most every kProgressSeconds.
class Throttle {
 public:
  explicit Throttle(const PrepareBertProgressFn& fn) : fn_(fn) {}
  void operator()(const PrepareBertProgress& p) {
    if (!fn_) return;
    const auto now = Clock::now();
    if (std::chrono::duration<double>(now - last_).count() < kProgressSeconds) return;
    last_ = now;
    fn_(p);
  }

 private:
  const PrepareBertProgressFn& fn_;
  Clock::time_point last_ = Clock::now();
};

}  // namespace

// ---------------------------------------------------------------------------------------
// Options and inputs.

void validate_prepare_bert_options(const PrepareBertOptions& o) {
  if (o.output_dir.empty()) fail("prepare-bert: no --output-dir");
  // target lengths are drawn from [2, S - 3]
  COLLAGE_CHECK(o.max_seq_length >= 5 && o.max_seq_length <= 65536,
                "--max-seq-length {}: must be in [5, 65536] ([CLS] A [SEP] B [SEP] needs 5)",
                o.max_seq_length);
  COLLAGE_CHECK(o.max_predictions_per_seq >= 1 && o.max_predictions_per_seq <= o.max_seq_length,
                "--max-predictions-per-seq {}: must be in [1, --max-seq-length = {}]",
                o.max_predictions_per_seq, o.max_seq_length);
  COLLAGE_CHECK(o.masked_lm_prob > 0 && o.masked_lm_prob <= 1,
                "--masked-lm-prob {}: must be in (0, 1]", o.masked_lm_prob);
  COLLAGE_CHECK(o.short_seq_prob >= 0 && o.short_seq_prob <= 1,
                "--short-seq-prob {}: must be in [0, 1]", o.short_seq_prob);
  COLLAGE_CHECK(o.dupe_factor >= 1, "--dupe-factor {}: must be at least 1", o.dupe_factor);
  COLLAGE_CHECK(o.shard_size >= 1, "--shard-size {}: must be at least 1", o.shard_size);
  COLLAGE_CHECK(o.threads >= 0, "--threads {}: must be >= 0", o.threads);
}

std::vector<std::string> expand_bert_inputs(const std::vector<std::string>& inputs) {
  std::vector<std::string> files;
  for (const std::string& input : inputs) {
    std::error_code ec;
    if (fs::is_directory(input, ec)) {
      std::vector<std::string> in_dir;
      for (const auto& entry : fs::directory_iterator(input))
        if (entry.is_regular_file()) in_dir.push_back(entry.path().string());
      std::sort(in_dir.begin(), in_dir.end());
      if (in_dir.empty()) fail("{}: --input directory holds no files", input);
      files.insert(files.end(), in_dir.begin(), in_dir.end());
    } else if (!fs::exists(input, ec) && input.find_first_of("*?[") != std::string::npos) {
      glob_t matches{};
      const int status = glob(input.c_str(), 0, nullptr, &matches);
      std::vector<std::string> found(matches.gl_pathv, matches.gl_pathv + matches.gl_pathc);
      globfree(&matches);
      if (status != 0 || found.empty()) fail("{}: --input pattern matches no file", input);
      std::sort(found.begin(), found.end());
      files.insert(files.end(), found.begin(), found.end());
    } else if (!fs::is_regular_file(input, ec)) {
      fail("{}: no such file (--input)", input);
    } else {
      files.push_back(input);
    }
  }
  if (files.empty()) fail("prepare-bert: no --input files");
  return files;
}

std::string bert_shard_name(int64_t index) { return fmt::format("part_{:05d}.hdf5", index); }

// ---------------------------------------------------------------------------------------
// Random numbers.

uint64_t bert_stream_seed(uint64_t seed, uint64_t a, uint64_t b) {
  return splitmix64(splitmix64(splitmix64(seed) ^ a) ^ b);
}

int64_t BertRandom::randint(int64_t lo, int64_t hi) {
  COLLAGE_CHECK(lo <= hi, "BertRandom::randint({}, {}): empty range", lo, hi);
  const uint64_t range = static_cast<uint64_t>(hi - lo) + 1;  // 0: all 2^64 values
  if (range == 0) return static_cast<int64_t>(engine_());
  // Reject the top partial copy of [0, range) so every value is equally likely.
  const uint64_t limit =
      std::numeric_limits<uint64_t>::max() - std::numeric_limits<uint64_t>::max() % range;
  uint64_t x;
  do x = engine_();
  while (x >= limit);
  return lo + static_cast<int64_t>(x % range);
}

// ---------------------------------------------------------------------------------------
// Corpus.

std::span<const int32_t> BertCorpus::sentence(int64_t d, int64_t s) const {
  const int64_t k = document_starts[d] + s;
  return {tokens.data() + sentence_starts[k],
          static_cast<size_t>(sentence_starts[k + 1] - sentence_starts[k])};
}

void BertCorpus::add_sentence(std::span<const int32_t> ids) {
  tokens.insert(tokens.end(), ids.begin(), ids.end());
  sentence_starts.push_back(static_cast<int64_t>(tokens.size()));
  ++open_sentences;
}

void BertCorpus::end_document() {
  if (open_sentences == 0) return;
  document_starts.push_back(num_sentences());
  open_sentences = 0;
}

BertCorpus tokenize_bert_corpus(const std::vector<std::string>& files,
                                const WordpieceTokenizer& tokenizer, int threads,
                                const std::function<void(int64_t, int64_t, int64_t)>& on_bytes) {
  int64_t total = 0, done = 0;
  for (const auto& file : files) total += static_cast<int64_t>(fs::file_size(file));

  BertCorpus corpus;
  std::vector<std::string> lines;
  std::vector<std::vector<int32_t>> ids;  // [lines] tokens of each line
  std::vector<std::string> errors;        // [lines] what went wrong inside the parallel loop
  std::vector<uint8_t> blank;             // [lines] 1: a document boundary
  for (const auto& file : files) {
    std::ifstream in(file, std::ios::binary);
    if (!in) fail("{}: cannot open", file);
    int64_t line_number = 0;
    bool more = true;
    while (more) {
      lines.clear();
      int64_t batch_bytes = 0;
      std::string line;
      while (batch_bytes < kBatchBytes && (more = static_cast<bool>(std::getline(in, line)))) {
        batch_bytes += static_cast<int64_t>(line.size()) + 1;
        lines.push_back(std::move(line));
      }
      if (in.bad()) fail("{}: read error", file);
      const auto n = static_cast<int64_t>(lines.size());
      ids.assign(n, {});
      errors.assign(n, {});
      blank.assign(n, 0);
      // Lines are short and similar: hand them out in small runs.
#pragma omp parallel for schedule(dynamic, 256) num_threads(threads)
      for (int64_t i = 0; i < n; ++i) {
        try {
          const std::string_view text = strip_ascii_space(lines[i]);
          if (text.empty())
            blank[i] = 1;
          else
            tokenizer.encode_append(text, ids[i]);
        } catch (const std::exception& e) {
          errors[i] = e.what();
        }
      }
      for (int64_t i = 0; i < n; ++i) {
        if (!errors[i].empty()) fail("{}:{}: {}", file, line_number + i + 1, errors[i]);
        if (blank[i])
          corpus.end_document();
        else if (!ids[i].empty())
          corpus.add_sentence(ids[i]);
      }
      line_number += n;
      done += batch_bytes;
      if (on_bytes) on_bytes(std::min(done, total), total, corpus.num_documents());
    }
    corpus.end_document();  // a file's end ends its last document
  }
  return corpus;
}

// ---------------------------------------------------------------------------------------
// Instances.

BertSpecialIds BertSpecialIds::of(const WordpieceTokenizer& tokenizer,
                                  const std::string& vocab_file) {
  BertSpecialIds special;
  const std::pair<const char*, int32_t*> wanted[] = {
      {"[CLS]", &special.cls}, {"[SEP]", &special.sep}, {"[MASK]", &special.mask}};
  for (const auto& [token, id] : wanted) {
    *id = tokenizer.id_of(token);
    if (*id < 0)
      fail("{}: the vocabulary has no {} token, which BERT instances need", vocab_file, token);
  }
  special.vocab_size = tokenizer.vocab_size();
  return special;
}

std::span<const int32_t> BertInstances::instance_tokens(int64_t i) const {
  return {tokens.data() + token_starts[i],
          static_cast<size_t>(token_starts[i + 1] - token_starts[i])};
}
std::span<const int32_t> BertInstances::instance_masked_positions(int64_t i) const {
  return {masked_positions.data() + masked_starts[i],
          static_cast<size_t>(masked_starts[i + 1] - masked_starts[i])};
}
std::span<const int32_t> BertInstances::instance_masked_ids(int64_t i) const {
  return {masked_ids.data() + masked_starts[i],
          static_cast<size_t>(masked_starts[i + 1] - masked_starts[i])};
}

void BertInstances::append(const BertInstances& other) {
  const int64_t token_base = token_starts.back(), masked_base = masked_starts.back();
  tokens.insert(tokens.end(), other.tokens.begin(), other.tokens.end());
  for (size_t i = 1; i < other.token_starts.size(); ++i)
    token_starts.push_back(token_base + other.token_starts[i]);
  b_starts.insert(b_starts.end(), other.b_starts.begin(), other.b_starts.end());
  masked_positions.insert(masked_positions.end(), other.masked_positions.begin(),
                          other.masked_positions.end());
  masked_ids.insert(masked_ids.end(), other.masked_ids.begin(), other.masked_ids.end());
  for (size_t i = 1; i < other.masked_starts.size(); ++i)
    masked_starts.push_back(masked_base + other.masked_starts[i]);
  next_sentence_labels.insert(next_sentence_labels.end(), other.next_sentence_labels.begin(),
                              other.next_sentence_labels.end());
}

void truncate_seq_pair(int64_t& a_begin, int64_t& a_end, int64_t& b_begin, int64_t& b_end,
                       int64_t max_tokens, BertRandom& rng) {
  while ((a_end - a_begin) + (b_end - b_begin) > max_tokens) {
    const bool cut_a = a_end - a_begin > b_end - b_begin;
    int64_t& begin = cut_a ? a_begin : b_begin;
    int64_t& end = cut_a ? a_end : b_end;
    // Sometimes the front, sometimes the back, so neither end of a segment is favoured.
    if (rng.uniform() < 0.5)
      ++begin;
    else
      --end;
  }
}

void create_masked_lm_predictions(std::span<int32_t> tokens, double masked_lm_prob,
                                  int max_predictions, const BertSpecialIds& special,
                                  BertRandom& rng, std::vector<int32_t>& positions,
                                  std::vector<int32_t>& labels) {
  std::vector<int32_t> candidates;
  candidates.reserve(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] != special.cls && tokens[i] != special.sep)
      candidates.push_back(static_cast<int32_t>(i));
  rng.shuffle(std::span<int32_t>(candidates));

  // Python's int(round(x)): nearest, ties to even (nearbyint under the default rounding mode).
  const auto rounded = static_cast<int64_t>(std::nearbyint(tokens.size() * masked_lm_prob));
  const int64_t count = std::min<int64_t>(
      {max_predictions, std::max<int64_t>(1, rounded), static_cast<int64_t>(candidates.size())});
  std::vector<std::pair<int32_t, int32_t>> masked;  // (position, original id)
  masked.reserve(count);
  for (int64_t k = 0; k < count; ++k) {
    const int32_t at = candidates[k];
    masked.emplace_back(at, tokens[at]);
    if (rng.uniform() < 0.8)
      tokens[at] = special.mask;
    else if (rng.uniform() < 0.5)
      ;  // kept as it is
    else
      tokens[at] = static_cast<int32_t>(rng.randint(0, special.vocab_size - 1));
  }
  std::sort(masked.begin(), masked.end());
  for (const auto& [at, id] : masked) {
    positions.push_back(at);
    labels.push_back(id);
  }
}

void create_instances_from_document(const BertCorpus& corpus, int64_t document,
                                    const PrepareBertOptions& options,
                                    const BertSpecialIds& special, BertRandom& rng,
                                    BertInstances& out) {
  const int64_t sentences = corpus.document_sentences(document);
  const int64_t documents = corpus.num_documents();
  const int64_t max_num_tokens = options.max_seq_length - 3;  // room for [CLS] [SEP] [SEP]
  // Usually fill the whole sequence; sometimes aim shorter, so that pretraining also sees the
  // short inputs of fine-tuning. The target is only a guide; max_num_tokens is the limit.
  int64_t target = max_num_tokens;
  if (rng.uniform() < options.short_seq_prob) target = rng.randint(2, max_num_tokens);

  std::vector<int32_t> a, b, tokens;
  const auto append_sentence = [&](std::vector<int32_t>& to, int64_t d, int64_t s) {
    const auto ids = corpus.sentence(d, s);
    to.insert(to.end(), ids.begin(), ids.end());
  };
  int64_t chunk_begin = 0;  // the chunk is sentences [chunk_begin, i]
  int64_t chunk_tokens = 0;
  for (int64_t i = 0; i < sentences; ++i) {
    chunk_tokens += static_cast<int64_t>(corpus.sentence(document, i).size());
    if (i != sentences - 1 && chunk_tokens < target) continue;
    const int64_t chunk_sentences = i - chunk_begin + 1;
    // A is the chunk's first a_end sentences.
    const int64_t a_end = chunk_sentences >= 2 ? rng.randint(1, chunk_sentences - 1) : 1;
    a.clear();
    b.clear();
    for (int64_t s = chunk_begin; s < chunk_begin + a_end; ++s) append_sentence(a, document, s);
    bool random_next = false;
    if (chunk_sentences == 1 || rng.uniform() < 0.5) {
      random_next = true;
      const int64_t target_b = target - static_cast<int64_t>(a.size());
      // Rarely more than one try on a large corpus; with a single document B comes from it.
      int64_t other = 0;
      for (int attempt = 0; attempt < 10; ++attempt) {
        other = rng.randint(0, documents - 1);
        if (other != document) break;
      }
      const int64_t other_sentences = corpus.document_sentences(other);
      for (int64_t s = rng.randint(0, other_sentences - 1); s < other_sentences; ++s) {
        append_sentence(b, other, s);
        if (static_cast<int64_t>(b.size()) >= target_b) break;
      }
      // The chunk's sentences after A were not used: put them back.
      i -= chunk_sentences - a_end;
    } else {
      for (int64_t s = chunk_begin + a_end; s <= i; ++s) append_sentence(b, document, s);
    }
    int64_t a_lo = 0, a_hi = static_cast<int64_t>(a.size());
    int64_t b_lo = 0, b_hi = static_cast<int64_t>(b.size());
    truncate_seq_pair(a_lo, a_hi, b_lo, b_hi, max_num_tokens, rng);

    tokens.clear();
    tokens.push_back(special.cls);
    tokens.insert(tokens.end(), a.begin() + a_lo, a.begin() + a_hi);
    tokens.push_back(special.sep);
    const auto b_start = static_cast<int32_t>(tokens.size());
    tokens.insert(tokens.end(), b.begin() + b_lo, b.begin() + b_hi);
    tokens.push_back(special.sep);
    create_masked_lm_predictions(tokens, options.masked_lm_prob, options.max_predictions_per_seq,
                                 special, rng, out.masked_positions, out.masked_ids);
    out.tokens.insert(out.tokens.end(), tokens.begin(), tokens.end());
    out.token_starts.push_back(static_cast<int64_t>(out.tokens.size()));
    out.b_starts.push_back(b_start);
    out.masked_starts.push_back(static_cast<int64_t>(out.masked_positions.size()));
    out.next_sentence_labels.push_back(random_next ? 1 : 0);

    chunk_begin = i + 1;
    chunk_tokens = 0;
  }
}

BertInstances create_bert_instances(const BertCorpus& corpus, const PrepareBertOptions& options,
                                    const BertSpecialIds& special, int threads,
                                    const std::function<void(int64_t, int64_t, int64_t)>& on_done) {
  const int64_t documents = corpus.num_documents();
  const int64_t visits = documents * options.dupe_factor;
  BertInstances all;
  std::vector<BertInstances> block;
  std::vector<std::string> errors;
  for (int64_t first = 0; first < visits; first += kInstanceBlock) {
    const int64_t n = std::min(kInstanceBlock, visits - first);
    block.assign(n, {});
    errors.assign(n, {});
    // Documents differ in length: hand them out one by one.
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
    for (int64_t k = 0; k < n; ++k) {
      try {
        const int64_t visit = (first + k) / documents, document = (first + k) % documents;
        BertRandom rng(bert_stream_seed(options.seed, visit, document));
        create_instances_from_document(corpus, document, options, special, rng, block[k]);
      } catch (const std::exception& e) {
        errors[k] = e.what();
      }
    }
    for (int64_t k = 0; k < n; ++k) {
      if (!errors[k].empty())
        fail("prepare-bert: document {}: {}", (first + k) % documents, errors[k]);
      all.append(block[k]);
    }
    if (on_done) on_done(first + n, visits, all.size());
  }
  return all;
}

// ---------------------------------------------------------------------------------------
// The whole command.

std::string format_prepare_bert_progress(const PrepareBertProgress& p) {
  const double percent = p.total > 0 ? 100.0 * p.done / p.total : 100.0;
  switch (p.phase) {
    case PrepareBertProgress::kTokenizing: {
      const double mb = p.done / 1e6, rate = p.seconds > 0 ? mb / p.seconds : 0;
      return fmt::format(
          "prepare-bert: tokenizing {:.1f}/{:.1f} MB ({:.0f}%), {:.1f} MB/s, {} documents", mb,
          p.total / 1e6, percent, rate, human_count(p.documents));
    }
    case PrepareBertProgress::kInstances:
      return fmt::format(
          "prepare-bert: instances {}/{} document visits ({:.0f}%), {} instances, {:.0f} "
          "instances/s",
          human_count(p.done), human_count(p.total), percent, human_count(p.instances),
          p.seconds > 0 ? p.instances / p.seconds : 0);
    case PrepareBertProgress::kWriting:
      return fmt::format("prepare-bert: writing shard {}/{} ({} instances)", p.done, p.total,
                         human_count(p.instances));
  }
  return {};
}

void print_prepare_bert_progress(const PrepareBertProgress& progress) {
  fmt::print(stderr, "{}\n", format_prepare_bert_progress(progress));
  std::fflush(stderr);
}

PrepareBertStats prepare_bert(const PrepareBertOptions& options,
                              const PrepareBertProgressFn& on_progress) {
  const auto start = Clock::now();
  validate_prepare_bert_options(options);
  const std::vector<std::string> files = expand_bert_inputs(options.inputs);
  const WordpieceTokenizer tokenizer = WordpieceTokenizer::load(options.vocab_file);
  const BertSpecialIds special = BertSpecialIds::of(tokenizer, options.vocab_file);
  const int threads = options.threads > 0 ? options.threads : omp_get_max_threads();

  PrepareBertStats stats;
  stats.files = static_cast<int64_t>(files.size());

  // 1. Text -> documents of tokenised sentences.
  auto phase_start = Clock::now();
  Throttle tokenize_progress(on_progress);
  const BertCorpus tokenized = tokenize_bert_corpus(
      files, tokenizer, threads, [&](int64_t done, int64_t total, int64_t documents) {
        stats.bytes = done;
        tokenize_progress({PrepareBertProgress::kTokenizing, done, total, documents, 0,
                           seconds_since(phase_start)});
      });
  stats.documents = tokenized.num_documents();
  stats.sentences = tokenized.num_sentences();
  stats.tokens = static_cast<int64_t>(tokenized.tokens.size());
  stats.tokenize_seconds = seconds_since(phase_start);
  if (stats.documents == 0)
    fail("prepare-bert: the inputs hold no sentence with tokens; nothing written to {}",
         options.output_dir);

  // 2. Instances, then one shuffle over all of them.
  phase_start = Clock::now();
  Throttle instance_progress(on_progress);
  const BertInstances instances = create_bert_instances(
      tokenized, options, special, threads, [&](int64_t done, int64_t total, int64_t count) {
        instance_progress({PrepareBertProgress::kInstances, done, total, stats.documents, count,
                           seconds_since(phase_start)});
      });
  stats.instances = instances.size();
  stats.masked = static_cast<int64_t>(instances.masked_positions.size());
  stats.instance_tokens = static_cast<int64_t>(instances.tokens.size());
  for (uint8_t label : instances.next_sentence_labels) stats.random_next += label;
  std::vector<int64_t> order(stats.instances);
  std::iota(order.begin(), order.end(), int64_t{0});
  BertRandom shuffle_rng(bert_stream_seed(options.seed, kShuffleStream, 0));
  shuffle_rng.shuffle(std::span<int64_t>(order));
  stats.instance_seconds = seconds_since(phase_start);

  // 3. Shards of shard_size rows, each written whole and renamed into place.
  phase_start = Clock::now();
  fs::create_directories(options.output_dir);
  const int64_t shards = (stats.instances + options.shard_size - 1) / options.shard_size;
  Throttle write_progress(on_progress);
  for (int64_t k = 0; k < shards; ++k) {
    const int64_t first = k * options.shard_size;
    const int64_t count = std::min(options.shard_size, stats.instances - first);
    const std::string path = (fs::path(options.output_dir) / bert_shard_name(k)).string();
    write_bert_hdf5(path, instances, std::span<const int64_t>(order).subspan(first, count),
                    options.max_seq_length, options.max_predictions_per_seq);
    stats.shards.push_back(path);
    write_progress({PrepareBertProgress::kWriting, k + 1, shards, stats.documents, first + count,
                    seconds_since(phase_start)});
  }
  // part_*.hdf5 left by an earlier, larger run would be read as part of this data set.
  static const std::regex kPartName(R"(part_(\d{5,})\.hdf5)");
  for (const auto& entry : fs::directory_iterator(options.output_dir)) {
    std::smatch m;
    const std::string name = entry.path().filename().string();
    if (entry.is_regular_file() && std::regex_match(name, m, kPartName) &&
        std::stoll(m[1].str()) >= shards) {
      fs::remove(entry.path());
      stats.removed_stale.push_back(entry.path().string());
    }
  }
  std::sort(stats.removed_stale.begin(), stats.removed_stale.end());
  stats.write_seconds = seconds_since(phase_start);
  stats.seconds = seconds_since(start);
  return stats;
}

}  // namespace collage
