// An architecture's model family and its models (model_family.h).
#include "model/model_family.h"

#include "core/error.h"

namespace collage {

ModelShape model_shape(const Config& config) {
  return {config.training.micro_batch_size, config.data.seq_len, config.data.max_predictions};
}

const ModelFamilyCode& model_family(const ModelConfig& config) {
  switch (architecture(config).family) {
    case ModelFamily::gpt:
      return gpt_family_code();
    case ModelFamily::bert:
      return bert_family_code();
  }
  fail("model.arch {}: no model family", config.arch);
}

namespace {

// The family's maker of `Model`; a family without one (null) is an error naming what it is not.
template <typename Model>
using ModelMaker = std::unique_ptr<Model> (*)(const ModelConfig&, Backend&, const ModelShape&,
                                              const ModelPlacement&);
template <typename Model>
std::unique_ptr<Model> make_with(ModelMaker<Model> make, const char* kind,
                                 const ModelConfig& config, Backend& backend,
                                 const ModelShape& shape, const ModelPlacement& placement) {
  COLLAGE_CHECK(make != nullptr, "model.arch {}: {} is not a {} language model", config.arch,
                architecture(config).title, kind);
  return make(config, backend, shape, placement);
}

}  // namespace

std::unique_ptr<CausalLanguageModel> make_causal_lm(const ModelConfig& config, Backend& backend,
                                                    const ModelShape& shape,
                                                    const ModelPlacement& placement) {
  return make_with(model_family(config).make_causal_lm, "causal", config, backend, shape,
                   placement);
}

std::unique_ptr<MaskedLanguageModel> make_masked_lm(const ModelConfig& config, Backend& backend,
                                                    const ModelShape& shape,
                                                    const ModelPlacement& placement) {
  return make_with(model_family(config).make_masked_lm, "masked", config, backend, shape,
                   placement);
}

std::unique_ptr<TrainableModel> make_model(const ModelConfig& config, Backend& backend,
                                           const ModelShape& shape,
                                           const ModelPlacement& placement) {
  if (architecture(config).objective == Objective::next_token)
    return make_causal_lm(config, backend, shape, placement);
  return make_masked_lm(config, backend, shape, placement);
}

}  // namespace collage
