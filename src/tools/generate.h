#pragma once
// `collage generate`: text from a trained GPT.
//
// The model is the training GPT at tensor-parallel 1 (a checkpoint of any layout loads into
// it), built for one sequence of a fixed window of T positions, T = min(prompt + new tokens,
// data.seq_len). Each new token is one forward over the window: the context's last (up to) T
// tokens at positions 0.., padding after them. Attention is causal, so the padding does not
// change the logits of the last real position, which are the ones read (the real vocabulary
// only; the padded columns are ignored). There is no key/value cache: a token costs a forward of
// T positions. Once the text outgrows the window, each token sees the last T.
//
// Sampling: temperature 0 is greedy (argmax, the lowest id on ties). Otherwise the top_k
// largest logits (0: all) are kept, softmax(logit / temperature) is taken in fp64 over them and
// a token is drawn from it with a std::mt19937_64 seeded by `seed` (its 53 high bits as the
// uniform number). The same seed, checkpoint and backend give the same text.
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "config/config.h"
#include "model/language_model.h"

namespace collage {

struct SamplingOptions {
  double temperature = 0.8;  // 0: greedy
  int top_k = 40;            // 0: no cut
  uint64_t seed = 1234;
};

// A token id in [0, vocab) drawn from `logits` (the first vocab of them) as above.
int32_t sample_token(const float* logits, int vocab, const SamplingOptions& options,
                     std::mt19937_64& rng);

// A tp = 1 causal language model (a GPT) of one sequence of `window` positions, for generation.
class GptSampler {
 public:
  GptSampler(const ModelConfig& config, Backend& backend, int window);

  CausalLanguageModel& model() { return *model_; }
  int window() const { return window_; }

  // The logits of the last token of `context` (non-empty), over the first `vocab` ids, after a
  // forward of its last window() tokens.
  std::vector<float> next_token_logits(const std::vector<int32_t>& context, int vocab);

 private:
  Backend& backend_;
  int window_;
  std::unique_ptr<CausalLanguageModel> model_;
  std::vector<int32_t> tokens_;  // (window)
  std::vector<bf16> row_;        // one row of logits: the padded vocabulary
};

struct GeneratedTokens {
  std::vector<int32_t> tokens;  // the new ones, without the stop token
  bool stopped = false;         // ended by the stop token rather than max_new_tokens
  int forwards = 0;
};

// Up to max_new_tokens tokens after `context`, drawn from ids < vocab; stops when it draws
// stop_token (>= 0; -1: never). on_token sees each new token as it comes (not the stop token).
GeneratedTokens generate_tokens(GptSampler& sampler, std::vector<int32_t> context,
                                int max_new_tokens, int vocab, int32_t stop_token,
                                const SamplingOptions& options,
                                const std::function<void(int32_t)>& on_token = {});

struct GenerateOptions {
  std::string checkpoint;  // a checkpoint file, a set's manifest or a directory (its latest)
  std::string prompt;      // UTF-8; empty: start from <|endoftext|>
  int max_new_tokens = 64;
  SamplingOptions sampling;
  bool ignore_eos = false;  // do not stop at <|endoftext|>
  // The GPT-2 tokenizer files; empty: the checkpoint config's data.vocab_file / merges_file
  // (or, when those are empty, prepare-gpt's defaults).
  std::string vocab_file, merges_file;
  // cpu | cuda | cuda-emulated | auto; empty: the checkpoint config's parallel.backend.
  std::string backend;
  // cpu threads; -1: the checkpoint config's parallel.threads (0: every core).
  int threads = -1;
};

struct GenerateResult {
  std::string checkpoint;  // the file used
  int64_t step = 0;
  std::vector<int32_t> prompt_tokens;  // what the model was given (<|endoftext|> for "")
  GeneratedTokens generated;
  std::string continuation;  // the new tokens' text
  int window = 0;
  double seconds = 0;  // generating (after loading)
};

// Loads the checkpoint's GPT and tokenizer, writes the prompt and then each new token's text to
// `out` as it comes (flushed), and a newline at the end; logs (spdlog) what it does and the
// tokens/s. Throws Error for an encoder checkpoint, missing tokenizer files (naming the key or
// option), or a prompt outside the model's vocabulary.
GenerateResult generate_text(const GenerateOptions& options, std::FILE* out);

}  // namespace collage
