#pragma once
// A run directory's files and rules (the run driver's, train/run.hpp): claiming it (lock, stale
// temporaries of a killed save, a fresh run's refusal of a used directory unless overwrite), the
// config record and metrics log, cutting the metrics after a resumed checkpoint's step, and the
// never-save-non-finite guard with its message naming the last good checkpoint.
// Layout: <out>/.lock, config.json, metrics.jsonl, checkpoints/ (io/checkpoint.hpp).

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "sparselm/core/arena.hpp"
#include "sparselm/core/error.hpp"
#include "sparselm/core/input_file.hpp"
#include "sparselm/io/atomic_file.hpp"
#include "sparselm/io/checkpoint.hpp"
#include "sparselm/io/run_dir.hpp"
#include "sparselm/parallel/replica_group.hpp"
#include "sparselm/train/metrics.hpp"

namespace sparselm {

// Keeps the lines of a JSON-lines metrics file whose "step" is at most `step` (and lines without a
// step), rewriting it atomically. A missing file is left missing.
inline void truncate_metrics_after(const std::filesystem::path& path, std::size_t step) {
  if (!std::filesystem::exists(path)) return;
  std::istringstream in(read_input(path, "metrics file", max_text_bytes));  // refuses a FIFO or device
  std::string line, kept;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded()) continue;  // a line cut by a crash
    if (j.is_object() && j.contains("step") && j["step"].is_number_unsigned() && j["step"].get<std::size_t>() > step)
      continue;
    kept += line + "\n";
  }
  io::atomic_write_text(path, kept);
}

// The sentence that names the last good checkpoint of a run (for errors that stop it).
inline std::string last_good_checkpoint(const io::checkpoint_dir& cd, const std::filesystem::path& root) {
  if (auto l = cd.latest())
    return "The last good checkpoint is '" + l->string() + "': resume from it with --resume (and, e.g., a lower "
           "learning rate).";
  return "No checkpoint was saved in '" + root.string() + "'.";
}

// Whether every parameter is finite (a model that is not is never saved).
inline bool all_finite(const arena<float>& a) {
  float s = 0;  // NaN and infinities survive the multiplication by zero; finite values give 0
  for (std::size_t i = 0; i < a.layout().count(); ++i)
    for (float x : a[i]) s += x * 0.0f;
  return s == 0.0f;
}

// Before a job touches its run directory (holding its io::run_lock): stale temporaries of a killed
// save are removed (and reported); a fresh run refuses a directory that holds anything but the
// lock, unless `overwrite`, which deletes what an earlier run wrote (checkpoints, metrics, config).
inline void prepare_run_dir(const std::filesystem::path& out, const std::string& program, bool resume,
                            bool overwrite) {
  namespace fs = std::filesystem;
  SPARSELM_CHECK(!(resume && overwrite), program, ": --resume and --overwrite exclude each other");
  for (const fs::path& dir : {out, out / "checkpoints"})
    for (const auto& p : io::remove_stale_temporaries(dir))
      std::fprintf(stderr, "%s: removed '%s', left by an interrupted save\n", program.c_str(), p.string().c_str());
  if (resume) return;
  if (overwrite) {
    for (const char* name : {"checkpoints", "metrics.jsonl", "config.json"}) fs::remove_all(out / name);
    return;
  }
  std::string found;
  for (const auto& e : fs::directory_iterator(out))
    if (e.path().filename() != io::lock_file) {
      found = e.path().filename().string();
      break;
    }
  const bool has_checkpoints = !io::checkpoint_dir(out / "checkpoints").steps().empty();
  SPARSELM_CHECK(found.empty(), program, ": '", out.string(), "' is not empty (it holds '", found,
                 has_checkpoints ? "' and checkpoints" : "'",
                 "); pass --resume to continue that run, --overwrite to start it again, or choose another --out");
}

// Every job's start in its run directory, a collective over the ranks `g` (one process: g of 1):
// rank 0 locks the directory (held while `lock` lives) and tidies it (prepare_run_dir); the other
// ranks wait for it, since they read their checkpoints from it.
inline void claim_run_dir(parallel::replica_group& g, std::optional<io::run_lock>& lock,
                          const std::filesystem::path& out, const std::string& program, bool resume, bool overwrite) {
  if (g.rank() == 0) {
    lock.emplace(out);
    prepare_run_dir(out, program, resume, overwrite);
  }
  g.barrier();
}

// The files a job writes as it starts, on rank 0 (`writer`): config.json, and the metrics log,
// cut after `step` on resume. Other ranks get a log that writes nothing.
inline metrics_log open_run_files(bool writer, const std::filesystem::path& out, const nlohmann::json& config,
                                  bool resume, std::size_t step) {
  if (!writer) return {};
  std::filesystem::create_directories(out);
  io::atomic_write_text(out / "config.json", config.dump(2) + "\n");
  if (resume) truncate_metrics_after(out / "metrics.jsonl", step);
  return metrics_log(out / "metrics.jsonl", /*truncate=*/!resume);
}

}  // namespace sparselm
