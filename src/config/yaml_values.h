#pragma once
// One config value between YAML and its typed field: reading a yaml-cpp node into the
// field with strict typing ("model.n_layer: expected an integer, got 'twelve'"), and
// writing the field back as YAML text that reads back to the identical value.
#include <yaml-cpp/yaml.h>

#include <string>

#include "config/config_fields.h"

namespace collage {

// Where a value is and where it came from, for error messages: "<origin>: <key>: ...".
struct ValueContext {
  std::string origin;  // "configs/gpt/125m.yaml" or "configs/x.yaml (--set a.b=1)"
  std::string key;     // "model.n_layer"
};

// Replace the field's value with `node`'s. Throws Error on a wrong type or a value that does
// not fit the field.
void read_field(const YAML::Node& node, const FieldTarget& target, const ValueContext& where);

// "  n_layer: 12\n" (or a block list for data.datasets) at the given indent.
std::string write_field(const std::string& name, const FieldTarget& target, int indent);

// A short description of a node for messages: "'twelve'", "a list", "a map", "nothing".
std::string describe_node(const YAML::Node& node);

}  // namespace collage
