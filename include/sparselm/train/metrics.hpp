#pragma once
// Metrics as JSON lines: one object per line, flushed at once, so a crashed run keeps every line
// written so far and `scripts/plot_metrics.py` can read a run while it is going.
//
//   sparselm::metrics_log log("runs/x/metrics.jsonl");      // append
//   log.write({{"kind", "train"}, {"step", 10}, {"loss", 3.2}});

#include <cstdio>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "sparselm/core/error.hpp"

namespace sparselm {

class metrics_log {
 public:
  metrics_log() = default;
  // Opens `path` for appending (creating parent directories); truncate starts a new file.
  explicit metrics_log(const std::filesystem::path& path, bool truncate = false) : path_(path) {
    if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path());
    f_ = std::fopen(path.c_str(), truncate ? "w" : "a");
    SPARSELM_CHECK(f_ != nullptr, "metrics: cannot open '", path.string(), "' for writing");
  }
  metrics_log(const metrics_log&) = delete;
  metrics_log& operator=(const metrics_log&) = delete;
  metrics_log(metrics_log&& o) noexcept : path_(std::move(o.path_)), f_(std::exchange(o.f_, nullptr)) {}
  metrics_log& operator=(metrics_log&& o) noexcept {
    std::swap(path_, o.path_);
    std::swap(f_, o.f_);
    return *this;
  }
  ~metrics_log() {
    if (f_) std::fclose(f_);
  }

  bool is_open() const noexcept { return f_ != nullptr; }
  const std::filesystem::path& path() const noexcept { return path_; }

  void write(const nlohmann::json& j) {
    if (!f_) return;
    const std::string line = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    SPARSELM_CHECK(std::fwrite(line.data(), 1, line.size(), f_) == line.size() && std::fflush(f_) == 0,
                   "metrics: write to '", path_.string(), "' failed");
  }

 private:
  std::filesystem::path path_;
  std::FILE* f_ = nullptr;
};

}  // namespace sparselm
