// `collage export` (src/tools/export.h, safetensors.h): the safetensors writer and reader, the
// GPT-2 and collage namings, and export_checkpoint() on a trained tiny run, refusals included.
// tests/export/export_gpt2_test.py checks the export against GPT-2's forward in torch.
#include "tools/export.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "checkpoint/safetensors.h"
#include "core/error.h"
#include "model/bert.h"
#include "model/gpt.h"
#include "synthetic_weights.h"
#include "tiny_run.h"
#include "train/trainer.h"

namespace collage {
namespace {

std::string slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void spit(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

template <typename T>
std::vector<uint8_t> bytes_of(const std::vector<T>& values) {
  std::vector<uint8_t> bytes(values.size() * sizeof(T));
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

class ExportSafetensors : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("collage_safetensors_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(ExportSafetensors, RoundTripsWithTheHeaderLayoutOfTheFormat) {
  const std::vector<SafetensorsTensor> tensors = {
      {"a.weight", "BF16", {3}, bytes_of(std::vector<uint16_t>{0x3f80, 0xbf80, 0x4000})},
      {"b", "F32", {2, 2}, bytes_of(std::vector<float>{1.5f, -2.f, 0.25f, 8.f})},
      {"scalar", "I64", {}, bytes_of(std::vector<int64_t>{-7})},
      {"empty", "F32", {0, 4}, {}},
      {"c", "U8", {5}, {1, 2, 3, 4, 5}}};
  const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"step", "12"}};
  const std::string path = (dir_ / "m.safetensors").string();
  const uint64_t written = write_safetensors(path, tensors, metadata);

  // The header by hand: u64 length, JSON padded with spaces to 8, offsets back to back.
  const std::string file = slurp(path);
  ASSERT_EQ(written, file.size());
  uint64_t n = 0;
  std::memcpy(&n, file.data(), 8);
  EXPECT_EQ((8 + n) % 8, 0u);
  const std::string text = file.substr(8, n);
  EXPECT_EQ(text.front(), '{');
  EXPECT_EQ(text.substr(text.find_last_not_of(' ') + 1),
            std::string(n - 1 - text.find_last_not_of(' '), ' '));
  const nlohmann::json header = nlohmann::json::parse(text);
  EXPECT_EQ(header.at("__metadata__"), nlohmann::json(metadata));
  const std::vector<std::pair<std::string, std::vector<uint64_t>>> offsets = {{"a.weight", {0, 6}},
                                                                              {"b", {6, 22}},
                                                                              {"scalar", {22, 30}},
                                                                              {"empty", {30, 30}},
                                                                              {"c", {30, 35}}};
  for (const auto& [name, expected] : offsets) {
    EXPECT_EQ(header.at(name).at("data_offsets").get<std::vector<uint64_t>>(), expected) << name;
  }
  EXPECT_EQ(header.at("b").at("dtype"), "F32");
  EXPECT_EQ(header.at("b").at("shape"), nlohmann::json({2, 2}));
  EXPECT_EQ(header.at("scalar").at("shape"), nlohmann::json::array());
  EXPECT_EQ(file.size(), 8 + n + 35);
  EXPECT_EQ(file.substr(8 + n + 6, 4), std::string("\0\0\xc0\x3f", 4));  // 1.5f

  const SafetensorsFile read = read_safetensors(path);
  EXPECT_EQ(read.metadata, metadata);
  ASSERT_EQ(read.tensors.size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); i++) {
    EXPECT_EQ(read.tensors[i].name, tensors[i].name);
    EXPECT_EQ(read.tensors[i].dtype, tensors[i].dtype);
    EXPECT_EQ(read.tensors[i].shape, tensors[i].shape);
    EXPECT_EQ(read.tensors[i].bytes, tensors[i].bytes);
  }
  EXPECT_EQ(safetensors_dtype_size("BF16"), 2u);
  EXPECT_EQ(safetensors_dtype_size("F32"), 4u);
  EXPECT_EQ(safetensors_dtype_size("F64"), 8u);
  EXPECT_EQ(safetensors_dtype_size("U8"), 1u);
}

void expect_error(const std::function<void()>& f, const std::string& fragment) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one saying '" << fragment << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST_F(ExportSafetensors, RefusesBadTensorsAndBadFilesNamingThem) {
  const std::string path = (dir_ / "bad.safetensors").string();
  auto write = [&](std::vector<SafetensorsTensor> tensors) {
    return [=] { write_safetensors(path, tensors, {}); };
  };
  expect_error(write({{"x", "F32", {2}, {0, 0, 0, 0}}}),
               "'x' has 4 bytes, but shape [2] of F32 needs 8");
  expect_error(write({{"x", "F32", {1}, {0, 0, 0, 0}}, {"x", "F32", {1}, {0, 0, 0, 0}}}),
               "tensor name 'x' is empty, reserved or repeated");
  expect_error(write({{"__metadata__", "U8", {1}, {0}}}), "reserved");
  expect_error(write({{"x", "F17", {1}, {0}}}), "unknown safetensors dtype 'F17'");

  // Files that are not whole or not consistent.
  write_safetensors(path, {{"x", "F32", {2}, std::vector<uint8_t>(8, 1)}}, {});
  const std::string good = slurp(path);
  spit(path, good.substr(0, good.size() - 1));
  expect_error([&] { read_safetensors(path); }, path +
                                                    ": bad safetensors header: tensor 'x': "
                                                    "data_offsets outside the 7 bytes of data");
  spit(path, good + "x");
  expect_error([&] { read_safetensors(path); }, path + ": the tensors cover 8 of the 9 data bytes");
  spit(path, good.substr(0, 4));
  expect_error([&] { read_safetensors(path); }, "not a safetensors file");
  std::string huge = good;
  const uint64_t too_long = good.size();
  std::memcpy(huge.data(), &too_long, 8);
  spit(path, huge);
  expect_error([&] { read_safetensors(path); }, "does not fit the file");
  auto with_header = [&](std::string json) {
    json.append((8 - json.size() % 8) % 8, ' ');
    std::string file(8, '\0');
    const uint64_t n = json.size();
    std::memcpy(file.data(), &n, 8);
    spit(path, file + json + std::string(8, '\0'));
  };
  with_header(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})");
  expect_error([&] { read_safetensors(path); }, "'x' starts at byte 4 of the data, expected 0");
  with_header(R"({"x":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})");
  expect_error([&] { read_safetensors(path); }, "needs 12 bytes, data_offsets span 8");
  with_header(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"__metadata__":{"a":1}})");
  expect_error([&] { read_safetensors(path); }, "__metadata__ value of 'a' is not a string");
  with_header(R"([1, 2])");
  expect_error([&] { read_safetensors(path); }, "not a JSON object");
}

const SafetensorsTensor& find(const std::vector<SafetensorsTensor>& tensors,
                              const std::string& name) {
  for (const SafetensorsTensor& t : tensors)
    if (t.name == name) return t;
  throw Error("no tensor " + name);
}

bf16 at(const SafetensorsTensor& t, int64_t i) {
  bf16 v;
  std::memcpy(&v, t.bytes.data() + i * 2, 2);
  return v;
}

TEST(ExportNames, Gpt2ExpressibleConfigGetsGpt2NamesShapesAndLayouts) {
  const CheckpointWeights w = synthetic_weights(kGpt);
  const HfNaming naming = export_naming(w.config.model);
  EXPECT_EQ(naming.model_class, "GPT2LMHeadModel");
  const std::vector<SafetensorsTensor> t = export_safetensors(w, naming, "BF16");
  std::vector<std::string> names;
  for (const SafetensorsTensor& x : t) names.push_back(x.name);
  std::vector<std::string> expected = {"transformer.wte.weight", "transformer.wpe.weight"};
  for (int l = 0; l < 2; l++)
    for (const char* s :
         {"ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
          "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight",
          "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"})
      expected.push_back(fmt::format("transformer.h.{}.{}", l, s));
  expected.push_back("transformer.ln_f.weight");
  expected.push_back("transformer.ln_f.bias");
  EXPECT_EQ(names, expected);  // lm_head.weight tied: left out

  auto shape = [&](const std::string& name) { return find(t, name).shape; };
  using S = std::vector<int64_t>;
  EXPECT_EQ(shape("transformer.wte.weight"), S({100, 32}));  // 128 padded rows trimmed
  EXPECT_EQ(shape("transformer.wpe.weight"), S({24, 32}));
  EXPECT_EQ(shape("transformer.h.0.attn.c_attn.weight"), S({32, 96}));
  EXPECT_EQ(shape("transformer.h.0.attn.c_attn.bias"), S({96}));
  EXPECT_EQ(shape("transformer.h.1.attn.c_proj.weight"), S({32, 32}));
  EXPECT_EQ(shape("transformer.h.1.mlp.c_fc.weight"), S({32, 128}));
  EXPECT_EQ(shape("transformer.h.1.mlp.c_proj.weight"), S({128, 32}));
  for (const SafetensorsTensor& x : t) EXPECT_EQ(x.dtype, "BF16");

  // Conv1D layouts: c_attn.weight[i][j] = qkv.weight[j][i]; vectors and wte rows as they are.
  std::map<std::string, const ParameterInfo*> info;
  for (const ParameterInfo& p : w.table) info[p.name] = &p;
  auto value = [&](const std::string& name, int64_t i) {
    return w.values[size_t(info.at(name)->offset + i)];
  };
  const SafetensorsTensor& c_attn = find(t, "transformer.h.1.attn.c_attn.weight");
  for (int64_t i = 0; i < 32; i++)
    for (int64_t j = 0; j < 96; j++)
      ASSERT_EQ(at(c_attn, i * 96 + j).bits, value("h.1.attn.qkv.weight", j * 32 + i).bits);
  const SafetensorsTensor& c_proj = find(t, "transformer.h.0.mlp.c_proj.weight");  // fc2 (C, F)
  for (int64_t i = 0; i < 128; i++)
    for (int64_t j = 0; j < 32; j++)
      ASSERT_EQ(at(c_proj, i * 32 + j).bits, value("h.0.mlp.fc2.weight", j * 128 + i).bits);
  const SafetensorsTensor& wte = find(t, "transformer.wte.weight");
  for (int64_t i = 0; i < 100 * 32; i++) ASSERT_EQ(at(wte, i).bits, value("wte.weight", i).bits);
  const SafetensorsTensor& bias = find(t, "transformer.h.0.attn.c_attn.bias");
  for (int64_t i = 0; i < 96; i++) ASSERT_EQ(at(bias, i).bits, value("h.0.attn.qkv.bias", i).bits);
}

TEST(ExportNames, UntiedGpt2GetsTheHeadAndItsConfigSaysSo) {
  const CheckpointWeights w = synthetic_weights(R"(
model: {n_layer: 1, hidden_size: 32, n_head: 2, vocab_size: 50257, max_position_embeddings: 24,
        ffn_hidden_size: 48, tie_embeddings: false, layernorm_eps: 1.0e-6, init_std: 0.01}
)");
  const std::vector<SafetensorsTensor> t =
      export_safetensors(w, export_naming(w.config.model), "BF16");
  EXPECT_EQ(find(t, "lm_head.weight").shape, std::vector<int64_t>({50257, 32}));
  EXPECT_EQ(find(t, "transformer.h.0.mlp.c_fc.weight").shape, std::vector<int64_t>({32, 48}));
  const nlohmann::ordered_json c = hf_config_json(hf_naming(w.config.model), "bfloat16");
  EXPECT_EQ(c.at("model_type"), "gpt2");
  EXPECT_EQ(c.at("architectures"), nlohmann::ordered_json({"GPT2LMHeadModel"}));
  EXPECT_EQ(c.at("vocab_size"), 50257);
  EXPECT_EQ(c.at("n_positions"), 24);
  EXPECT_EQ(c.at("n_ctx"), 24);
  EXPECT_EQ(c.at("n_embd"), 32);
  EXPECT_EQ(c.at("n_layer"), 1);
  EXPECT_EQ(c.at("n_head"), 2);
  EXPECT_EQ(c.at("n_inner"), 48);
  EXPECT_EQ(c.at("activation_function"), "gelu_new");
  EXPECT_EQ(c.at("layer_norm_epsilon").get<double>(), 1e-6);  // the decimal, not the float
  EXPECT_EQ(c.at("initializer_range").get<double>(), 0.01);
  EXPECT_EQ(c.at("bos_token_id"), 50256);  // GPT-2's vocabulary: <|endoftext|>
  EXPECT_EQ(c.at("eos_token_id"), 50256);
  EXPECT_EQ(c.at("tie_word_embeddings"), false);
  EXPECT_EQ(c.at("torch_dtype"), "bfloat16");
  // 4C: n_inner null; another vocabulary: no bos/eos.
  const nlohmann::ordered_json small =
      hf_config_json(hf_naming(synthetic_weights(kGpt).config.model), "float32");
  EXPECT_TRUE(small.at("n_inner").is_null());
  EXPECT_TRUE(small.at("bos_token_id").is_null());
  EXPECT_EQ(small.at("tie_word_embeddings"), true);
  EXPECT_EQ(small.at("torch_dtype"), "float32");
}

// The values of `t` in `tensors`, and of collage's parameter `name` in `w`.
std::vector<uint16_t> bits_of(const SafetensorsTensor& t) {
  std::vector<uint16_t> bits(t.bytes.size() / 2);
  std::memcpy(bits.data(), t.bytes.data(), t.bytes.size());
  return bits;
}
std::vector<uint16_t> rows_of(const CheckpointWeights& w, const std::string& name, int64_t begin,
                              int64_t count) {
  for (const ParameterInfo& info : w.table)
    if (info.name == name) {
      const int64_t cols = info.full_shape.size() == 2 ? info.full_shape[1] : 1;
      std::vector<uint16_t> bits;
      for (int64_t i = begin * cols; i < (begin + count) * cols; i++)
        bits.push_back(w.values[size_t(info.offset + i)].bits);
      return bits;
    }
  throw Error("no parameter " + name);
}

TEST(ExportNames, RopeGetsGptNeoXNamesWithEachHeadsQkvRowsTogether) {
  const CheckpointWeights w = synthetic_weights(kRope);
  const HfNaming naming = export_naming(w.config.model);
  EXPECT_EQ(naming.model_class, "GPTNeoXForCausalLM");
  const std::vector<SafetensorsTensor> t = export_safetensors(w, naming, "BF16");
  using S = std::vector<int64_t>;
  EXPECT_EQ(find(t, "gpt_neox.embed_in.weight").shape, S({100, 32}));
  EXPECT_EQ(find(t, "embed_out.weight").shape, S({100, 32}));
  EXPECT_EQ(find(t, "gpt_neox.layers.1.attention.query_key_value.weight").shape, S({96, 32}));
  EXPECT_EQ(find(t, "gpt_neox.layers.0.mlp.dense_h_to_4h.weight").shape, S({128, 32}));
  EXPECT_EQ(find(t, "gpt_neox.layers.0.mlp.dense_4h_to_h.weight").shape, S({32, 128}));
  EXPECT_EQ(t.size(), 1 + 2 * 12 + 2 + 1u);
  // query_key_value rows: head 0's q, k, v, then head 1's (HS = 16); collage's [q | k | v].
  for (const char* what : {"weight", "bias"}) {
    const std::string name = fmt::format("h.1.attn.qkv.{}", what);
    std::vector<uint16_t> expected;
    for (int head = 0; head < 2; head++)
      for (int part = 0; part < 3; part++) {
        const std::vector<uint16_t> rows = rows_of(w, name, part * 32 + head * 16, 16);
        expected.insert(expected.end(), rows.begin(), rows.end());
      }
    EXPECT_EQ(bits_of(find(t, fmt::format("gpt_neox.layers.1.attention.query_key_value.{}", what))),
              expected);
  }
  EXPECT_EQ(bits_of(find(t, "gpt_neox.layers.0.attention.dense.weight")),
            rows_of(w, "h.0.attn.proj.weight", 0, 32));  // nn.Linear: (out, in) as collage's
  const nlohmann::ordered_json c = hf_config_json(naming, "bfloat16");
  EXPECT_EQ(c.at("model_type"), "gpt_neox");
  EXPECT_EQ(c.at("rotary_pct"), 1.0);
  EXPECT_EQ(c.at("rotary_emb_base"), 500.0);
  EXPECT_EQ(c.at("rope_theta"), 500.0);
  EXPECT_EQ(c.at("use_parallel_residual"), false);
  EXPECT_EQ(c.at("hidden_act"), "gelu_new");
  EXPECT_EQ(c.at("intermediate_size"), 128);
  EXPECT_EQ(c.at("tie_word_embeddings"), false);
  // Tied: no embed_out.
  std::string tied_yaml = kRope;
  tied_yaml.replace(tied_yaml.find("tie_embeddings: false"), 21, "tie_embeddings: true");
  const CheckpointWeights tied = synthetic_weights(tied_yaml);
  for (const SafetensorsTensor& x :
       export_safetensors(tied, export_naming(tied.config.model), "BF16"))
    EXPECT_NE(x.name, "embed_out.weight");
}

TEST(ExportNames, EncodersGetBertAndRobertaNamesWithQkvSplit) {
  for (const char* arch : {"bert", "roberta"}) {
    const bool bert = std::string(arch) == "bert";
    const CheckpointWeights w = synthetic_weights(bert ? kBert : kRoberta);
    const HfNaming naming = export_naming(w.config.model);
    EXPECT_EQ(naming.model_class, bert ? "BertForPreTraining" : "RobertaForMaskedLM");
    const std::vector<SafetensorsTensor> t = export_safetensors(w, naming, "BF16");
    const std::string p = bert ? "bert." : "roberta.";
    std::set<std::string> names;
    for (const SafetensorsTensor& x : t) names.insert(x.name);
    std::set<std::string> expected = {
        p + "embeddings.word_embeddings.weight", p + "embeddings.position_embeddings.weight",
        p + "embeddings.token_type_embeddings.weight", p + "embeddings.LayerNorm.weight",
        p + "embeddings.LayerNorm.bias"};
    for (const char* s : {"attention.self.query", "attention.self.key", "attention.self.value",
                          "attention.output.dense", "attention.output.LayerNorm",
                          "intermediate.dense", "output.dense", "output.LayerNorm"})
      for (const char* wb : {".weight", ".bias"}) expected.insert(p + "encoder.layer.0." + s + wb);
    const std::vector<std::string> heads =
        bert ? std::vector<std::string>{"bert.pooler.dense", "cls.predictions.transform.dense",
                                        "cls.predictions.transform.LayerNorm",
                                        "cls.seq_relationship"}
             : std::vector<std::string>{"lm_head.dense", "lm_head.layer_norm"};
    for (const std::string& h : heads) {
      expected.insert(h + ".weight");
      expected.insert(h + ".bias");
    }
    const std::string decoder_bias = bert ? "cls.predictions.bias" : "lm_head.bias";
    expected.insert(decoder_bias);
    EXPECT_EQ(names, expected) << arch;
    // query, key, value: collage's qkv rows [0, C), [C, 2C), [2C, 3C); the bias trimmed to V.
    const std::string layer = p + "encoder.layer.0.attention.self.";
    EXPECT_EQ(bits_of(find(t, layer + "key.weight")), rows_of(w, "h.0.attn.qkv.weight", 32, 32));
    EXPECT_EQ(bits_of(find(t, layer + "value.bias")), rows_of(w, "h.0.attn.qkv.bias", 64, 32));
    EXPECT_EQ(find(t, layer + "query.weight").shape, std::vector<int64_t>({32, 32}));
    EXPECT_EQ(bits_of(find(t, decoder_bias)), rows_of(w, "mlm.decoder.bias", 0, 200));
    const nlohmann::ordered_json c = hf_config_json(naming, "float32");
    EXPECT_EQ(c.at("hidden_act"), "gelu");
    EXPECT_EQ(c.at("layer_norm_eps").get<double>(), 1e-12);
    EXPECT_EQ(c.at("pad_token_id"), bert ? 0 : 1);
    EXPECT_EQ(c.at("type_vocab_size"), bert ? 2 : 1);
  }
}

TEST(ExportNames, CollageNamesOnRequestAreTheParametersAsTheyAre) {
  const CheckpointWeights rope = synthetic_weights(kRope);
  const HfNaming naming = export_naming(rope.config.model, /*collage_names=*/true);
  EXPECT_EQ(export_naming_name(naming), "collage");
  EXPECT_NE(naming.reason.find("--names collage"), std::string::npos) << naming.reason;
  const std::vector<SafetensorsTensor> t = export_safetensors(rope, naming, "BF16");
  ASSERT_EQ(t.size(), rope.table.size());
  for (size_t i = 0; i < t.size(); i++) {
    const ParameterInfo& info = rope.table[i];
    EXPECT_EQ(t[i].name, info.name);
    EXPECT_EQ(t[i].shape, info.full_shape);
    ASSERT_EQ(t[i].bytes.size(), size_t(info.numel) * 2);
    EXPECT_EQ(std::memcmp(t[i].bytes.data(), rope.values.data() + info.offset, t[i].bytes.size()),
              0)
        << info.name;
  }
  EXPECT_EQ(find(t, "lm_head.weight").shape, std::vector<int64_t>({128, 32}));  // padded rows

  // F32 widens exactly.
  const std::vector<SafetensorsTensor> f32 = export_safetensors(rope, naming, "F32");
  for (size_t i = 0; i < t.size(); i++) {
    ASSERT_EQ(f32[i].bytes.size(), t[i].bytes.size() * 2);
    for (size_t k = 0; k < t[i].bytes.size() / 2; k++) {
      float f;
      std::memcpy(&f, f32[i].bytes.data() + 4 * k, 4);
      ASSERT_EQ(f, bf16_to_float(at(t[i], int64_t(k))));
    }
  }
  expect_error([&] { export_safetensors(rope, naming, "F16"); }, "expected BF16 or F32");
}

// Every class's tensors scatter back to the rows they came from, and its config.json reads back
// as the model section it was written from.
TEST(ExportNames, EveryNamingIsItsOwnInverse) {
  const std::vector<std::string> configs = {kGpt, kRope, kBert, kRoberta};
  for (const std::string& yaml : configs) {
    const CheckpointWeights w = synthetic_weights(yaml);
    const HfNaming naming = export_naming(w.config.model);
    std::vector<bf16> back(w.values.size(), bf16{0});
    std::map<std::string, const ParameterInfo*> info;
    for (const ParameterInfo& p : w.table) info[p.name] = &p;
    for (const HfTensor& t : naming.tensors) {
      const ParameterInfo& p = *info.at(t.name);
      const std::vector<bf16> v = hf_tensor_values(t, p.full_shape, w.values.data() + p.offset);
      scatter_hf_tensor(t, p.full_shape, v.data(), back.data() + p.offset);
    }
    const int64_t V = w.config.model.vocab_size;
    for (const ParameterInfo& p : w.table) {
      const bool vocab = is_vocab_parameter(p.name);
      const int64_t cols = p.full_shape.size() == 2 ? p.full_shape[1] : 1;
      const int64_t kept = vocab ? V * cols : p.numel;  // the padding rows are not exported
      for (int64_t i = 0; i < p.numel; i++)
        ASSERT_EQ(back[size_t(p.offset + i)].bits,
                  i < kept ? w.values[size_t(p.offset + i)].bits : 0)
            << naming.model_class << " " << p.name << " " << i;
    }
    const nlohmann::json file = hf_config_json(naming, "bfloat16");
    const ModelConfig read = model_config_from_hf(file, "x/config.json", w.config.model);
    EXPECT_EQ(read, w.config.model) << naming.model_class;
    EXPECT_TRUE(hf_config_mismatches(w.config.model, file).empty()) << naming.model_class;
  }
}

TEST(ExportNames, ConfigJsonThatCollageDoesNotComputeIsRefusedNamingTheKey) {
  const ModelConfig rope = synthetic_weights(kRope).config.model;
  nlohmann::json file = hf_config_json(hf_naming(rope), "bfloat16");
  file["rotary_pct"] = 0.25;
  file["use_parallel_residual"] = true;
  file.erase("hidden_act");  // transformers' default for GPT-NeoX: erf GELU
  expect_error([&] { model_config_from_hf(file, "pythia/config.json"); },
               "pythia/config.json: a GPTNeoXForCausalLM that collage does not compute:\n"
               "  hidden_act is \"gelu\" (transformers' default: the file leaves it out), "
               "collage computes \"gelu_new\"\n"
               "  rotary_pct is 0.25, collage computes 1.0\n"
               "  use_parallel_residual is true, collage computes false");
  // A run's config against a file: each disagreement names both keys and values.
  nlohmann::json other = hf_config_json(hf_naming(rope), "bfloat16");
  other["num_hidden_layers"] = 12;
  other["rotary_emb_base"] = 10000.0;
  const std::vector<std::string> lines = hf_config_mismatches(rope, other);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], "num_hidden_layers is 12, the config's model.n_layer gives 2");
  EXPECT_EQ(lines[1], "rotary_emb_base is 10000.0, the config's model.rope_base gives 500.0");
  expect_error(
      [&] {
        model_config_from_hf(nlohmann::json{{"architectures", {"LlamaForCausalLM"}}},
                             "llama/config.json");
      },
      "llama/config.json: config.json architectures is [\"LlamaForCausalLM\"]: collage "
      "reads GPT2LMHeadModel");
  expect_error(
      [&] {
        model_config_from_hf(nlohmann::json{{"architectures", {"GPT2LMHeadModel"}}},
                             "g/config.json");
      },
      "g/config.json: config.json has no n_layer");
}

// export_checkpoint() on real checkpoints of the trainer's tiny run.
class ExportCheckpoint : public TrainerTest {};

TEST_F(ExportCheckpoint, WritesTheExportAtomicallyAndRefusesWhatItShould) {
  const Config config = tiny_config("run", {"training.max_steps=3", "training.eval_interval=0"});
  train(config, {});
  const std::string checkpoints = (dir_ / "run" / "checkpoints").string();

  // A directory resolves to its latest checkpoint; the export is the checkpoint's weights.
  ExportOptions options{checkpoints, (dir_ / "out" / "hf").string()};
  const ExportResult result = export_checkpoint(options);
  EXPECT_EQ(result.naming, "GPT2LMHeadModel");
  EXPECT_EQ(result.step, 3);
  EXPECT_EQ(result.tensors, 2 + 12 * 2 + 2);
  EXPECT_EQ(result.files, std::vector<std::string>({"model.safetensors", "config.json"}));
  const SafetensorsFile file =
      read_safetensors((dir_ / "out" / "hf" / "model.safetensors").string());
  EXPECT_EQ(file.metadata.at("step"), "3");
  EXPECT_EQ(file.metadata.at("format"), "pt");
  EXPECT_EQ(file.metadata.at("precision"), "fp32-master");
  EXPECT_EQ(file.metadata.at("naming"), "GPT2LMHeadModel");
  EXPECT_EQ(parse_config(file.metadata.at("collage_config"), "meta"), config);
  EXPECT_EQ(fs::file_size(dir_ / "out" / "hf" / "model.safetensors"), result.safetensors_bytes);
  const CheckpointWeights w = read_checkpoint_weights(checkpoints + "/step_00000003.ckpt");
  const std::vector<SafetensorsTensor> expected =
      export_safetensors(w, export_naming(w.config.model), "BF16");
  ASSERT_EQ(file.tensors.size(), expected.size());
  for (size_t i = 0; i < expected.size(); i++) EXPECT_EQ(file.tensors[i].bytes, expected[i].bytes);
  for (const auto& entry : fs::directory_iterator(dir_ / "out"))
    EXPECT_EQ(entry.path().filename(), "hf") << "staging left behind";

  // Refusals, before any work, naming the path.
  expect_error([&] { export_checkpoint(options); }, (dir_ / "out" / "hf").string() +
                                                        ": --output is not empty (it holds "
                                                        "config.json, model.safetensors)");
  expect_error(
      [&] {
        export_checkpoint({(dir_ / "nothing").string(), (dir_ / "x").string()});
      },
      (dir_ / "nothing").string() + ": no such checkpoint file or directory");
  EXPECT_FALSE(fs::exists(dir_ / "x"));
  spit(dir_ / "file", "x");
  expect_error(
      [&] {
        export_checkpoint({checkpoints, (dir_ / "file").string()});
      },
      "--output exists and is not a directory");
  expect_error(
      [&] {
        export_checkpoint({checkpoints, (dir_ / "y").string(), "float16"});
      },
      "--dtype: 'float16' is not bfloat16 or float32");
  // A corrupt checkpoint: refused naming it, and no export directory left behind.
  const fs::path bad = dir_ / "bad.ckpt";
  std::string bytes = slurp(checkpoints + "/step_00000003.ckpt");
  bytes[bytes.size() / 2] ^= 1;
  spit(bad, bytes);
  expect_error(
      [&] {
        export_checkpoint({bad.string(), (dir_ / "z").string()});
      },
      bad.string() + ": checksum mismatch");
  EXPECT_FALSE(fs::exists(dir_ / "z"));
  for (const auto& entry : fs::directory_iterator(dir_))
    EXPECT_NE(entry.path().filename().string().front(), '.') << entry.path();

  // --force writes into it; an empty directory is simply used.
  options.force = true;
  options.dtype = "float32";
  export_checkpoint(options);
  const SafetensorsFile widened =
      read_safetensors((dir_ / "out" / "hf" / "model.safetensors").string());
  ASSERT_EQ(widened.tensors.size(), file.tensors.size());
  for (size_t i = 0; i < file.tensors.size(); i++) {
    EXPECT_EQ(widened.tensors[i].dtype, "F32");
    ASSERT_EQ(widened.tensors[i].bytes.size(), 2 * file.tensors[i].bytes.size());
    for (size_t k = 0; k < file.tensors[i].bytes.size() / 2; k++) {
      float f;
      std::memcpy(&f, widened.tensors[i].bytes.data() + 4 * k, 4);
      ASSERT_EQ(f, bf16_to_float(at(file.tensors[i], int64_t(k))));
    }
  }
  fs::create_directories(dir_ / "empty");
  EXPECT_EQ(export_checkpoint({checkpoints, (dir_ / "empty").string()}).naming, "GPT2LMHeadModel");
  EXPECT_TRUE(fs::exists(dir_ / "empty" / "config.json"));
}

}  // namespace
}  // namespace collage
