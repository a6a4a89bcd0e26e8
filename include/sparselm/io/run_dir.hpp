#pragma once
// Guards of a run directory (the --out of a training program):
//
//   io::run_lock lock(out);                       // <out>/.lock, held until destruction or exit
//   auto removed = io::remove_stale_temporaries(out / "checkpoints");   // after a kill -9
//
// run_lock takes an exclusive flock(2) on <out>/.lock: a second process on the same directory
// fails at once with an error naming the directory and the holder's pid. The kernel drops the lock
// when the holder exits in any way (kill -9 included), so a stale lock never blocks a resume.
//
// remove_stale_temporaries deletes the `<name>.tmp.<pid>.<n>` files and directories that an
// interrupted atomic write (io/atomic_file.hpp) or checkpoint save left behind. Call it only while
// holding the run lock: then no live writer owns them.

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <string>
#include <vector>

#include "sparselm/core/error.hpp"
#include "sparselm/io/atomic_file.hpp"

namespace sparselm::io {

inline constexpr const char* lock_file = ".lock";

class run_lock {
 public:
  explicit run_lock(const std::filesystem::path& dir) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    SPARSELM_CHECK(!ec, dir.string(), ": cannot create the run directory: ", ec.message());
    path_ = dir / lock_file;
    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    SPARSELM_CHECK(fd_ >= 0, path_.string(), ": cannot open the lock file: ", detail::errno_message(errno));
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      const int e = errno;
      std::string holder;
      char buf[32] = {};
      if (::pread(fd_, buf, sizeof buf - 1, 0) > 0) holder = std::string(buf);
      while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
      ::close(fd_);
      fd_ = -1;
      SPARSELM_CHECK(e != EWOULDBLOCK, dir.string(), ": the run directory is in use by another process",
                     holder.empty() ? std::string() : " (pid " + holder + ")", "; wait for it or choose another --out");
      fail(path_.string(), ": cannot lock: ", detail::errno_message(e));
    }
    const std::string pid = std::to_string(::getpid()) + "\n";
    if (::ftruncate(fd_, 0) == 0) (void)!::pwrite(fd_, pid.data(), pid.size(), 0);  // informative only
  }
  run_lock(const run_lock&) = delete;
  run_lock& operator=(const run_lock&) = delete;
  ~run_lock() {
    if (fd_ >= 0) ::close(fd_);  // releases the flock; the file stays (removing it would race)
  }

 private:
  std::filesystem::path path_;
  int fd_ = -1;
};

// True for names that temp_path_for (io/atomic_file.hpp) makes: "<name>.tmp.<digits>.<digits>".
inline bool is_temporary_name(const std::string& n) {
  const auto p = n.rfind(".tmp.");
  if (p == std::string::npos || p == 0) return false;
  const std::string rest = n.substr(p + 5);
  const auto dot = rest.find('.');
  if (dot == std::string::npos || dot == 0 || dot + 1 == rest.size()) return false;
  return rest.find_first_not_of("0123456789.") == std::string::npos && rest.find('.', dot + 1) == std::string::npos;
}

// Removes the temporaries of interrupted writes directly inside `dir`; returns their paths.
inline std::vector<std::filesystem::path> remove_stale_temporaries(const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  std::vector<fs::path> removed;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return removed;
  for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator(); it.increment(ec))
    if (is_temporary_name(it->path().filename().string())) removed.push_back(it->path());
  SPARSELM_CHECK(!ec, dir.string(), ": cannot list: ", ec.message());
  for (const auto& p : removed) {  // listed first: removing while iterating may skip entries
    fs::remove_all(p, ec);
    SPARSELM_CHECK(!ec, p.string(), ": cannot remove the leftover of an interrupted save: ", ec.message());
  }
  return removed;
}

}  // namespace sparselm::io
