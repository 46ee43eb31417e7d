// The parameter table of any architecture (trainable_model.h).
#include "model/trainable_model.h"

#include "model/bert.h"
#include "model/gpt.h"

namespace collage {

bool is_encoder(const ModelConfig& config) {
  return config.arch == "bert" || config.arch == "roberta";
}

std::vector<ParameterInfo> model_parameter_table(const ModelConfig& config, int tp) {
  return is_encoder(config) ? bert_parameter_table(config, tp) : gpt_parameter_table(config, tp);
}

}  // namespace collage
