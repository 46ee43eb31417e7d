#pragma once
// Where collage's log lines go (spdlog's default logger).
#include <string>

namespace collage {

// For commands whose standard output is their result (eval, generate): the default logger
// writes "[hh:mm:ss] message" lines to stderr, at `level` on world rank 0 and errors only on the
// other ranks.
void log_to_stderr(const std::string& level = "info", int world_rank = 0);

}  // namespace collage
