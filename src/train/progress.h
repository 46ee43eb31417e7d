#pragma once
// A one-line terminal progress display (bar, step, loss, speed, ETA) redrawn in place on
// stderr. Active only when stderr is a terminal (or forced on); log lines call clear()
// first so the bar never tears a log line.
#include <chrono>
#include <cstdint>
#include <string>

namespace collage {

class ProgressBar {
 public:
  // mode: "auto" (on if stderr is a TTY), "on", "off".
  ProgressBar(const std::string& mode, int64_t first_step, int64_t last_step);
  void update(int64_t step, double loss);
  void clear();
  void finish();
  bool active() const { return active_; }

 private:
  bool active_ = false;
  bool drawn_ = false;
  int64_t first_step_, last_step_;
  std::chrono::steady_clock::time_point start_;
};

std::string format_duration(double seconds);  // "1h02m", "3m05s", "12.3s"

}  // namespace collage
