#pragma once
// The one output rule of the programs: an output (a file or a directory a program writes) must
// not be one of the job's inputs, contain one, lie inside one, or link to one; and an existing
// directory is replaced only when it is of the kind the program writes, or with --overwrite.
//
//   io::check_output(out, {{cfg_path, "run config (-c)"}, {train, "--train"}}, "--out");
//   io::check_output_dir(out, "--out", overwrite, {"config.json", "model.safetensors"});
//
// Files are compared by identity (device and inode, what stat(2) sees through symlinks), so a
// hard link, a symlink or another spelling of an input is that input. Directories are compared
// the same way along each path's parents: `--out RUN/checkpoints/step-000002` lies inside the
// input RUN, and `--out DIR` contains the input `DIR/config.json`. A path that does not exist yet
// is compared through its nearest existing parent.

#include <sys/stat.h>

#include <filesystem>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sparselm/core/error.hpp"

namespace sparselm::io {

// One input of a job: its path and how the user named it (a flag, "run config", ...).
struct named_path {
  std::filesystem::path path;
  std::string what;
};

namespace detail {
struct file_id {
  dev_t dev;
  ino_t ino;
  bool operator==(const file_id&) const = default;
};

inline std::optional<file_id> id_of(const std::filesystem::path& p) {
  struct stat st {};
  if (p.empty() || ::stat(p.c_str(), &st) != 0) return std::nullopt;
  return file_id{st.st_dev, st.st_ino};
}

// The identities of p's existing parents, nearest first (p itself excluded).
inline std::vector<file_id> parent_ids(const std::filesystem::path& p) {
  std::vector<file_id> ids;
  std::filesystem::path a = std::filesystem::absolute(p).lexically_normal();
  if (!a.has_filename()) a = a.parent_path();  // "dir/" is "dir"
  for (auto q = a.parent_path(); !q.empty(); q = q.parent_path()) {
    if (auto id = id_of(q)) ids.push_back(*id);
    if (q == q.root_path()) break;
  }
  return ids;
}
}  // namespace detail

// Refuses `out` (named `out_what` in the error, e.g. "--out") when it is, contains, lies inside or
// links to one of `inputs`.
inline void check_output(const std::filesystem::path& out, const std::vector<named_path>& inputs,
                         const std::string& out_what) {
  const auto out_id = detail::id_of(out);
  const auto out_parents = detail::parent_ids(out);
  auto said = [&](const named_path& in) {
    return out_what + " '" + out.string() + "' and the input " + in.what + " '" + in.path.string() + "'";
  };
  for (const auto& in : inputs) {
    const auto in_id = detail::id_of(in.path);
    if (!in_id) continue;  // not there: its reader names it
    SPARSELM_CHECK(!(out_id && *out_id == *in_id), said(in),
                   " are the same file (also through a link); writing one would overwrite the other");
    for (const auto& p : out_parents)
      SPARSELM_CHECK(!(p == *in_id), said(in), ": the output lies inside the input; writing it would change the input");
    if (out_id)
      for (const auto& p : detail::parent_ids(in.path))
        SPARSELM_CHECK(!(p == *out_id), said(in),
                       ": the output directory contains the input; writing it would replace or delete the input");
  }
}

// Refuses to write into an existing directory `out` that holds anything but `own` (the names the
// program writes there, "prefix*" for a family of names, and the run lock), unless `overwrite`: a directory of another kind (a run
// directory, another program's output, a checkpoint) is never replaced by accident.
inline void check_output_dir(const std::filesystem::path& out, const std::string& out_what, bool overwrite,
                             std::initializer_list<std::string_view> own) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(out, ec)) return;
  SPARSELM_CHECK(fs::is_directory(out, ec), out_what, " '", out.string(), "' exists and is not a directory");
  if (overwrite) return;
  for (auto it = fs::directory_iterator(out, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    bool mine = name == ".lock";
    for (auto o : own)  // "name", or "prefix*"
      mine = mine || name == o || (o.ends_with('*') && name.starts_with(o.substr(0, o.size() - 1)));
    SPARSELM_CHECK(mine, out_what, " '", out.string(), "' already holds '", name,
                   "': choose another directory, or pass --overwrite to write into it anyway");
  }
  SPARSELM_CHECK(!ec, out.string(), ": cannot list: ", ec.message());
}

}  // namespace sparselm::io
