// Saving and restoring a run, at any parallel layout: see training_checkpoint.h.
#include "checkpoint/training_checkpoint.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>

#include "checkpoint/checkpoint_info.h"
#include "core/error.h"
#include "model/tensor_shards.h"
#include "optim/precision_conversion.h"

namespace collage {

namespace fs = std::filesystem;

bool saves_checkpoint_part(const RankLayout& layout) { return layout.dp_rank == 0 || layout.zero; }

Checkpoint make_training_checkpoint(const Config& config, Backend& backend,
                                    const TrainableModel& model, const Optimizer& optimizer,
                                    const TrainingProgress& progress, const RankLayout& layout) {
  Checkpoint ckpt;
  ckpt.step = progress.step;
  nlohmann::json components = nlohmann::json::array();
  for (const StateComponent& c : optimizer.state()) components.push_back(c.name);
  ckpt.meta = {
      {"step", progress.step},
      {"consumed_samples", progress.consumed_samples},
      {"precision", precision_name(optimizer.precision())},
      {"adam_order", adam_order_name(config.optimizer.adam_order)},
      {"collage_plus_reference_quirk", config.optimizer.collage_plus_reference_quirk},
      {"optimizer_components", components},
      {"rounding_seed", optimizer.rounding_seed()},
      {"edq_cumulative", {{"dot", progress.edq.dot}, {"u_squared", progress.edq.u_squared}}},
      {"num_parameters", model.num_parameters()},
      {"data_seed", config.data.seed},
      {"init_seed", config.training.seed},
      {"layout",
       {{"tensor_parallel", layout.tp}, {"data_parallel", layout.dp}, {"zero", layout.zero}}},
      {"config", config_to_yaml(config)}};
  const bool weights = layout.dp_rank == 0;  // the data-parallel replicas hold the same
  ckpt.meta["part"] = {{"tp_rank", layout.tp_rank},
                       {"dp_rank", layout.dp_rank},
                       {"weights", weights},
                       {"state_begin", optimizer.shard_begin()}};
  // Parameters by name, raw bf16 bits, so a resumed run continues bit for bit.
  if (weights) {
    for (const ParameterInfo& p : model.parameters()) {
      CheckpointTensor t{p.name, "bf16", p.shape, std::vector<uint8_t>(p.numel * sizeof(bf16))};
      backend.copy_to_host(t.bytes.data(), model.parameter_memory() + p.offset, t.bytes.size());
      ckpt.tensors.push_back(std::move(t));
    }
  }
  // The state of the elements [shard_begin, shard_begin + shard_elements) of the rank's memory.
  for (const StateComponent& c : optimizer.state()) {
    CheckpointTensor t{"optimizer." + c.name,
                       c.dtype,
                       {optimizer.shard_elements()},
                       std::vector<uint8_t>(c.bytes)};
    backend.copy_to_host(t.bytes.data(), c.data, t.bytes.size());
    ckpt.tensors.push_back(std::move(t));
  }
  return ckpt;
}

std::string save_checkpoint_set(const std::string& dir, Checkpoint& part, const RankLayout& layout,
                                Comm& world, int keep) {
  // The set's save id (checkpoint.h): rank 0's random number, in every shard and the manifest.
  uint64_t save_id = 0;
  if (world.rank() == 0)
    save_id = (uint64_t(std::random_device{}()) << 32) ^ std::random_device{}();
  world.broadcast(&save_id, sizeof save_id, 0);
  part.meta["save_id"] = fmt::format("{:016x}", save_id);
  const std::string shard_name = (fs::path(checkpoint_shard_directory_name(part.step)) /
                                  fmt::format("rank_{:05d}.ckpt", layout.world_rank))
                                     .string();
  const uint8_t mine = saves_checkpoint_part(layout) ? 1 : 0;
  if (mine) write_checkpoint_file((fs::path(dir) / shard_name).string(), part);
  // Fault injection for tests/parallel/checkpoints.py: COLLAGE_TEST_KILL_IN_SAVE=<world rank>
  // kills that rank in the middle of saving the set (rank 0: once every shard is on disk,
  // before the manifest), as a crash or a `kill -9` would.
  const char* kill_rank = std::getenv("COLLAGE_TEST_KILL_IN_SAVE");
  const bool killed_here = kill_rank && std::atoi(kill_rank) == layout.world_rank;
  if (killed_here && layout.world_rank != 0) std::raise(SIGKILL);
  // Who wrote; and when this returns, every rank's file is on disk.
  std::vector<uint8_t> wrote(size_t(world.size()));
  world.all_gather(&mine, wrote.data(), 1);
  if (killed_here) std::raise(SIGKILL);
  if (world.rank() == 0) {
    Checkpoint manifest;
    manifest.step = part.step;
    manifest.meta = part.meta;
    manifest.meta.erase("part");
    nlohmann::json shards = nlohmann::json::array();
    for (int rank = 0; rank < world.size(); rank++) {
      if (!wrote[size_t(rank)]) continue;
      shards.push_back((fs::path(checkpoint_shard_directory_name(part.step)) /
                        fmt::format("rank_{:05d}.ckpt", rank))
                           .string());
    }
    manifest.meta["shards"] = shards;
    save_checkpoint(dir, manifest, keep);
  }
  world.barrier();  // the set is committed when any rank goes on
  return (fs::path(dir) / checkpoint_file_name(part.step)).string();
}

std::string save_training_checkpoint(const Config& config, Backend& backend,
                                     const TrainableModel& model, const Optimizer& optimizer,
                                     const TrainingProgress& progress, const RankLayout& layout,
                                     Comm& world) {
  Checkpoint part = make_training_checkpoint(config, backend, model, optimizer, progress, layout);
  const std::string path =
      layout.world_size > 1
          ? save_checkpoint_set(checkpoint_dir(config), part, layout, world, config.checkpoint.keep)
          : save_checkpoint(checkpoint_dir(config), part, config.checkpoint.keep);
  spdlog::info("saved checkpoint {}", path);
  return path;
}

namespace {

// A saved layout's part: which tensor-parallel rank, and where its optimizer state starts.
struct SavedPart {
  int tp_rank = 0;
  bool weights = true;
  int64_t state_begin = 0;
  Checkpoint ckpt;
};

// Every tensor of the model whole (tensor-parallel 1 shapes of the saved layout), as raw
// little-endian elements: the weights, and each optimizer state component.
struct WholeTensors {
  std::map<std::string, std::vector<uint8_t>> params;
  std::map<std::string, std::map<std::string, std::vector<uint8_t>>> state;  // component, tensor
};

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// The parts a checkpoint path stands for: itself, or the shards its manifest lists.
std::vector<SavedPart> load_parts(const Checkpoint& top) {
  std::vector<SavedPart> parts;
  auto describe = [](Checkpoint ckpt) {
    SavedPart part;
    if (ckpt.meta.contains("part")) {  // single-process checkpoints have no "part"
      const nlohmann::json& p = ckpt.meta.at("part");
      part.tp_rank = p.at("tp_rank").get<int>();
      part.weights = p.at("weights").get<bool>();
      part.state_begin = p.at("state_begin").get<int64_t>();
    }
    part.ckpt = std::move(ckpt);
    return part;
  };
  const std::vector<std::string> shards = checkpoint_shard_paths(top);
  if (shards.empty()) {
    parts.push_back(describe(top));
  } else {
    for (const std::string& shard : shards) {
      Checkpoint part = load_checkpoint(shard);
      check_shard_of_set(top, part);
      parts.push_back(describe(std::move(part)));
    }
  }
  return parts;
}

// Puts the saved parts (tensor-parallel size saved_tp) back into whole tensors: the weights,
// and with_state every optimizer state component of `precision`.
WholeTensors assemble(const std::vector<SavedPart>& parts, const std::string& path,
                      const ModelConfig& model, int saved_tp, Precision precision,
                      bool with_state) {
  const std::vector<ParameterInfo> table = model_parameter_table(model, saved_tp);
  int64_t rank_elements = 0;  // each tensor-parallel rank's parameter memory
  for (const ParameterInfo& info : table) rank_elements += info.numel;
  WholeTensors whole;
  for (const ParameterInfo& info : table)
    whole.params[info.name].resize(numel_of(info.full_shape) * 2);
  const std::vector<StateComponent> components =
      with_state ? Optimizer::components(precision) : std::vector<StateComponent>{};
  for (const StateComponent& c : components)
    for (const ParameterInfo& info : table)
      whole.state[c.name][info.name].resize(numel_of(info.full_shape) * c.element_bytes);

  for (int r = 0; r < saved_tp; r++) {
    const ParallelLayout layout{saved_tp, r};
    bool have_weights = false;
    // The rank's flat state, from the parts that hold pieces of it (ZeRO-1 shards or one).
    std::map<std::string, std::vector<uint8_t>> flat;
    for (const StateComponent& c : components) flat[c.name].resize(rank_elements * c.element_bytes);
    int64_t covered = 0;
    for (const SavedPart& part : parts) {
      if (part.tp_rank != r) continue;
      if (part.weights && !have_weights) {
        for (const ParameterInfo& info : table) {
          const CheckpointTensor& t = part.ckpt.tensor(info.name);
          COLLAGE_CHECK(t.shape == info.shape && t.dtype == "bf16",
                        "{}: parameter '{}' has shape {} ({}) in the checkpoint but {} (bf16) in "
                        "the model at tensor-parallel {}: the model config differs from the "
                        "checkpoint's",
                        part.ckpt.path, info.name, fmt::join(t.shape, "x"), t.dtype,
                        fmt::join(info.shape, "x"), saved_tp);
          copy_shard_into(t.bytes.data(), whole.params[info.name].data(), info, layout, 2);
        }
        have_weights = true;
      }
      int64_t count = 0;
      for (const StateComponent& c : components) {
        const CheckpointTensor& t = part.ckpt.tensor("optimizer." + c.name);
        COLLAGE_CHECK(
            t.dtype == c.dtype && t.shape.size() == 1,
            "{}: optimizer state '{}' is {} of shape [{}], expected a vector of {} for {}",
            part.ckpt.path, c.name, t.dtype, fmt::join(t.shape, ", "), c.dtype,
            precision_name(precision));
        // A ZeRO-1 shard may reach into the padding behind the parameters: not kept.
        count = std::clamp<int64_t>(rank_elements - part.state_begin, 0, t.shape[0]);
        std::memcpy(flat[c.name].data() + part.state_begin * c.element_bytes, t.bytes.data(),
                    size_t(count) * c.element_bytes);
      }
      covered += count;
    }
    COLLAGE_CHECK(have_weights && (!with_state || covered == rank_elements),
                  "{}: the checkpoint lacks {} of tensor-parallel rank {} of {} (a shard is "
                  "missing)",
                  path, have_weights ? "optimizer state" : "the weights", r, saved_tp);
    for (const StateComponent& c : components)
      for (const ParameterInfo& info : table)
        copy_shard_into(flat[c.name].data() + info.offset * c.element_bytes,
                        whole.state[c.name][info.name].data(), info, layout, c.element_bytes);
  }
  return whole;
}

// A whole tensor of `rows` rows read as one of `wanted_rows` rows (the padded vocabulary grows
// with the tensor-parallel size). Fewer rows: its first rows, in place. More: zero rows added
// at the end, in `scratch`. Padding rows are zero in the weights and every state component, so
// nothing is lost either way.
const uint8_t* with_rows(const std::vector<uint8_t>& tensor, int64_t rows, int64_t wanted_rows,
                         std::vector<uint8_t>& scratch) {
  if (wanted_rows <= rows) return tensor.data();
  scratch.assign(tensor.size() / size_t(rows) * size_t(wanted_rows), 0);
  std::copy(tensor.begin(), tensor.end(), scratch.begin());
  return scratch.data();
}

// A checkpoint (single file or set) read whole: its strategy, layout and every tensor.
struct SavedRun {
  Checkpoint top;  // the file or the set's manifest
  std::string precision_name;
  Precision precision = Precision::fp32_master;
  int tp = 1, dp = 1;
  WholeTensors whole;
};

SavedRun read_saved_run(const std::string& path, const ModelConfig& model, bool with_state) {
  SavedRun run;
  run.top = load_checkpoint(path);
  run.precision_name = run.top.meta.value("precision", "");
  try {
    run.precision = parse_precision(run.precision_name);
  } catch (const Error& e) {
    fail("{}: checkpoint metadata: {}", path, e.what());
  }
  if (run.top.meta.contains("layout")) {
    run.tp = run.top.meta.at("layout").at("tensor_parallel").get<int>();
    run.dp = run.top.meta.at("layout").at("data_parallel").get<int>();
  }
  run.whole = assemble(load_parts(run.top), path, model, run.tp, run.precision, with_state);
  return run;
}

// This rank's shard of every saved tensor, in the model's parameter memory order: the weights,
// and (with_state) each optimizer state component of the saved strategy.
HostTrainingState cut_for_model(const SavedRun& run, const ModelConfig& config,
                                const TrainableModel& model, bool with_state) {
  const ParallelLayout layout = model.layout();
  std::map<std::string, int64_t> saved_rows;
  for (const ParameterInfo& info : model_parameter_table(config, run.tp))
    saved_rows[info.name] = info.full_shape[0];
  const int64_t n = model.num_parameters();
  HostTrainingState state{run.precision, std::vector<bf16>(n), {}};
  const std::vector<StateComponent> components =
      with_state ? Optimizer::components(run.precision) : std::vector<StateComponent>{};
  for (const StateComponent& c : components) state.state[c.name].resize(n * c.element_bytes);
  std::vector<uint8_t> scratch;
  for (const ParameterInfo& info : model.parameters()) {
    const int64_t rows = saved_rows.at(info.name), wanted_rows = info.full_shape[0];
    copy_shard_out_of(with_rows(run.whole.params.at(info.name), rows, wanted_rows, scratch),
                      state.params.data() + info.offset, info, layout, 2);
    for (const StateComponent& c : components)
      copy_shard_out_of(
          with_rows(run.whole.state.at(c.name).at(info.name), rows, wanted_rows, scratch),
          state.state[c.name].data() + info.offset * c.element_bytes, info, layout,
          c.element_bytes);
  }
  return state;
}

// Keys whose change makes a resumed run another run: the model, the data and its order, the
// seeds, the batch. (The precision has its own check and --convert-precision.)
bool changes_the_run(const std::string& key) {
  if (key == "model.hidden_dropout" || key == "model.attention_dropout") return false;
  static const std::vector<std::string> keys = {"data.datasets",
                                                "data.split",
                                                "data.seq_len",
                                                "data.seed",
                                                "data.hdf5_train",
                                                "data.max_predictions",
                                                "data.dynamic_masking",
                                                "training.seed",
                                                "training.micro_batch_size",
                                                "training.global_batch_size"};
  return key.starts_with("model.") || std::find(keys.begin(), keys.end(), key) != keys.end();
}

// Resuming under changed keys: refused for those that change the run (listing old and new
// values) unless allowed, logged for the others.
void check_config_changes(const Config& saved, const Config& config, const std::string& path,
                          bool allow_config_change, bool log_other_changes) {
  std::string refused, logged;
  for (const ConfigChange& c : config_changes(saved, config)) {
    if (c.key == "optimizer.precision") continue;
    const std::string line = fmt::format("\n  {}: {} -> {}", c.key, c.old_value, c.new_value);
    (changes_the_run(c.key) && !allow_config_change ? refused : logged) += line;
  }
  COLLAGE_CHECK(refused.empty(),
                "{}: the config differs from the checkpoint's in keys that change the model, the "
                "data order or the batch:{}\nresume with the checkpoint's values (its config is "
                "in the checkpoint and in <logging.dir>/config.yaml), or pass "
                "--allow-config-change to continue anyway",
                path, refused);
  if (!logged.empty() && log_other_changes)
    spdlog::info("resuming {} with a changed config:{}", path, logged);
}

void check_precision(const std::string& path, const std::string& saved_name, Precision wanted,
                     bool convert_precision) {
  COLLAGE_CHECK(saved_name == precision_name(wanted) || convert_precision,
                "{}: the checkpoint was trained with optimizer.precision '{}' but the config "
                "says '{}'. To continue unchanged, resume with --set optimizer.precision={}; to "
                "switch strategy, add --convert-precision (converts its optimizer state from "
                "{} to {})",
                path, saved_name, precision_name(wanted), saved_name, saved_name,
                precision_name(wanted));
}

}  // namespace

void check_resume_allowed(const std::string& path, const Config& config, bool convert_precision,
                          bool allow_config_change) {
  const CheckpointInfo info = read_checkpoint_info(path);  // the header: no tensors read
  COLLAGE_CHECK(!info.meta.value("weights_only", false),
                "{}: holds weights only (written by `collage import`), no optimizer state to "
                "continue: start a run from it with --init-from",
                path);
  check_config_changes(info.config, config, path, allow_config_change,
                       /*log_other_changes=*/false);
  check_precision(path, info.meta.value("precision", ""), config.optimizer.precision,
                  convert_precision);
}

std::string checkpoint_dir(const Config& config) {
  return config.checkpoint.dir.empty()
             ? (std::filesystem::path(config.logging.dir) / "checkpoints").string()
             : config.checkpoint.dir;
}

int64_t load_checkpoint_weights(const std::string& path, const Config& config, Backend& backend,
                                TrainableModel& model) {
  const SavedRun run = read_saved_run(path, config.model, /*with_state=*/false);
  const HostTrainingState state = cut_for_model(run, config.model, model, /*with_state=*/false);
  backend.copy_to_device(model.parameter_memory(), state.params.data(),
                         state.params.size() * sizeof(bf16));
  return run.top.meta.value("step", int64_t{0});
}

void load_whole_weights(const std::vector<bf16>& values, const ModelConfig& config,
                        Backend& backend, TrainableModel& model) {
  std::map<std::string, const ParameterInfo*> whole;
  const std::vector<ParameterInfo> table = model_parameter_table(config, 1);
  for (const ParameterInfo& info : table) whole[info.name] = &info;
  COLLAGE_CHECK(!table.empty() && size_t(table.back().offset + table.back().numel) <= values.size(),
                "load_whole_weights: {} values for a model of {}", values.size(),
                table.empty() ? 0 : table.back().offset + table.back().numel);
  const ParallelLayout layout = model.layout();
  std::vector<bf16> params(size_t(model.num_parameters()));
  std::vector<uint8_t> tensor, scratch;
  for (const ParameterInfo& info : model.parameters()) {
    const ParameterInfo& from = *whole.at(info.name);
    const auto* begin = reinterpret_cast<const uint8_t*>(values.data() + from.offset);
    tensor.assign(begin, begin + from.numel * sizeof(bf16));
    copy_shard_out_of(with_rows(tensor, from.full_shape[0], info.full_shape[0], scratch),
                      params.data() + info.offset, info, layout, sizeof(bf16));
  }
  backend.copy_to_device(model.parameter_memory(), params.data(), params.size() * sizeof(bf16));
}

TrainingProgress restore_training_checkpoint(const std::string& path, const Config& config,
                                             Backend& backend, TrainableModel& model,
                                             Optimizer& optimizer, bool convert_precision,
                                             bool allow_config_change) {
  const SavedRun run = read_saved_run(path, config.model, /*with_state=*/true);
  const Checkpoint& top = run.top;
  if (top.meta.contains("config"))
    check_config_changes(
        parse_config(top.meta.at("config").get<std::string>(), path + " (its saved config)"),
        config, path, allow_config_change, /*log_other_changes=*/true);
  const std::string& saved_name = run.precision_name;
  const Precision saved = run.precision;
  const Precision wanted = optimizer.precision();
  check_precision(path, saved_name, wanted, convert_precision);
  const int saved_tp = run.tp, saved_dp = run.dp;
  const ParallelLayout layout = model.layout();
  const int64_t n = model.num_parameters();
  HostTrainingState state = cut_for_model(run, config.model, model, /*with_state=*/true);
  if (saved != wanted) {
    state = convert_training_state(state, wanted);
    spdlog::info("converted the optimizer state of {} from {} to {}", path, saved_name,
                 precision_name(wanted));
  }
  const std::string saved_order = top.meta.value("adam_order", "torch");
  if (saved_order != adam_order_name(config.optimizer.adam_order))
    spdlog::warn("{}: trained with optimizer.adam_order {}, continuing with {}", path, saved_order,
                 adam_order_name(config.optimizer.adam_order));

  backend.copy_to_device(model.parameter_memory(), state.params.data(), n * sizeof(bf16));
  // The optimizer's shard of the state; past the parameters (ZeRO-1 padding) it stays zero.
  const int64_t begin = optimizer.shard_begin();
  const int64_t count = std::clamp<int64_t>(n - begin, 0, optimizer.shard_elements());
  for (const StateComponent& c : optimizer.state()) {
    const std::vector<uint8_t>& bytes = state.state.at(c.name);
    COLLAGE_CHECK(bytes.size() == size_t(n) * c.element_bytes,
                  "{}: optimizer state '{}' has {} bytes, expected {}", path, c.name, bytes.size(),
                  size_t(n) * c.element_bytes);
    backend.copy_to_device(c.data, bytes.data() + begin * c.element_bytes,
                           size_t(count) * c.element_bytes);
  }
  // The rounding stream continues with the checkpoint's key (older checkpoints have none).
  if (top.meta.contains("rounding_seed"))
    optimizer.set_rounding_seed(top.meta.at("rounding_seed").get<uint64_t>());

  TrainingProgress progress;
  progress.step = top.meta.at("step").get<int64_t>();
  progress.consumed_samples = top.meta.at("consumed_samples").get<int64_t>();
  if (top.meta.contains("edq_cumulative")) {
    progress.edq.dot = top.meta.at("edq_cumulative").at("dot").get<double>();
    progress.edq.u_squared = top.meta.at("edq_cumulative").at("u_squared").get<double>();
  }
  spdlog::info(
      "resumed from {} at step {} ({} samples consumed){}", path, progress.step,
      progress.consumed_samples,
      saved_tp != layout.tp || saved_dp != 1
          ? fmt::format(", saved at tensor-parallel {} x data-parallel {}", saved_tp, saved_dp)
          : "");
  return progress;
}

}  // namespace collage
