// `collage export`: see export.h.
#include "tools/export.h"

#include <fcntl.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_info.h"
#include "checkpoint/training_checkpoint.h"
#include "collage_version.h"
#include "config/architecture.h"
#include "core/error.h"
#include "model/model_family.h"
#include "optim/memory_report.h"
#include "tools/posix_file.h"

namespace collage {

namespace fs = std::filesystem;

namespace {

constexpr const char* kSafetensors = "model.safetensors";

// GPT-2's BPE vocabulary: its <|endoftext|> (50256) is the bos and eos token.
constexpr int kGpt2VocabSize = 50257;
constexpr int kGpt2EndOfText = 50256;

// The rows x cols bf16 matrix `in` transposed (cols x rows).
std::vector<bf16> transposed(const bf16* in, int64_t rows, int64_t cols) {
  std::vector<bf16> out(size_t(rows * cols));
  constexpr int64_t kTile = 64;  // tiles of both matrices stay in cache
  for (int64_t i0 = 0; i0 < rows; i0 += kTile)
    for (int64_t j0 = 0; j0 < cols; j0 += kTile)
      for (int64_t i = i0; i < std::min(rows, i0 + kTile); i++)
        for (int64_t j = j0; j < std::min(cols, j0 + kTile); j++)
          out[size_t(j * rows + i)] = in[i * cols + j];
  return out;
}

// bf16 values as safetensors bytes of `dtype`: BF16 as they are, F32 widened exactly.
std::vector<uint8_t> encode(const bf16* values, int64_t n, const std::string& dtype) {
  std::vector<uint8_t> bytes;
  if (dtype == "BF16") {
    bytes.resize(size_t(n) * sizeof(bf16));
    std::memcpy(bytes.data(), values, bytes.size());
  } else if (dtype == "F32") {
    bytes.resize(size_t(n) * sizeof(float));
    bf16_to_float_array(values, reinterpret_cast<float*>(bytes.data()), n);
  } else {
    fail("export dtype '{}': expected BF16 or F32", dtype);
  }
  return bytes;
}

// A float config value (1e-5f) as the decimal it was written as (1e-05), not as the double
// nearest the float (9.99999974737875e-06).
double shortest(float value) { return std::stod(fmt::format("{}", value)); }

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  COLLAGE_CHECK(in.good(), "{}: cannot open: {}", path, std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  COLLAGE_CHECK(!in.bad(), "{}: read failed", path);
  return text.str();
}

void fsync_directory(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;  // best effort: the files themselves are synced
  ::fsync(fd);
  ::close(fd);
}

// The export directory as given, made absolute and without a trailing '/'.
fs::path export_directory(const std::string& output) {
  COLLAGE_CHECK(!output.empty(), "--output: an export directory is needed");
  fs::path dir = fs::absolute(output).lexically_normal();
  if (dir.filename().empty()) dir = dir.parent_path();
  return dir;
}

// What a non-empty `dir` holds, for the refusal message ("config.json, model.safetensors").
std::string describe_entries(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.push_back(entry.path().filename());
  std::sort(names.begin(), names.end());
  const size_t shown = std::min<size_t>(names.size(), 4);
  std::string list = fmt::format("{}", fmt::join(names.begin(), names.begin() + shown, ", "));
  if (names.size() > shown) list += fmt::format(", ... ({} entries)", names.size());
  return list;
}

}  // namespace

CheckpointWeights read_checkpoint_weights(const std::string& checkpoint) {
  std::error_code ec;
  COLLAGE_CHECK(fs::exists(checkpoint, ec), "{}: no such checkpoint file or directory", checkpoint);
  CheckpointWeights w;
  w.path = resolve_resume(checkpoint, checkpoint);  // a directory: its newest valid checkpoint
  const CheckpointInfo info = read_checkpoint_info(w.path);
  w.step = info.step;
  w.precision = info.meta.value("precision", "");
  w.config = info.config;
  // A tp = 1 model of the smallest shape (its activations are not used): the weights of any
  // saved layout are put back together whole by load_checkpoint_weights().
  auto backend = make_cpu_backend(0);
  const std::unique_ptr<TrainableModel> model = make_model(
      w.config.model, *backend, ModelShape{.micro_batch = 1, .seq_len = 1, .max_predictions = 1});
  load_checkpoint_weights(w.path, w.config, *backend, *model);
  w.table = model->parameters();
  w.values.resize(size_t(model->num_parameters()));
  backend->copy_to_host(w.values.data(), model->parameter_memory(), w.values.size() * sizeof(bf16));
  return w;
}

const char* export_naming_name(ExportNaming naming) {
  return naming == ExportNaming::hf_gpt2 ? "hf-gpt2" : "collage";
}

ExportNamingChoice choose_export_naming(const ModelConfig& config) {
  const HfNaming hf = model_family(config).hf_naming(config);
  return {hf.model_class.empty() ? ExportNaming::collage : ExportNaming::hf_gpt2, hf.reason};
}

namespace {

// The model's tensors under its Hugging Face names (the model family's HfNaming): the linear
// weights transposed to Conv1D's (in, out), the vocabulary without its padding rows.
std::vector<SafetensorsTensor> hf_tensors(
    const CheckpointWeights& weights, const std::map<std::string, const ParameterInfo*>& by_name,
    const std::string& dtype) {
  std::vector<SafetensorsTensor> out;
  const ModelConfig& c = weights.config.model;
  const HfNaming naming = model_family(c).hf_naming(c);
  COLLAGE_CHECK(!naming.model_class.empty(), "{}: {}: no Hugging Face GPT-2 names", weights.path,
                naming.reason);
  std::set<std::string> used;
  for (const HfTensor& t : naming.tensors) {
    const auto it = by_name.find(t.name);
    COLLAGE_CHECK(it != by_name.end(), "{}: the model has no parameter '{}'", weights.path, t.name);
    used.insert(t.name);
    const ParameterInfo& info = *it->second;
    const bf16* values = weights.values.data() + info.offset;
    switch (t.layout) {
      case HfLayout::same:
        out.push_back({t.hf_name, dtype, info.full_shape, encode(values, info.numel, dtype)});
        break;
      case HfLayout::transposed: {
        const int64_t rows = info.full_shape.at(0), cols = info.full_shape.at(1);
        const std::vector<bf16> transposed_values = transposed(values, rows, cols);
        out.push_back(
            {t.hf_name, dtype, {cols, rows}, encode(transposed_values.data(), info.numel, dtype)});
        break;
      }
      case HfLayout::vocab_rows: {
        const int64_t cols = info.full_shape.at(1);
        COLLAGE_CHECK(info.full_shape.at(0) >= c.vocab_size,
                      "{}: '{}' has {} rows, fewer than the {} of model.vocab_size", weights.path,
                      t.name, info.full_shape.at(0), c.vocab_size);
        out.push_back({t.hf_name,
                       dtype,
                       {c.vocab_size, cols},
                       encode(values, int64_t{c.vocab_size} * cols, dtype)});
        break;
      }
    }
  }
  // Every parameter has gone somewhere: a parameter added to a model must be named there.
  COLLAGE_CHECK(used.size() == weights.table.size(),
                "{}: {} of the model's {} parameters have no {} name", weights.path,
                weights.table.size() - used.size(), weights.table.size(), naming.model_class);
  return out;
}

}  // namespace

std::vector<SafetensorsTensor> export_tensors(const CheckpointWeights& weights, ExportNaming naming,
                                              const std::string& dtype) {
  safetensors_dtype_size(dtype);  // a known name
  COLLAGE_CHECK(dtype == "BF16" || dtype == "F32", "export dtype '{}': expected BF16 or F32",
                dtype);
  std::map<std::string, const ParameterInfo*> by_name;
  for (const ParameterInfo& info : weights.table) {
    COLLAGE_CHECK(info.offset + info.numel <= int64_t(weights.values.size()),
                  "{}: parameter '{}' lies outside the {} values read", weights.path, info.name,
                  weights.values.size());
    by_name[info.name] = &info;
  }
  if (naming == ExportNaming::hf_gpt2) return hf_tensors(weights, by_name, dtype);
  std::vector<SafetensorsTensor> out;
  for (const ParameterInfo& info : weights.table)
    out.push_back({info.name, dtype, info.full_shape,
                   encode(weights.values.data() + info.offset, info.numel, dtype)});
  return out;
}

nlohmann::ordered_json hf_gpt2_config(const ModelConfig& c, const std::string& torch_dtype) {
  const bool gpt2_vocab = c.vocab_size == kGpt2VocabSize;
  nlohmann::ordered_json j;
  j["architectures"] = {"GPT2LMHeadModel"};
  j["model_type"] = "gpt2";
  j["vocab_size"] = c.vocab_size;
  j["n_positions"] = c.max_position_embeddings;
  j["n_ctx"] = c.max_position_embeddings;
  j["n_embd"] = c.hidden_size;
  j["n_layer"] = c.n_layer;
  j["n_head"] = c.n_head;
  j["n_inner"] =
      c.ffn() == 4 * c.hidden_size ? nlohmann::ordered_json() : nlohmann::ordered_json(c.ffn());
  j["activation_function"] = "gelu_new";  // GELU, tanh approximation
  // collage's GPT has no dropout; transformers' defaults (0.1) would apply in train mode.
  j["resid_pdrop"] = 0.0;
  j["embd_pdrop"] = 0.0;
  j["attn_pdrop"] = 0.0;
  j["layer_norm_epsilon"] = shortest(c.layernorm_eps);
  j["initializer_range"] = shortest(c.init_std);
  j["scale_attn_weights"] = true;  // softmax(q·kᵀ/√HS)
  j["scale_attn_by_inverse_layer_idx"] = false;
  j["reorder_and_upcast_attn"] = false;
  j["use_cache"] = true;
  j["bos_token_id"] =
      gpt2_vocab ? nlohmann::ordered_json(kGpt2EndOfText) : nlohmann::ordered_json();
  j["eos_token_id"] =
      gpt2_vocab ? nlohmann::ordered_json(kGpt2EndOfText) : nlohmann::ordered_json();
  j["tie_word_embeddings"] = c.tie_embeddings;
  j["torch_dtype"] = torch_dtype;
  return j;
}

const std::vector<std::string>& export_file_names() {
  static const std::vector<std::string> names = {kSafetensors, "config.json",
                                                 "vocab.json", "merges.txt",
                                                 "vocab.txt",  "tokenizer_config.json"};
  return names;
}

namespace {

// Where an export goes: DIR, and how it is named in messages (as given, without a trailing '/').
struct ExportTarget {
  fs::path dir;
  fs::path shown;
  bool replace_whole = true;  // DIR missing or empty: the staging directory becomes it
};

// The directory first: refused before any work when it is a file, or not empty without --force.
ExportTarget check_export_target(const ExportOptions& options) {
  ExportTarget target;
  target.dir = export_directory(options.output);
  target.shown = (fs::path(options.output) / "x").parent_path();
  std::error_code ec;
  if (fs::exists(target.dir, ec)) {
    COLLAGE_CHECK(fs::is_directory(target.dir, ec), "{}: --output exists and is not a directory",
                  target.shown.string());
    if (!fs::is_empty(target.dir, ec)) {
      COLLAGE_CHECK(options.force,
                    "{}: --output is not empty (it holds {}); choose a new directory, or pass "
                    "--force to write the export's files into it (replacing an earlier export)",
                    target.shown.string(), describe_entries(target.dir));
      target.replace_whole = false;
    }
  }
  return target;
}

// The staging directory beside DIR (the same file system, so renames are atomic).
struct Staging {
  fs::path path;
  fs::path created;  // the outermost parent directory this export created, if any
};

// Creates the staging directory (and DIR's parents), empty.
Staging make_staging_directory(const fs::path& dir) {
  Staging staging;
  const fs::path parent = dir.parent_path();
  std::error_code ec;
  for (fs::path p = parent; !p.empty() && !fs::exists(p, ec); p = p.parent_path())
    staging.created = p;
  try {
    fs::create_directories(parent);
  } catch (const fs::filesystem_error& e) {
    fail("{}: cannot create the directory of --output: {}", parent.string(), e.code().message());
  }
  staging.path = parent / fmt::format(".{}.export-{}.tmp", dir.filename().string(), ::getpid());
  fs::remove_all(staging.path, ec);
  try {
    fs::create_directory(staging.path);
  } catch (const fs::filesystem_error& e) {
    fail("{}: cannot create a directory beside --output: {}", staging.path.string(),
         e.code().message());
  }
  return staging;
}

// model.safetensors (its metadata: the version, step, precision, naming and config) and, for
// hf-gpt2 names, config.json.
void write_model_files(const fs::path& staging, const CheckpointWeights& weights,
                       const std::string& dtype, const std::string& torch_dtype,
                       ExportResult& result) {
  const std::vector<SafetensorsTensor> tensors = export_tensors(weights, result.naming, dtype);
  const std::map<std::string, std::string> metadata = {
      {"format", "pt"},
      {"collage_version", fmt::format("{} ({})", COLLAGE_VERSION, COLLAGE_GIT)},
      {"step", std::to_string(weights.step)},
      {"precision", weights.precision},
      {"naming", export_naming_name(result.naming)},
      {"collage_config", config_to_yaml(weights.config)}};
  result.safetensors_bytes =
      write_safetensors((staging / kSafetensors).string(), tensors, metadata);
  result.tensors = int64_t(tensors.size());
  result.files.push_back(kSafetensors);
  if (result.naming == ExportNaming::hf_gpt2) {
    write_file_synced((staging / "config.json").string(),
                      hf_gpt2_config(weights.config.model, torch_dtype).dump(2) + "\n");
    result.files.push_back("config.json");
  }
}

// The tokenizer the model was trained with, when its files are where the config says
// (relative paths: from the current directory, as when training); with hf-gpt2 names, its
// tokenizer_config.json too.
void copy_tokenizer_files(const fs::path& staging, const Config& config, ExportResult& result) {
  const DataConfig& data = config.data;
  struct TokenizerFile {
    const char* key;
    std::string source;
    const char* name;  // in DIR
  };
  std::vector<TokenizerFile> tokenizer;
  if (architecture(config.model).tokenizer == TokenizerKind::gpt2_bpe) {
    tokenizer = {{"data.vocab_file", data.vocab_file, "vocab.json"},
                 {"data.merges_file", data.merges_file, "merges.txt"}};
  } else {
    tokenizer = {{"data.vocab_file", data.vocab_file, "vocab.txt"}};
  }
  std::error_code ec;
  std::vector<std::string> missing, copied;
  for (const TokenizerFile& t : tokenizer)
    if (t.source.empty())
      missing.push_back(fmt::format("{} is not set", t.key));
    else if (!fs::is_regular_file(t.source, ec))
      missing.push_back(fmt::format("{} {} is not found", t.key, t.source));
  if (!missing.empty()) {
    spdlog::info("export: no tokenizer files: the checkpoint's {}", fmt::join(missing, ", "));
    return;
  }
  for (const TokenizerFile& t : tokenizer) {
    write_file_synced((staging / t.name).string(), read_file(t.source));
    result.files.push_back(t.name);
    copied.push_back(fmt::format("{} -> {}", t.source, t.name));
  }
  if (result.naming == ExportNaming::hf_gpt2) {
    nlohmann::ordered_json tokenizer_config;
    tokenizer_config["model_max_length"] = config.model.max_position_embeddings;
    write_file_synced((staging / "tokenizer_config.json").string(),
                      tokenizer_config.dump(2) + "\n");
    result.files.push_back("tokenizer_config.json");
  }
  spdlog::info("export: the tokenizer of the checkpoint's config: {}", fmt::join(copied, ", "));
}

// The staged files into DIR: one rename of the whole directory, or (--force into a non-empty
// DIR) one rename per file, removing the files of an earlier export that this one lacks.
void commit_export(const ExportTarget& target, const fs::path& staging,
                   const ExportResult& result) {
  std::error_code ec;
  const fs::path& dir = target.dir;
  if (target.replace_whole) {
    fs::remove(dir, ec);  // an empty directory, or nothing
    if (std::rename(staging.c_str(), dir.c_str()) != 0)
      fail("{}: cannot rename {} to it: {}", target.shown.string(), staging.string(),
           std::strerror(errno));
    fsync_directory(dir.parent_path());
    return;
  }
  for (const std::string& name : result.files)
    if (std::rename((staging / name).c_str(), (dir / name).c_str()) != 0)
      fail("{}: cannot rename {} into it: {}", target.shown.string(), (staging / name).string(),
           std::strerror(errno));
  for (const std::string& name : export_file_names())
    if (std::find(result.files.begin(), result.files.end(), name) == result.files.end() &&
        fs::remove(dir / name, ec))
      spdlog::info("export: removed {} of an earlier export", (target.shown / name).string());
  fs::remove_all(staging, ec);
  fsync_directory(dir);
}

// Reads the checkpoint, chooses the names, and writes every file of the export into `staging`.
void write_export(const ExportOptions& options, const std::string& dtype, const fs::path& staging,
                  ExportResult& result) {
  const CheckpointWeights weights = read_checkpoint_weights(options.checkpoint);
  const ModelConfig& m = weights.config.model;
  result.step = weights.step;
  spdlog::info("export: {} (step {}, {}): {}, {} layers, hidden {}, vocab {}: {} parameters",
               weights.path, weights.step, weights.precision, m.arch, m.n_layer, m.hidden_size,
               m.vocab_size, weights.values.size());
  const ExportNamingChoice choice = choose_export_naming(m);
  result.naming = choice.naming;
  result.reason = choice.reason;
  spdlog::info("export: {} names: {}", export_naming_name(choice.naming), choice.reason);
  write_model_files(staging, weights, dtype, options.dtype, result);
  copy_tokenizer_files(staging, weights.config, result);
}

}  // namespace

ExportResult export_checkpoint(const ExportOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  COLLAGE_CHECK(options.dtype == "bfloat16" || options.dtype == "float32",
                "--dtype: '{}' is not bfloat16 or float32", options.dtype);
  const std::string dtype = options.dtype == "bfloat16" ? "BF16" : "F32";
  const ExportTarget target = check_export_target(options);
  std::error_code ec;
  COLLAGE_CHECK(fs::exists(options.checkpoint, ec), "{}: no such checkpoint file or directory",
                options.checkpoint);
  const Staging staging = make_staging_directory(target.dir);
  ExportResult result;
  result.directory = target.dir.string();
  try {
    write_export(options, dtype, staging.path, result);
    commit_export(target, staging.path, result);
  } catch (...) {
    // A failed export leaves nothing: the staged files, and the parents it created.
    fs::remove_all(staging.path, ec);
    if (!staging.created.empty()) fs::remove_all(staging.created, ec);
    throw;
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  spdlog::info("export: wrote {}: {} tensors, {} ({}), and {} in {:.1f} s",
               (target.shown / kSafetensors).string(), result.tensors,
               format_bytes(double(result.safetensors_bytes)), dtype,
               result.files.size() > 1 ? fmt::format("{}", fmt::join(result.files.begin() + 1,
                                                                     result.files.end(), ", "))
                                       : std::string("no other file"),
               result.seconds);
  return result;
}

}  // namespace collage
