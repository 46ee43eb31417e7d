// The key table of the YAML config and the "did you mean" suggestion for unknown keys.
#include "config/config_fields.h"

#include <algorithm>

namespace collage {

std::vector<ConfigField> config_fields(Config& c) {
  ModelConfig& m = c.model;
  DataConfig& d = c.data;
  TrainingConfig& t = c.training;
  OptimizerConfig& o = c.optimizer;
  return {
      {"model.arch", &m.arch},
      {"model.n_layer", &m.n_layer},
      {"model.hidden_size", &m.hidden_size},
      {"model.n_head", &m.n_head},
      {"model.ffn_hidden_size", &m.ffn_hidden_size},
      {"model.vocab_size", &m.vocab_size},
      {"model.max_position_embeddings", &m.max_position_embeddings},
      {"model.position_embedding", &m.position_embedding},
      {"model.rope_base", &m.rope_base},
      {"model.tie_embeddings", &m.tie_embeddings},
      {"model.init_std", &m.init_std},
      {"model.layernorm_eps", &m.layernorm_eps},
      {"model.type_vocab_size", &m.type_vocab_size},
      {"model.pad_token_id", &m.pad_token_id},
      {"model.hidden_dropout", &m.hidden_dropout},
      {"model.attention_dropout", &m.attention_dropout},

      {"data.datasets", &d.datasets},
      {"data.split", &d.split},
      {"data.seq_len", &d.seq_len},
      {"data.seed", &d.seed},
      {"data.prepare_from", &d.prepare_from},
      {"data.vocab_file", &d.vocab_file},
      {"data.merges_file", &d.merges_file},
      {"data.hdf5_train", &d.hdf5_train},
      {"data.hdf5_valid", &d.hdf5_valid},
      {"data.max_predictions", &d.max_predictions},
      {"data.dynamic_masking", &d.dynamic_masking},
      {"data.mask_token_id", &d.mask_token_id},
      {"data.special_token_ids", &d.special_token_ids},
      {"data.prepare_valid_from", &d.prepare_valid_from},

      {"training.micro_batch_size", &t.micro_batch_size},
      {"training.global_batch_size", &t.global_batch_size},
      {"training.max_steps", &t.max_steps},
      {"training.eval_interval", &t.eval_interval},
      {"training.eval_iters", &t.eval_iters},
      {"training.log_interval", &t.log_interval},
      {"training.seed", &t.seed},

      {"optimizer.precision", &o.precision},
      {"optimizer.adam_order", &o.adam_order},
      {"optimizer.collage_plus_reference_quirk", &o.collage_plus_reference_quirk},
      {"optimizer.edq", &o.edq},
      {"optimizer.lr", &o.lr},
      {"optimizer.min_lr", &o.min_lr},
      {"optimizer.beta1", &o.beta1},
      {"optimizer.beta2", &o.beta2},
      {"optimizer.eps", &o.eps},
      {"optimizer.weight_decay", &o.weight_decay},
      {"optimizer.grad_clip", &o.grad_clip},
      {"optimizer.schedule", &o.schedule},
      {"optimizer.warmup_steps", &o.warmup_steps},
      {"optimizer.decay_steps", &o.decay_steps},

      {"parallel.backend", &c.parallel.backend},
      {"parallel.tensor_parallel", &c.parallel.tensor_parallel},
      {"parallel.zero", &c.parallel.zero},
      {"parallel.comm_timeout", &c.parallel.comm_timeout},
      {"parallel.threads", &c.parallel.threads},
      {"parallel.cpu_gemm", &c.parallel.cpu_gemm},

      {"logging.dir", &c.logging.dir},
      {"logging.level", &c.logging.level},
      {"logging.progress", &c.logging.progress},
      {"logging.edq_groups", &c.logging.edq_groups},
      {"logging.all_ranks", &c.logging.all_ranks},

      {"checkpoint.dir", &c.checkpoint.dir},
      {"checkpoint.interval", &c.checkpoint.interval},
      {"checkpoint.keep", &c.checkpoint.keep},
  };
}

std::vector<std::string> config_key_paths() {
  Config scratch;
  std::vector<std::string> paths;
  for (const ConfigField& f : config_fields(scratch)) paths.push_back(f.path);
  return paths;
}

namespace {

// Levenshtein distance: insertions, deletions and substitutions cost 1.
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); j++) prev[j] = j;
  for (size_t i = 1; i <= a.size(); i++) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); j++) {
      size_t substitute = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, substitute});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string last_component(const std::string& path) {
  size_t dot = path.rfind('.');
  return dot == std::string::npos ? path : path.substr(dot + 1);
}

}  // namespace

std::string did_you_mean(const std::string& key, const std::vector<std::string>& candidates) {
  // A typo within the right section ("model.hiden_size"), or the right name in the wrong
  // section ("model.seq_len" -> "data.seq_len"): score the full path, and the last
  // component alone plus one for the moved section.
  std::string best;
  size_t best_score = SIZE_MAX;
  for (const std::string& candidate : candidates) {
    size_t score = std::min(edit_distance(key, candidate),
                            edit_distance(last_component(key), last_component(candidate)) + 1);
    if (score < best_score) best_score = score, best = candidate;
  }
  size_t allowed = std::max<size_t>(2, last_component(key).size() / 3);
  if (best.empty() || best_score > allowed) return "";
  return " (did you mean '" + best + "'?)";
}

}  // namespace collage
