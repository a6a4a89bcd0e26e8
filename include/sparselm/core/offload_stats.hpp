#pragma once
// What offloaded state (core/arena.hpp, file_backing) costs a run in time and disk traffic: the
// seconds the process waited for pages to come in (populate) or spent starting their write-back
// (write_behind), counted by the arenas, and the bytes this process read from and wrote to storage
// (Linux /proc/self/io: read_bytes, write_bytes, pages dirtied through a shared mapping included).
// The trainer reads them around a step (step_metrics::io_*).
//
//   const auto before = sparselm::offload_snapshot();
//   ... a step ...
//   const auto d = sparselm::offload_snapshot() - before;   // d.wait_seconds, d.read_bytes, ...

#include <atomic>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <string>

namespace sparselm {

namespace detail {
struct offload_counters {
  std::atomic<std::uint64_t> wait_ns{0};       // in populate(): pages read in before use
  std::atomic<std::uint64_t> writeback_ns{0};  // in write_behind(): write-back started, pages dropped
};
inline offload_counters& offload_counts() noexcept {
  static offload_counters c;
  return c;
}
// Adds the time since its construction to a counter (nanoseconds).
class offload_timer {
 public:
  explicit offload_timer(std::atomic<std::uint64_t>& to) noexcept : to_(to), t0_(std::chrono::steady_clock::now()) {}
  offload_timer(const offload_timer&) = delete;
  offload_timer& operator=(const offload_timer&) = delete;
  ~offload_timer() {
    const auto d = std::chrono::steady_clock::now() - t0_;
    to_.fetch_add(std::uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(d).count()),
                  std::memory_order_relaxed);
  }

 private:
  std::atomic<std::uint64_t>& to_;
  std::chrono::steady_clock::time_point t0_;
};
}  // namespace detail

// The counters at one moment; a difference of two is what happened between them.
struct offload_snapshot_t {
  double wait_seconds = 0;       // waiting for offloaded pages to be read in
  double writeback_seconds = 0;  // starting write-back of offloaded pages and dropping them
  double read_bytes = 0;         // this process's reads from storage (0 without /proc/self/io)
  double write_bytes = 0;        // this process's writes to storage, dirtied mapped pages included
  offload_snapshot_t operator-(const offload_snapshot_t& o) const noexcept {
    return {wait_seconds - o.wait_seconds, writeback_seconds - o.writeback_seconds, read_bytes - o.read_bytes,
            write_bytes - o.write_bytes};
  }
};

inline offload_snapshot_t offload_snapshot() {
  offload_snapshot_t s;
  auto& c = detail::offload_counts();
  s.wait_seconds = double(c.wait_ns.load(std::memory_order_relaxed)) * 1e-9;
  s.writeback_seconds = double(c.writeback_ns.load(std::memory_order_relaxed)) * 1e-9;
  std::ifstream f("/proc/self/io");
  for (std::string line; std::getline(f, line);) {
    if (line.rfind("read_bytes:", 0) == 0) s.read_bytes = std::stod(line.substr(11));
    else if (line.rfind("write_bytes:", 0) == 0) s.write_bytes = std::stod(line.substr(12));
  }
  return s;
}

}  // namespace sparselm
