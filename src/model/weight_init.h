#pragma once
// Reproducible weight initialisation shared by the models. std::normal_distribution is
// implementation-defined, so normals come from our own Box-Muller over std::mt19937_64
// (whose output sequence the standard fixes): the same seed gives the same bits with any
// compiler, backend or storage type.
#include <cstdint>
#include <functional>
#include <vector>

#include "model/parameter_info.h"

namespace collage {

// A per-tensor stream seed: mixes the run seed with the tensor's index in the table, so
// a tensor's values do not depend on which other tensors exist before it is drawn.
uint64_t tensor_seed(uint64_t seed, uint64_t tensor_index);

// n values of N(0, std²), each rounded to a bf16-representable float.
std::vector<float> normal_bf16_values(uint64_t stream_seed, int64_t n, double std);

// This rank's shard of a full tensor (values in full_shape, row-major) under `split`.
std::vector<float> extract_shard(const std::vector<float>& full, const ParameterInfo& info,
                                 const ParallelLayout& layout);

// How one tensor starts, whole (tp = 1 shape): zeros, ones, or N(0, std²) with the rows from
// real_rows on (a padded vocabulary's) left at zero.
struct TensorInit {
  enum Kind { zeros, ones, normal } kind = zeros;
  double std = 0;
  int64_t real_rows = -1;  // -1: every row drawn
};

// Every tensor of `table` drawn whole by `rule` (normals from tensor_seed(seed, index), the same
// stream at every tp) and cut to this rank's shard: num_parameters host values at the table's
// offsets, so every tensor-parallel layout starts from the same model.
std::vector<float> initial_values(const std::vector<ParameterInfo>& table, int64_t num_parameters,
                                  const ParallelLayout& layout, uint64_t seed,
                                  const std::function<TensorInit(const ParameterInfo&)>& rule);

}  // namespace collage
