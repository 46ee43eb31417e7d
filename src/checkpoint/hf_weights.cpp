// Weights from a Hugging Face directory: see hf_weights.h.
#include "checkpoint/hf_weights.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "checkpoint/posix_file.h"
#include "checkpoint/safetensors_reader.h"
#include "core/error.h"
#include "model/hf_naming.h"
#include "model/trainable_model.h"

namespace collage {

namespace fs = std::filesystem;

namespace {

constexpr const char* kHfPrefix = "hf:";

// IEEE half to float, exactly (every half is a float).
float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
  uint32_t bits;
  if (exponent == 0x1f) {  // inf, NaN
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else if (exponent != 0) {  // normal
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {  // ±0
    bits = sign;
  } else {  // subnormal: normalise
    exponent = 113;
    while ((mantissa & 0x400u) == 0) mantissa <<= 1, exponent--;
    bits = sign | (exponent << 23) | ((mantissa & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// A tensor's bytes as bf16: BF16 as they are, F32 and F16 (widened exactly) rounded to
// nearest-even; `rounded` counts the values that changed.
std::vector<bf16> to_bf16(const std::vector<uint8_t>& bytes, const std::string& dtype,
                          const std::string& where, int64_t& rounded) {
  std::vector<bf16> out;
  auto from_float = [&](float f) {
    const bf16 b = float_to_bf16(f);
    if (bf16_to_float(b) != f && f == f) rounded++;
    out.push_back(b);
  };
  if (dtype == "BF16") {
    out.resize(bytes.size() / 2);
    std::memcpy(out.data(), bytes.data(), bytes.size());
  } else if (dtype == "F32") {
    out.reserve(bytes.size() / 4);
    for (size_t i = 0; i < bytes.size(); i += 4) {
      float f;
      std::memcpy(&f, bytes.data() + i, 4);
      from_float(f);
    }
  } else if (dtype == "F16") {
    out.reserve(bytes.size() / 2);
    for (size_t i = 0; i < bytes.size(); i += 2) {
      uint16_t h;
      std::memcpy(&h, bytes.data() + i, 2);
      from_float(half_to_float(h));
    }
  } else {
    fail("{}: dtype {}: collage reads BF16, F32 and F16 weights", where, dtype);
  }
  return out;
}

// Tensors transformers keeps beside the weights, which collage computes instead: causal masks,
// position ids, rotary frequencies.
bool is_buffer(const std::string& name) {
  for (const char* suffix : {".attn.bias", ".attn.masked_bias", ".attention.bias",
                             ".attention.masked_bias", "position_ids", "rotary_emb.inv_freq"})
    if (name.ends_with(suffix)) return true;
  return false;
}

// A tied head's copy, which save_pretrained usually leaves out but some files keep.
bool is_tied_copy(const std::string& name, const ModelConfig& model) {
  if (!model.tie_embeddings) return false;
  for (const char* tied :
       {"lm_head.weight", "embed_out.weight", "cls.predictions.decoder.weight",
        "cls.predictions.decoder.bias", "lm_head.decoder.weight", "lm_head.decoder.bias"})
    if (name == tied) return true;
  return false;
}

struct Source {
  const SafetensorsReader& reader;
  std::string directory;
  std::set<std::string> used;  // the file's names read
  int64_t rounded = 0;

  // The file's name for `name` (with or without the base prefix); "" when it has neither.
  std::string find(const std::string& name, const std::string& prefix) const {
    if (reader.contains(name)) return name;
    if (!prefix.empty() && name.starts_with(prefix) && reader.contains(name.substr(prefix.size())))
      return name.substr(prefix.size());
    return "";
  }
  // Tensor `file_name` as bf16, checked to have `shape`.
  std::vector<bf16> read(const std::string& file_name, const std::vector<int64_t>& shape,
                         const std::string& what) {
    const SafetensorsStoredTensor& t = reader.tensor(file_name);
    COLLAGE_CHECK(t.shape == shape,
                  "{}: tensor '{}' ({}) has shape [{}], collage's model needs [{}]", t.file,
                  file_name, what, fmt::join(t.shape, ", "), fmt::join(shape, ", "));
    used.insert(file_name);
    return to_bf16(reader.read(file_name), t.dtype,
                   fmt::format("{}: tensor '{}'", t.file, file_name), rounded);
  }
};

// The model section of a collage export's metadata, and the export itself.
void read_collage_metadata(const SafetensorsReader& reader, const std::string& dir, HfWeights& w) {
  const auto& meta = reader.metadata();
  if (meta.count("collage_config"))
    w.collage_config =
        parse_config(meta.at("collage_config"), dir + " (the export's collage_config)");
  if (meta.count("step")) w.step = std::stoll(meta.at("step"));
  if (meta.count("precision")) w.precision = meta.at("precision");
}

}  // namespace

bool is_hf_source(const std::string& source) { return source.rfind(kHfPrefix, 0) == 0; }

std::string hf_source_directory(const std::string& source) {
  return is_hf_source(source) ? source.substr(std::strlen(kHfPrefix)) : source;
}

namespace {

// The model the directory holds and its naming (w.model, w.naming and the collage export's
// metadata), checked against `expected`.
HfNaming read_model(const SafetensorsReader& reader, const std::string& directory,
                    const ModelConfig* expected, HfWeights& w) {
  std::error_code ec;
  read_collage_metadata(reader, directory, w);
  const fs::path config_path = fs::path(directory) / "config.json";
  const bool has_config = fs::exists(config_path, ec);
  HfNaming naming;
  if (has_config) {
    nlohmann::json config_json;
    try {
      config_json = nlohmann::json::parse(read_file(config_path.string()));
    } catch (const nlohmann::json::exception& e) {
      fail("{}: not JSON: {}", config_path.string(), e.what());
    }
    const ModelConfig base = w.collage_config ? w.collage_config->model : ModelConfig{};
    w.model = model_config_from_hf(config_json, config_path.string(), expected ? *expected : base);
    if (expected) {
      const std::vector<std::string> lines = hf_config_mismatches(*expected, config_json);
      COLLAGE_CHECK(lines.empty(), "{} disagrees with the config's model section:\n  {}",
                    config_path.string(), fmt::join(lines, "\n  "));
      w.model = *expected;
    }
    naming = hf_naming(w.model);
  } else {
    COLLAGE_CHECK(reader.metadata().count("naming") &&
                      reader.metadata().at("naming") == "collage" && w.collage_config,
                  "{}: no config.json, and its safetensors are not a `collage export --names "
                  "collage` (their metadata names no collage config)",
                  directory);
    w.model = w.collage_config->model;
    if (expected) {
      Config saved, wanted;
      saved.model = w.model;
      wanted.model = *expected;
      std::string lines;
      for (const ConfigChange& c : config_changes(saved, wanted))
        if (c.key != "model.hidden_dropout" && c.key != "model.attention_dropout")
          lines += fmt::format("\n  {}: {} in the export, {} in the config", c.key, c.old_value,
                               c.new_value);
      COLLAGE_CHECK(lines.empty(), "{}: the export's model differs from the config's:{}", directory,
                    lines);
      w.model = *expected;
    }
  }
  w.naming = naming.model_class.empty() ? "collage" : naming.model_class;
  return naming;
}

SafetensorsReader open_directory(const std::string& directory) {
  std::error_code ec;
  COLLAGE_CHECK(fs::is_directory(directory, ec),
                "{}: not a directory (a Hugging Face model directory holds config.json and "
                "model.safetensors)",
                directory);
  return SafetensorsReader(directory);
}

}  // namespace

void check_hf_directory(const std::string& directory, const ModelConfig& expected) {
  HfWeights w;
  read_model(open_directory(directory), directory, &expected, w);
}

HfWeights read_hf_weights(const std::string& directory, const ModelConfig* expected) {
  HfWeights w;
  w.directory = directory;
  const SafetensorsReader reader = open_directory(directory);
  const HfNaming naming = read_model(reader, directory, expected, w);
  w.table = model_parameter_table(w.model, 1);
  std::map<std::string, const ParameterInfo*> info;
  int64_t total = 0;
  for (const ParameterInfo& p : w.table) {
    info[p.name] = &p;
    total = std::max(total, p.offset + p.numel);
  }
  w.values.assign(size_t(total), bf16{0});

  Source source{reader, directory, {}, 0};
  if (naming.model_class.empty()) {  // collage's names and shapes
    for (const ParameterInfo& p : w.table) {
      COLLAGE_CHECK(reader.contains(p.name), "{}: no tensor '{}' (the model's parameter)",
                    directory, p.name);
      const std::vector<bf16> v = source.read(p.name, p.full_shape, "collage's parameter");
      std::copy(v.begin(), v.end(), w.values.begin() + p.offset);
    }
  } else {
    const std::string& prefix = naming.base_prefix;
    for (const HfTensor& t : naming.tensors) {
      const ParameterInfo& p = *info.at(t.name);
      const std::string name = source.find(t.hf_name, prefix);
      COLLAGE_CHECK(!name.empty(), "{}: no tensor '{}' ({} needs it; collage's '{}')", directory,
                    t.hf_name, naming.model_class, t.name);
      const std::vector<bf16> v =
          source.read(name, hf_tensor_shape(t, p.full_shape), "collage's " + t.name);
      scatter_hf_tensor(t, p.full_shape, v.data(), w.values.data() + p.offset);
    }
  }
  std::vector<std::string> unknown;
  for (const SafetensorsStoredTensor& t : reader.tensors()) {
    if (source.used.count(t.name)) continue;
    if (is_buffer(t.name) || is_tied_copy(t.name, w.model))
      w.skipped.push_back(t.name);
    else
      unknown.push_back(t.name);
  }
  COLLAGE_CHECK(
      unknown.empty(),
      "{}: {} tensor(s) that a {} has no place for: {}{} (a model collage does not "
      "compute, or another class's file)",
      directory, unknown.size(), w.naming,
      fmt::join(unknown.begin(), unknown.begin() + std::min<size_t>(unknown.size(), 5), ", "),
      unknown.size() > 5 ? ", ..." : "");
  w.tensors_read = int64_t(source.used.size());
  w.values_rounded = source.rounded;
  return w;
}

}  // namespace collage
