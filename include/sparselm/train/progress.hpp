#pragma once
// A one-line progress bar with rate and ETA, redrawn in place on stderr when stderr is a terminal
// (otherwise silent, so logs and CI output stay clean).
//
//   sparselm::progress_bar bar(total_steps);
//   bar.update(step, "loss 3.21 | 1.9k tok/s");
//   bar.finish();

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>

namespace sparselm {

// "1h02m", "3m07s", "12s"
inline std::string format_duration(double seconds) {
  if (!(seconds >= 0) || seconds > 1e7) return "?";
  const long s = long(seconds + 0.5);
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%ldh%02ldm", s / 3600, (s / 60) % 60);
  else if (s >= 60)
    std::snprintf(buf, sizeof buf, "%ldm%02lds", s / 60, s % 60);
  else
    std::snprintf(buf, sizeof buf, "%lds", s);
  return buf;
}

class progress_bar {
 public:
  explicit progress_bar(std::size_t total, bool enabled = isatty(STDERR_FILENO) != 0, std::size_t first = 0)
      : total_(std::max<std::size_t>(total, 1)), first_(first), on_(enabled), t0_(clock::now()) {}

  bool enabled() const noexcept { return on_; }

  // Redraws the bar at `done` of total with a short status text.
  void update(std::size_t done, const std::string& status) {
    if (!on_) return;
    const double el = std::chrono::duration<double>(clock::now() - t0_).count();
    const double per = done > first_ ? el / double(done - first_) : 0.0;
    const double eta = done > first_ ? per * double(total_ - std::min(done, total_)) : -1.0;
    constexpr int width = 24;
    const int filled = int(double(width) * double(std::min(done, total_)) / double(total_));
    std::string bar(std::size_t(filled), '#');
    bar.resize(width, '.');
    std::fprintf(stderr, "\r[%s] %zu/%zu %s | %s elapsed, ETA %s\033[K", bar.c_str(), done, total_, status.c_str(),
                 format_duration(el).c_str(), format_duration(eta).c_str());
    std::fflush(stderr);
  }
  // Ends the line (so the next output starts on a fresh one).
  void finish() {
    if (on_) std::fputc('\n', stderr);
    on_ = false;
  }
  // Prints a whole line above the bar (e.g. an evaluation result).
  void message(const std::string& line) {
    if (on_) std::fprintf(stderr, "\r\033[K");
    std::fprintf(stderr, "%s\n", line.c_str());
  }

 private:
  using clock = std::chrono::steady_clock;
  std::size_t total_, first_;
  bool on_;
  clock::time_point t0_;
};

}  // namespace sparselm
