#pragma once
// The directory of numbered checkpoints a training run keeps (io/checkpoint.hpp writes what goes
// in each): <out>/checkpoints/step-000200/{config.json, model.safetensors,
// training_state.safetensors} and <out>/checkpoints/latest naming the newest. A checkpoint is
// written into a temporary directory and renamed into place, then `latest` is replaced atomically,
// so a crash (kill -9) at any moment leaves the previous checkpoint intact and resumable.
//
//   io::checkpoint_dir dir(out / "checkpoints", /*keep=*/2);
//   dir.save(step, [&](const std::filesystem::path& tmp) { io::save_model(tmp, model); });
//   if (auto last = dir.latest()) resume_from(*last);
//   auto ckpt = io::resolve_checkpoint("runs/gpt");   // a checkpoint, or a run's latest one

#include <algorithm>
#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "sparselm/core/error.hpp"
#include "sparselm/core/json.hpp"
#include "sparselm/io/atomic_file.hpp"

namespace sparselm::io {

// The files of one checkpoint.
inline constexpr const char* model_file = "model.safetensors";
inline constexpr const char* config_file = "config.json";
inline constexpr const char* state_file = "training_state.safetensors";
// Metadata key of the CRC-32C (8 hex digits) of the training state's "sparselm.training_state" text.
inline constexpr const char* training_state_checksum_key = "sparselm.training_state.crc32c";

// The numbered checkpoints of a run: <root>/step-NNNNNN/ and <root>/latest.
class checkpoint_dir {
 public:
  explicit checkpoint_dir(std::filesystem::path root, std::size_t keep = 2) : root_(std::move(root)), keep_(keep) {}

  const std::filesystem::path& root() const noexcept { return root_; }
  static std::string step_name(std::size_t step) {
    std::string s = std::to_string(step);
    return "step-" + std::string(s.size() < 6 ? 6 - s.size() : 0, '0') + s;
  }

  // Writes checkpoint `step`: fill(tmp_dir) writes its files, then the directory is renamed into
  // place and `latest` updated; older checkpoints beyond `keep` are removed. Returns its path.
  template <class Fill>
  std::filesystem::path save(std::size_t step, Fill&& fill) {
    namespace fs = std::filesystem;
    fs::create_directories(root_);
    const fs::path final_dir = root_ / step_name(step);
    const fs::path tmp = detail::temp_path_for(final_dir);
    std::error_code ec;
    try {
      fs::create_directories(tmp);
      fill(tmp);
    } catch (...) {
      fs::remove_all(tmp, ec);
      throw;
    }
    if (fs::exists(final_dir)) {  // the same step saved again (e.g. after a resume): swap it out
      const fs::path old = detail::temp_path_for(final_dir);
      fs::rename(final_dir, old, ec);
      if (ec) {
        std::error_code ignored;
        fs::remove_all(tmp, ignored);
        fail(final_dir.string(), ": cannot move the previous checkpoint aside: ", ec.message());
      }
      fs::rename(tmp, final_dir, ec);
      if (ec) {  // put the previous one back: a failed save never loses a checkpoint
        std::error_code back, ignored;
        fs::rename(old, final_dir, back);
        fs::remove_all(tmp, ignored);
        fail(final_dir.string(), ": cannot rename the new checkpoint into place: ", ec.message(),
             back ? " (the previous one is kept as '" + old.string() + "')" : std::string());
      }
      sparselm::io::detail::sync_directory(root_);
      fs::remove_all(old, ec);  // a leftover is removed by the next start (remove_stale_temporaries)
    } else {
      fs::rename(tmp, final_dir, ec);
      if (ec) {
        std::error_code ignored;
        fs::remove_all(tmp, ignored);
        fail(final_dir.string(), ": cannot rename the new checkpoint into place: ", ec.message());
      }
    }
    sparselm::io::detail::sync_directory(root_);
    atomic_write_text(root_ / "latest", step_name(step) + "\n");
    prune(step);
    return final_dir;
  }

  // The newest complete checkpoint: the one `latest` names if it is complete, else the highest
  // numbered complete one; nullopt when there is none.
  std::optional<std::filesystem::path> latest() const {
    namespace fs = std::filesystem;
    if (!fs::is_directory(root_)) return std::nullopt;
    if (fs::exists(root_ / "latest")) {
      std::string name = read_text_file(root_ / "latest", "checkpoint pointer", 4096);
      while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
      // a checkpoint of this run, by name: never a path that leads out of it (another run's)
      SPARSELM_CHECK(name.empty() || (name.find('/') == std::string::npos && name != "." && name != ".."),
                     (root_ / "latest").string(), ": names '", name,
                     "', not a checkpoint of this run (expected a step-NNNNNN directory name)");
      if (!name.empty() && complete(root_ / name)) return root_ / name;
    }
    auto all = steps();
    for (auto it = all.rbegin(); it != all.rend(); ++it)
      if (complete(root_ / step_name(*it))) return root_ / step_name(*it);
    return std::nullopt;
  }

  static bool complete(const std::filesystem::path& d) {
    namespace fs = std::filesystem;
    return fs::exists(d / model_file) && fs::exists(d / config_file) && fs::exists(d / state_file);
  }

  // Steps of the step-NNNNNN directories, ascending.
  std::vector<std::size_t> steps() const {
    std::vector<std::size_t> r;
    if (!std::filesystem::is_directory(root_)) return r;
    for (auto& e : std::filesystem::directory_iterator(root_)) {
      const std::string n = e.path().filename().string();
      if (!e.is_directory() || n.rfind("step-", 0) != 0 || n.size() < 6) continue;
      if (n.find_first_not_of("0123456789", 5) != std::string::npos || n.size() > 5 + 18) continue;
      r.push_back(std::stoull(n.substr(5)));
    }
    std::sort(r.begin(), r.end());
    return r;
  }

 private:
  void prune(std::size_t newest) {
    if (keep_ == 0) return;
    auto all = steps();
    std::size_t kept = 0;
    for (auto it = all.rbegin(); it != all.rend(); ++it) {
      if (*it > newest) continue;  // never delete a newer one (left by an earlier, longer run)
      if (++kept > keep_) {
        std::error_code ec;
        std::filesystem::remove_all(root_ / step_name(*it), ec);
      }
    }
  }

  std::filesystem::path root_;
  std::size_t keep_;
};

// A checkpoint directory from a user's path: a checkpoint itself (has model.safetensors), or a run
// directory / checkpoints root whose latest checkpoint is taken.
inline std::filesystem::path resolve_checkpoint(const std::filesystem::path& p) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const auto st = fs::status(p, ec);
  SPARSELM_CHECK(!ec && fs::exists(st), p.string(), ": no such checkpoint or run directory",
                 ec ? " (" + ec.message() + ")" : std::string());
  if (fs::is_regular_file(p) || fs::exists(p / model_file)) return p;
  for (const fs::path& root : {p / "checkpoints", p}) {
    if (auto l = checkpoint_dir(root).latest()) return *l;
  }
  fail(p.string(), ": no checkpoint found (expected ", model_file, " or checkpoints/latest)");
}

}  // namespace sparselm::io
