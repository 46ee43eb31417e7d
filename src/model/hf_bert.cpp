// BERT and RoBERTa under Hugging Face's names (hf_naming.h). collage's encoder is HF's: post-LN
// blocks, erf GELU ("gelu"), attention scaled by 1/√HS over the unmasked keys, an MLM head
// LN(gelu(dense(x))) · wordᵀ + its own bias with the decoder tied to the word embeddings, and
// for BERT the tanh pooler on [CLS] and the NSP classifier (BertForPreTraining); RoBERTa
// numbers positions past pad_token_id as RobertaEmbeddings does (RobertaForMaskedLM).
// collage's fused attn.qkv rows [q | k | v] are HF's query, key and value, in that order.
#include <fmt/format.h>

#include "config/architecture.h"
#include "model/hf_naming.h"

namespace collage {

HfNaming bert_hf_naming(const ModelConfig& c) {
  const bool bert = architecture(c).next_sentence;  // BERT: pooler and NSP; RoBERTa: neither
  const std::string prefix = bert ? "bert." : "roberta.";
  HfNaming n;
  n.model_class = bert ? "BertForPreTraining" : "RobertaForMaskedLM";
  n.model_type = bert ? "bert" : "roberta";
  n.base_prefix = prefix;
  n.reason = bert ? "BERT is HF's BERT: post-LN blocks, erf GELU, the MLM head with its own "
                    "decoder bias, the pooler and the NSP classifier"
                  : "RoBERTa is HF's RoBERTa: BERT's blocks and MLM head, positions past "
                    "pad_token_id, no pooler";
  auto add = [&](std::string hf, std::string name, std::vector<RowRange> rows = {}) {
    n.tensors.push_back({std::move(hf), std::move(name), std::move(rows), false});
  };
  auto pair = [&](const std::string& hf, const std::string& name,
                  const std::vector<RowRange>& rows = {}) {
    add(hf + ".weight", name + ".weight", rows);
    add(hf + ".bias", name + ".bias", rows);
  };
  const int64_t C = c.hidden_size;
  add(prefix + "embeddings.word_embeddings.weight", "embeddings.word.weight",
      first_rows(c.vocab_size));
  add(prefix + "embeddings.position_embeddings.weight", "embeddings.position.weight");
  add(prefix + "embeddings.token_type_embeddings.weight", "embeddings.token_type.weight");
  pair(prefix + "embeddings.LayerNorm", "embeddings.ln");
  for (int l = 0; l < c.n_layer; l++) {
    const std::string p = fmt::format("h.{}.", l);
    const std::string hf = fmt::format("{}encoder.layer.{}.", prefix, l);
    pair(hf + "attention.self.query", p + "attn.qkv", {{0, C}});
    pair(hf + "attention.self.key", p + "attn.qkv", {{C, C}});
    pair(hf + "attention.self.value", p + "attn.qkv", {{2 * C, C}});
    pair(hf + "attention.output.dense", p + "attn.proj");
    pair(hf + "attention.output.LayerNorm", p + "ln_1");
    pair(hf + "intermediate.dense", p + "mlp.fc1");
    pair(hf + "output.dense", p + "mlp.fc2");
    pair(hf + "output.LayerNorm", p + "ln_2");
  }
  if (bert) {
    pair("bert.pooler.dense", "pooler.dense");
    pair("cls.predictions.transform.dense", "mlm.dense");
    pair("cls.predictions.transform.LayerNorm", "mlm.ln");
    add("cls.predictions.bias", "mlm.decoder.bias", first_rows(c.vocab_size));
    pair("cls.seq_relationship", "nsp");
  } else {
    pair("lm_head.dense", "mlm.dense");
    pair("lm_head.layer_norm", "mlm.ln");
    add("lm_head.bias", "mlm.decoder.bias", first_rows(c.vocab_size));
  }

  n.model_keys = hf_size_keys(c);
  n.model_keys.insert(
      n.model_keys.end(),
      {
          {"max_position_embeddings", c.max_position_embeddings, "model.max_position_embeddings",
           512},
          {"type_vocab_size", c.type_vocab_size, "model.type_vocab_size", 2},
          {"layer_norm_eps", shortest_decimal(c.layernorm_eps), "model.layernorm_eps", 1e-12},
          {"hidden_act", "gelu", "", "gelu"},  // erf GELU, in the blocks and the MLM head
          {"position_embedding_type", "absolute", "", "absolute"},
          {"tie_word_embeddings", true, "", true},  // the MLM decoder is the word embeddings
      });
  // RoBERTa's positions start past the padding id: it shapes the forward.
  if (bert)
    n.other_keys["pad_token_id"] = c.pad_token_id;
  else
    n.model_keys.push_back({"pad_token_id", c.pad_token_id, "model.pad_token_id", 1});
  n.other_keys["hidden_dropout_prob"] = shortest_decimal(c.hidden_dropout);
  n.other_keys["attention_probs_dropout_prob"] = shortest_decimal(c.attention_dropout);
  n.other_keys["initializer_range"] = shortest_decimal(c.init_std);
  return n;
}

}  // namespace collage
