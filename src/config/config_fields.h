#pragma once
// The schema of the YAML config as one table: every key path ("model.n_layer") with a
// typed pointer to the field of a Config it fills. The parser, the override handling, the
// unknown-key check and config_to_yaml() all walk this one table, so a new field is added
// in exactly one place (plus its range check in validate.cpp).
#include <functional>
#include <string>
#include <variant>
#include <vector>

#include "config/config.h"

namespace collage {

using FieldTarget = std::variant<int*, int64_t*, uint64_t*, float*, double*, bool*, std::string*,
                                 Precision*, AdamOrder*, std::vector<std::string>*,
                                 std::vector<int>*, std::vector<DatasetSource>*>;

struct ConfigField {
  std::string path;  // "section.key"
  FieldTarget target;
};

// Every field of `config`, section by section in the order config_to_yaml() writes them.
std::vector<ConfigField> config_fields(Config& config);

// The key paths of config_fields(), for suggestions ("did you mean ...?").
std::vector<std::string> config_key_paths();

// " (did you mean 'model.hidden_size'?)" when a candidate is within a small edit distance
// of `key`, or "" when nothing is close.
std::string did_you_mean(const std::string& key, const std::vector<std::string>& candidates);

// Where a key's value came from, for messages: the file, or the file and the override.
using OriginOf = std::function<std::string(const std::string& key_path)>;

// validate_config() with a per-key origin (parse_config() knows which keys were overridden).
void validate_config(const Config& config, const OriginOf& origin_of, int data_parallel);

}  // namespace collage
