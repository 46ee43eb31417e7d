// The header of a checkpoint (checkpoint.h): 12-byte magic, u32 version, u64 metadata bytes H,
// u64 data bytes D, then H bytes of JSON {"step", "meta", "tensors"}.
#include "train/checkpoint_info.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "core/error.h"
#include "train/training_checkpoint.h"

namespace collage {

CheckpointInfo read_checkpoint_info(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  COLLAGE_CHECK(in.good(), "{}: cannot open the checkpoint: {}", path, std::strerror(errno));
  in.seekg(0, std::ios::end);
  const uint64_t file_size = uint64_t(in.tellg());
  in.seekg(0);
  char header[32];
  in.read(header, sizeof header);
  COLLAGE_CHECK(in.good() && std::memcmp(header, "COLLAGE-CKPT", 12) == 0,
                "{}: not a collage checkpoint (bad magic)", path);
  uint32_t version;
  uint64_t meta_bytes;
  std::memcpy(&version, header + 12, 4);
  std::memcpy(&meta_bytes, header + 16, 8);
  COLLAGE_CHECK(version == 1, "{}: unsupported checkpoint format version {}", path, version);
  COLLAGE_CHECK(meta_bytes <= file_size - sizeof header,
                "{}: truncated or corrupt checkpoint (its header describes {} bytes of metadata, "
                "the file has {} bytes)",
                path, meta_bytes, file_size);
  std::string text(meta_bytes, '\0');
  in.read(text.data(), std::streamsize(meta_bytes));
  COLLAGE_CHECK(in.good(), "{}: truncated checkpoint metadata", path);
  CheckpointInfo info;
  info.path = path;
  std::string yaml;
  try {
    const nlohmann::json json = nlohmann::json::parse(text);
    info.step = json.at("step").get<int64_t>();
    info.meta = json.at("meta");
    if (info.meta.contains("config")) yaml = info.meta.at("config").get<std::string>();
  } catch (const std::exception& e) {
    fail("{}: corrupt checkpoint metadata: {}", path, e.what());
  }
  COLLAGE_CHECK(!yaml.empty(), "{}: the checkpoint holds no saved config (meta \"config\")", path);
  info.config = parse_config(yaml, path + " (its saved config)");
  return info;
}

void load_weights_for_inference(const std::string& path, const Config& config, Backend& backend,
                                TrainableModel& model) {
  auto logger = spdlog::default_logger();
  const spdlog::level::level_enum level = logger->level();
  logger->set_level(std::max(level, spdlog::level::warn));
  try {
    load_checkpoint_weights(path, config, backend, model);
  } catch (...) {
    logger->set_level(level);
    throw;
  }
  logger->set_level(level);
}

}  // namespace collage
