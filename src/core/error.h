#pragma once
// collage::Error: every failure the user can cause (bad config, bad data file, non-finite
// loss, ...) is thrown as an Error whose message names the file, key or step and the
// reason. main() prints it as one line and exits non-zero.
#if defined(__CUDACC__)
#error \
    "core/error.h (fmt) does not compile under nvcc: kernel files check their arguments with COLLAGE_KERNEL_CHECK (printf-style) from kernels/common.cuh"
#endif
#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace collage {

// Thrown by a command that ends with a non-zero status that is not an error (collage train
// stopped by a signal after writing its checkpoint): the CLI exits with `status`.
struct ExitStatus {
  int status = 0;
};

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// fail("{}: expected {} bytes, found {}", path, want, got)
template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace collage

// COLLAGE_CHECK(cond, "fmt", args...): internal invariant or input check that throws Error.
#define COLLAGE_CHECK(cond, ...)               \
  do {                                         \
    if (!(cond)) ::collage::fail(__VA_ARGS__); \
  } while (0)
