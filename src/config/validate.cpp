// Range and consistency checks of a Config. Each failure names where the value came from
// (file, or file and override), the full key path and the reason; the first failure throws.
#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <initializer_list>

#include "config/architecture.h"
#include "config/config_fields.h"
#include "core/error.h"

namespace collage {
namespace {

class Checker {
 public:
  explicit Checker(const OriginOf& origin_of) : origin_of_(origin_of) {}

  template <typename... Args>
  [[noreturn]] void reject(const std::string& key, fmt::format_string<Args...> reason,
                           Args&&... args) const {
    fail("{}: {}: {}", origin_of_(key), key, fmt::format(reason, std::forward<Args>(args)...));
  }

  template <typename T>
  void positive(const std::string& key, T value) const {
    if (!(value > 0)) reject(key, "must be > 0, got {}", value);
  }
  template <typename T>
  void non_negative(const std::string& key, T value) const {
    if (!(value >= 0)) reject(key, "must be >= 0, got {}", value);
  }
  void open_unit_interval(const std::string& key, double value) const {
    if (!(value > 0 && value < 1)) reject(key, "must be in (0, 1), got {}", value);
  }
  void one_of(const std::string& key, const std::string& value,
              std::initializer_list<const char*> allowed) const {
    std::string list;
    for (const char* a : allowed) {
      if (value == a) return;
      list += (list.empty() ? "" : "|") + std::string(a);
    }
    reject(key, "expected one of {}, got '{}'", list, value);
  }

 private:
  const OriginOf& origin_of_;
};

void check_model(const Checker& c, const ModelConfig& m, int tp) {
  const Architecture* registered = find_architecture(m.arch);
  if (registered == nullptr)
    c.reject("model.arch", "expected one of {}, got '{}'", architecture_names(), m.arch);
  c.positive("model.n_layer", m.n_layer);
  c.positive("model.hidden_size", m.hidden_size);
  c.positive("model.n_head", m.n_head);
  c.non_negative("model.ffn_hidden_size", m.ffn_hidden_size);
  c.positive("model.vocab_size", m.vocab_size);
  c.positive("model.max_position_embeddings", m.max_position_embeddings);
  c.one_of("model.position_embedding", m.position_embedding, {"learned", "rope"});
  c.positive("model.rope_base", m.rope_base);
  c.positive("model.init_std", m.init_std);
  c.positive("model.layernorm_eps", m.layernorm_eps);
  if (m.hidden_size % m.n_head != 0)
    c.reject("model.n_head", "{} does not divide model.hidden_size {}", m.n_head, m.hidden_size);
  if (m.position_embedding == "rope" && m.head_size() % 2 != 0)
    c.reject("model.position_embedding",
             "rope needs an even head size, but model.hidden_size {} / model.n_head {} = {}",
             m.hidden_size, m.n_head, m.head_size());
  if (registered->encoder_keys) {
    c.positive("model.type_vocab_size", m.type_vocab_size);
    if (m.pad_token_id < 0 || m.pad_token_id >= m.vocab_size)
      c.reject("model.pad_token_id", "{} is not a token id below model.vocab_size {}",
               m.pad_token_id, m.vocab_size);
    for (auto [key, p] : {std::pair{"model.hidden_dropout", m.hidden_dropout},
                          std::pair{"model.attention_dropout", m.attention_dropout}})
      if (!(p >= 0 && p < 1)) c.reject(key, "{} is not a probability in [0, 1)", p);
  }
  if (!registered->rotary_positions && m.position_embedding != "learned")
    c.reject("model.position_embedding", "{}: the encoders use learned positions",
             m.position_embedding);
  // Megatron tensor parallelism splits attention by heads and the MLP by ffn columns.
  if (m.n_head % tp != 0)
    c.reject("model.n_head", "{} heads do not split over parallel.tensor_parallel {}", m.n_head,
             tp);
  // (The default 4 * hidden_size always splits once n_head does: tp | n_head | hidden_size.)
  if (m.ffn() % tp != 0)
    c.reject("model.ffn_hidden_size", "{} does not split over parallel.tensor_parallel {}", m.ffn(),
             tp);
}

// BERT / RoBERTa read HDF5 shards (src/data/bert/bert_shards.h).
void check_encoder_data(const Checker& c, const DataConfig& d, const ModelConfig& m) {
  if (!d.datasets.empty())
    c.reject("data.datasets",
             "is for GPT (Megatron .bin/.idx); model.arch {} reads data.hdf5_train and "
             "data.hdf5_valid",
             m.arch);
  if (d.hdf5_train.empty())
    c.reject("data.hdf5_train", "required for model.arch {}: a .hdf5 file or a directory of them",
             m.arch);
  if (d.max_predictions < 1 || d.max_predictions > d.seq_len)
    c.reject("data.max_predictions", "{} is not in [1, data.seq_len = {}]", d.max_predictions,
             d.seq_len);
  if (!d.merges_file.empty())
    c.reject("data.merges_file",
             "is GPT-2 BPE's; model.arch {} prepares text with WordPiece "
             "(data.vocab_file)",
             m.arch);
  if (!d.prepare_valid_from.empty() && d.prepare_from.empty())
    c.reject("data.prepare_valid_from", "needs data.prepare_from (the training text)");
  if (!d.prepare_valid_from.empty() && d.hdf5_valid.empty())
    c.reject("data.prepare_valid_from", "needs data.hdf5_valid (where to write it)");
  for (size_t i = 0; i < d.prepare_valid_from.size(); i++)
    if (d.prepare_valid_from[i].empty())
      c.reject(fmt::format("data.prepare_valid_from[{}]", i), "empty");
  if (d.mask_token_id < 0 || d.mask_token_id >= m.vocab_size)
    c.reject("data.mask_token_id", "{} is not a token id below model.vocab_size {}",
             d.mask_token_id, m.vocab_size);
  for (size_t i = 0; i < d.special_token_ids.size(); i++)
    if (d.special_token_ids[i] < 0 || d.special_token_ids[i] >= m.vocab_size)
      c.reject(fmt::format("data.special_token_ids[{}]", i),
               "{} is not a token id below model.vocab_size {}", d.special_token_ids[i],
               m.vocab_size);
}

void check_data(const Checker& c, const DataConfig& d, const ModelConfig& m) {
  c.positive("data.seq_len", d.seq_len);
  // Learned positions and the rope table both hold max_position_embeddings positions; RoBERTa's
  // start past the padding id. Checked here, before any data is loaded or prepared.
  const Architecture& arch = architecture(m);
  const int64_t positions =
      int64_t{d.seq_len} + (arch.positions_past_padding ? int64_t{m.pad_token_id} + 1 : 0);
  if (positions > m.max_position_embeddings)
    c.reject("data.seq_len", "{} needs {} positions, more than model.max_position_embeddings {}",
             d.seq_len, positions, m.max_position_embeddings);
  for (size_t i = 0; i < d.prepare_from.size(); i++)
    if (d.prepare_from[i].empty()) c.reject(fmt::format("data.prepare_from[{}]", i), "empty");
  if (arch.objective == Objective::masked_lm) {
    check_encoder_data(c, d, m);
    return;
  }
  for (auto [key, path] :
       {std::pair{"data.hdf5_train", d.hdf5_train}, std::pair{"data.hdf5_valid", d.hdf5_valid}})
    if (!path.empty())
      c.reject(key, "is for the encoders (model.arch bert | roberta); a GPT reads data.datasets");
  if (d.dynamic_masking)
    c.reject("data.dynamic_masking", "is for the encoders (model.arch bert | roberta)");
  if (!d.prepare_valid_from.empty())
    c.reject("data.prepare_valid_from",
             "is for the encoders; a GPT's validation split comes from data.split");
  if (d.datasets.empty())
    c.reject("data.datasets", "empty: give at least one {{prefix, weight}} (or a prefix string)");
  for (size_t i = 0; i < d.datasets.size(); i++) {
    if (d.datasets[i].prefix.empty()) c.reject(fmt::format("data.datasets[{}].prefix", i), "empty");
    c.positive(fmt::format("data.datasets[{}].weight", i), d.datasets[i].weight);
  }
  try {
    parse_split(d.split);
  } catch (const Error& e) {
    c.reject("data.split", "{}", e.what());
  }
  if (!d.prepare_from.empty()) {
    // prepare_from builds datasets[0] from raw text; it needs the tokenizer files.
    if (d.datasets.size() != 1)
      c.reject("data.prepare_from", "builds a single dataset, but data.datasets lists {}",
               d.datasets.size());
    if (d.vocab_file.empty()) c.reject("data.vocab_file", "required with data.prepare_from");
    if (d.merges_file.empty()) c.reject("data.merges_file", "required with data.prepare_from");
  }
}

void check_training(const Checker& c, const TrainingConfig& t, int data_parallel) {
  c.positive("training.micro_batch_size", t.micro_batch_size);
  c.positive("training.global_batch_size", t.global_batch_size);
  int64_t per_pass = int64_t{t.micro_batch_size} * data_parallel;
  if (t.global_batch_size % per_pass != 0)
    c.reject("training.global_batch_size",
             "{} is not a multiple of training.micro_batch_size {} * data-parallel size {}",
             t.global_batch_size, t.micro_batch_size, data_parallel);
  c.positive("training.max_steps", t.max_steps);
  c.non_negative("training.eval_interval", t.eval_interval);
  c.non_negative("training.eval_iters", t.eval_iters);
  if (t.eval_interval > 0 && t.eval_iters == 0)
    c.reject("training.eval_iters", "must be > 0 when training.eval_interval is {}",
             t.eval_interval);
  c.positive("training.log_interval", t.log_interval);
}

void check_optimizer(const Checker& c, const OptimizerConfig& o) {
  c.positive("optimizer.lr", o.lr);
  c.non_negative("optimizer.min_lr", o.min_lr);
  if (o.min_lr > o.lr)
    c.reject("optimizer.min_lr", "{} is larger than optimizer.lr {}", o.min_lr, o.lr);
  c.open_unit_interval("optimizer.beta1", o.beta1);
  c.open_unit_interval("optimizer.beta2", o.beta2);
  c.positive("optimizer.eps", o.eps);
  c.non_negative("optimizer.weight_decay", o.weight_decay);
  c.non_negative("optimizer.grad_clip", o.grad_clip);
  c.one_of("optimizer.schedule", o.schedule, {"cosine", "linear", "constant"});
  c.non_negative("optimizer.warmup_steps", o.warmup_steps);
  c.positive("optimizer.decay_steps", o.decay_steps);
  if (o.collage_plus_reference_quirk && o.precision != Precision::collage_plus)
    c.reject("optimizer.collage_plus_reference_quirk",
             "true only applies to optimizer.precision collage-plus, but the precision is '{}'",
             precision_name(o.precision));
  if (o.schedule != "constant" && o.warmup_steps > o.decay_steps)
    c.reject("optimizer.warmup_steps", "{} is larger than optimizer.decay_steps {}", o.warmup_steps,
             o.decay_steps);
}

void check_rest(const Checker& c, const Config& config) {
  c.one_of("parallel.backend", config.parallel.backend, {"auto", "cpu", "cuda", "cuda-emulated"});
  c.positive("parallel.tensor_parallel", config.parallel.tensor_parallel);
  if (config.parallel.zero != 0 && config.parallel.zero != 1)
    c.reject("parallel.zero",
             "{} is not 0 (off) or 1 (ZeRO-1: optimizer state sharded over data "
             "parallelism)",
             config.parallel.zero);
  if (!(config.parallel.comm_timeout == 0 || config.parallel.comm_timeout >= 1))
    c.reject("parallel.comm_timeout", "{} is not 0 (no watchdog) or a number of seconds >= 1",
             config.parallel.comm_timeout);
  c.non_negative("parallel.threads", config.parallel.threads);
  c.one_of("parallel.cpu_gemm", config.parallel.cpu_gemm, {"auto", "onednn", "openblas"});
  if (config.logging.dir.empty()) c.reject("logging.dir", "empty");
  c.one_of("logging.level", config.logging.level,
           {"trace", "debug", "info", "warn", "error", "critical", "off"});
  c.one_of("logging.progress", config.logging.progress, {"auto", "on", "off"});
  if (config.logging.edq_groups && !config.optimizer.edq)
    c.reject("logging.edq_groups", "true needs optimizer.edq: true (EDQ is switched off)");
  c.non_negative("checkpoint.interval", config.checkpoint.interval);
  c.positive("checkpoint.keep", config.checkpoint.keep);
}

}  // namespace

void validate_config(const Config& config, const OriginOf& origin_of, int data_parallel) {
  Checker c(origin_of);
  // The parallel sizes first: the model's divisibility checks use them.
  c.positive("parallel.tensor_parallel", config.parallel.tensor_parallel);
  check_model(c, config.model, config.parallel.tensor_parallel);
  check_data(c, config.data, config.model);
  check_training(c, config.training, data_parallel);
  check_optimizer(c, config.optimizer);
  check_rest(c, config);
}

void validate_config(const Config& config, const std::string& origin, int data_parallel) {
  COLLAGE_CHECK(data_parallel > 0, "{}: data-parallel size must be > 0, got {}", origin,
                data_parallel);
  validate_config(
      config, [&](const std::string&) { return origin; }, data_parallel);
}

std::array<double, 3> parse_split(const std::string& split) {
  // Megatron's --split: "980,10,10" or "98/1/1"; missing parts are 0.
  const char* usage = "expected up to three non-negative numbers separated by ',' like 980,10,10";
  std::array<double, 3> parts{0, 0, 0};
  size_t count = 0, start = 0;
  while (true) {
    size_t end = split.find_first_of(",/", start);
    std::string part = split.substr(start, end == std::string::npos ? end : end - start);
    size_t first = part.find_first_not_of(' '), last = part.find_last_not_of(' ');
    part = first == std::string::npos ? "" : part.substr(first, last - first + 1);
    double value = 0;
    auto [stop, ec] = std::from_chars(part.data(), part.data() + part.size(), value);
    if (count == 3 || part.empty() || ec != std::errc() || stop != part.data() + part.size() ||
        !std::isfinite(value) || value < 0)
      fail("malformed split '{}': {}", split, usage);
    parts[count++] = value;
    if (end == std::string::npos) break;
    start = end + 1;
  }
  double total = parts[0] + parts[1] + parts[2];
  if (!(parts[0] > 0)) fail("split '{}' leaves no training data (first part must be > 0)", split);
  for (double& p : parts) p /= total;
  return parts;
}

}  // namespace collage
