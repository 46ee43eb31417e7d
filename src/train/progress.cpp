#include "train/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>

namespace collage {

std::string format_duration(double seconds) {
  if (seconds < 60) return fmt::format("{:.1f}s", seconds);
  auto s = static_cast<int64_t>(seconds);
  if (s < 3600) return fmt::format("{}m{:02d}s", s / 60, s % 60);
  return fmt::format("{}h{:02d}m", s / 3600, (s % 3600) / 60);
}

ProgressBar::ProgressBar(const std::string& mode, int64_t first_step, int64_t last_step)
    : first_step_(first_step), last_step_(last_step), start_(std::chrono::steady_clock::now()) {
  active_ = mode == "on" || (mode == "auto" && isatty(STDERR_FILENO));
}

void ProgressBar::update(int64_t step, double loss) {
  if (!active_) return;
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const int64_t done = step - first_step_ + 1, total = last_step_ - first_step_ + 1;
  const double fraction = total > 0 ? double(done) / total : 1.0;
  const int width = 30, filled = static_cast<int>(fraction * width);
  const double per_step = done > 0 ? elapsed / done : 0;
  std::string bar(filled, '#');
  bar.resize(width, '.');
  std::fprintf(stderr, "\r\033[K[%s] step %lld/%lld %3.0f%% | loss %.4f | %s/step | ETA %s",
               bar.c_str(), static_cast<long long>(step), static_cast<long long>(last_step_),
               100 * fraction, loss, format_duration(per_step).c_str(),
               format_duration(per_step * (total - done)).c_str());
  std::fflush(stderr);
  drawn_ = true;
}

void ProgressBar::clear() {
  if (!active_ || !drawn_) return;
  std::fprintf(stderr, "\r\033[K");
  std::fflush(stderr);
  drawn_ = false;
}

void ProgressBar::finish() { clear(); }

}  // namespace collage
