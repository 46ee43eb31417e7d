// `collage generate CHECKPOINT --prompt TEXT [--max-new-tokens N] [--temperature T] [--top-k K]
//  [--seed S] [--ignore-eos] [--vocab-file F] [--merges-file F] [--backend NAME]`
#include <charconv>
#include <cmath>
#include <cstdio>

#include "cli/commands.h"
#include "core/logging.h"
#include "tools/generate.h"

namespace collage {
namespace {

// A finite number >= 0 ("must be >= 0, got -1").
CLI::Validator non_negative_number() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        double x = 0;
        const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), x);
        if (error != std::errc() || end != value.data() + value.size() || !std::isfinite(x))
          return fmt::format("expected a number, got '{}'", value);
        if (x < 0) return fmt::format("must be >= 0, got {}", value);
        return "";
      },
      "NONNEGATIVE");
}

}  // namespace

void add_generate_command(CLI::App& root) {
  auto options = std::make_shared<GenerateOptions>();
  auto* cmd = root.add_subcommand(
      "generate",
      "Continue a prompt with a trained GPT: prints the prompt and then each new token as it\n"
      "comes on stdout (logs and tokens/s on stderr). The checkpoint (any tensor/data-parallel\n"
      "layout) carries its config: the model, data.seq_len (the longest context the model sees;\n"
      "a longer text slides: each token sees the last seq_len), the GPT-2 tokenizer files\n"
      "data.vocab_file/data.merges_file and parallel.backend. Sampling: the top-k largest\n"
      "logits, softmax at the temperature, a seeded draw; --temperature 0 is greedy. The same\n"
      "seed, checkpoint and backend give the same text. Stops at <|endoftext|> unless\n"
      "--ignore-eos; an empty prompt starts from <|endoftext|>. Example:\n"
      "  collage generate runs/demo/checkpoints --prompt \"The sea was\" --max-new-tokens 40 \\\n"
      "      --temperature 0.8 --top-k 40 --seed 7\n"
      "Exit status: 0 done, 1 an error (the message names the file or key), 2 a command line\n"
      "that does not parse.");
  cmd->add_option("checkpoint", options->checkpoint,
                  "A checkpoint file, a multi-rank set's manifest (step_N.ckpt), or a checkpoint "
                  "directory (its newest valid checkpoint)")
      ->required();
  cmd->add_option("--prompt", options->prompt, "The text to continue (UTF-8)");
  cmd->add_option("--max-new-tokens", options->max_new_tokens, "Tokens to generate at most")
      ->capture_default_str()
      ->check(at_least(1));
  cmd->add_option("--temperature", options->sampling.temperature,
                  "Softmax temperature; 0 = greedy (the most likely token each time)")
      ->capture_default_str()
      ->check(non_negative_number());
  cmd->add_option("--top-k", options->sampling.top_k,
                  "Draw from the K most likely tokens only; 0 = from all")
      ->capture_default_str()
      ->check(at_least(0));
  cmd->add_option("--seed", options->sampling.seed, "Seed of the draws")->capture_default_str();
  cmd->add_flag("--ignore-eos", options->ignore_eos,
                "Do not stop at <|endoftext|> (generate --max-new-tokens tokens)");
  cmd->add_option("--vocab-file", options->vocab_file,
                  "GPT-2 encoder.json (default: the checkpoint config's data.vocab_file)");
  cmd->add_option("--merges-file", options->merges_file,
                  "GPT-2 vocab.bpe (default: the checkpoint config's data.merges_file)");
  cmd->add_option("--backend", options->backend,
                  "Run on this backend instead of the checkpoint config's parallel.backend")
      ->check(CLI::IsMember({"auto", "cpu", "cuda", "cuda-emulated"}));
  cmd->add_option("--threads", options->threads,
                  "cpu threads (0: every core; default: the checkpoint config's parallel.threads)")
      ->check(at_least(0));
  cmd->callback([options] {
    log_to_stderr();
    generate_text(*options, stdout);
  });
}

}  // namespace collage
