// `collage generate` (generate.h): a trained GPT continues a prompt.
#include "tools/generate.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>
#include <numeric>

#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_info.h"
#include "checkpoint/training_checkpoint.h"
#include "config/architecture.h"
#include "core/error.h"
#include "data/megatron/prepare_gpt.h"
#include "data/text/gpt2_tokenizer.h"
#include "dist/backend_choice.h"
#include "model/model_family.h"

namespace collage {
namespace {

namespace fs = std::filesystem;

// A tokenizer file: the option, else the checkpoint config's key, else prepare-gpt's default.
std::string tokenizer_file(const std::string& option, const char* option_name,
                           const std::string& configured, const char* key,
                           const std::string& fallback) {
  if (!option.empty()) {
    COLLAGE_CHECK(fs::is_regular_file(option), "{}: {}: no such file", option_name, option);
    return option;
  }
  if (!configured.empty()) {
    COLLAGE_CHECK(fs::is_regular_file(configured),
                  "{}: {}: no such file (the GPT-2 tokenizer file the checkpoint's config names, "
                  "relative to the directory training ran in; give {} PATH)",
                  key, configured, option_name);
    return configured;
  }
  COLLAGE_CHECK(fs::is_regular_file(fallback),
                "{}: the checkpoint's config names no GPT-2 tokenizer file and prepare-gpt's "
                "default {} does not exist: give {} PATH",
                key, fallback, option_name);
  return fallback;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int32_t sample_token(const float* logits, int vocab, const SamplingOptions& options,
                     std::mt19937_64& rng) {
  COLLAGE_CHECK(vocab >= 1, "sample_token: empty vocabulary");
  // Larger logit first, the lower id on ties: a strict total order, so the choice is the same
  // whatever the sort does with equal elements.
  auto before = [logits](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  if (options.temperature <= 0) {
    int32_t best = 0;
    for (int32_t i = 1; i < vocab; i++)
      if (before(i, best)) best = i;
    COLLAGE_CHECK(std::isfinite(logits[best]), "the model's logits are not finite ({})",
                  logits[best]);
    return best;
  }
  std::vector<int32_t> ids(static_cast<size_t>(vocab));
  std::iota(ids.begin(), ids.end(), 0);
  if (options.top_k > 0 && options.top_k < vocab) {
    std::partial_sort(ids.begin(), ids.begin() + options.top_k, ids.end(), before);
    ids.resize(size_t(options.top_k));
  }
  double max = -std::numeric_limits<double>::infinity();
  for (int32_t id : ids) max = std::max(max, double(logits[id]));
  COLLAGE_CHECK(std::isfinite(max), "the model's logits are not finite (largest: {})", max);
  std::vector<double> weights(ids.size());
  double total = 0;
  for (size_t j = 0; j < ids.size(); j++) {
    weights[j] = std::exp((double(logits[ids[j]]) - max) / options.temperature);
    total += weights[j];
  }
  const double u = double(rng() >> 11) * 0x1.0p-53 * total;  // uniform in [0, total)
  double cumulative = 0;
  for (size_t j = 0; j < ids.size(); j++) {
    cumulative += weights[j];
    if (u < cumulative) return ids[j];
  }
  return ids.back();  // u within rounding of the total
}

GptSampler::GptSampler(const ModelConfig& config, Backend& backend, int window)
    : backend_(backend), window_(window) {
  COLLAGE_CHECK(window >= 1, "GptSampler: window {} < 1", window);
  model_ = make_causal_lm(config, backend,
                          ModelShape{.micro_batch = 1, .seq_len = window, .max_predictions = 1});
  tokens_.resize(size_t(window));
  row_.resize(size_t(config.padded_vocab(1)));
}

std::vector<float> GptSampler::next_token_logits(const std::vector<int32_t>& context, int vocab) {
  COLLAGE_CHECK(!context.empty(), "GptSampler: empty context");
  const int Vp = int(row_.size());
  COLLAGE_CHECK(vocab >= 1 && vocab <= Vp, "GptSampler: vocab {} outside [1, {}]", vocab, Vp);
  const int n = int(std::min<size_t>(context.size(), size_t(window_)));
  std::copy(context.end() - n, context.end(), tokens_.begin());
  std::fill(tokens_.begin() + n, tokens_.end(), 0);  // after the last real token: not seen by it
  Batch batch;                                       // no targets: the logits only
  batch.input_ids = tokens_.data();
  model_->forward(batch, 1);
  backend_.copy_to_host(row_.data(), model_->logits() + int64_t(n - 1) * Vp,
                        size_t(Vp) * sizeof(bf16));
  std::vector<float> logits(static_cast<size_t>(vocab));
  for (int i = 0; i < vocab; i++) logits[size_t(i)] = bf16_to_float(row_[size_t(i)]);
  return logits;
}

GeneratedTokens generate_tokens(GptSampler& sampler, std::vector<int32_t> context,
                                int max_new_tokens, int vocab, int32_t stop_token,
                                const SamplingOptions& options,
                                const std::function<void(int32_t)>& on_token) {
  std::mt19937_64 rng(options.seed);
  GeneratedTokens out;
  for (int i = 0; i < max_new_tokens; i++) {
    const std::vector<float> logits = sampler.next_token_logits(context, vocab);
    out.forwards++;
    const int32_t token = sample_token(logits.data(), vocab, options, rng);
    if (token == stop_token) {
      out.stopped = true;
      break;
    }
    context.push_back(token);
    out.tokens.push_back(token);
    if (on_token) on_token(token);
  }
  return out;
}

namespace {

void check_generate_options(const GenerateOptions& options) {
  COLLAGE_CHECK(options.max_new_tokens >= 1, "--max-new-tokens: must be >= 1, got {}",
                options.max_new_tokens);
  COLLAGE_CHECK(options.sampling.temperature >= 0, "--temperature: must be >= 0, got {}",
                options.sampling.temperature);
  COLLAGE_CHECK(options.sampling.top_k >= 0, "--top-k: must be >= 0, got {}",
                options.sampling.top_k);
  COLLAGE_CHECK(fs::exists(options.checkpoint), "{}: no such checkpoint file or directory",
                options.checkpoint);
}

// The GPT tokenizer (the options' files, else the checkpoint config's); warns when the model
// has ids the tokenizer lacks (only the tokenizer's are sampled).
Gpt2Tokenizer load_tokenizer(const GenerateOptions& options, const Config& config) {
  const PrepareOptions defaults;
  const std::string vocab_file =
      tokenizer_file(options.vocab_file, "--vocab-file", config.data.vocab_file, "data.vocab_file",
                     defaults.vocab_file);
  const std::string merges_file =
      tokenizer_file(options.merges_file, "--merges-file", config.data.merges_file,
                     "data.merges_file", defaults.merges_file);
  Gpt2Tokenizer tokenizer = Gpt2Tokenizer::load(vocab_file, merges_file);
  const int model_vocab = config.model.vocab_size;
  if (model_vocab > tokenizer.vocab_size())
    spdlog::warn(
        "model.vocab_size {} is larger than the tokenizer's {} ({}): sampling only "
        "the tokenizer's ids",
        model_vocab, tokenizer.vocab_size(), vocab_file);
  return tokenizer;
}

// The prompt's tokens (<|endoftext|> for an empty prompt), each checked against the model's
// vocabulary.
std::vector<int32_t> encode_prompt(const std::string& prompt, const Gpt2Tokenizer& tokenizer,
                                   int model_vocab) {
  std::vector<int32_t> tokens = tokenizer.encode(prompt);
  if (tokens.empty()) {
    tokens.push_back(tokenizer.eot_token());
    spdlog::info("empty prompt: starting from <|endoftext|> (id {})", tokenizer.eot_token());
  }
  COLLAGE_CHECK(!prompt.empty() || tokenizer.eot_token() < model_vocab,
                "an empty prompt starts from <|endoftext|> (id {}), which is outside the "
                "model's vocabulary of {} ids (model.vocab_size): give a --prompt",
                tokenizer.eot_token(), model_vocab);
  for (int32_t id : tokens)
    COLLAGE_CHECK(id < model_vocab,
                  "the prompt's token {} ('{}') is outside the model's vocabulary of {} ids "
                  "(model.vocab_size): was it trained on GPT-2 tokens?",
                  id, tokenizer.token_bytes(id), model_vocab);
  return tokens;
}

// The positions the model sees: the prompt and the new tokens, at most data.seq_len (logged
// when the text outgrows it).
int model_window(int prompt_length, int max_new_tokens, int seq_len) {
  const int64_t wanted = int64_t(prompt_length) + max_new_tokens;
  const int window = int(std::min<int64_t>(wanted, seq_len));
  if (prompt_length > window)
    spdlog::info(
        "the prompt has {} tokens, more than the model's window of {} (data.seq_len): "
        "the model sees its last {}",
        prompt_length, window, window);
  else if (wanted > window)
    spdlog::info(
        "the text outgrows the model's window of {} tokens (data.seq_len) after {} "
        "new tokens: from then on each token sees the last {}",
        window, window - prompt_length, window);
  return window;
}

// --backend and --threads, else the checkpoint's parallel settings.
std::unique_ptr<Backend> make_generate_backend(const GenerateOptions& options,
                                               const Config& config) {
  const BackendChoice choice =
      choose_backend(options.backend.empty() ? config.parallel.backend : options.backend);
  try {
    return make_backend(choice.name,
                        options.threads >= 0 ? options.threads : config.parallel.threads);
  } catch (const Error& e) {
    fail("{} ({}; choose another with --backend cpu)", e.what(),
         options.backend.empty() ? "the checkpoint's parallel.backend" : "--backend");
  }
}

std::string sampling_summary(const SamplingOptions& sampling) {
  if (sampling.temperature <= 0) return "greedy";
  return fmt::format("temperature {:g}, top-k {}, seed {}", sampling.temperature,
                     sampling.top_k > 0 ? std::to_string(sampling.top_k) : std::string("off"),
                     sampling.seed);
}

// Writes the prompt, then each new token's text as it comes (flushed), and a newline.
void generate_and_print(GptSampler& sampler, const Gpt2Tokenizer& tokenizer, int vocab,
                        const GenerateOptions& options, std::FILE* out, GenerateResult& result) {
  std::fputs(options.prompt.c_str(), out);
  std::fflush(out);
  const auto start = std::chrono::steady_clock::now();
  result.generated = generate_tokens(sampler, result.prompt_tokens, options.max_new_tokens, vocab,
                                     options.ignore_eos ? -1 : tokenizer.eot_token(),
                                     options.sampling, [&](int32_t token) {
                                       const std::string& bytes = tokenizer.token_bytes(token);
                                       result.continuation += bytes;
                                       std::fwrite(bytes.data(), 1, bytes.size(), out);
                                       std::fflush(out);
                                     });
  result.seconds = seconds_since(start);
  std::fputc('\n', out);
  std::fflush(out);
}

}  // namespace

GenerateResult generate_text(const GenerateOptions& options, std::FILE* out) {
  check_generate_options(options);
  GenerateResult result;
  result.checkpoint = resolve_resume(options.checkpoint, options.checkpoint);
  const CheckpointInfo info = read_checkpoint_info(result.checkpoint);
  const Config& config = info.config;
  result.step = info.step;
  const Architecture& arch = architecture(config.model);
  COLLAGE_CHECK(arch.objective == Objective::next_token,
                "{}: a {} model (model.arch: {}): collage generate continues text with a GPT "
                "(a decoder); an encoder fills in masked tokens. Evaluate it with `collage eval "
                "CONFIG --checkpoint {}`",
                result.checkpoint, arch.title, config.model.arch, options.checkpoint);
  const Gpt2Tokenizer tokenizer = load_tokenizer(options, config);
  const int vocab = std::min(config.model.vocab_size, tokenizer.vocab_size());
  result.prompt_tokens = encode_prompt(options.prompt, tokenizer, config.model.vocab_size);
  const int prompt_length = int(result.prompt_tokens.size());
  result.window = model_window(prompt_length, options.max_new_tokens, config.data.seq_len);

  const std::unique_ptr<Backend> backend = make_generate_backend(options, config);
  GptSampler sampler(config.model, *backend, result.window);
  load_checkpoint_weights(result.checkpoint, config, *backend, sampler.model());
  spdlog::info(
      "model: {} parameters ({} layers, hidden {}), step {} of {}; backend {}; prompt {} "
      "tokens; sampling {}",
      sampler.model().num_parameters(), config.model.n_layer, config.model.hidden_size, info.step,
      result.checkpoint, backend->name(), prompt_length, sampling_summary(options.sampling));

  generate_and_print(sampler, tokenizer, vocab, options, out, result);
  const size_t count = result.generated.tokens.size();
  spdlog::info(
      "generated {} token(s) in {:.2f} s: {:.1f} tokens/s ({} forwards of {} "
      "positions){}",
      count, result.seconds, double(count) / std::max(result.seconds, 1e-9),
      result.generated.forwards, result.window,
      result.generated.stopped ? "; stopped at <|endoftext|>" : "");
  return result;
}

}  // namespace collage
