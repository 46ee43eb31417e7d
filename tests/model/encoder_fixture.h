#pragma once
// The encoder fixtures of scripts/reference/bert_reference.py (bert_encoder.bin,
// roberta_encoder.bin) as a config, a labelled batch and the weights in a BertT's layout: shared
// by the reference test and the every-position inference test.
#include <algorithm>
#include <string>
#include <vector>

#include "fixture_reader.h"
#include "model/bert.h"

namespace collage::test {

struct EncoderCase {
  ModelConfig config;
  int B, T, P;
  std::vector<int32_t> ids, mask, segments, positions, labels, nsp;
  BertInputs batch() const {
    return {ids.data(),       mask.data(),   segments.data(),
            positions.data(), labels.data(), nsp.empty() ? nullptr : nsp.data()};
  }
};

inline Fixture read_encoder_fixture(const std::string& arch) {
  // Built with append: GCC 12 warns (-Wstringop-overflow, a false positive) on the inlined
  // memcpy of a chain of std::string operator+.
  std::string path = COLLAGE_SOURCE_DIR;
  path.append("/tests/fixtures/").append(arch).append("_encoder.bin");
  return read_fixture(path);
}

inline std::vector<int32_t> fixture_ints(const Fixture& f, const std::string& name) {
  const std::vector<float>& data = entry(f, name).data;
  return std::vector<int32_t>(data.begin(), data.end());
}

inline EncoderCase encoder_case(const Fixture& f, const std::string& arch) {
  const std::vector<float>& c = entry(f, "config").data;
  EncoderCase k;
  k.config.arch = arch;
  k.config.n_layer = int(c[0]);
  k.config.hidden_size = int(c[1]);
  k.config.n_head = int(c[2]);
  k.config.ffn_hidden_size = int(c[3]);
  k.config.vocab_size = int(c[4]);
  k.config.max_position_embeddings = int(c[5]);
  k.config.type_vocab_size = int(c[6]);
  k.config.pad_token_id = int(c[7]);
  k.config.layernorm_eps = c[8];
  k.P = int(c[9]);
  const std::vector<int64_t>& shape = entry(f, "batch.input_ids").shape;
  k.B = int(shape[0]), k.T = int(shape[1]);
  k.ids = fixture_ints(f, "batch.input_ids");
  k.mask = fixture_ints(f, "batch.input_mask");
  k.segments = fixture_ints(f, "batch.segment_ids");
  k.positions = fixture_ints(f, "batch.masked_lm_positions");
  k.labels = fixture_ints(f, "batch.masked_lm_ids");
  if (arch == "bert") k.nsp = fixture_ints(f, "batch.next_sentence_labels");
  return k;
}

// The fixture's "param.NAME" tensors in the model's parameter layout (host floats).
template <typename Storage>
std::vector<float> fixture_parameters(const Fixture& f, const BertT<Storage>& model) {
  std::vector<float> host(size_t(model.num_parameters()));
  for (const ParameterInfo& p : model.parameters()) {
    const FixtureTensor& t = entry(f, "param." + p.name);
    if (t.shape != p.shape) throw std::runtime_error("fixture shape differs for " + p.name);
    std::copy(t.data.begin(), t.data.end(), host.begin() + p.offset);
  }
  return host;
}

}  // namespace collage::test
