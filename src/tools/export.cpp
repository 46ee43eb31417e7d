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
#include <map>
#include <memory>
#include <regex>
#include <set>

#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_info.h"
#include "checkpoint/posix_file.h"
#include "checkpoint/safetensors_shards.h"
#include "checkpoint/training_checkpoint.h"
#include "collage_version.h"
#include "config/architecture.h"
#include "core/error.h"
#include "model/model_family.h"
#include "model/tensor_shards.h"
#include "optim/memory_report.h"

namespace collage {

namespace fs = std::filesystem;

namespace {

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

namespace {

// A checkpoint part's header and what it holds: tensor-parallel rank `tp_rank`'s weights or not.
struct WeightsPart {
  std::string path;
  Checkpoint header;
  int tp_rank = 0;
  bool weights = true;
};

// The parts of `path` (itself, or its manifest's shards), headers only.
std::vector<WeightsPart> weights_parts(const std::string& path, const Checkpoint& top) {
  std::vector<std::string> paths = checkpoint_shard_paths(top);
  if (paths.empty()) paths = {path};
  std::vector<WeightsPart> parts;
  for (const std::string& p : paths) {
    WeightsPart part{p, p == path ? top : read_checkpoint_header(p)};
    if (part.header.meta.contains("part")) {  // single-process checkpoints have no "part"
      part.tp_rank = part.header.meta.at("part").at("tp_rank").get<int>();
      part.weights = part.header.meta.at("part").at("weights").get<bool>();
    }
    parts.push_back(std::move(part));
  }
  return parts;
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
  // Every byte checked (and a set's shards against its manifest) without keeping any; then the
  // weights read a tensor at a time, never the optimizer state: the model is held once.
  verify_checkpoint(w.path);
  const Checkpoint top = read_checkpoint_header(w.path);
  const int saved_tp =
      top.meta.contains("layout") ? top.meta.at("layout").at("tensor_parallel").get<int>() : 1;
  const std::vector<WeightsPart> parts = weights_parts(w.path, top);
  std::vector<const WeightsPart*> of_rank(size_t(saved_tp), nullptr);
  for (const WeightsPart& part : parts)
    if (part.weights && part.tp_rank >= 0 && part.tp_rank < saved_tp && !of_rank[part.tp_rank])
      of_rank[part.tp_rank] = &part;
  for (int r = 0; r < saved_tp; r++)
    COLLAGE_CHECK(of_rank[r] != nullptr,
                  "{}: the checkpoint lacks the weights of tensor-parallel rank {} of {} (a shard "
                  "is missing)",
                  w.path, r, saved_tp);

  const ModelConfig& model = w.config.model;
  w.table = model_parameter_table(model, 1);
  std::map<std::string, const ParameterInfo*> whole;
  int64_t total = 0;
  for (const ParameterInfo& info : w.table) {
    whole[info.name] = &info;
    total = std::max(total, info.offset + info.numel);
  }
  w.values.assign(size_t(total), bf16{0});
  std::vector<uint8_t> full;
  for (const ParameterInfo& info : model_parameter_table(model, saved_tp)) {
    int64_t numel = 1;
    for (int64_t d : info.full_shape) numel *= d;
    full.assign(size_t(numel) * sizeof(bf16), 0);
    for (int r = 0; r < saved_tp; r++) {
      const WeightsPart& part = *of_rank[r];
      const CheckpointTensor& t = part.header.tensor(info.name);
      COLLAGE_CHECK(t.shape == info.shape && t.dtype == "bf16",
                    "{}: parameter '{}' has shape {} ({}) in the checkpoint but {} (bf16) in the "
                    "model at tensor-parallel {}: the model config differs from the checkpoint's",
                    part.path, info.name, fmt::join(t.shape, "x"), t.dtype,
                    fmt::join(info.shape, "x"), saved_tp);
      copy_shard_into(read_checkpoint_tensor(part.path, t).data(), full.data(), info, {saved_tp, r},
                      sizeof(bf16));
    }
    // At tp = 1 the vocabulary has as many padding rows or fewer: its first rows.
    const ParameterInfo& to = *whole.at(info.name);
    std::memcpy(w.values.data() + to.offset, full.data(), size_t(to.numel) * sizeof(bf16));
  }
  return w;
}

HfNaming export_naming(const ModelConfig& config, bool collage_names) {
  HfNaming naming = hf_naming(config);
  if (collage_names && !naming.model_class.empty()) {
    naming = HfNaming{};
    naming.reason = "--names collage: collage's own names and shapes";
  }
  return naming;
}

std::string export_naming_name(const HfNaming& naming) {
  return naming.model_class.empty() ? "collage" : naming.model_class;
}

std::vector<uint8_t> export_bytes(const std::vector<bf16>& values, const std::string& dtype) {
  std::vector<uint8_t> bytes;
  if (dtype == "BF16") {
    bytes.resize(values.size() * sizeof(bf16));
    std::memcpy(bytes.data(), values.data(), bytes.size());
  } else if (dtype == "F32") {
    bytes.resize(values.size() * sizeof(float));
    bf16_to_float_array(values.data(), reinterpret_cast<float*>(bytes.data()),
                        int64_t(values.size()));
  } else {
    fail("export dtype '{}': expected BF16 or F32", dtype);
  }
  return bytes;
}

std::vector<ExportTensor> export_tensors(const CheckpointWeights& weights, const HfNaming& naming) {
  std::map<std::string, const ParameterInfo*> by_name;
  for (const ParameterInfo& info : weights.table) {
    COLLAGE_CHECK(info.offset + info.numel <= int64_t(weights.values.size()),
                  "{}: parameter '{}' lies outside the {} values read", weights.path, info.name,
                  weights.values.size());
    by_name[info.name] = &info;
  }
  std::vector<ExportTensor> out;
  if (naming.model_class.empty()) {  // collage's names: each parameter as it is
    for (const ParameterInfo& info : weights.table) {
      const bf16* values = weights.values.data() + info.offset;
      out.push_back({info.name, info.full_shape,
                     [values, n = info.numel] { return std::vector<bf16>(values, values + n); }});
    }
    return out;
  }
  std::set<std::string> used;
  for (const HfTensor& t : naming.tensors) {
    const auto it = by_name.find(t.name);
    COLLAGE_CHECK(it != by_name.end(), "{}: the model has no parameter '{}' ({} names it {})",
                  weights.path, t.name, naming.model_class, t.hf_name);
    used.insert(t.name);
    const ParameterInfo& info = *it->second;
    const bf16* values = weights.values.data() + info.offset;
    out.push_back({t.hf_name, hf_tensor_shape(t, info.full_shape),
                   [&t, &info, values] { return hf_tensor_values(t, info.full_shape, values); }});
  }
  // Every parameter has gone somewhere: a parameter added to a model must be named there.
  COLLAGE_CHECK(used.size() == weights.table.size(),
                "{}: {} of the model's {} parameters have no {} name", weights.path,
                weights.table.size() - used.size(), weights.table.size(), naming.model_class);
  return out;
}

std::vector<SafetensorsTensor> export_safetensors(const CheckpointWeights& weights,
                                                  const HfNaming& naming,
                                                  const std::string& dtype) {
  safetensors_dtype_size(dtype);  // a known name
  COLLAGE_CHECK(dtype == "BF16" || dtype == "F32", "export dtype '{}': expected BF16 or F32",
                dtype);
  std::vector<SafetensorsTensor> out;
  for (const ExportTensor& t : export_tensors(weights, naming))
    out.push_back({t.name, dtype, t.shape, export_bytes(t.values(), dtype)});
  return out;
}

bool is_export_shard_name(const std::string& name) {
  // model-00001-of-00003.safetensors (safetensors_shards.h)
  static const std::regex shard(R"(model-[0-9]{5}-of-[0-9]{5}\.safetensors)");
  return std::regex_match(name, shard);
}

const std::vector<std::string>& export_file_names() {
  static const std::vector<std::string> names = {
      kSafetensorsSingleFile, kSafetensorsIndexFile, "config.json",          "vocab.json",
      "merges.txt",           "vocab.txt",           "tokenizer_config.json"};
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

// model.safetensors (its metadata: the version, step, precision, naming and config) and, with a
// Hugging Face class, config.json.
void write_model_files(const fs::path& staging, const CheckpointWeights& weights,
                       const HfNaming& naming, const std::string& dtype,
                       const std::string& torch_dtype, uint64_t max_shard_bytes,
                       ExportResult& result) {
  // Each tensor's values are made when its shard writes it: the model is not held twice.
  const std::vector<ExportTensor> tensors = export_tensors(weights, naming);
  std::vector<SafetensorsTensorInfo> entries;
  for (const ExportTensor& t : tensors) entries.push_back({t.name, dtype, t.shape});
  const std::map<std::string, std::string> metadata = {
      {"format", "pt"},
      {"collage_version", fmt::format("{} ({})", COLLAGE_VERSION, COLLAGE_GIT)},
      {"step", std::to_string(weights.step)},
      {"precision", weights.precision},
      {"naming", export_naming_name(naming)},
      {"collage_config", config_to_yaml(weights.config)}};
  const std::vector<std::string> files =
      write_safetensors_shards(staging.string(), entries, metadata, max_shard_bytes,
                               [&](size_t i) { return export_bytes(tensors[i].values(), dtype); });
  for (const std::string& file : files) {
    result.safetensors_bytes += fs::file_size(staging / file);
    result.files.push_back(file);
  }
  result.tensors = int64_t(tensors.size());
  if (!naming.model_class.empty()) {
    write_file_synced((staging / "config.json").string(),
                      hf_config_json(naming, torch_dtype).dump(2) + "\n");
    result.files.push_back("config.json");
  }
}

// tokenizer_config.json for transformers' AutoTokenizer: the class that reads the files beside
// it (a RoBERTa trained on WordPiece ids needs BERT's tokenizer, not RoBERTa's BPE), and the
// longest input the model takes.
nlohmann::ordered_json tokenizer_config(const Config& config) {
  const ModelConfig& m = config.model;
  const Architecture& arch = architecture(m);
  nlohmann::ordered_json j;
  if (arch.tokenizer == TokenizerKind::gpt2_bpe) {
    j["tokenizer_class"] = "GPT2Tokenizer";
    if (m.vocab_size == 50257)  // GPT-2's vocabulary: <|endoftext|> is every special token
      for (const char* key : {"bos_token", "eos_token", "unk_token"}) j[key] = "<|endoftext|>";
    j["model_max_length"] = m.max_position_embeddings;
  } else {
    // collage's WordPiece is BERT's uncased FullTokenizer (data/text/wordpiece_tokenizer.h).
    j["tokenizer_class"] = "BertTokenizer";
    j["do_lower_case"] = true;
    j["unk_token"] = "[UNK]";
    j["sep_token"] = "[SEP]";
    j["pad_token"] = "[PAD]";
    j["cls_token"] = "[CLS]";
    j["mask_token"] = "[MASK]";
    // RoBERTa's positions start past the padding id.
    j["model_max_length"] = arch.positions_past_padding
                                ? m.max_position_embeddings - m.pad_token_id - 1
                                : m.max_position_embeddings;
  }
  return j;
}

// The tokenizer the model was trained with, when its files are where the config says
// (relative paths: from the current directory, as when training); with a Hugging Face class,
// its tokenizer_config.json too.
void copy_tokenizer_files(const fs::path& staging, const Config& config, const HfNaming& naming,
                          ExportResult& result) {
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
  if (!naming.model_class.empty()) {
    write_file_synced((staging / "tokenizer_config.json").string(),
                      tokenizer_config(config).dump(2) + "\n");
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
  std::vector<std::string> earlier = export_file_names();
  for (const auto& entry : fs::directory_iterator(dir, ec))  // an earlier export's shards
    if (is_export_shard_name(entry.path().filename().string()))
      earlier.push_back(entry.path().filename().string());
  for (const std::string& name : earlier)
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
  const HfNaming naming = export_naming(m, options.collage_names);
  result.naming = export_naming_name(naming);
  result.reason = naming.reason;
  spdlog::info("export: {} names: {}", result.naming, naming.reason);
  write_model_files(staging, weights, naming, dtype, options.dtype, options.max_shard_bytes,
                    result);
  copy_tokenizer_files(staging, weights.config, naming, result);
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
  const size_t shards =
      size_t(std::count_if(result.files.begin(), result.files.end(),
                           [](const std::string& f) { return is_export_shard_name(f); }));
  // The weights' file(s), then the others: "model-00001-of-00003.safetensors ... (3 shards)".
  std::vector<std::string> others;
  for (const std::string& f : result.files)
    if (!is_export_shard_name(f) && f != kSafetensorsSingleFile && f != kSafetensorsIndexFile)
      others.push_back(f);
  spdlog::info(
      "export: wrote {}: {} tensors, {} ({}) in {}, and {} in {:.1f} s", target.shown.string(),
      result.tensors, format_bytes(double(result.safetensors_bytes)), dtype,
      shards ? fmt::format("{} shards and {}", shards, kSafetensorsIndexFile)
             : std::string(kSafetensorsSingleFile),
      others.empty() ? std::string("no other file") : fmt::format("{}", fmt::join(others, ", ")),
      result.seconds);
  return result;
}

}  // namespace collage
