#include "core/logging.h"

#include <fmt/format.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <memory>

namespace collage {

void log_to_stderr(const std::string& level, int world_rank) {
  auto sink = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
  sink->set_pattern(world_rank == 0 ? "[%H:%M:%S] %v"
                                    : fmt::format("[%H:%M:%S] [rank {}] %v", world_rank));
  auto logger = std::make_shared<spdlog::logger>("collage", sink);
  logger->set_level(world_rank == 0 ? spdlog::level::from_str(level) : spdlog::level::err);
  logger->flush_on(spdlog::level::trace);
  spdlog::set_default_logger(logger);
}

}  // namespace collage
