#pragma once
// The one guarded mapping of an input file, for files a job reads for its whole length (token
// files, data/token_file.hpp; BERT example files, data/bert_examples.hpp).
//
// A mapped file can change under the job: truncated, or overwritten in place by a shorter file.
// Two things then go wrong, and the mapping guards against both:
//   - a read of a page wholly past the new end raises SIGBUS. The guard's handler finds the mapping
//     the address belongs to, writes one line naming the file and ends the process with exit
//     status 1 (nothing can be saved from a signal handler; the last checkpoint is intact). A SIGBUS
//     elsewhere gets the default action. Up to max_guarded mappings are watched at once.
//   - a read inside the last page that still exists returns zeros, silently (an evaluation over
//     zeros). So a reader calls region(offset, length) before each use of the bytes: it checks the
//     file's current size (fstat on the descriptor kept open) against the size its header gives
//     (set_expected_size) and throws sparselm::error naming the file if they differ.
//
//   io::mapped_input m(path, "token file");          // open_input: a regular file, size bounded
//   parse the header from m.bytes(); m.set_expected_size(header size + body);
//   const unsigned char* p = m.region(offset, n);    // checked: the file still has its size

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <span>
#include <string>
#include <utility>

#include "sparselm/core/error.hpp"
#include "sparselm/core/input_file.hpp"
#include "sparselm/core/program.hpp"

namespace sparselm::io {

namespace detail {

// A slot of the SIGBUS guard: a mapping's address range and the line to write when it faults.
struct guarded_mapping {
  std::atomic<const unsigned char*> begin{nullptr};
  std::size_t size = 0;
  char message[512] = {};
  std::size_t length = 0;
};
inline constexpr int max_guarded = 32;
inline guarded_mapping guarded[max_guarded];

inline void on_sigbus(int sig, siginfo_t* info, void*) {
  const auto* a = static_cast<const unsigned char*>(info->si_addr);
  for (auto& g : guarded) {
    const unsigned char* b = g.begin.load(std::memory_order_acquire);
    if (b && a >= b && a < b + g.size) {
      (void)!::write(STDERR_FILENO, g.message, g.length);
      ::_exit(1);
    }
  }
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

// Watches [p, p + size) (the mapping of `path`, a `what`); returns the slot, or -1 when all
// max_guarded slots are taken (the mapping is then unguarded against SIGBUS; region() still
// checks the size).
inline int guard_mapping(const unsigned char* p, std::size_t size, const std::string& path, const char* what) noexcept {
  static std::atomic<bool> installed{false};
  if (!installed.exchange(true)) {
    struct sigaction sa {};
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGBUS, &sa, nullptr);
  }
  for (int i = 0; i < max_guarded; ++i) {
    auto& g = guarded[i];
    const unsigned char* expected = nullptr;
    // claim the slot with a sentinel, fill it, then publish the real address
    static const unsigned char claimed = 0;
    if (!g.begin.compare_exchange_strong(expected, &claimed)) continue;
    g.size = 0;
    g.length = std::size_t(std::snprintf(g.message, sizeof g.message,
                                         "%s: error: %s '%s' was truncated or overwritten while in use (SIGBUS "
                                         "reading it); stopped without saving, the last checkpoint is intact\n",
                                         sparselm::detail::program_name(), what, path.c_str()));
    g.length = std::min(g.length, sizeof g.message - 1);
    g.size = size;
    g.begin.store(p, std::memory_order_release);
    return i;
  }
  return -1;
}

inline void unguard_mapping(int slot) noexcept {
  if (slot >= 0) guarded[slot].begin.store(nullptr, std::memory_order_release);
}

}  // namespace detail

// A read-only, guarded memory map of a whole input file. Move-only.
class mapped_input {
 public:
  mapped_input() = default;
  // Opens `path` through open_input (refusing what is not a regular file, or is over max_bytes),
  // maps it and guards the mapping; `what` names the kind of file in messages ("token file").
  mapped_input(const std::filesystem::path& path, const char* what, std::uint64_t max_bytes = max_mapped_bytes)
      : name_(path.string()), what_(what) {
    const input_handle h = open_input(path, what, max_bytes);
    fd_ = h.fd;
    size_ = h.size;
    expected_ = h.size;
    if (size_ > 0) {
      void* p = ::mmap(nullptr, std::size_t(size_), PROT_READ, MAP_PRIVATE, fd_, 0);
      if (p == MAP_FAILED) {
        const int e = errno;
        ::close(fd_);
        fail(name_, ": cannot map ", what, ": ", sparselm::detail::errno_phrase(e));
      }
      map_ = static_cast<const unsigned char*>(p);
      guard_ = detail::guard_mapping(map_, std::size_t(size_), name_, what);
    }
  }
  mapped_input(mapped_input&& o) noexcept { swap(o); }
  mapped_input& operator=(mapped_input&& o) noexcept {
    if (this != &o) {
      release();
      swap(o);
    }
    return *this;
  }
  mapped_input(const mapped_input&) = delete;
  mapped_input& operator=(const mapped_input&) = delete;
  ~mapped_input() { release(); }

  const std::string& name() const noexcept { return name_; }
  // The whole mapping as it was opened (for validating the header and contents on open).
  std::span<const unsigned char> bytes() const noexcept { return {map_, std::size_t(size_)}; }

  // The size the file must keep while in use (its header's; the size at open by default).
  void set_expected_size(std::uint64_t n) noexcept { expected_ = n; }

  // Throws naming the file when its size is no longer the expected one (truncated, or replaced in
  // place by another length).
  void check_intact() const {
    struct stat st {};
    SPARSELM_CHECK(::fstat(fd_, &st) == 0, name_, ": cannot stat ", what_, ": ",
                   sparselm::detail::errno_phrase(errno));
    SPARSELM_CHECK(std::uint64_t(st.st_size) == expected_, what_, " '", name_,
                   "' was truncated or overwritten while in use: it is now ", std::uint64_t(st.st_size),
                   " bytes, its header says ", expected_);
  }

  // Bytes [offset, offset + length) of the mapping, after check_intact().
  const unsigned char* region(std::uint64_t offset, std::uint64_t length) const {
    SPARSELM_CHECK(offset <= expected_ && length <= expected_ - offset && expected_ <= size_, name_, ": bytes [",
                   offset, ", ", offset + length, ") are outside the ", expected_, "-byte ", what_);
    check_intact();
    return map_ + offset;
  }

 private:
  void release() noexcept {
    detail::unguard_mapping(guard_);
    guard_ = -1;
    if (map_) ::munmap(const_cast<unsigned char*>(map_), std::size_t(size_));
    map_ = nullptr;
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    size_ = expected_ = 0;
  }
  void swap(mapped_input& o) noexcept {
    std::swap(name_, o.name_);
    std::swap(what_, o.what_);
    std::swap(fd_, o.fd_);
    std::swap(map_, o.map_);
    std::swap(size_, o.size_);
    std::swap(expected_, o.expected_);
    std::swap(guard_, o.guard_);
  }

  std::string name_;
  const char* what_ = "file";
  int fd_ = -1;
  const unsigned char* map_ = nullptr;
  std::uint64_t size_ = 0;      // mapped bytes
  std::uint64_t expected_ = 0;  // bytes the file must have while in use
  int guard_ = -1;              // slot in the SIGBUS guard
};

}  // namespace sparselm::io
