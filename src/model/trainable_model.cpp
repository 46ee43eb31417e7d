// The parameter table of any architecture (trainable_model.h), from its model family.
#include "model/trainable_model.h"

#include "model/model_family.h"

namespace collage {

std::vector<ParameterInfo> model_parameter_table(const ModelConfig& config, int tp) {
  return model_family(config).parameter_table(config, tp);
}

}  // namespace collage
