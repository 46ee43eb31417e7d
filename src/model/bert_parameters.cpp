// The BERT/RoBERTa parameter table (names, shard shapes, offsets), the views of the contiguous
// parameter/gradient memory, initialisation and host load/save (bert.h).
#include <algorithm>
#include <string_view>
#include <unordered_map>

#include "config/architecture.h"
#include "core/error.h"
#include "model/bert.h"
#include "model/parameter_table.h"
#include "model/weight_init.h"

namespace collage {

namespace {

void validate_bert_config(const ModelConfig& c, int tp) {
  COLLAGE_CHECK(architecture(c).family == ModelFamily::bert, "model.arch: '{}' is not an encoder",
                c.arch);
  check_transformer_shape(c);
  COLLAGE_CHECK(c.vocab_size >= 1 && c.type_vocab_size >= 1 && c.max_position_embeddings >= 1,
                "model: vocab_size {}, type_vocab_size {} and max_position_embeddings {} must be "
                ">= 1",
                c.vocab_size, c.type_vocab_size, c.max_position_embeddings);
  check_tensor_parallel_split(c, tp);
}

}  // namespace

std::vector<ParameterInfo> bert_parameter_table(const ModelConfig& config, int tp) {
  validate_bert_config(config, tp);
  const int64_t C = config.hidden_size, F = config.ffn(), Vp = config.padded_vocab(tp);
  ParameterTableBuilder table(tp);
  using S = TensorSplit;
  table.add("embeddings.word.weight", {Vp, C}, S::rows, true);
  table.add("embeddings.position.weight", {config.max_position_embeddings, C}, S::replicated, true);
  table.add("embeddings.token_type.weight", {config.type_vocab_size, C}, S::replicated, true);
  table.layernorm("embeddings.ln", C);
  for (int l = 0; l < config.n_layer; ++l) {  // post-LN
    const std::string p = "h." + std::to_string(l) + ".";
    table.linear(p + "attn.qkv", 3 * C, C, S::qkv_rows);
    table.linear(p + "attn.proj", C, C, S::columns);
    table.layernorm(p + "ln_1", C);
    table.linear(p + "mlp.fc1", F, C, S::rows);
    table.linear(p + "mlp.fc2", C, F, S::columns);
    table.layernorm(p + "ln_2", C);
  }
  table.linear("mlm.dense", C, C, S::replicated);
  table.layernorm("mlm.ln", C);
  // Split with the tied word embedding's rows.
  table.add("mlm.decoder.bias", {Vp}, S::rows, false);
  if (architecture(config).next_sentence) {
    table.linear("pooler.dense", C, C, S::replicated);
    table.linear("nsp", 2, C, S::replicated);
  }
  return table.finish();
}

template <typename Storage>
typename BertT<Storage>::Weights BertT<Storage>::bind_weights(Storage* base) const {
  std::unordered_map<std::string, Storage*> by_name;
  for (const ParameterInfo& info : table_) by_name[info.name] = base + info.offset;
  auto at = [&](const std::string& name) {
    auto it = by_name.find(name);
    return it == by_name.end() ? nullptr : it->second;
  };
  Weights w;
  w.word = at("embeddings.word.weight");
  w.position = at("embeddings.position.weight");
  w.token_type = at("embeddings.token_type.weight");
  w.emb_ln_w = at("embeddings.ln.weight");
  w.emb_ln_b = at("embeddings.ln.bias");
  for (int l = 0; l < config_.n_layer; ++l) {
    const std::string p = "h." + std::to_string(l) + ".";
    w.layers.push_back({at(p + "attn.qkv.weight"), at(p + "attn.qkv.bias"),
                        at(p + "attn.proj.weight"), at(p + "attn.proj.bias"), at(p + "ln_1.weight"),
                        at(p + "ln_1.bias"), at(p + "mlp.fc1.weight"), at(p + "mlp.fc1.bias"),
                        at(p + "mlp.fc2.weight"), at(p + "mlp.fc2.bias"), at(p + "ln_2.weight"),
                        at(p + "ln_2.bias")});
  }
  w.mlm_dense_w = at("mlm.dense.weight");
  w.mlm_dense_b = at("mlm.dense.bias");
  w.mlm_ln_w = at("mlm.ln.weight");
  w.mlm_ln_b = at("mlm.ln.bias");
  w.decoder_b = at("mlm.decoder.bias");
  w.pooler_w = at("pooler.dense.weight");
  w.pooler_b = at("pooler.dense.bias");
  w.nsp_w = at("nsp.weight");
  w.nsp_b = at("nsp.bias");
  return w;
}

template <typename Storage>
void BertT<Storage>::init_weights(uint64_t seed) {
  const std::vector<float> host =
      initial_values(table_, num_parameters_, layout_, seed, [&](const ParameterInfo& info) {
        if (ends_with(info.name, ".bias")) return TensorInit{TensorInit::zeros};
        if (ends_with(info.name, "ln.weight") || ends_with(info.name, "ln_1.weight") ||
            ends_with(info.name, "ln_2.weight"))
          return TensorInit{TensorInit::ones};
        const bool vocab = info.name == "embeddings.word.weight";
        return TensorInit{TensorInit::normal, config_.init_std, vocab ? int64_t{V_} : -1};
      });
  this->load_parameters(host.data());
}

// Explicit instantiation of the members defined in this file (the rest: bert.cpp).
#define COLLAGE_INSTANTIATE(S)                                          \
  template typename BertT<S>::Weights BertT<S>::bind_weights(S*) const; \
  template void BertT<S>::init_weights(uint64_t);
COLLAGE_INSTANTIATE(bf16)
COLLAGE_INSTANTIATE(float)
#undef COLLAGE_INSTANTIATE

}  // namespace collage
