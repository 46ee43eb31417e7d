#include "model/weight_init.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <random>

#include "core/error.h"
#include "core/splitmix64.h"
#include "model/tensor_shards.h"
#include "numerics/bf16.h"

namespace collage {

namespace {

// Uniform in (0, 1]: 53 random bits, never 0 (the log below needs u > 0).
double uniform_open_zero(std::mt19937_64& rng) {
  return (static_cast<double>(rng() >> 11) + 1.0) * 0x1.0p-53;
}

}  // namespace

uint64_t tensor_seed(uint64_t seed, uint64_t tensor_index) {
  return splitmix64(splitmix64(seed) ^ (tensor_index + 1));
}

std::vector<float> normal_bf16_values(uint64_t stream_seed, int64_t n, double std) {
  std::mt19937_64 rng(stream_seed);
  std::vector<float> values(static_cast<size_t>(n));
  // Box-Muller: two uniforms give two independent standard normals.
  for (int64_t i = 0; i < n; i += 2) {
    double radius = std::sqrt(-2.0 * std::log(uniform_open_zero(rng)));
    double angle = 2.0 * std::numbers::pi * uniform_open_zero(rng);
    values[i] = round_to_bf16(static_cast<float>(std * radius * std::cos(angle)));
    if (i + 1 < n)
      values[i + 1] = round_to_bf16(static_cast<float>(std * radius * std::sin(angle)));
  }
  return values;
}

std::vector<float> extract_shard(const std::vector<float>& full, const ParameterInfo& info,
                                 const ParallelLayout& layout) {
  int64_t full_numel = 1;
  for (int64_t d : info.full_shape) full_numel *= d;
  COLLAGE_CHECK(static_cast<int64_t>(full.size()) == full_numel, "{}: {} values for a tensor of {}",
                info.name, full.size(), full_numel);
  std::vector<float> shard(static_cast<size_t>(info.numel));
  copy_shard_out_of(full.data(), shard.data(), info, layout, sizeof(float));
  return shard;
}

std::vector<float> initial_values(const std::vector<ParameterInfo>& table, int64_t num_parameters,
                                  const ParallelLayout& layout, uint64_t seed,
                                  const std::function<TensorInit(const ParameterInfo&)>& rule) {
  std::vector<float> host(size_t(num_parameters), 0.0f);
  for (size_t i = 0; i < table.size(); i++) {
    const ParameterInfo& info = table[i];
    int64_t full_numel = 1;
    for (int64_t d : info.full_shape) full_numel *= d;
    const TensorInit init = rule(info);
    std::vector<float> full;
    if (init.kind == TensorInit::normal) {
      full = normal_bf16_values(tensor_seed(seed, i), full_numel, init.std);
      if (init.real_rows >= 0) {  // padding rows: no token or target ever uses them
        const int64_t row = full_numel / info.full_shape[0];
        std::fill(full.begin() + init.real_rows * row, full.end(), 0.0f);
      }
    } else {
      full.assign(size_t(full_numel), init.kind == TensorInit::ones ? 1.0f : 0.0f);
    }
    const std::vector<float> shard = extract_shard(full, info, layout);
    std::copy(shard.begin(), shard.end(), host.begin() + info.offset);
  }
  return host;
}

}  // namespace collage
