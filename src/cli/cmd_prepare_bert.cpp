// `collage prepare-bert`: text -> WordPiece -> BERT pretraining HDF5 shards (prepare_bert.h).
#include <fmt/format.h>

#include <filesystem>
#include <memory>

#include "cli/commands.h"
#include "core/error.h"
#include "data/bert/prepare_bert.h"

namespace collage {

void add_prepare_bert_command(CLI::App& root) {
  auto options = std::make_shared<PrepareBertOptions>();
  auto* cmd = root.add_subcommand(
      "prepare-bert",
      "Make BERT pretraining data from text: WordPiece tokens -> sentence pairs with masked-LM "
      "labels -> HDF5 shards DIR/part_00000.hdf5, ... in the layout of NVIDIA "
      "DeepLearningExamples' create_pretraining_data.py (input_ids i4, input_mask i1, "
      "segment_ids i1 [N, S]; masked_lm_positions, masked_lm_ids i4 [N, P]; "
      "next_sentence_labels i1 [N]; gzip).\n\n"
      "The real data for BERT pretraining is English Wikipedia (+ BookCorpus) in exactly this "
      "layout, e.g. AWS/NVIDIA's bert_pretrain_wikicorpus_tokenized_hdf5_seqlen128 (S 128, "
      "P 20) and _seqlen512 (S 512, P 80) shards: the same reader reads those and these "
      "(`collage inspect DIR/part_00000.hdf5 --vocab-file ...` shows one). This command makes "
      "such shards from your own text, as NVIDIA's script does (Google's BERT recipe):\n"
      "  input: one sentence per line, a blank line between documents (a file's end also ends "
      "a document); pairs never span documents\n"
      "  pairs: [CLS] A [SEP] B [SEP], A = whole sentences; B follows A in the document "
      "(next_sentence_label 0) or, half of the time, is taken from a random other document "
      "(label 1); --short-seq-prob of the documents' visits aim at a random shorter length\n"
      "  masking: --masked-lm-prob of each pair's tokens (at most --max-predictions-per-seq), "
      "never [CLS]/[SEP]: 80% become [MASK], 10% a random token, 10% stay\n"
      "  every document is visited --dupe-factor times with different pairs and masks; all "
      "instances are shuffled together, then cut into shards of --shard-size rows\n"
      "Same --seed, same inputs and options -> byte-identical files, whatever --threads. "
      "Everything is held in memory until written (about 4 bytes a token of text and "
      "~0.7 KB an instance at S 128): for a corpus larger than memory, split the text and run "
      "once per part into different directories.\n"
      "Example:\n"
      "  collage prepare-bert --input wiki/*.txt --output-dir data/bert/seq128 "
      "--max-seq-length 128 --max-predictions-per-seq 20");
  cmd->add_option("--input", options->inputs,
                  "Text files, repeatable and several per flag; a quoted glob pattern "
                  "('wiki/*.txt') is expanded here, a directory stands for the files in it. "
                  "UTF-8, one sentence per line, blank line between documents.")
      ->required();
  cmd->add_option("--output-dir", options->output_dir,
                  "Directory for part_00000.hdf5, part_00001.hdf5, ... (created if missing). "
                  "Each file appears only when complete; part files of an earlier run beyond "
                  "this run's last are removed, so the directory holds exactly one data set.")
      ->required();
  cmd->add_option("--vocab-file", options->vocab_file,
                  "BERT vocab.txt (uncased WordPiece: the text is lower-cased and accents "
                  "stripped); it needs [CLS], [SEP], [MASK]")
      ->capture_default_str();
  cmd->add_option("--max-seq-length", options->max_seq_length,
                  "S: tokens per instance, [CLS] and both [SEP] included; shorter pairs are "
                  "0-padded (128 for phase 1, 512 for phase 2 of the BERT recipe)")
      ->capture_default_str();
  cmd->add_option("--max-predictions-per-seq", options->max_predictions_per_seq,
                  "P: at most this many masked positions per instance (20 for S 128, 80 for "
                  "S 512); the rest of the row is 0-padded")
      ->capture_default_str();
  cmd->add_option("--masked-lm-prob", options->masked_lm_prob,
                  "Fraction of an instance's tokens that get a masked-LM label (rounded, at "
                  "least 1)")
      ->capture_default_str();
  cmd->add_option("--dupe-factor", options->dupe_factor,
                  "Times each document is visited, each time with different pairs and masks "
                  "(multiplies the instances and the memory)")
      ->capture_default_str();
  cmd->add_option("--short-seq-prob", options->short_seq_prob,
                  "Probability that a document visit aims at a random length in [2, S-3] "
                  "instead of S-3, so the model also sees short inputs")
      ->capture_default_str();
  cmd->add_option("--shard-size", options->shard_size,
                  "Instances per output file (the last file holds the rest). The reader keeps "
                  "a shard's decoded rows in memory: N*(3S+2P+1)*4 bytes, 170 MB for 100000 "
                  "rows at S 128")
      ->capture_default_str();
  cmd->add_option("--seed", options->seed,
                  "Seed of every random choice (std::mt19937_64 streams, the same on every "
                  "compiler)")
      ->capture_default_str();
  cmd->add_option("--threads", options->threads,
                  "Threads for tokenising and building instances; 0 = OpenMP's default "
                  "(OMP_NUM_THREADS or all cores). The output does not depend on it.")
      ->capture_default_str()
      ->check(at_least(0));

  cmd->callback([options] {
    if (!std::filesystem::exists(options->vocab_file))
      fail(
          "{}: no such file (a BERT vocab.txt: fetch bert-base-uncased's with "
          "scripts/install-deps.sh --assets, or pass --vocab-file)",
          options->vocab_file);
    const PrepareBertStats stats = prepare_bert(*options);
    const double n = static_cast<double>(stats.instances);
    fmt::print(
        "prepare-bert: wrote {} shard(s) to {} ({} .. {})\n"
        "  input      {} file(s), {:.2f} MB, {} documents, {} sentences, {} tokens\n"
        "  instances  {} (S {}, P {}, dupe factor {}), {:.1f} tokens and {:.2f} masked "
        "per instance, {:.1f}% random next\n"
        "  seconds    {:.2f} (tokenizing {:.2f}, instances {:.2f}, writing {:.2f})\n"
        "  speed      {:.2f} MB/s of text overall, {:.2f} MB/s tokenizing, {:.0f} "
        "instances/s\n",
        stats.shards.size(), options->output_dir,
        std::filesystem::path(stats.shards.front()).filename().string(),
        std::filesystem::path(stats.shards.back()).filename().string(), stats.files,
        stats.bytes / 1e6, stats.documents, stats.sentences, stats.tokens, stats.instances,
        options->max_seq_length, options->max_predictions_per_seq, options->dupe_factor,
        stats.instance_tokens / n, stats.masked / n, 100.0 * stats.random_next / n, stats.seconds,
        stats.tokenize_seconds, stats.instance_seconds, stats.write_seconds,
        stats.seconds > 0 ? stats.bytes / 1e6 / stats.seconds : 0,
        stats.tokenize_seconds > 0 ? stats.bytes / 1e6 / stats.tokenize_seconds : 0,
        stats.seconds > 0 ? n / stats.seconds : 0);
    for (const auto& removed : stats.removed_stale)
      fmt::print("  removed    {} (left by an earlier run with more shards)\n", removed);
  });
}

}  // namespace collage
