#include "core/error_lines.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>

namespace collage {
namespace {

// The value of an environment variable as a non-negative integer, or -1.
long environment_number(const char* name) {
  const char* value = std::getenv(name);
  if (!value || !*value) return -1;
  char* end = nullptr;
  const long number = std::strtol(value, &end, 10);
  return *end == '\0' && number >= 0 ? number : -1;
}

}  // namespace

std::string launcher_rank_tag() {
  for (const auto& [rank_name, size_name] :
       {std::pair{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
        std::pair{"PMI_RANK", "PMI_SIZE"}}) {
    const long rank = environment_number(rank_name), size = environment_number(size_name);
    if (rank >= 0 && size > 1 && rank < size)
      return "rank " + std::to_string(rank) + " of " + std::to_string(size) + ": ";
  }
  return "";
}

std::string error_lines(std::string_view prefix, std::string_view tag, std::string_view message) {
  if (!message.empty() && message.back() == '\n') message.remove_suffix(1);
  std::string text;
  size_t begin = 0;
  do {
    const size_t end = message.find('\n', begin);
    const std::string_view line =
        message.substr(begin, end == std::string_view::npos ? std::string_view::npos : end - begin);
    text.append(prefix).append(tag).append(line).push_back('\n');
    begin = end == std::string_view::npos ? message.size() + 1 : end + 1;
  } while (begin <= message.size());
  return text;
}

void write_to_stderr(std::string_view text) {
  while (!text.empty()) {
    const ssize_t written = ::write(STDERR_FILENO, text.data(), text.size());
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0) return;  // nowhere left to say it
    text.remove_prefix(size_t(written));
  }
}

void print_error(std::string_view prefix, std::string_view message) {
  write_to_stderr(error_lines(prefix, launcher_rank_tag(), message));
}

}  // namespace collage
