#pragma once
// The one way the library opens an input file. Every reader (JSON files and lines, text, e-mail
// messages, vocabularies, SQuAD and prediction files, token and example files, safetensors) goes
// through open_input, which
//   - opens without blocking (O_NONBLOCK: opening a FIFO with no writer would wait for ever),
//   - refuses anything but a regular file, naming the file and what it is (a directory, a FIFO,
//     a character or block device, a socket),
//   - refuses a file larger than the limit the caller gives, naming the file and the limit,
// all before a byte is read. read_input reads such a file whole, and stops with an error if it
// grows past the limit while being read (a file another process is still appending to).
//
//   const int fd = open_input(path, "token file", max_bytes).fd;       // caller closes fd
//   std::string text = read_input(path, "config file", max_config_bytes);

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <filesystem>
#include <string>
#include <system_error>

#include "sparselm/core/error.hpp"

namespace sparselm {

// Limits for the readers of the library (a caller may pass its own).
inline constexpr std::uint64_t max_config_bytes = std::uint64_t(64) << 20;   // configs, run records, `latest`
inline constexpr std::uint64_t max_dataset_json_bytes = std::uint64_t(1) << 30;  // SQuAD, predictions, JSON lines
inline constexpr std::uint64_t max_vocab_bytes = std::uint64_t(256) << 20;   // vocabularies, merges
inline constexpr std::uint64_t max_message_bytes = std::uint64_t(16) << 20;  // one e-mail message
inline constexpr std::uint64_t max_text_bytes = std::uint64_t(16) << 30;     // one text corpus file
inline constexpr std::uint64_t max_mapped_bytes = std::uint64_t(1) << 40;    // token, example, safetensors files

namespace detail {
inline std::string errno_phrase(int e) { return std::generic_category().message(e); }

// What a file that is not regular is, for the refusal.
inline const char* file_kind(mode_t m) noexcept {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISSOCK(m)) return "a socket";
  return "not a file";
}
}  // namespace detail

// An open input: its descriptor (blocking again, close-on-exec; the caller closes it) and its size
// when opened.
struct input_handle {
  int fd = -1;
  std::uint64_t size = 0;
};

// Opens `path` for reading as described at the top of this file; `what` says what the file is
// for ("token file", "SQuAD file"). Throws sparselm::error naming the path.
inline input_handle open_input(const std::filesystem::path& path, const char* what, std::uint64_t max_bytes) {
  struct stat st {};
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    // a socket cannot be opened at all (ENXIO): name what it is rather than the errno
    if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
      fail(path.string(), ": ", what, " is not a regular file (", detail::file_kind(st.st_mode), ")");
    fail(path.string(), ": cannot open ", what, ": ", detail::errno_phrase(e));
  }
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    fail(path.string(), ": cannot stat ", what, ": ", detail::errno_phrase(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(path.string(), ": ", what, " is not a regular file (", detail::file_kind(st.st_mode), ")");
  }
  const auto size = std::uint64_t(st.st_size);
  if (size > max_bytes) {
    ::close(fd);
    fail(path.string(), ": ", what, " is ", size, " bytes, more than the limit of ", max_bytes, " bytes");
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return {fd, size};
}

// Reads a whole input file opened with open_input; throws naming it when it cannot be read or
// grows past `max_bytes` while being read.
inline std::string read_input(const std::filesystem::path& path, const char* what, std::uint64_t max_bytes) {
  const input_handle h = open_input(path, what, max_bytes);
  std::string s;
  try {
    s.reserve(std::size_t(h.size));
    char buf[65536];
    for (;;) {
      const ::ssize_t n = ::read(h.fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      SPARSELM_CHECK(n >= 0, path.string(), ": cannot read ", what, ": ", detail::errno_phrase(errno));
      if (n == 0) break;
      SPARSELM_CHECK(s.size() + std::size_t(n) <= max_bytes, path.string(), ": ", what,
                     " grew past the limit of ", max_bytes, " bytes while being read");
      s.append(buf, std::size_t(n));
    }
  } catch (...) {
    ::close(h.fd);
    throw;
  }
  ::close(h.fd);
  return s;
}

}  // namespace sparselm
