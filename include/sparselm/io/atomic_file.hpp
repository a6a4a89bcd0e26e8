#pragma once
// Atomic file and directory replacement: write to a temporary name beside the target, flush and
// fsync, then rename over the target. A reader (or a crash, or kill -9) sees either the old file
// or the complete new one, never a partial write.
//
//   io::atomic_write(path, [&](std::FILE* f) { write bytes to f; });   // throws sparselm::error
//   io::atomic_write_text(dir / "latest", "ckpt-000200\n");

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <system_error>

#include "sparselm/core/error.hpp"
#include "sparselm/core/input_file.hpp"

namespace sparselm::io {

namespace detail {
inline std::string errno_message(int e) { return std::generic_category().message(e); }

// A fresh temporary name beside `path` (same directory, so rename() stays on one file system).
inline std::filesystem::path temp_path_for(const std::filesystem::path& path) {
  static std::atomic<unsigned> serial{0};
  std::filesystem::path t = path;
  t += ".tmp." + std::to_string(::getpid()) + "." + std::to_string(serial++);
  return t;
}

// fsync a directory so that a rename inside it is durable. File systems that cannot sync a
// directory (EINVAL) are accepted; any other failure throws naming the directory.
inline void sync_directory(const std::filesystem::path& dir) {
  const char* d = dir.empty() ? "." : dir.c_str();
  const int fd = ::open(d, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  SPARSELM_CHECK(fd >= 0, d, ": cannot open the directory to sync it: ", errno_message(errno));
  const int r = ::fsync(fd);
  const int e = errno;
  ::close(fd);
  SPARSELM_CHECK(r == 0 || e == EINVAL, d, ": cannot sync the directory: ", errno_message(e));
}
}  // namespace detail

// Opens `path` for reading and returns the descriptor (the caller closes it), or throws naming
// the path and `what` (e.g. "token file"): core/input_file.hpp's open_input, which refuses a FIFO,
// device, directory or socket and a file over `max_bytes` before anything is read.
inline int open_regular(const std::filesystem::path& path, const char* what,
                        std::uint64_t max_bytes = max_mapped_bytes) {
  return open_input(path, what, max_bytes).fd;
}

// Creates `path` atomically from what `fill` writes to the stream. On any failure (including an
// exception from fill) the temporary file is removed, the old `path` is untouched and
// sparselm::error is thrown naming the file.
inline void atomic_write(const std::filesystem::path& path, const std::function<void(std::FILE*)>& fill) {
  namespace fs = std::filesystem;
  if (path.has_parent_path()) fs::create_directories(path.parent_path());
  const fs::path tmp = detail::temp_path_for(path);
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  SPARSELM_CHECK(f != nullptr, path.string(), ": cannot create '", tmp.string(), "': ", detail::errno_message(errno));
  std::error_code ec;
  try {
    fill(f);
  } catch (...) {
    std::fclose(f);
    fs::remove(tmp, ec);
    throw;
  }
  errno = 0;
  const bool ok = std::fflush(f) == 0 && ::fsync(::fileno(f)) == 0 && !std::ferror(f);
  int e = errno;
  const bool closed = std::fclose(f) == 0;
  if (!closed && e == 0) e = errno;
  if (e == 0) e = EIO;  // never "Success" in a failure message
  if (!ok || !closed) {
    fs::remove(tmp, ec);
    fail(path.string(), ": cannot write: ", detail::errno_message(e));
  }
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    fail(path.string(), ": cannot rename the temporary file into place: ", ec.message());
  }
  detail::sync_directory(path.parent_path());
}

// Writes n bytes to f or throws naming `what`.
inline void write_bytes(std::FILE* f, const void* p, std::size_t n, const std::string& what) {
  if (n == 0) return;
  SPARSELM_CHECK(std::fwrite(p, 1, n, f) == n, what, ": write failed: ", detail::errno_message(errno));
}

inline void atomic_write_text(const std::filesystem::path& path, std::string_view text) {
  atomic_write(path, [&](std::FILE* f) { write_bytes(f, text.data(), text.size(), path.string()); });
}

// Reads a whole (small) text file through open_input (a regular file of at most `max_bytes`);
// throws naming it when it cannot be read.
inline std::string read_text_file(const std::filesystem::path& path, const char* what = "file",
                                  std::uint64_t max_bytes = max_config_bytes) {
  return read_input(path, what, max_bytes);
}

}  // namespace sparselm::io
