// Fuzz target: a YAML config and `--set` overrides (parse_config), then writing the resolved
// config back out as `train` logs it.
#include <string>
#include <vector>

#include "config/config.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace collage;
  fuzz::InputReader input(data, size);
  // The YAML document, then NUL-separated overrides ("optimizer.lr=1e-3").
  const std::string yaml(input.take_until('\0'));
  std::vector<std::string> overrides;
  while (!input.rest().empty() && overrides.size() < 4)
    overrides.emplace_back(input.take_until('\0', 256));
  fuzz::refusals_allowed([&] {
    const Config config = parse_config(yaml, "fuzz.yaml", overrides);
    config_to_yaml(config);
  });
  return 0;
}
