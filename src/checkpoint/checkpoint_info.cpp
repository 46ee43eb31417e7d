// What a checkpoint says about itself (checkpoint_info.h), from its header (checkpoint.h).
#include "checkpoint/checkpoint_info.h"

#include "checkpoint/checkpoint.h"
#include "core/error.h"

namespace collage {

CheckpointInfo read_checkpoint_info(const std::string& path) {
  const Checkpoint header = read_checkpoint_header(path);
  CheckpointInfo info;
  info.path = path;
  info.step = header.step;
  info.meta = header.meta;
  COLLAGE_CHECK(info.meta.contains("config") && info.meta.at("config").is_string(),
                "{}: the checkpoint holds no saved config (meta \"config\")", path);
  info.config =
      parse_config(info.meta.at("config").get<std::string>(), path + " (its saved config)");
  return info;
}

}  // namespace collage
