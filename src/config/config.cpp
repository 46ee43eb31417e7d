// YAML file -> Config: strict reading (every key known, every value of the right type),
// `--set a.b=value` overrides, validation, and the resolved config back as YAML.
#include "config/config.h"

#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "config/config_fields.h"
#include "config/yaml_values.h"
#include "core/error.h"

namespace collage {
namespace {

std::string section_of(const std::string& path) { return path.substr(0, path.find('.')); }

std::vector<std::string> section_names() {
  std::vector<std::string> sections;
  for (const std::string& path : config_key_paths())
    if (sections.empty() || sections.back() != section_of(path))
      sections.push_back(section_of(path));
  return sections;
}

const ConfigField* find_field(const std::vector<ConfigField>& fields, const std::string& path) {
  for (const ConfigField& f : fields)
    if (f.path == path) return &f;
  return nullptr;
}

YAML::Node load_yaml(const std::string& text, const std::string& origin) {
  try {
    return YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    fail("{}: YAML syntax error at line {}, column {}: {}", origin, e.mark.line + 1,
         e.mark.column + 1, e.msg);
  }
}

// The document is a map of sections, each a map of keys. Every key must be in the table.
void read_document(const YAML::Node& root, const std::vector<ConfigField>& fields,
                   const std::string& origin) {
  if (root.IsNull()) return;  // an empty file: all defaults
  if (!root.IsMap())
    fail("{}: expected a map of sections (model, data, ...) at the top level, got {}", origin,
         describe_node(root));
  std::set<std::string> seen;
  for (const auto& section : root) {
    std::string name = section.first.Scalar();
    std::vector<std::string> sections = section_names();
    if (std::find(sections.begin(), sections.end(), name) == sections.end())
      fail("{}: unknown key '{}'{}", origin, name, did_you_mean(name, sections));
    if (!seen.insert(name).second) fail("{}: duplicate key '{}'", origin, name);
    const YAML::Node& body = section.second;
    if (body.IsNull()) continue;  // `model:` with nothing under it
    if (!body.IsMap()) fail("{}: {}: expected a map, got {}", origin, name, describe_node(body));
    for (const auto& entry : body) {
      std::string path = name + "." + entry.first.Scalar();
      const ConfigField* field = find_field(fields, path);
      if (!field)
        fail("{}: unknown key '{}'{}", origin, path, did_you_mean(path, config_key_paths()));
      if (!seen.insert(path).second) fail("{}: duplicate key '{}'", origin, path);
      read_field(entry.second, field->target, {origin, path});
    }
  }
}

// "training.max_steps=50": the value is parsed as YAML (a scalar, or a flow list/map such as
// "[{prefix: a, weight: 2}]"). Returns the key path it set.
std::string apply_override(const std::string& assignment, const std::vector<ConfigField>& fields,
                           const std::string& origin, const std::string& label) {
  size_t eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0)
    fail("{}: --set '{}': expected key.path=value, e.g. training.max_steps=100", origin,
         assignment);
  std::string path = assignment.substr(0, eq);
  const ConfigField* field = find_field(fields, path);
  if (!field)
    fail("{}: --set {}: unknown key '{}'{}", origin, assignment, path,
         did_you_mean(path, config_key_paths()));
  YAML::Node value = load_yaml(assignment.substr(eq + 1), label);
  read_field(value, field->target, {label, path});
  return path;
}

}  // namespace

Config parse_config(const std::string& yaml_text, const std::string& origin_file,
                    const std::vector<std::string>& overrides, const std::string& phase) {
  Config config;
  std::vector<ConfigField> fields = config_fields(config);
  YAML::Node root = load_yaml(yaml_text, origin_file);
  // phases: {NAME: {section: {key: value}}}: each phase overrides the document's keys.
  YAML::Node phases;
  bool has_phases = false;
  if (root.IsMap())
    for (const auto& entry : root)
      if (entry.first.Scalar() == "phases") phases = entry.second, has_phases = true;
  if (has_phases) root.remove("phases");
  read_document(root, fields, origin_file);
  std::vector<std::string> names;
  if (has_phases) {
    if (!phases.IsMap())
      fail("{}: phases: expected a map of phase name -> sections, got {}", origin_file,
           describe_node(phases));
    for (const auto& entry : phases) {  // every phase's keys checked, whichever runs
      const std::string name = entry.first.Scalar();
      Config scratch;
      read_document(entry.second, config_fields(scratch),
                    fmt::format("{} (phases.{})", origin_file, name));
      names.push_back(name);
    }
  }
  std::string origin = origin_file;
  if (!phase.empty()) {
    if (std::find(names.begin(), names.end(), phase) == names.end())
      fail("{}: --phase {}: {}", origin_file, phase,
           names.empty()
               ? std::string("the file defines no phases")
               : fmt::format("no such phase; the file defines {}", fmt::join(names, ", ")));
    origin = fmt::format("{} (phase {})", origin_file, phase);
    read_document(phases[phase], fields, origin);
  }

  // Messages about an overridden key name the override as well as the file.
  std::map<std::string, std::string> override_of;
  for (const std::string& assignment : overrides) {
    std::string label = origin + " (--set " + assignment + ")";
    override_of[apply_override(assignment, fields, origin, label)] = label;
  }
  OriginOf origin_of = [&](const std::string& key) {
    auto it = override_of.find(key.substr(0, key.find('[')));  // data.datasets[1].weight
    return it == override_of.end() ? origin : it->second;
  };
  validate_config(config, origin_of, /*data_parallel=*/1);
  return config;
}

Config load_config(const std::string& path, const std::vector<std::string>& overrides,
                   const std::string& phase) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot read config file: {}", path, std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  return parse_config(text.str(), path, overrides, phase);
}

std::vector<ConfigChange> config_changes(const Config& old_config, const Config& new_config) {
  Config a = old_config, b = new_config;  // config_fields() hands out mutable pointers
  const std::vector<ConfigField> old_fields = config_fields(a), new_fields = config_fields(b);
  std::vector<ConfigChange> changes;
  for (size_t i = 0; i < old_fields.size(); i++) {
    // write_field gives "  name: value\n" (or a block for the dataset list): the value is the rest.
    auto value = [](const ConfigField& f) {
      std::string text = write_field("", f.target, 0);
      text = text.substr(1);  // the ':' after the empty name
      while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
      while (!text.empty() && (text.front() == ' ' || text.front() == '\n')) text.erase(0, 1);
      return text;
    };
    const std::string before = value(old_fields[i]), after = value(new_fields[i]);
    if (before != after) changes.push_back({old_fields[i].path, before, after});
  }
  return changes;
}

std::string config_to_yaml(const Config& config) {
  Config copy = config;  // config_fields() hands out mutable pointers
  std::string out = "# collage config, resolved: every key with the value the run uses\n";
  std::string section;
  for (const ConfigField& f : config_fields(copy)) {
    if (section_of(f.path) != section) {
      section = section_of(f.path);
      out += section + ":\n";
    }
    out += write_field(f.path.substr(section.size() + 1), f.target, 2);
  }
  return out;
}

}  // namespace collage
