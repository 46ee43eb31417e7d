// Formatting of the per-rank memory breakdown, and byte sizes in and out.
#include "optim/memory_report.h"

#include <fmt/format.h>

#include <cctype>
#include <charconv>
#include <cmath>

#include "core/error.h"

namespace collage {

double MemoryReport::bytes_per_parameter() const {
  if (parameters == 0) return 0;
  double bytes = double(parameter_bytes + gradient_bytes);
  for (const StateComponent& c : state) bytes += double(c.bytes);
  return bytes / double(parameters);
}

std::string format_bytes(double bytes) {
  if (bytes >= 1e9) return fmt::format("{:.2f} GB", bytes / 1e9);
  if (bytes >= 1e6) return fmt::format("{:.1f} MB", bytes / 1e6);
  if (bytes >= 1e3) return fmt::format("{:.1f} KB", bytes / 1e3);
  return fmt::format("{:.0f} B", bytes);
}

double parse_bytes(const std::string& text) {
  const char* begin = text.data();
  const char* end = begin + text.size();
  double value = 0;
  auto [stop, ec] = std::from_chars(begin, end, value);
  std::string unit;
  for (const char* p = stop; p != end; p++)
    if (*p != ' ') unit += char(std::tolower(static_cast<unsigned char>(*p)));
  const std::pair<const char*, double> units[] = {{"", 1},
                                                  {"b", 1},
                                                  {"kb", 1e3},
                                                  {"mb", 1e6},
                                                  {"gb", 1e9},
                                                  {"tb", 1e12},
                                                  {"kib", 1024.0},
                                                  {"mib", 1048576.0},
                                                  {"gib", 1073741824.0},
                                                  {"tib", 1099511627776.0}};
  if (ec == std::errc() && std::isfinite(value) && value > 0)
    for (const auto& [name, scale] : units)
      if (unit == name) return value * scale;
  fail(
      "memory size '{}': expected a positive number with an optional unit B, KB, MB, GB, TB "
      "(powers of 10) or KiB, MiB, GiB, TiB (powers of 2), e.g. 40GB",
      text);
}

std::string component_label(const std::string& name) {
  if (name == "dtheta") return "δθ";
  if (name == "dv") return "δv";
  return name;
}

std::string format_memory_report(const MemoryReport& r, const std::string& title) {
  const double n = double(r.parameters);
  std::string out;
  // Labels hold 2-byte UTF-8 characters (θ, δ): pad by characters, not bytes.
  auto row = [&](const std::string& label, double bytes, const std::string& note) {
    size_t chars = 0;
    for (unsigned char c : label) chars += (c & 0xc0) != 0x80;
    const std::string line =
        fmt::format("  {}{} {:>10}  {}", label, std::string(chars < 34 ? 34 - chars : 1, ' '),
                    format_bytes(bytes), note);
    out += line.substr(0, line.find_last_not_of(' ') + 1) + "\n";
  };
  auto per_param = [&](double bytes) {
    return fmt::format("{:5.2f} B/parameter", n > 0 ? bytes / n : 0.0);
  };
  out += fmt::format(
      "{}: {} parameters ({:.2f} M) at tensor-parallel {}, data-parallel {}{}; optimizer {}\n",
      title, r.parameters, n / 1e6, r.tensor_parallel, r.data_parallel,
      r.zero ? " (ZeRO-1: optimizer state sharded over data-parallel)" : "",
      precision_name(r.precision));
  row("parameters (bf16)", double(r.parameter_bytes), per_param(double(r.parameter_bytes)));
  row("gradients (bf16)", double(r.gradient_bytes), per_param(double(r.gradient_bytes)));
  row("optimizer state", double(r.state_bytes), per_param(double(r.state_bytes)));
  for (const StateComponent& c : r.state)
    row(fmt::format("  {} ({})", component_label(c.name), c.dtype), double(c.bytes),
        per_param(double(c.bytes)));
  row("θ + g + state", double(r.parameter_bytes + r.gradient_bytes + r.state_bytes),
      fmt::format("{:5.2f} B/parameter", r.bytes_per_parameter()));
  row(fmt::format("activations ({} x {} tokens)", r.micro_batch, r.seq_len),
      double(r.activation_bytes), "");
  row("total", double(r.total_bytes()), "");
  return out;
}

}  // namespace collage
