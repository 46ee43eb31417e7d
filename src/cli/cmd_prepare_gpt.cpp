// `collage prepare-gpt`: text / JSONL -> GPT-2 tokens -> Megatron .bin/.idx (prepare_gpt.h).
#include <fmt/format.h>

#include <filesystem>
#include <memory>

#include "cli/commands.h"
#include "core/error.h"
#include "data/megatron/prepare_gpt.h"

namespace collage {

void add_prepare_gpt_command(CLI::App& root) {
  auto options = std::make_shared<PrepareOptions>();
  auto* cmd = root.add_subcommand(
      "prepare-gpt",
      "Tokenise text with GPT-2's byte-level BPE into a Megatron indexed dataset "
      "(<prefix>.bin + <prefix>.idx, one sequence per document, uint16 tokens), like "
      "Megatron's tools/preprocess_data.py --append-eod.\nExample:\n"
      "  collage prepare-gpt --input books/*.txt extra.jsonl --output-prefix data/demo_text");
  cmd->add_option("--input", options->inputs,
                  "Input files, repeatable and several per flag (globs are expanded by the "
                  "shell). A .jsonl or .json file holds one JSON object per line whose "
                  "--json-key field is a document; any other file is plain UTF-8 text and is "
                  "one document. Empty documents are skipped.")
      ->required();
  cmd->add_option("--output-prefix", options->output_prefix,
                  "Writes <prefix>.bin and <prefix>.idx (missing directories are created; "
                  "the files appear only when complete)")
      ->required();
  cmd->add_option("--vocab-file", options->vocab_file, "GPT-2 encoder.json (token -> id)")
      ->capture_default_str();
  cmd->add_option("--merges-file", options->merges_file, "GPT-2 vocab.bpe (BPE merges)")
      ->capture_default_str();
  cmd->add_option("--json-key", options->jsonl_key,
                  "Field of each JSONL object that holds the document text")
      ->capture_default_str();
  cmd->add_flag_callback(
      "--no-append-eod", [options] { options->append_eod = false; },
      "Do not append <|endoftext|> (id 50256) after each document (default: append)");
  cmd->add_option("--threads", options->threads,
                  "Tokeniser threads; 0 = OpenMP's default (OMP_NUM_THREADS or all cores)")
      ->capture_default_str()
      ->check(at_least(0));

  cmd->callback([options] {
    for (const auto& [file, flag] : {std::pair{options->vocab_file, "--vocab-file"},
                                     std::pair{options->merges_file, "--merges-file"}}) {
      if (!std::filesystem::exists(file)) {
        fail(
            "{}: no such file (a GPT-2 BPE file: fetch them with scripts/install-deps.sh "
            "--assets, or pass {})",
            file, flag);
      }
    }
    const PrepareStats stats = prepare_gpt(*options);
    const double tokens_per_second = stats.seconds > 0 ? stats.tokens / stats.seconds : 0;
    fmt::print(
        "prepare-gpt: wrote {0}.bin and {0}.idx\n"
        "  documents  {1} ({2} empty skipped)\n"
        "  tokens     {3} ({4}, EOD {5})\n"
        "  text       {6:.2f} MB{7}\n"
        "  seconds    {8:.2f}\n"
        "  tokens/s   {9:.0f} ({10:.2f} MB/s)\n",
        options->output_prefix, stats.documents, stats.empty_documents, stats.tokens,
        dtype_name(stats.dtype), options->append_eod ? "appended" : "not appended",
        stats.bytes / 1e6,
        stats.invalid_utf8 > 0
            ? fmt::format(" ({} ill-formed UTF-8 sequences replaced)", stats.invalid_utf8)
            : std::string(),
        stats.seconds, tokens_per_second,
        stats.seconds > 0 ? stats.bytes / 1e6 / stats.seconds : 0);
  });
}

}  // namespace collage
