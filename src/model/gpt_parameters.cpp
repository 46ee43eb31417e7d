// The GPT parameter table (names, shard shapes, offsets), the views of the contiguous
// parameter/gradient memory, initialisation and host load/save.
#include <algorithm>
#include <cmath>
#include <string_view>
#include <type_traits>
#include <unordered_map>

#include "config/architecture.h"
#include "core/error.h"
#include "model/gpt.h"
#include "model/parameter_table.h"
#include "model/weight_init.h"

namespace collage {

namespace {

void validate_gpt_config(const ModelConfig& c, int tp) {
  COLLAGE_CHECK(architecture(c).family == ModelFamily::gpt, "model.arch: '{}' is not a GPT",
                c.arch);
  check_transformer_shape(c);
  COLLAGE_CHECK(c.vocab_size >= 1, "model.vocab_size: {} must be >= 1", c.vocab_size);
  COLLAGE_CHECK(c.position_embedding == "learned" || c.position_embedding == "rope",
                "model.position_embedding: '{}' is not learned or rope", c.position_embedding);
  COLLAGE_CHECK(c.position_embedding != "rope" || c.head_size() % 2 == 0,
                "model: rope needs an even head size, got {}", c.head_size());
  COLLAGE_CHECK(c.max_position_embeddings >= 1, "model.max_position_embeddings: {} must be >= 1",
                c.max_position_embeddings);
  check_tensor_parallel_split(c, tp);
}

}  // namespace

std::vector<ParameterInfo> gpt_parameter_table(const ModelConfig& config, int tp) {
  validate_gpt_config(config, tp);
  const int64_t C = config.hidden_size, F = config.ffn(), Vp = config.padded_vocab(tp);
  ParameterTableBuilder table(tp);
  using S = TensorSplit;
  table.add("wte.weight", {Vp, C}, S::rows, true);
  if (config.position_embedding == "learned")
    table.add("wpe.weight", {config.max_position_embeddings, C}, S::replicated, true);
  for (int l = 0; l < config.n_layer; ++l) {  // pre-LN
    const std::string p = "h." + std::to_string(l) + ".";
    table.layernorm(p + "ln_1", C);
    table.linear(p + "attn.qkv", 3 * C, C, S::qkv_rows);
    table.linear(p + "attn.proj", C, C, S::columns);
    table.layernorm(p + "ln_2", C);
    table.linear(p + "mlp.fc1", F, C, S::rows);
    table.linear(p + "mlp.fc2", C, F, S::columns);
  }
  table.layernorm("ln_f", C);
  if (!config.tie_embeddings) table.add("lm_head.weight", {Vp, C}, S::rows, true);
  return table.finish();
}

template <typename Storage>
std::vector<ParameterInfo> GptT<Storage>::parameter_table(const ModelConfig& config, int tp) {
  return gpt_parameter_table(config, tp);
}

template <typename Storage>
typename GptT<Storage>::Weights GptT<Storage>::bind_weights(Storage* base) const {
  std::unordered_map<std::string, Storage*> by_name;
  for (const ParameterInfo& info : table_) by_name[info.name] = base + info.offset;
  auto at = [&](const std::string& name) {
    auto it = by_name.find(name);
    return it == by_name.end() ? nullptr : it->second;
  };
  Weights w;
  w.wte = at("wte.weight");
  w.wpe = at("wpe.weight");
  for (int l = 0; l < config_.n_layer; ++l) {
    std::string p = "h." + std::to_string(l) + ".";
    w.layers.push_back({at(p + "ln_1.weight"), at(p + "ln_1.bias"), at(p + "attn.qkv.weight"),
                        at(p + "attn.qkv.bias"), at(p + "attn.proj.weight"),
                        at(p + "attn.proj.bias"), at(p + "ln_2.weight"), at(p + "ln_2.bias"),
                        at(p + "mlp.fc1.weight"), at(p + "mlp.fc1.bias"), at(p + "mlp.fc2.weight"),
                        at(p + "mlp.fc2.bias")});
  }
  w.lnf_w = at("ln_f.weight");
  w.lnf_b = at("ln_f.bias");
  w.head = config_.tie_embeddings ? w.wte : at("lm_head.weight");
  return w;
}

template <typename Storage>
void GptT<Storage>::init_weights(uint64_t seed) {
  const double std = config_.init_std;
  const double residual_std = std / std::sqrt(2.0 * config_.n_layer);  // GPT-2 scaled init
  const std::vector<float> host =
      initial_values(table_, num_parameters_, layout_, seed, [&](const ParameterInfo& info) {
        if (ends_with(info.name, ".bias")) return TensorInit{TensorInit::zeros};
        if (info.name.starts_with("ln_f.") || ends_with(info.name, "ln_1.weight") ||
            ends_with(info.name, "ln_2.weight"))
          return TensorInit{TensorInit::ones};
        const bool residual =
            ends_with(info.name, "attn.proj.weight") || ends_with(info.name, "mlp.fc2.weight");
        const bool vocab = info.name == "wte.weight" || info.name == "lm_head.weight";
        return TensorInit{TensorInit::normal, residual ? residual_std : std,
                          vocab ? int64_t{config_.vocab_size} : -1};
      });
  this->load_parameters(host.data());
}

// Explicit instantiation of the members defined in this file (the rest: gpt.cpp).
#define COLLAGE_INSTANTIATE(S)                                                           \
  template std::vector<ParameterInfo> GptT<S>::parameter_table(const ModelConfig&, int); \
  template typename GptT<S>::Weights GptT<S>::bind_weights(S*) const;                    \
  template void GptT<S>::init_weights(uint64_t);
COLLAGE_INSTANTIATE(bf16)
COLLAGE_INSTANTIATE(float)
#undef COLLAGE_INSTANTIATE

}  // namespace collage
