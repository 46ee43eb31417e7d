#pragma once
// Converting a run's weights and optimizer state from one precision strategy to another,
// for `collage train --resume ... --convert-precision` (the table of every conversion is in
// precision_conversion.cpp). Works on host copies, as they come out of a checkpoint.
#include <map>
#include <string>
#include <vector>

#include "config/config.h"
#include "numerics/bf16.h"

namespace collage {

struct HostTrainingState {
  Precision precision = Precision::fp32_master;
  std::vector<bf16> params;  // θ (n): the weights the model reads
  // Each state component of Optimizer::components(precision) by name: n raw elements
  // (f32 or bf16, little-endian), as stored in checkpoints.
  std::map<std::string, std::vector<uint8_t>> state;
};

// The same weights and moments held the way `to` holds them. Throws Error naming the
// component when `from` lacks one of its strategy's components or has the wrong size.
HostTrainingState convert_training_state(const HostTrainingState& from, Precision to);

// The bf16 nearest (ties to even) to a double, rounded once (a double -> float -> bf16
// chain can round twice). Used for the converted values.
bf16 double_to_bf16(double x);

}  // namespace collage
