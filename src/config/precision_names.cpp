// optimizer.precision names <-> the Precision enum (docs/PRECISION.md §1 says what each one is),
// and optimizer.adam_order names <-> AdamOrder.
#include <string>

#include "config/config.h"
#include "core/error.h"

namespace collage {
namespace {

constexpr Precision kAllPrecisions[] = {Precision::fp32_master,   Precision::bf16,
                                        Precision::collage_light, Precision::collage_plus,
                                        Precision::kahan,         Precision::stochastic};

}  // namespace

std::string precision_names() {
  std::string names;
  for (Precision p : kAllPrecisions)
    names += (names.empty() ? "" : ", ") + std::string(precision_name(p));
  return names;
}

Precision parse_precision(const std::string& name) {
  for (Precision p : kAllPrecisions)
    if (name == precision_name(p)) return p;
  fail("unknown precision '{}' (valid: {})", name, precision_names());
}

const char* adam_order_name(AdamOrder order) { return order == AdamOrder::torch ? "torch" : "hf"; }

AdamOrder parse_adam_order(const std::string& name) {
  for (AdamOrder order : {AdamOrder::torch, AdamOrder::hf})
    if (name == adam_order_name(order)) return order;
  fail("unknown adam order '{}' (valid: torch, hf)", name);
}

}  // namespace collage
