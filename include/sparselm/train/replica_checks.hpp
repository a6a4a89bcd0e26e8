#pragma once
// What the jobs (train/lm_job.hpp, train/bert_job.hpp) check before data-parallel ranks train
// together: every rank runs the same resolved config and reads the same data files. Both are
// collectives: every rank of the group calls them, in the same order.
//
//   check_same_config(group, resolved, "gpt_train");       // names the differing fields
//   check_same_files(group, {train_path, valid_path}, "gpt_train");

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sparselm/core/error.hpp"
#include "sparselm/core/input_file.hpp"
#include "sparselm/io/crc32c.hpp"
#include "sparselm/parallel/replica_group.hpp"

namespace sparselm {

// Size, and a CRC-32C of the first and last MiB, of a file (which ranks compare); opened through
// open_input (core/input_file.hpp), so a FIFO or device is refused by name.
inline std::uint64_t file_fingerprint(const std::filesystem::path& p) {
  const input_handle h = open_input(p, "data file", max_mapped_bytes);
  const std::uint64_t size = h.size;
  std::string head(std::size_t(std::min<std::uint64_t>(size, 1 << 20)), '\0'), tail = head;
  const bool ok = ::pread(h.fd, head.data(), head.size(), 0) == ::ssize_t(head.size()) &&
                  ::pread(h.fd, tail.data(), tail.size(), ::off_t(size - tail.size())) == ::ssize_t(tail.size());
  ::close(h.fd);
  SPARSELM_CHECK(ok, p.string(), ": read failed while comparing the data files of the ranks");
  return (size << 32) ^ io::crc32c(head.data(), head.size(), io::crc32c(tail.data(), tail.size()));
}

// Fails on a rank whose config differs from rank 0's, naming the fields (JSON pointers) and both
// values.
inline void check_same_config(parallel::replica_group& g, const nlohmann::json& resolved, const std::string& program) {
  if (g.size() == 1) return;
  std::string cfg = resolved.dump();
  g.broadcast(cfg);
  if (cfg == resolved.dump()) return;
  const auto theirs = nlohmann::json::parse(cfg);
  std::string where;
  for (const auto& op : nlohmann::json::diff(theirs, resolved)) {
    const std::string path = op.value("path", "");
    const nlohmann::json::json_pointer ptr(path);
    where += (where.empty() ? "" : "; ") + path + ": rank 0 " + (theirs.contains(ptr) ? theirs[ptr].dump() : "absent") +
             ", rank " + std::to_string(g.rank()) + " " + (resolved.contains(ptr) ? resolved[ptr].dump() : "absent");
  }
  fail(program, ": data parallel: rank ", g.rank(), " runs another config than rank 0 (", where, ")");
}

// Fails on a rank whose fingerprint of something it computed (e.g. a task's encoded training
// examples) differs from rank 0's; `what` names it.
inline void check_same_fingerprint(parallel::replica_group& g, std::uint64_t mine, const std::string& program,
                                   const std::string& what) {
  if (g.size() == 1) return;
  std::vector<std::uint64_t> all(g.size());
  g.all_gather(mine, all);
  for (std::size_t r = 1; r < all.size(); ++r)
    SPARSELM_CHECK(all[r] == all[0], program, ": data parallel: rank ", r, " has other ", what, " than rank 0");
}

// Fails on a rank whose files (empty paths skipped) differ from rank 0's in size or content.
inline void check_same_files(parallel::replica_group& g, const std::vector<std::filesystem::path>& files,
                             const std::string& program) {
  if (g.size() == 1) return;
  for (const auto& f : files)
    if (!f.empty())
      check_same_fingerprint(g, file_fingerprint(f), program,
                             "contents in '" + f.string() + "' (size or first and last MiB)");
}

// Fails on the first rank whose parameter fingerprint differs from the one it is compared with,
// naming both. A fingerprint is a CRC-32C in the low 32 bits; the high bits say which rank it is
// compared with: 0 (every rank holds the whole model), or the rank's pipeline stage s, whose first
// replica is rank s (ranks that keep only their stage's parameters, train/stage_params.hpp).
inline void check_same_parameters(parallel::replica_group& g, std::uint64_t mine, const std::string& when) {
  std::vector<std::uint64_t> crc(g.size());
  g.all_gather(mine, crc);
  for (std::size_t r = 1; r < crc.size(); ++r) {
    const std::size_t q = std::min(std::size_t(crc[r] >> 32), crc.size() - 1);
    SPARSELM_CHECK(crc[r] == crc[q], "data parallel: ", when, ", the parameters of rank ", r, " (CRC-32C ",
                   io::crc32c_hex(std::uint32_t(crc[r])), ") differ from rank ", q, "'s (",
                   io::crc32c_hex(std::uint32_t(crc[q])), "): the replicas no longer train one model");
  }
}

}  // namespace sparselm
