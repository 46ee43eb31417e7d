// Saving and restoring a run: see training_checkpoint.h.
#include "train/training_checkpoint.h"

#include <spdlog/spdlog.h>

#include <cstring>
#include <map>

#include "core/error.h"
#include "optim/precision_conversion.h"

namespace collage {

Checkpoint make_training_checkpoint(const Config& config, Backend& backend, const GPT& model,
                                    const Optimizer& optimizer, const TrainingProgress& progress) {
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
      {"config", config_to_yaml(config)}};
  // Parameters by name, raw bf16 bits, so a resumed run continues bit for bit.
  for (const ParameterInfo& p : model.parameters()) {
    CheckpointTensor t{p.name, "bf16", p.shape, std::vector<uint8_t>(p.numel * sizeof(bf16))};
    backend.copy_to_host(t.bytes.data(), model.parameter_memory() + p.offset, t.bytes.size());
    ckpt.tensors.push_back(std::move(t));
  }
  for (const StateComponent& c : optimizer.state()) {
    CheckpointTensor t{
        "optimizer." + c.name, c.dtype, {model.num_parameters()}, std::vector<uint8_t>(c.bytes)};
    backend.copy_to_host(t.bytes.data(), c.data, t.bytes.size());
    ckpt.tensors.push_back(std::move(t));
  }
  return ckpt;
}

namespace {

// The checkpoint's weights, in the model's parameter memory order.
std::vector<bf16> read_parameters(const Checkpoint& ckpt, const GPT& model) {
  std::vector<bf16> params(model.num_parameters());
  for (const ParameterInfo& p : model.parameters()) {
    const CheckpointTensor& t = ckpt.tensor(p.name);
    COLLAGE_CHECK(t.shape == p.shape && t.dtype == "bf16",
                  "{}: parameter '{}' has shape {} ({}) in the checkpoint but {} (bf16) in the "
                  "model: the model config differs from the checkpoint's",
                  ckpt.path, p.name, fmt::join(t.shape, "x"), t.dtype, fmt::join(p.shape, "x"));
    std::memcpy(params.data() + p.offset, t.bytes.data(), t.bytes.size());
  }
  return params;
}

// The state components of `precision`, checked against the checkpoint's tensors.
std::map<std::string, std::vector<uint8_t>> read_state(const Checkpoint& ckpt, Precision precision,
                                                       int64_t num_parameters) {
  std::map<std::string, std::vector<uint8_t>> state;
  for (const StateComponent& c : Optimizer::components(precision)) {
    const CheckpointTensor& t = ckpt.tensor("optimizer." + c.name);
    COLLAGE_CHECK(t.dtype == c.dtype && t.bytes.size() == size_t(num_parameters) * c.element_bytes,
                  "{}: optimizer state '{}' is {} bytes of {}, expected {} bytes of {} for {}",
                  ckpt.path, c.name, t.bytes.size(), t.dtype,
                  size_t(num_parameters) * c.element_bytes, c.dtype, precision_name(precision));
    state[c.name] = t.bytes;
  }
  return state;
}

}  // namespace

TrainingProgress restore_training_checkpoint(const std::string& path, const Config& config,
                                             Backend& backend, GPT& model, Optimizer& optimizer,
                                             bool convert_precision) {
  Checkpoint ckpt = load_checkpoint(path);
  const std::string saved_name = ckpt.meta.value("precision", "");
  Precision saved;
  try {
    saved = parse_precision(saved_name);
  } catch (const Error& e) {
    fail("{}: checkpoint metadata: {}", path, e.what());
  }
  const Precision wanted = optimizer.precision();
  HostTrainingState state{saved, read_parameters(ckpt, model),
                          read_state(ckpt, saved, model.num_parameters())};
  if (saved != wanted) {
    COLLAGE_CHECK(convert_precision,
                  "{}: the checkpoint was trained with optimizer.precision '{}' but the config "
                  "says '{}'. To continue unchanged, resume with --set optimizer.precision={}; to "
                  "switch strategy, add --convert-precision (converts its optimizer state from "
                  "{} to {})",
                  path, saved_name, precision_name(wanted), saved_name, saved_name,
                  precision_name(wanted));
    state = convert_training_state(state, wanted);
    spdlog::info("converted the optimizer state of {} from {} to {}", path, saved_name,
                 precision_name(wanted));
  }
  const std::string saved_order = ckpt.meta.value("adam_order", "torch");
  if (saved_order != adam_order_name(config.optimizer.adam_order))
    spdlog::warn("{}: trained with optimizer.adam_order {}, continuing with {}", path, saved_order,
                 adam_order_name(config.optimizer.adam_order));

  backend.copy_to_device(model.parameter_memory(), state.params.data(),
                         state.params.size() * sizeof(bf16));
  for (const StateComponent& c : optimizer.state()) {
    const std::vector<uint8_t>& bytes = state.state.at(c.name);
    COLLAGE_CHECK(bytes.size() == c.bytes, "{}: optimizer state '{}' has {} bytes, expected {}",
                  path, c.name, bytes.size(), c.bytes);
    backend.copy_to_device(c.data, bytes.data(), bytes.size());
  }
  // The rounding stream continues with the checkpoint's key (older checkpoints have none).
  if (ckpt.meta.contains("rounding_seed"))
    optimizer.set_rounding_seed(ckpt.meta.at("rounding_seed").get<uint64_t>());

  TrainingProgress progress;
  progress.step = ckpt.meta.at("step").get<int64_t>();
  progress.consumed_samples = ckpt.meta.at("consumed_samples").get<int64_t>();
  if (ckpt.meta.contains("edq_cumulative")) {
    progress.edq.dot = ckpt.meta.at("edq_cumulative").at("dot").get<double>();
    progress.edq.u_squared = ckpt.meta.at("edq_cumulative").at("u_squared").get<double>();
  }
  spdlog::info("resumed from {} at step {} ({} samples consumed)", path, progress.step,
               progress.consumed_samples);
  return progress;
}

}  // namespace collage
