// Hugging Face's sharded safetensors layout: see safetensors_shards.h.
#include "checkpoint/safetensors_shards.h"

#include <fmt/format.h>

#include <cctype>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>

#include "core/error.h"

namespace collage {

namespace {

std::string lowercase(std::string text) {
  for (char& c : text) c = char(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

bool is_blank(char c) { return c == ' ' || c == '\t'; }

}  // namespace

uint64_t parse_max_shard_size(const std::string& text) {
  auto refuse = [&](const std::string& why) {
    fail(
        "max shard size '{}': {}; expected bytes (5000000000) or a number and a unit: KB, MB, "
        "GB, TB (powers of 10) or KiB, MiB, GiB, TiB (powers of 2), e.g. 5GB",
        text, why);
  };
  size_t i = 0;
  while (i < text.size() && is_blank(text[i])) i++;
  using u128 = unsigned __int128;
  constexpr u128 kLimit = u128(UINT64_MAX);
  u128 whole = 0;
  size_t digits = 0;
  for (; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])); i++, digits++) {
    whole = whole * 10 + u128(text[i] - '0');
    if (whole > kLimit) refuse("past 2^64 - 1 bytes");
  }
  // The fraction as numerator / 10^places; 18 places keep numerator · unit within 128 bits.
  u128 numerator = 0, denominator = 1;
  bool fraction = false;
  if (i < text.size() && text[i] == '.') {
    fraction = true;
    for (i++; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])); i++) {
      if (denominator == u128(1'000'000'000'000'000'000ull)) refuse("more than 18 decimals");
      numerator = numerator * 10 + u128(text[i] - '0'), denominator *= 10, digits++;
    }
  }
  if (digits == 0) refuse("no number");
  while (i < text.size() && is_blank(text[i])) i++;
  size_t end = text.size();
  while (end > i && is_blank(text[end - 1])) end--;
  const std::string unit = lowercase(text.substr(i, end - i));
  static const std::map<std::string, uint64_t> units = {{"", 1},
                                                        {"kb", 1'000},
                                                        {"mb", 1'000'000},
                                                        {"gb", 1'000'000'000},
                                                        {"tb", 1'000'000'000'000},
                                                        {"kib", uint64_t{1} << 10},
                                                        {"mib", uint64_t{1} << 20},
                                                        {"gib", uint64_t{1} << 30},
                                                        {"tib", uint64_t{1} << 40}};
  const auto it = units.find(unit);
  if (it == units.end()) refuse(fmt::format("unknown unit '{}'", text.substr(i, end - i)));
  if (unit.empty() && fraction) refuse("a fraction of a byte");
  const u128 bytes = whole * it->second + numerator * it->second / denominator;
  if (bytes > kLimit) refuse("past 2^64 - 1 bytes");
  if (bytes == 0) refuse("a shard needs at least 1 byte");
  return uint64_t(bytes);
}

SafetensorsShardPlan plan_safetensors_shards(const std::vector<uint64_t>& tensor_bytes,
                                             uint64_t max_shard_bytes) {
  SafetensorsShardPlan plan;
  plan.shard_of.resize(tensor_bytes.size());
  std::vector<size_t> current;
  uint64_t current_bytes = 0;
  for (size_t i = 0; i < tensor_bytes.size(); i++) {
    const uint64_t bytes = tensor_bytes[i];
    plan.total_size += bytes;
    if (bytes > max_shard_bytes) {  // its own shard, listed now; the current one stays open
      plan.shards.push_back({i});
      continue;
    }
    // current_bytes <= max here, so the subtraction cannot wrap; equal to max is allowed.
    if (bytes > max_shard_bytes - current_bytes) {
      plan.shards.push_back(std::move(current));
      current.clear();
      current_bytes = 0;
    }
    current.push_back(i);
    current_bytes += bytes;
  }
  if (!current.empty() || plan.shards.empty()) plan.shards.push_back(std::move(current));
  for (size_t s = 0; s < plan.shards.size(); s++)
    for (size_t i : plan.shards[s]) plan.shard_of[i] = s;
  return plan;
}

std::string safetensors_shard_file(size_t shard, size_t count) {
  if (count == 1) return kSafetensorsSingleFile;
  return fmt::format("model-{:05d}-of-{:05d}.safetensors", shard + 1, count);
}

std::string safetensors_index_json(const std::vector<SafetensorsTensorInfo>& tensors,
                                   const SafetensorsShardPlan& plan) {
  COLLAGE_CHECK(plan.shard_of.size() == tensors.size(),
                "safetensors index: a plan of {} tensors for {} tensors", plan.shard_of.size(),
                tensors.size());
  nlohmann::json weight_map = nlohmann::json::object();  // a std::map: sorted by name
  for (size_t i = 0; i < tensors.size(); i++)
    weight_map[tensors[i].name] = safetensors_shard_file(plan.shard_of[i], plan.shards.size());
  const nlohmann::json index = {{"metadata", {{"total_size", plan.total_size}}},
                                {"weight_map", std::move(weight_map)}};
  try {
    // Python's json.dumps(indent=2, sort_keys=True): ", " never ends a line, ": " between key
    // and value, non-ASCII as \uXXXX.
    return index.dump(2, ' ', /*ensure_ascii=*/true) + "\n";
  } catch (const nlohmann::json::exception& e) {  // a name that is not UTF-8
    fail("safetensors index: a tensor name cannot be written as JSON: {}", e.what());
  }
}

std::vector<std::string> write_safetensors_shards(
    const std::string& dir, const std::vector<SafetensorsTensorInfo>& tensors,
    const std::map<std::string, std::string>& metadata, uint64_t max_shard_bytes,
    const SafetensorsBytesFn& bytes_of) {
  namespace fs = std::filesystem;
  // Every check before the first file: names unique across the shards, dtypes, shapes, JSON.
  std::vector<uint64_t> sizes;
  try {
    safetensors_header(tensors, metadata);
    for (const SafetensorsTensorInfo& t : tensors) sizes.push_back(safetensors_tensor_bytes(t));
  } catch (const Error& e) {
    fail("{}: {}", dir, e.what());
  }
  const SafetensorsShardPlan plan = plan_safetensors_shards(sizes, max_shard_bytes);
  const size_t count = plan.shards.size();
  std::vector<std::string> files;
  for (size_t s = 0; s < count; s++) files.push_back(safetensors_shard_file(s, count));

  auto open_shard = [&](size_t s) {
    std::vector<SafetensorsTensorInfo> entries;
    for (size_t i : plan.shards[s]) entries.push_back(tensors[i]);
    return SafetensorsWriter((fs::path(dir) / files[s]).string(), std::move(entries), metadata);
  };
  std::vector<std::optional<SafetensorsWriter>> writers(count);  // the shards being written
  std::vector<bool> done(count, false);
  for (size_t i = 0; i < tensors.size(); i++) {
    const size_t s = plan.shard_of[i];
    if (!writers[s]) writers[s].emplace(open_shard(s));
    writers[s]->append(bytes_of(i));
    if (writers[s]->appended() == plan.shards[s].size()) {
      writers[s]->finish();
      writers[s].reset();
      done[s] = true;
    }
  }
  for (size_t s = 0; s < count; s++)  // the empty shard of a list without tensors
    if (!done[s]) open_shard(s).finish();

  if (count > 1) {
    write_file_synced((fs::path(dir) / kSafetensorsIndexFile).string(),
                      safetensors_index_json(tensors, plan));
    files.push_back(kSafetensorsIndexFile);
  }
  return files;
}

}  // namespace collage
