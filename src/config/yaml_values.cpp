// Reading YAML nodes into typed fields and writing them back. Numbers are parsed with
// std::from_chars (exact, locale-independent) and written in the shortest form that reads
// back to the same value, so config_to_yaml() round-trips bit for bit.
#include "config/yaml_values.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <charconv>
#include <cmath>
#include <type_traits>

#include "core/error.h"

namespace collage {

std::string describe_node(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Scalar:
      return "'" + node.Scalar() + "'";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Map:
      return "a map";
    default:
      return "nothing";
  }
}

namespace {

[[noreturn]] void type_error(const ValueContext& where, const char* expected,
                             const YAML::Node& node) {
  fail("{}: {}: expected {}, got {}", where.origin, where.key, expected, describe_node(node));
}

// Integers: plain decimal with an optional sign; anything else ("12.0", "1e3") is refused
// rather than silently truncated.
template <typename Int>
Int read_integer(const YAML::Node& node, const ValueContext& where) {
  const char* expected = std::is_signed_v<Int> ? "an integer" : "a non-negative integer";
  if (!node.IsScalar()) type_error(where, expected, node);
  std::string text = node.Scalar();
  const char* begin = text.data();
  const char* end = begin + text.size();
  if (begin != end && *begin == '+') begin++;
  Int value{};
  auto [stop, ec] = std::from_chars(begin, end, value);
  if (ec == std::errc::result_out_of_range)
    fail("{}: {}: {} is out of range for this field", where.origin, where.key, text);
  if (ec != std::errc() || stop != end || begin == end) type_error(where, expected, node);
  return value;
}

template <typename Real>
Real read_real(const YAML::Node& node, const ValueContext& where) {
  if (!node.IsScalar()) type_error(where, "a number", node);
  std::string text = node.Scalar();
  const char* begin = text.data();
  const char* end = begin + text.size();
  if (begin != end && *begin == '+') begin++;
  Real value{};
  auto [stop, ec] = std::from_chars(begin, end, value);
  if (ec == std::errc::result_out_of_range)
    fail("{}: {}: {} is out of range for this field", where.origin, where.key, text);
  if (ec != std::errc() || stop != end || begin == end || !std::isfinite(value))
    type_error(where, "a finite number", node);
  return value;
}

bool read_bool(const YAML::Node& node, const ValueContext& where) {
  if (node.IsScalar()) {
    const std::string& s = node.Scalar();
    if (s == "true" || s == "True" || s == "TRUE") return true;
    if (s == "false" || s == "False" || s == "FALSE") return false;
  }
  type_error(where, "true or false", node);
}

// A missing value (`dir:`) is the empty string.
std::string read_string(const YAML::Node& node, const ValueContext& where) {
  if (node.IsNull()) return "";
  if (!node.IsScalar()) type_error(where, "a string", node);
  return node.Scalar();
}

ValueContext element(const ValueContext& where, size_t i) {
  return {where.origin, fmt::format("{}[{}]", where.key, i)};
}

// A list of strings, or one string as shorthand for a list of one.
std::vector<std::string> read_string_list(const YAML::Node& node, const ValueContext& where) {
  std::vector<std::string> out;
  if (node.IsNull()) return out;
  if (node.IsScalar()) return {node.Scalar()};
  if (!node.IsSequence()) type_error(where, "a list of strings", node);
  for (size_t i = 0; i < node.size(); i++) out.push_back(read_string(node[i], element(where, i)));
  return out;
}

// A list of integers, or one integer as shorthand for a list of one.
std::vector<int> read_int_list(const YAML::Node& node, const ValueContext& where) {
  std::vector<int> out;
  if (node.IsNull()) return out;
  if (node.IsScalar()) return {read_integer<int>(node, where)};
  if (!node.IsSequence()) type_error(where, "a list of integers", node);
  for (size_t i = 0; i < node.size(); i++)
    out.push_back(read_integer<int>(node[i], element(where, i)));
  return out;
}

DatasetSource read_dataset(const YAML::Node& node, const ValueContext& where) {
  DatasetSource source;
  if (node.IsScalar()) {
    source.prefix = node.Scalar();
    return source;
  }
  if (!node.IsMap()) type_error(where, "a map {prefix, weight} or a prefix string", node);
  bool has_prefix = false;
  for (const auto& entry : node) {
    std::string name = entry.first.as<std::string>();
    ValueContext sub{where.origin, where.key + "." + name};
    if (name == "prefix") {
      source.prefix = read_string(entry.second, sub), has_prefix = true;
    } else if (name == "weight") {
      source.weight = read_real<double>(entry.second, sub);
    } else {
      fail("{}: unknown key '{}'{}", where.origin, sub.key,
           did_you_mean(sub.key, {where.key + ".prefix", where.key + ".weight"}));
    }
  }
  if (!has_prefix) fail("{}: {}: missing key 'prefix'", where.origin, where.key);
  return source;
}

// datasets: a list of {prefix, weight} maps (or of prefix strings), or one prefix string.
std::vector<DatasetSource> read_datasets(const YAML::Node& node, const ValueContext& where) {
  std::vector<DatasetSource> out;
  if (node.IsNull()) return out;
  if (node.IsScalar()) return {read_dataset(node, where)};
  if (!node.IsSequence()) type_error(where, "a list of {prefix, weight} maps", node);
  for (size_t i = 0; i < node.size(); i++) out.push_back(read_dataset(node[i], element(where, i)));
  return out;
}

// Strings that read back as the same string in any YAML reader can go unquoted; the rest
// (empty, "on", "980,10,10", globs, ...) are written double-quoted with escapes.
bool is_plain_safe(const std::string& s) {
  if (s.empty()) return false;
  static const char* const reserved[] = {"true", "false", "yes", "no", "on",
                                         "off",  "null",  "y",   "n",  "~"};
  std::string lower;
  for (char c : s) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const char* r : reserved)
    if (lower == r) return false;
  if (!std::isalpha(static_cast<unsigned char>(s[0])) && s[0] != '_' && s[0] != '/') return false;
  for (char c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.' &&
        c != '/')
      return false;
  return true;
}

std::string yaml_string(const std::string& s) {
  if (is_plain_safe(s)) return s;
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\', out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      out += fmt::format("\\x{:02x}", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

}  // namespace

void read_field(const YAML::Node& node, const FieldTarget& target, const ValueContext& where) {
  std::visit(
      [&](auto* field) {
        using T = std::remove_pointer_t<decltype(field)>;
        if constexpr (std::is_same_v<T, bool>) {
          *field = read_bool(node, where);
        } else if constexpr (std::is_integral_v<T>) {
          *field = read_integer<T>(node, where);
        } else if constexpr (std::is_floating_point_v<T>) {
          *field = read_real<T>(node, where);
        } else if constexpr (std::is_same_v<T, std::string>) {
          *field = read_string(node, where);
        } else if constexpr (std::is_same_v<T, Precision>) {
          if (!node.IsScalar()) type_error(where, "a precision name", node);
          try {
            *field = parse_precision(node.Scalar());
          } catch (const Error& e) {
            fail("{}: {}: {}", where.origin, where.key, e.what());
          }
        } else if constexpr (std::is_same_v<T, AdamOrder>) {
          if (!node.IsScalar()) type_error(where, "torch or hf", node);
          try {
            *field = parse_adam_order(node.Scalar());
          } catch (const Error& e) {
            fail("{}: {}: {}", where.origin, where.key, e.what());
          }
        } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
          *field = read_string_list(node, where);
        } else if constexpr (std::is_same_v<T, std::vector<int>>) {
          *field = read_int_list(node, where);
        } else {
          *field = read_datasets(node, where);
        }
      },
      target);
}

std::string write_field(const std::string& name, const FieldTarget& target, int indent) {
  std::string pad(indent, ' ');
  return std::visit(
      [&](auto* field) -> std::string {
        using T = std::remove_pointer_t<decltype(field)>;
        std::string head = pad + name + ":";
        if constexpr (std::is_same_v<T, bool>) {
          return head + (*field ? " true\n" : " false\n");
        } else if constexpr (std::is_arithmetic_v<T>) {
          return head + fmt::format(" {}\n", *field);  // shortest exact form
        } else if constexpr (std::is_same_v<T, std::string>) {
          return head + " " + yaml_string(*field) + "\n";
        } else if constexpr (std::is_same_v<T, Precision>) {
          return head + " " + precision_name(*field) + "\n";
        } else if constexpr (std::is_same_v<T, AdamOrder>) {
          return head + " " + adam_order_name(*field) + "\n";
        } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
          std::string items;
          for (const std::string& s : *field) items += (items.empty() ? "" : ", ") + yaml_string(s);
          return head + " [" + items + "]\n";
        } else if constexpr (std::is_same_v<T, std::vector<int>>) {
          return head + fmt::format(" [{}]\n", fmt::join(*field, ", "));
        } else {
          if (field->empty()) return head + " []\n";
          for (const DatasetSource& d : *field)
            head += fmt::format("\n{}  - prefix: {}\n{}    weight: {}", pad, yaml_string(d.prefix),
                                pad, d.weight);
          return head + "\n";
        }
      },
      target);
}

}  // namespace collage
