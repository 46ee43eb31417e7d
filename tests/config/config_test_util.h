#pragma once
// Helpers for the config tests: parse a YAML snippet and return the error it raises.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "config/config.h"
#include "core/error.h"

namespace collage::testing {

// The smallest valid config: every other key takes its default.
inline const char* kMinimalYaml = "data:\n  datasets: data/x\n";

// The Error message parse_config() throws for `yaml` (origin "t.yaml"), or a test failure
// naming the text if it does not throw.
inline std::string error_of_phase(const std::string& yaml, const std::string& phase) {
  try {
    parse_config(yaml, "t.yaml", {}, phase);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

inline std::string error_of(const std::string& yaml,
                            const std::vector<std::string>& overrides = {}) {
  try {
    parse_config(yaml, "t.yaml", overrides);
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error for:\n" << yaml;
  return "";
}

// The minimal config plus one more section body, e.g. with_section("model", "n_layer: 0").
inline std::string with(const std::string& section, const std::string& body) {
  return std::string(kMinimalYaml) + section + ":\n  " + body + "\n";
}

}  // namespace collage::testing
