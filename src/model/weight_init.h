#pragma once
// Reproducible weight initialisation shared by the models. std::normal_distribution is
// implementation-defined, so normals come from our own Box-Muller over std::mt19937_64
// (whose output sequence the standard fixes): the same seed gives the same bits with any
// compiler, backend or storage type.
#include <cstdint>
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

}  // namespace collage
