// `collage import`: see import.h.
#include "tools/import.h"

#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstring>
#include <filesystem>

#include "checkpoint/checkpoint.h"
#include "checkpoint/hf_weights.h"
#include "config/architecture.h"
#include "config/config.h"
#include "core/error.h"
#include "numerics/precision.h"

namespace collage {

namespace fs = std::filesystem;

namespace {

// The config the checkpoint records (import.h).
Config checkpoint_config(const ImportOptions& options, const HfWeights& w,
                         const std::string& directory) {
  if (!options.config.empty()) return load_config(options.config);
  if (w.collage_config) return *w.collage_config;
  Config config;
  config.model = w.model;
  const bool bpe = architecture(w.model).tokenizer == TokenizerKind::gpt2_bpe;
  const fs::path vocab = fs::absolute(directory) / (bpe ? "vocab.json" : "vocab.txt");
  const fs::path merges = fs::absolute(directory) / "merges.txt";
  std::error_code ec;
  if (fs::exists(vocab, ec) && (!bpe || fs::exists(merges, ec))) {
    config.data.vocab_file = vocab.string();
    if (bpe) config.data.merges_file = merges.string();
  }
  return config;
}

}  // namespace

ImportResult import_hf_directory(const ImportOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  COLLAGE_CHECK(!options.output.empty(), "--output: a checkpoint file to write is needed");
  std::error_code ec;
  COLLAGE_CHECK(options.force || !fs::exists(options.output, ec),
                "{}: --output exists; choose another path, or pass --force to replace it",
                options.output);
  COLLAGE_CHECK(!fs::is_directory(options.output, ec),
                "{}: --output is a directory; name the .ckpt file to write", options.output);
  const std::string directory = hf_source_directory(options.source);
  std::optional<Config> given;
  if (!options.config.empty()) given = load_config(options.config);
  const HfWeights w = read_hf_weights(directory, given ? &given->model : nullptr);
  const Config config = checkpoint_config(options, w, directory);
  spdlog::info("import: {}: {}, {} layers, hidden {}, vocab {}: {} tensors{}", directory, w.naming,
               w.model.n_layer, w.model.hidden_size, w.model.vocab_size, w.tensors_read,
               w.values_rounded
                   ? fmt::format(", {} values rounded to bf16 nearest-even", w.values_rounded)
                   : "");
  if (!w.skipped.empty())
    spdlog::info("import: skipped {} (buffers and tied copies)", fmt::join(w.skipped, ", "));

  Checkpoint ckpt;
  ckpt.step = w.step;
  ckpt.meta = {
      {"step", w.step},
      {"consumed_samples", 0},
      {"precision", w.precision.empty() ? precision_name(config.optimizer.precision) : w.precision},
      {"weights_only", true},
      {"imported_from", fs::absolute(directory).string()},
      {"imported_naming", w.naming},
      {"num_parameters", int64_t(w.values.size())},
      {"layout", {{"tensor_parallel", 1}, {"data_parallel", 1}, {"zero", 0}}},
      {"config", config_to_yaml(config)}};
  for (const ParameterInfo& p : w.table) {
    CheckpointTensor t{p.name, "bf16", p.shape, std::vector<uint8_t>(size_t(p.numel) * 2)};
    std::memcpy(t.bytes.data(), w.values.data() + p.offset, t.bytes.size());
    ckpt.tensors.push_back(std::move(t));
  }
  write_checkpoint_file(options.output, ckpt);
  ImportResult result{options.output, w.naming, w.tensors_read, int64_t(w.values.size()),
                      w.values_rounded};
  spdlog::info("import: wrote {}: {} parameters (weights only) in {:.1f} s", options.output,
               result.parameters,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return result;
}

}  // namespace collage
