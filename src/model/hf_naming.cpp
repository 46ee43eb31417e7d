// What the Hugging Face classes share: config.json written and compared, and the model section
// read back from it (hf_naming.h). The classes themselves: hf_gpt.cpp, hf_bert.cpp.
#include "model/hf_naming.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"
#include "model/model_family.h"

namespace collage {

std::vector<HfConfigKey> hf_size_keys(const ModelConfig& c) {
  return {{"vocab_size", c.vocab_size, "model.vocab_size"},
          {"hidden_size", c.hidden_size, "model.hidden_size"},
          {"num_hidden_layers", c.n_layer, "model.n_layer"},
          {"num_attention_heads", c.n_head, "model.n_head"},
          {"intermediate_size", c.ffn(), "model.ffn_hidden_size"}};
}

std::vector<RowRange> first_rows(int64_t n) { return {{0, n}}; }

double shortest_decimal(float value) { return std::stod(fmt::format("{}", value)); }

namespace {

// A parameter as rows × columns: a matrix's own, a vector's elements as rows of one.
struct RowsCols {
  int64_t rows, cols;
};
RowsCols rows_cols(const HfTensor& t, const std::vector<int64_t>& full_shape) {
  COLLAGE_CHECK(full_shape.size() == 1 || full_shape.size() == 2,
                "{}: parameter '{}' of {} dimensions", t.hf_name, t.name, full_shape.size());
  return {full_shape[0], full_shape.size() == 2 ? full_shape[1] : 1};
}

// The ranges of `t`, checked against the parameter's rows ([0, rows) when none are given).
std::vector<RowRange> ranges_of(const HfTensor& t, int64_t rows) {
  if (t.rows.empty()) return {{0, rows}};
  for (const RowRange& r : t.rows)
    COLLAGE_CHECK(r.begin >= 0 && r.count >= 0 && r.begin + r.count <= rows,
                  "{}: rows [{}, {}) outside the {} of '{}'", t.hf_name, r.begin, r.begin + r.count,
                  rows, t.name);
  return t.rows;
}

int64_t total_rows(const std::vector<RowRange>& ranges) {
  int64_t n = 0;
  for (const RowRange& r : ranges) n += r.count;
  return n;
}

}  // namespace

std::vector<int64_t> hf_tensor_shape(const HfTensor& t, const std::vector<int64_t>& full_shape) {
  const RowsCols p = rows_cols(t, full_shape);
  const int64_t rows = total_rows(ranges_of(t, p.rows));
  if (full_shape.size() == 1) return {rows};
  return t.transposed ? std::vector<int64_t>{p.cols, rows} : std::vector<int64_t>{rows, p.cols};
}

std::vector<bf16> hf_tensor_values(const HfTensor& t, const std::vector<int64_t>& full_shape,
                                   const bf16* parameter) {
  const RowsCols p = rows_cols(t, full_shape);
  const std::vector<RowRange> ranges = ranges_of(t, p.rows);
  const int64_t rows = total_rows(ranges), cols = p.cols;
  std::vector<bf16> out(size_t(rows * cols));
  int64_t row = 0;  // of the HF tensor before transposing
  for (const RowRange& r : ranges)
    for (int64_t i = 0; i < r.count; i++, row++) {
      const bf16* from = parameter + (r.begin + i) * cols;
      if (!t.transposed) {
        std::copy(from, from + cols, out.begin() + row * cols);
      } else {
        for (int64_t j = 0; j < cols; j++) out[size_t(j * rows + row)] = from[j];
      }
    }
  return out;
}

void scatter_hf_tensor(const HfTensor& t, const std::vector<int64_t>& full_shape,
                       const bf16* values, bf16* parameter) {
  const RowsCols p = rows_cols(t, full_shape);
  const std::vector<RowRange> ranges = ranges_of(t, p.rows);
  const int64_t rows = total_rows(ranges), cols = p.cols;
  int64_t row = 0;
  for (const RowRange& r : ranges)
    for (int64_t i = 0; i < r.count; i++, row++) {
      bf16* to = parameter + (r.begin + i) * cols;
      if (!t.transposed) {
        std::copy(values + row * cols, values + (row + 1) * cols, to);
      } else {
        for (int64_t j = 0; j < cols; j++) to[j] = values[j * rows + row];
      }
    }
}

HfNaming hf_naming(const ModelConfig& config) { return model_family(config).hf_naming(config); }

nlohmann::ordered_json hf_config_json(const HfNaming& naming, const std::string& torch_dtype) {
  COLLAGE_CHECK(!naming.model_class.empty(), "config.json: {}", naming.reason);
  nlohmann::ordered_json j;
  j["architectures"] = {naming.model_class};
  j["model_type"] = naming.model_type;
  for (const HfConfigKey& k : naming.model_keys) j[k.key] = k.value;
  for (const auto& [key, value] : naming.other_keys.items()) j[key] = value;
  j["torch_dtype"] = torch_dtype;
  return j;
}

namespace {

// A value as the forward reads it: null standing for what it means.
nlohmann::json resolved(const nlohmann::json& value, const HfConfigKey& key) {
  return value.is_null() ? nlohmann::json(key.null_means) : value;
}

// Numbers by value (1e-05 written by Python and 1e-5f written here agree to float precision);
// everything else exactly.
bool same_value(const nlohmann::json& a, const nlohmann::json& b) {
  if (a.is_number() && b.is_number()) {
    const double x = a.get<double>(), y = b.get<double>();
    return x == y || std::fabs(x - y) <= 1e-6 * std::max(std::fabs(x), std::fabs(y));
  }
  return a == b;
}

std::string architectures_of(const nlohmann::json& j) {
  if (j.contains("architectures") && j["architectures"].is_array() && !j["architectures"].empty() &&
      j["architectures"][0].is_string())
    return j["architectures"][0].get<std::string>();
  return "";
}

}  // namespace

std::vector<std::string> hf_config_mismatches(const ModelConfig& config,
                                              const nlohmann::json& config_json) {
  const HfNaming naming = hf_naming(config);
  COLLAGE_CHECK(!naming.model_class.empty(), "{}", naming.reason);
  std::vector<std::string> lines;
  const std::string file_class = architectures_of(config_json);
  if (file_class != naming.model_class)
    lines.push_back(fmt::format("architectures is [{}], the config's model is a {}",
                                file_class.empty() ? "missing" : "\"" + file_class + "\"",
                                naming.model_class));
  for (const HfConfigKey& k : naming.model_keys) {
    const bool present = config_json.contains(k.key);
    if (!present && k.hf_default.is_null() && k.null_means.is_null()) {
      lines.push_back(fmt::format("{} is missing (the config's {} is {})", k.key,
                                  k.collage_key.empty() ? "model" : k.collage_key, k.value.dump()));
      continue;
    }
    const nlohmann::json file_value =
        resolved(present ? config_json.at(k.key) : nlohmann::json(k.hf_default), k);
    if (same_value(file_value, resolved(k.value, k))) continue;
    lines.push_back(fmt::format(
        "{} is {}{}, {}", k.key, present ? config_json.at(k.key).dump() : k.hf_default.dump(),
        present ? "" : " (transformers' default: the file leaves it out)",
        k.collage_key.empty()
            ? fmt::format("collage computes {}", k.value.dump())
            : fmt::format("the config's {} gives {}", k.collage_key, k.value.dump())));
  }
  return lines;
}

namespace {

// A key of config.json, or `fallback` when it is missing or null; Error naming the file and
// key when it has another type.
template <typename T>
T get(const nlohmann::json& j, const char* key, T fallback, const std::string& path) {
  if (!j.contains(key) || j.at(key).is_null()) return fallback;
  try {
    return j.at(key).get<T>();
  } catch (const nlohmann::json::exception&) {
    fail("{}: config.json {} is {}: not the type transformers reads", path, key, j.at(key).dump());
  }
}

template <typename T>
T need(const nlohmann::json& j, const char* key, const std::string& path) {
  COLLAGE_CHECK(j.contains(key) && !j.at(key).is_null(), "{}: config.json has no {}", path, key);
  return get<T>(j, key, T{}, path);
}

ModelConfig gpt2_model(const nlohmann::json& j, const std::string& path, ModelConfig m) {
  m.arch = "gpt";
  m.position_embedding = "learned";
  m.n_layer = need<int>(j, "n_layer", path);
  m.hidden_size = need<int>(j, "n_embd", path);
  m.n_head = need<int>(j, "n_head", path);
  m.ffn_hidden_size = get<int>(j, "n_inner", 0, path);
  m.vocab_size = need<int>(j, "vocab_size", path);
  m.max_position_embeddings = get<int>(j, "n_positions", 1024, path);
  m.layernorm_eps = get<float>(j, "layer_norm_epsilon", 1e-5f, path);
  m.tie_embeddings = get<bool>(j, "tie_word_embeddings", true, path);
  m.init_std = get<float>(j, "initializer_range", m.init_std, path);
  return m;
}

ModelConfig gpt_neox_model(const nlohmann::json& j, const std::string& path, ModelConfig m) {
  m.arch = "gpt";
  m.position_embedding = "rope";
  m.n_layer = need<int>(j, "num_hidden_layers", path);
  m.hidden_size = need<int>(j, "hidden_size", path);
  m.n_head = need<int>(j, "num_attention_heads", path);
  m.ffn_hidden_size = need<int>(j, "intermediate_size", path);
  m.vocab_size = need<int>(j, "vocab_size", path);
  m.max_position_embeddings = get<int>(j, "max_position_embeddings", 2048, path);
  m.layernorm_eps = get<float>(j, "layer_norm_eps", 1e-5f, path);
  m.rope_base = get<float>(j, "rotary_emb_base", get<float>(j, "rope_theta", 10000.0f, path), path);
  m.tie_embeddings = get<bool>(j, "tie_word_embeddings", false, path);
  m.init_std = get<float>(j, "initializer_range", m.init_std, path);
  return m;
}

ModelConfig encoder_model(const nlohmann::json& j, const std::string& path, ModelConfig m,
                          bool roberta) {
  m.arch = roberta ? "roberta" : "bert";
  m.position_embedding = "learned";
  m.tie_embeddings = true;
  m.n_layer = need<int>(j, "num_hidden_layers", path);
  m.hidden_size = need<int>(j, "hidden_size", path);
  m.n_head = need<int>(j, "num_attention_heads", path);
  m.ffn_hidden_size = need<int>(j, "intermediate_size", path);
  m.vocab_size = need<int>(j, "vocab_size", path);
  m.max_position_embeddings = get<int>(j, "max_position_embeddings", 512, path);
  m.type_vocab_size = get<int>(j, "type_vocab_size", 2, path);
  m.layernorm_eps = get<float>(j, "layer_norm_eps", 1e-12f, path);
  m.pad_token_id = get<int>(j, "pad_token_id", roberta ? 1 : 0, path);
  m.hidden_dropout = get<float>(j, "hidden_dropout_prob", m.hidden_dropout, path);
  m.attention_dropout = get<float>(j, "attention_probs_dropout_prob", m.attention_dropout, path);
  m.init_std = get<float>(j, "initializer_range", m.init_std, path);
  return m;
}

}  // namespace

ModelConfig model_config_from_hf(const nlohmann::json& j, const std::string& path,
                                 const ModelConfig& base) {
  COLLAGE_CHECK(j.is_object(), "{}: config.json is not a JSON object", path);
  const std::string cls = architectures_of(j);
  ModelConfig m;
  if (cls == "GPT2LMHeadModel")
    m = gpt2_model(j, path, base);
  else if (cls == "GPTNeoXForCausalLM")
    m = gpt_neox_model(j, path, base);
  else if (cls == "BertForPreTraining")
    m = encoder_model(j, path, base, /*roberta=*/false);
  else if (cls == "RobertaForMaskedLM")
    m = encoder_model(j, path, base, /*roberta=*/true);
  else
    fail(
        "{}: config.json architectures is {}: collage reads GPT2LMHeadModel, "
        "GPTNeoXForCausalLM, BertForPreTraining and RobertaForMaskedLM",
        path, j.contains("architectures") ? j.at("architectures").dump() : "missing");
  if (m.ffn_hidden_size == 4 * m.hidden_size) m.ffn_hidden_size = 0;  // collage's default
  // What the file sets that collage's blocks do not compute (a partial rotary, a parallel
  // residual, another activation) shows as a disagreement with the naming of the model read.
  const std::vector<std::string> lines = hf_config_mismatches(m, j);
  COLLAGE_CHECK(lines.empty(), "{}: a {} that collage does not compute:\n  {}", path, cls,
                fmt::join(lines, "\n  "));
  return m;
}

}  // namespace collage
