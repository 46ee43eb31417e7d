// Hugging Face directories into collage (src/checkpoint/hf_weights.h, src/tools/import.h): every
// class export writes reads back to the very weights, at tensor-parallel 1 and 2; a trained
// run's export -> import -> export gives the same files; `--init-from hf:DIR` starts a run from
// the same weights as the checkpoint; bad directories are refused naming what is wrong, with
// nothing written. tests/export/ checks files written by torch.
#include "tools/import.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "../error_of.h"
#include "backend/cpu/cpu_backend.h"
#include "checkpoint/hf_weights.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/safetensors_reader.h"
#include "checkpoint/training_checkpoint.h"
#include "model/model_family.h"
#include "model/tensor_shards.h"
#include "synthetic_weights.h"
#include "tiny_run.h"
#include "train/trainer.h"

namespace collage {
namespace {

using test::error_of;

std::string slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void spit(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// The weights as a trained model holds them: the vocabulary's padding rows zero.
CheckpointWeights trained_like(const std::string& yaml) {
  CheckpointWeights w = synthetic_weights(yaml);
  const ModelConfig& m = w.config.model;
  for (const ParameterInfo& p : w.table)
    if (is_vocab_parameter(p.name)) {
      const int64_t cols = p.full_shape.size() == 2 ? p.full_shape[1] : 1;
      std::fill(w.values.begin() + p.offset + int64_t{m.vocab_size} * cols,
                w.values.begin() + p.offset + p.numel, bf16{0});
    }
  return w;
}

// An export directory written from `w`'s tensors: model.safetensors and config.json.
void write_hf_directory(const fs::path& dir, const CheckpointWeights& w, const std::string& dtype,
                        bool collage_names = false) {
  fs::create_directories(dir);
  const HfNaming naming = export_naming(w.config.model, collage_names);
  std::map<std::string, std::string> metadata = {{"format", "pt"}};
  if (collage_names) {
    metadata["naming"] = "collage";
    metadata["collage_config"] = config_to_yaml(w.config);
  }
  write_safetensors((dir / "model.safetensors").string(), export_safetensors(w, naming, dtype),
                    metadata);
  if (!collage_names) spit(dir / "config.json", hf_config_json(naming, "bfloat16").dump(2));
}

class ImportHf : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("collage_import_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(ImportHf, EveryClassReadsBackToTheSameWeightsAndExportsTheSameTensors) {
  int i = 0;
  for (const std::string& yaml : {kGpt, kRope, kBert, kRoberta}) {
    const CheckpointWeights w = trained_like(yaml);
    for (const char* dtype : {"BF16", "F32"}) {
      const fs::path dir = dir_ / std::to_string(i++);
      write_hf_directory(dir, w, dtype);
      const HfWeights read = read_hf_weights(dir.string());  // the model from config.json
      EXPECT_EQ(read.naming, export_naming(w.config.model).model_class);
      ModelConfig expected = w.config.model;
      expected.hidden_dropout = read.model.hidden_dropout;  // not in a GPT's config.json
      expected.attention_dropout = read.model.attention_dropout;
      EXPECT_EQ(read.model, expected) << read.naming;
      ASSERT_EQ(read.values.size(), w.values.size());
      EXPECT_TRUE(std::equal(read.values.begin(), read.values.end(), w.values.begin(),
                             [](bf16 a, bf16 b) { return a.bits == b.bits; }))
          << read.naming << " " << dtype;
      EXPECT_EQ(read.values_rounded, 0);
      // Exported again: the same tensors, byte for byte.
      CheckpointWeights again = w;
      again.values = read.values;
      const HfNaming naming = export_naming(w.config.model);
      const std::vector<SafetensorsTensor> a = export_safetensors(w, naming, dtype);
      const std::vector<SafetensorsTensor> b = export_safetensors(again, naming, dtype);
      ASSERT_EQ(a.size(), b.size());
      for (size_t k = 0; k < a.size(); k++) EXPECT_EQ(a[k].bytes, b[k].bytes) << a[k].name;
    }
  }
  // collage's own names (`export --names collage`): the config comes from the metadata.
  const CheckpointWeights rope = trained_like(kRope);
  write_hf_directory(dir_ / "collage", rope, "BF16", /*collage_names=*/true);
  const HfWeights read = read_hf_weights((dir_ / "collage").string(), &rope.config.model);
  EXPECT_EQ(read.naming, "collage");
  EXPECT_TRUE(std::equal(read.values.begin(), read.values.end(), rope.values.begin(),
                         [](bf16 a, bf16 b) { return a.bits == b.bits; }));
}

// GPT-2 as published: names without "transformer.", the attention masks saved as buffers, F32
// values that bf16 cannot hold (rounded nearest-even, counted), F16 widened exactly.
TEST_F(ImportHf, PublishedLayoutsAndFloatDtypesAreRead) {
  const CheckpointWeights w = trained_like(kGpt);
  const HfNaming naming = export_naming(w.config.model);
  std::vector<SafetensorsTensor> tensors = export_safetensors(w, naming, "F32");
  for (SafetensorsTensor& t : tensors)
    t.name = t.name.substr(t.name.rfind("transformer.", 0) == 0 ? 12 : 0);
  tensors.push_back({"h.0.attn.bias", "F32", {1, 1, 2, 2}, std::vector<uint8_t>(16, 0)});
  // One value halfway between two bf16 neighbours of 1.0: rounds to even, 1.0.
  const float halfway = 1.0f + 1.0f / 256;
  std::memcpy(tensors[0].bytes.data(), &halfway, 4);
  const fs::path dir = dir_ / "published";
  fs::create_directories(dir);
  write_safetensors((dir / "model.safetensors").string(), tensors, {{"format", "pt"}});
  spit(dir / "config.json", hf_config_json(naming, "float32").dump());
  HfWeights read = read_hf_weights(dir.string(), &w.config.model);
  EXPECT_EQ(read.values_rounded, 1);
  EXPECT_EQ(read.values[0].bits, float_to_bf16(1.0f).bits);
  EXPECT_EQ(read.skipped, std::vector<std::string>({"h.0.attn.bias"}));

  // F16: every half value is a float, which is then rounded to bf16 like an F32 one.
  const std::vector<uint16_t> halves = {0x0001, 0x3c00, 0x3c01, 0xc2aa, 0x7bff, 0x8400};
  const std::vector<float> exact = {5.9604644775390625e-8f, 1.0f,     1.0009765625f,
                                    -3.33203125f,           65504.0f, -6.103515625e-05f};
  for (SafetensorsTensor& t : tensors) {
    if (t.name == "h.0.attn.bias") continue;
    const size_t n = t.bytes.size() / 4;
    std::vector<uint8_t> bytes(n * 2);
    for (size_t k = 0; k < n; k++) std::memcpy(bytes.data() + 2 * k, &halves[k % halves.size()], 2);
    t = {t.name, "F16", t.shape, bytes};
  }
  write_safetensors((dir / "model.safetensors").string(), tensors, {{"format", "pt"}});
  read = read_hf_weights(dir.string());
  const ParameterInfo& ln = w.table[2];  // h.0.ln_1.weight: not transposed, all rows kept
  ASSERT_EQ(ln.name, "h.0.ln_1.weight");
  for (int64_t k = 0; k < ln.numel; k++)
    ASSERT_EQ(read.values[size_t(ln.offset + k)].bits,
              float_to_bf16(exact[size_t(k) % exact.size()]).bits)
        << k;
}

// The weights of an import, placed in a tensor-parallel 2 model's ranks: each rank's memory is
// its shard of the whole, as a checkpoint's would be.
class RankOnlyComm final : public Comm {
 public:
  RankOnlyComm(int rank, int size) : rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void all_reduce_sum(float*, int64_t) override { unused(); }
  void all_reduce_sum(double*, int64_t) override { unused(); }
  void all_reduce_sum(bf16*, int64_t) override { unused(); }
  void all_reduce_max(float*, int64_t) override { unused(); }
  void reduce_scatter_sum(const float*, float*, int64_t) override { unused(); }
  void reduce_scatter_sum(const bf16*, bf16*, int64_t) override { unused(); }
  void all_gather(const void*, void*, int64_t) override { unused(); }
  void broadcast(void*, int64_t, int) override { unused(); }
  void barrier() override { unused(); }

 private:
  [[noreturn]] static void unused() { throw Error("loading weights communicates nothing"); }
  int rank_, size_;
};

TEST_F(ImportHf, TensorParallelRanksGetTheirShardsOfTheImport) {
  for (const std::string& yaml : {kRope, kBert}) {
    const CheckpointWeights w = trained_like(yaml);
    write_hf_directory(dir_ / "tp", w, "BF16");
    const HfWeights read = read_hf_weights((dir_ / "tp").string(), &w.config.model);
    fs::remove_all(dir_ / "tp");
    auto backend = make_cpu_backend(1);
    for (int rank = 0; rank < 2; rank++) {
      RankOnlyComm comm(rank, 2);
      const ModelPlacement placement{{2, rank}, &comm, 1};
      const std::unique_ptr<TrainableModel> model =
          make_model(w.config.model, *backend, ModelShape{1, 8, 4}, placement);
      load_whole_weights(read.values, w.config.model, *backend, *model);
      std::vector<bf16> memory(size_t(model->num_parameters()));
      backend->copy_to_host(memory.data(), model->parameter_memory(), memory.size() * 2);
      const std::vector<ParameterInfo> whole = model_parameter_table(w.config.model, 1);
      for (const ParameterInfo& info : model->parameters()) {
        const ParameterInfo& from =
            *std::find_if(whole.begin(), whole.end(), [&](auto& p) { return p.name == info.name; });
        // The whole tensor with tp = 2's padded rows (zero) behind tp = 1's.
        const int64_t cols = info.full_shape.size() == 2 ? info.full_shape[1] : 1;
        std::vector<bf16> full(size_t(info.full_shape[0] * cols), bf16{0});
        std::copy(read.values.begin() + from.offset, read.values.begin() + from.offset + from.numel,
                  full.begin());
        std::vector<bf16> shard(size_t(info.numel));
        copy_shard_out_of(full.data(), shard.data(), info, {2, rank}, 2);
        for (int64_t k = 0; k < info.numel; k++)
          ASSERT_EQ(memory[size_t(info.offset + k)].bits, shard[size_t(k)].bits)
              << info.name << " rank " << rank << " element " << k;
      }
    }
  }
}

TEST_F(ImportHf, BadDirectoriesAreRefusedNamingWhatIsWrongAndWriteNothing) {
  const CheckpointWeights w = trained_like(kGpt);
  const fs::path out = dir_ / "out.ckpt";
  auto refused = [&](const fs::path& dir, const std::string& fragment,
                     const std::string& config = "") {
    const std::string e = error_of([&] {
      import_hf_directory({dir.string(), out.string(), config});
    });
    EXPECT_NE(e.find(fragment), std::string::npos) << "expected '" << fragment << "' in: " << e;
    EXPECT_FALSE(fs::exists(out)) << e;
  };
  auto fresh = [&](const std::string& name) {
    const fs::path dir = dir_ / name;
    write_hf_directory(dir, w, "BF16");
    return dir;
  };
  const HfNaming naming = export_naming(w.config.model);
  const std::vector<SafetensorsTensor> tensors = export_safetensors(w, naming, "BF16");
  auto with_tensors = [&](const std::string& name, std::vector<SafetensorsTensor> t) {
    const fs::path dir = fresh(name);
    write_safetensors((dir / "model.safetensors").string(), t, {});
    return dir;
  };

  std::vector<SafetensorsTensor> missing = tensors;
  missing.erase(missing.begin() + 3);
  refused(with_tensors("missing", missing),
          "no tensor '" + tensors[3].name + "' (GPT2LMHeadModel needs it");
  std::vector<SafetensorsTensor> shape = tensors;
  shape[1].shape = {shape[1].shape[1], shape[1].shape[0]};
  refused(with_tensors("shape", shape),
          "tensor 'transformer.wpe.weight' (collage's wpe.weight) "
          "has shape [32, 24], collage's model needs [24, 32]");
  std::vector<SafetensorsTensor> dtype = tensors;
  dtype[1].dtype = "I16";
  refused(with_tensors("dtype", dtype),
          "tensor 'transformer.wpe.weight': dtype I16: collage reads BF16, F32 and F16");
  std::vector<SafetensorsTensor> extra = tensors;
  extra.push_back({"transformer.h.9.mlp.c_fc.weight", "BF16", {1}, {0, 0}});
  refused(with_tensors("extra", extra),
          "1 tensor(s) that a GPT2LMHeadModel has no place for: transformer.h.9.mlp.c_fc.weight");

  const fs::path truncated = fresh("truncated");
  const std::string bytes = slurp(truncated / "model.safetensors");
  spit(truncated / "model.safetensors", bytes.substr(0, bytes.size() - 10));
  refused(truncated, (truncated / "model.safetensors").string());

  const fs::path index = fresh("index");
  fs::rename(index / "model.safetensors", index / "model-00001-of-00002.safetensors");
  nlohmann::json map = {{"metadata", {{"total_size", 0}}},
                        {"weight_map", nlohmann::json::object()}};
  for (const SafetensorsTensor& t : tensors)
    map["weight_map"][t.name] = &t == &tensors.back() ? "model-00002-of-00002.safetensors"
                                                      : "model-00001-of-00002.safetensors";
  spit(index / "model.safetensors.index.json", map.dump());
  refused(index, "model-00002-of-00002.safetensors");

  const fs::path no_config = fresh("no_config");
  fs::remove(no_config / "config.json");
  refused(no_config, "no config.json");

  // A run config whose model differs from config.json: each key with both values.
  const fs::path other = fresh("other");
  Config run = w.config;
  run.model.n_layer = 3;
  spit(dir_ / "run.yaml", config_to_yaml(run));
  refused(other, "n_layer is 2, the config's model.n_layer gives 3", (dir_ / "run.yaml").string());
  refused(dir_ / "nothing", "not a directory");
}

// A trained run: export -> import -> export writes the same files, and a run started from the
// export (--init-from hf:DIR) starts from the same weights as one started from the checkpoint.
class ImportCheckpoint : public TrainerTest {};

TEST_F(ImportCheckpoint, ExportImportExportIsTheSameFilesAndInitFromHfIsTheCheckpoint) {
  const Config config = tiny_config("first", {"optimizer.precision=collage-plus"});
  train(config, {});
  const std::string checkpoints = (dir_ / "first" / "checkpoints").string();
  for (bool collage_names : {false, true}) {
    const std::string tag = collage_names ? "collage" : "hf";
    ExportOptions first{checkpoints, (dir_ / ("export-" + tag)).string()};
    first.collage_names = collage_names;
    export_checkpoint(first);
    const std::string imported = (dir_ / (tag + ".ckpt")).string();
    const ImportResult result = import_hf_directory({first.output, imported});
    EXPECT_EQ(result.naming, collage_names ? "collage" : "GPT2LMHeadModel");
    ExportOptions second{imported, (dir_ / ("again-" + tag)).string()};
    second.collage_names = collage_names;
    export_checkpoint(second);
    for (const char* file : {"model.safetensors", "config.json"}) {
      if (collage_names && std::string(file) == "config.json") continue;
      EXPECT_EQ(slurp(fs::path(first.output) / file), slurp(fs::path(second.output) / file))
          << tag << " " << file;
    }
    // --resume refuses the weights-only checkpoint; --init-from takes it.
    EXPECT_NE(error_of([&] {
                check_resume_allowed(imported, config, false, false);
              }).find("holds weights only"),
              std::string::npos);
  }
  TrainOptions from_hf;
  from_hf.init_from = "hf:" + (dir_ / "export-hf").string();
  train(tiny_config("second", {"optimizer.precision=collage-plus"}), from_hf);
  TrainOptions from_checkpoint;
  from_checkpoint.init_from = checkpoints;
  train(tiny_config("third", {"optimizer.precision=collage-plus"}), from_checkpoint);
  const auto second = metrics("second"), third = metrics("third");
  ASSERT_EQ(second.size(), third.size());
  for (size_t k = 0; k < second.size(); k++)
    for (const char* key : {"loss", "val_loss"})
      if (third[k].contains(key))
        EXPECT_EQ(second[k][key].get<double>(), third[k][key].get<double>()) << k << key;
  // The run's config must agree with config.json.
  from_hf.overwrite = true;
  EXPECT_NE(error_of([&] {
              train(tiny_config("fourth", {"model.n_layer=3"}), from_hf);
            }).find("n_layer is 2, the config's model.n_layer gives 3"),
            std::string::npos);
}

// A sharded export holds the same tensors as a single file, and imports to the same weights; a
// --force export over it removes the shards it no longer writes.
TEST_F(ImportCheckpoint, ShardedExportIsTheSameTensorsAndImportsTheSame) {
  train(tiny_config("run", {"training.max_steps=3", "training.eval_interval=0"}), {});
  const std::string checkpoints = (dir_ / "run" / "checkpoints").string();
  ExportOptions one{checkpoints, (dir_ / "one").string()};
  export_checkpoint(one);
  ExportOptions many{checkpoints, (dir_ / "many").string()};
  many.max_shard_bytes = 8000;  // the 32x64 wte (4 kB) and a few layers' tensors a shard
  const ExportResult sharded = export_checkpoint(many);
  const SafetensorsReader a(one.output), b(many.output);
  EXPECT_EQ(a.files().size(), 1u);
  EXPECT_GT(b.files().size(), 3u);
  EXPECT_TRUE(std::find(sharded.files.begin(), sharded.files.end(),
                        "model.safetensors.index.json") != sharded.files.end());
  ASSERT_EQ(a.tensors().size(), b.tensors().size());
  for (const SafetensorsStoredTensor& t : a.tensors()) {
    EXPECT_EQ(b.tensor(t.name).shape, t.shape) << t.name;
    EXPECT_EQ(b.read(t.name), a.read(t.name)) << t.name;
  }
  // A shard's tensors (the header is not counted) fit the max, or are one larger tensor alone.
  std::map<std::string, std::pair<uint64_t, int>> shard;
  for (const SafetensorsStoredTensor& t : b.tensors())
    shard[t.file].first += t.bytes, shard[t.file].second++;
  for (const auto& [file, size] : shard)
    EXPECT_TRUE(size.first <= 8000u || size.second == 1) << file << " " << size.first;
  const HfWeights x = read_hf_weights(one.output), y = read_hf_weights(many.output);
  EXPECT_TRUE(std::equal(x.values.begin(), x.values.end(), y.values.begin(), y.values.end(),
                         [](bf16 p, bf16 q) { return p.bits == q.bits; }));
  many.force = true;
  many.max_shard_bytes = 5'000'000'000;
  export_checkpoint(many);
  std::vector<std::string> left;
  for (const auto& entry : fs::directory_iterator(many.output))
    left.push_back(entry.path().filename().string());
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, std::vector<std::string>({"config.json", "model.safetensors"}));
}

}  // namespace
}  // namespace collage
