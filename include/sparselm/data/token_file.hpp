#pragma once
// Token files: a flat array of token ids behind a small header, written atomically and read by
// memory map.
//
// Format, version 1 (all integers little-endian):
//
//   offset  size  field
//        0     8  magic "SPLMTOK\0" (53 50 4C 4D 54 4F 4B 00)
//        8     4  version = 1
//       12     4  bytes per token: 2 (uint16) or 4 (uint32)
//       16     8  token count N (> 0)
//       24     8  vocab size V (> 0): every id is < V
//       32     8  sequence length L: 0 = one continuous stream (GPT mode); L > 0 = N/L fixed-length
//                 sequences laid end to end, windows never cross them (WikiText mode)
//       40     8  document count (informative; 0 = unknown)
//       48    16  reserved, zero
//       64  N*w   the ids
//
// The file size is exactly 64 + N*w. Readers reject, with sparselm::error naming the file and the
// fault: a foreign file (bad magic), another version, an unknown width, a truncated file or
// trailing bytes, N = 0 (empty dataset), and ids >= V (checked on load by default, or on demand
// for each range read). Non-regular files (FIFO, device, directory) are refused. The file is
// mapped through io::mapped_input: every read checks first that the file still has the size its
// header gives, so a file truncated or replaced while in use is an error naming it (also within
// the last page, where the mapping would read zeros), and a read that faults anyway (SIGBUS) ends
// the process with one line naming the file and exit status 1.
//
//   sparselm::data::write_token_file("train.tok", ids, 50257);
//   sparselm::data::token_file f("train.tok");
//   f.size(); f.vocab_size(); f[i]; f.read(first, out_span);

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <span>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sparselm/core/error.hpp"
#include "sparselm/io/atomic_file.hpp"
#include "sparselm/io/mapped_input.hpp"

namespace sparselm::data {

inline constexpr std::array<unsigned char, 8> token_file_magic = {'S', 'P', 'L', 'M', 'T', 'O', 'K', 0};
inline constexpr std::uint32_t token_file_version = 1;
inline constexpr std::size_t token_file_header_size = 64;

enum class token_dtype : std::uint32_t { uint16 = 2, uint32 = 4 };

// Width that holds ids < vocab_size.
constexpr token_dtype token_dtype_for(std::uint64_t vocab_size) noexcept {
  return vocab_size <= 65536 ? token_dtype::uint16 : token_dtype::uint32;
}

namespace detail {

template <class T>
T load_le(const unsigned char* p) noexcept {
  T v = 0;
  for (std::size_t i = 0; i < sizeof(T); ++i) v |= T(p[i]) << (8 * i);
  return v;
}
template <class T>
void store_le(unsigned char* p, T v) noexcept {
  for (std::size_t i = 0; i < sizeof(T); ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}

inline std::string errno_text(int e) { return std::generic_category().message(e); }

}  // namespace detail

// The header fields (what write_token_file takes besides the ids, and what a reader reports).
struct token_file_info {
  token_dtype dtype = token_dtype::uint16;
  std::uint64_t tokens = 0;
  std::uint64_t vocab_size = 0;
  std::uint64_t sequence_length = 0;
  std::uint64_t documents = 0;
};

// Validates a token file's header against the file's size (`file` is the whole file image, or at
// least its header with file.size() the file's size) and returns its fields; errors name `name`.
inline token_file_info parse_token_file_header(std::span<const unsigned char> file, const std::string& name) {
  token_file_info info_;
  const unsigned char* h = file.data();
  const std::uint64_t n = file.size();
  const std::size_t m = std::size_t(std::min<std::uint64_t>(n, token_file_magic.size()));
  const bool magic_prefix = m == 0 || std::memcmp(h, token_file_magic.data(), m) == 0;
  SPARSELM_CHECK(magic_prefix, name, ": not a sparselm token file (bad magic; expected \"SPLMTOK\\0\")");
  SPARSELM_CHECK(n >= token_file_header_size, name, ": truncated token file: ", n, " bytes, shorter than the ",
                 token_file_header_size, "-byte header");
  const auto version = detail::load_le<std::uint32_t>(h + 8);
  SPARSELM_CHECK(version == token_file_version, name, ": unsupported token file version ", version,
                 " (this build reads version ", token_file_version, ")");
  const auto w = detail::load_le<std::uint32_t>(h + 12);
  SPARSELM_CHECK(w == 2 || w == 4, name, ": unknown token width ", w, " bytes (expected 2 or 4)");
  info_.dtype = token_dtype(w);
  info_.tokens = detail::load_le<std::uint64_t>(h + 16);
  info_.vocab_size = detail::load_le<std::uint64_t>(h + 24);
  info_.sequence_length = detail::load_le<std::uint64_t>(h + 32);
  info_.documents = detail::load_le<std::uint64_t>(h + 40);
  SPARSELM_CHECK(info_.vocab_size > 0 && info_.vocab_size <= (std::uint64_t(1) << 31), name,
                 ": invalid vocab size ", info_.vocab_size, " in header");
  SPARSELM_CHECK(info_.tokens > 0, name, ": empty dataset: the token file holds no tokens");
  const std::uint64_t body = n - token_file_header_size;
  SPARSELM_CHECK(info_.tokens <= body / w, name, ": truncated token file: header says ", info_.tokens,
                 " tokens (", info_.tokens * w, " bytes) but only ", body, " bytes follow the header");
  SPARSELM_CHECK(body == info_.tokens * w, name, ": ", body - info_.tokens * w,
                 " trailing bytes after the last of ", info_.tokens, " tokens");
  SPARSELM_CHECK(info_.sequence_length == 0 || info_.tokens % info_.sequence_length == 0, name,
                 ": token count ", info_.tokens, " is not a multiple of the sequence length ", info_.sequence_length);
  return info_;
}


// How much a reader checks on open.
enum class token_check {
  full,   // header, size and every id < vocab size (one pass over the file)
  header  // header and size only; read()/at() check the ids they return
};

// A read-only, memory-mapped token file. Move-only.
class token_file {
 public:
  token_file() = default;
  explicit token_file(const std::filesystem::path& path, token_check check = token_check::full)
      : path_(path), map_(path, "token file") {
    parse_header();
    map_.set_expected_size(map_.bytes().size());  // the header accounts for every byte
    if (check == token_check::full) validate();
    else validated_ = false;
  }
  token_file(token_file&& o) noexcept = default;
  token_file& operator=(token_file&& o) noexcept = default;
  token_file(const token_file&) = delete;
  token_file& operator=(const token_file&) = delete;

  const std::filesystem::path& path() const noexcept { return path_; }
  const token_file_info& info() const noexcept { return info_; }
  std::uint64_t size() const noexcept { return info_.tokens; }
  std::uint64_t vocab_size() const noexcept { return info_.vocab_size; }
  token_dtype dtype() const noexcept { return info_.dtype; }
  std::uint64_t sequence_length() const noexcept { return info_.sequence_length; }
  std::uint64_t documents() const noexcept { return info_.documents; }
  bool validated() const noexcept { return validated_; }

  // Id at position i, unchecked against the vocab (i < size()) and against a change of the file
  // (for the validation pass on open; read() and at() check).
  std::uint32_t operator[](std::uint64_t i) const noexcept { return load(data() + i * width()); }
  // Id at position i, checked: position in range, the file intact, id < vocab size.
  std::int32_t at(std::uint64_t i) const {
    SPARSELM_CHECK(i < size(), path_.string(), ": token position ", i, " is past the end (", size(), " tokens)");
    std::uint32_t id = load(map_.region(token_file_header_size + i * width(), width()));
    if (!validated_) check_id(i, id);
    return std::int32_t(id);
  }
  // Copies ids [first, first + out.size()) into out as int32, after checking that the file still
  // has the size its header gives. Ids are checked against the vocab unless the whole file was
  // validated on open.
  void read(std::uint64_t first, std::span<std::int32_t> out) const {
    SPARSELM_CHECK(first <= size() && out.size() <= size() - first, path_.string(), ": cannot read tokens [", first,
                   ", ", first + out.size(), "): the file has ", size());
    const unsigned char* p = map_.region(token_file_header_size + first * width(), out.size() * width());
    if (info_.dtype == token_dtype::uint16) {
      for (std::size_t j = 0; j < out.size(); ++j) out[j] = std::int32_t(detail::load_le<std::uint16_t>(p + 2 * j));
    } else {
      for (std::size_t j = 0; j < out.size(); ++j) out[j] = std::int32_t(detail::load_le<std::uint32_t>(p + 4 * j));
    }
    if (!validated_)
      for (std::size_t j = 0; j < out.size(); ++j) check_id(first + j, std::uint32_t(out[j]));
  }
  std::vector<std::int32_t> read_all() const {
    std::vector<std::int32_t> v(size());
    read(0, v);
    return v;
  }
  // Checks every id against the vocab size (done on open with token_check::full).
  void validate() {
    const std::uint64_t n = size();
    for (std::uint64_t i = 0; i < n; ++i) {
      std::uint32_t id = (*this)[i];
      if (id >= info_.vocab_size) check_id(i, id);
    }
    validated_ = true;
  }

 private:
  std::size_t width() const noexcept { return std::size_t(info_.dtype); }
  const unsigned char* data() const noexcept { return map_.bytes().data() + token_file_header_size; }
  std::uint32_t load(const unsigned char* p) const noexcept {
    return info_.dtype == token_dtype::uint16 ? detail::load_le<std::uint16_t>(p) : detail::load_le<std::uint32_t>(p);
  }

  void check_id(std::uint64_t pos, std::uint32_t id) const {
    SPARSELM_CHECK(id < info_.vocab_size, path_.string(), ": token id ", id, " at position ", pos,
                   " is not below the vocab size ", info_.vocab_size);
  }

  void parse_header() { info_ = parse_token_file_header(map_.bytes(), path_.string()); }

  std::filesystem::path path_;
  token_file_info info_{};
  io::mapped_input map_;  // guarded (io/mapped_input.hpp)
  bool validated_ = false;
};

// Streams ids into `path` through a temporary file in the same directory; commit() fills in the
// header and renames it into place, so readers never see a partial file. Without commit() (for
// example when an exception unwinds) the temporary file is removed.
class token_file_writer {
 public:
  // dtype defaults to the narrowest width for vocab_size.
  token_file_writer(const std::filesystem::path& path, std::uint64_t vocab_size, std::uint64_t sequence_length = 0)
      : token_file_writer(path, vocab_size, token_dtype_for(vocab_size), sequence_length) {}
  token_file_writer(const std::filesystem::path& path, std::uint64_t vocab_size, token_dtype dtype,
                    std::uint64_t sequence_length)
      : path_(path) {
    const std::string name = path.string();
    SPARSELM_CHECK(vocab_size > 0 && vocab_size <= (std::uint64_t(1) << 31), name, ": invalid vocab size ", vocab_size);
    SPARSELM_CHECK(dtype == token_dtype::uint32 || vocab_size <= 65536, name, ": vocab size ", vocab_size,
                   " does not fit 16-bit tokens");
    info_.dtype = dtype;
    info_.vocab_size = vocab_size;
    info_.sequence_length = sequence_length;
    tmp_ = path;
    static std::atomic<unsigned> serial{0};
    tmp_ += ".tmp." + std::to_string(::getpid()) + "." + std::to_string(serial++);
    file_ = std::fopen(tmp_.string().c_str(), "wb");
    SPARSELM_CHECK(file_ != nullptr, tmp_.string(), ": cannot create token file: ", detail::errno_text(errno));
    unsigned char zero[token_file_header_size] = {};
    write_bytes(zero, sizeof zero);
  }
  token_file_writer(const token_file_writer&) = delete;
  token_file_writer& operator=(const token_file_writer&) = delete;
  ~token_file_writer() {
    if (file_) {
      std::fclose(file_);
      std::error_code ec;
      std::filesystem::remove(tmp_, ec);
    }
  }

  // Appends ids; each must be in [0, vocab size).
  void append(std::span<const std::int32_t> ids) {
    buf_.resize(ids.size() * std::size_t(info_.dtype));
    unsigned char* p = buf_.data();
    for (std::size_t j = 0; j < ids.size(); ++j) {
      const std::int32_t id = ids[j];
      SPARSELM_CHECK(id >= 0 && std::uint64_t(id) < info_.vocab_size, path_.string(), ": token id ", id,
                     " at position ", info_.tokens + j, " is outside the vocabulary 0..", info_.vocab_size - 1);
      if (info_.dtype == token_dtype::uint16) detail::store_le(p + 2 * j, std::uint16_t(id));
      else detail::store_le(p + 4 * j, std::uint32_t(id));
    }
    write_bytes(buf_.data(), buf_.size());
    info_.tokens += ids.size();
  }
  void add_documents(std::uint64_t n) noexcept { info_.documents += n; }
  std::uint64_t tokens() const noexcept { return info_.tokens; }

  // Writes the header and renames the file into place. Zero tokens is an error (empty dataset).
  token_file_info commit() {
    SPARSELM_CHECK(file_ != nullptr, path_.string(), ": token file already committed");
    SPARSELM_CHECK(info_.tokens > 0, path_.string(), ": empty dataset: no tokens to write");
    SPARSELM_CHECK(info_.sequence_length == 0 || info_.tokens % info_.sequence_length == 0, path_.string(),
                   ": ", info_.tokens, " tokens are not a whole number of ", info_.sequence_length, "-token sequences");
    unsigned char h[token_file_header_size] = {};
    std::memcpy(h, token_file_magic.data(), token_file_magic.size());
    detail::store_le(h + 8, token_file_version);
    detail::store_le(h + 12, std::uint32_t(info_.dtype));
    detail::store_le(h + 16, info_.tokens);
    detail::store_le(h + 24, info_.vocab_size);
    detail::store_le(h + 32, info_.sequence_length);
    detail::store_le(h + 40, info_.documents);
    SPARSELM_CHECK(std::fseek(file_, 0, SEEK_SET) == 0, tmp_.string(), ": seek failed: ", detail::errno_text(errno));
    write_bytes(h, sizeof h);
    errno = 0;
    const bool flushed = std::fflush(file_) == 0 && ::fsync(::fileno(file_)) == 0;
    int e = errno;
    const bool closed = std::fclose(file_) == 0;
    if (!closed && e == 0) e = errno;
    if (e == 0) e = EIO;  // never "Success" in a failure message
    file_ = nullptr;
    std::error_code ec;
    if (!flushed || !closed) {
      std::filesystem::remove(tmp_, ec);
      fail(tmp_.string(), ": cannot write token file: ", detail::errno_text(e));
    }
    std::filesystem::rename(tmp_, path_, ec);
    if (ec) {
      std::filesystem::remove(tmp_, ec);
      fail(path_.string(), ": cannot move the finished token file into place: ", ec.message());
    }
    return info_;
  }

 private:
  void write_bytes(const void* p, std::size_t n) {
    if (n == 0) return;
    SPARSELM_CHECK(std::fwrite(p, 1, n, file_) == n, tmp_.string(), ": write failed: ", detail::errno_text(errno));
  }

  std::filesystem::path path_, tmp_;
  std::FILE* file_ = nullptr;
  token_file_info info_{};
  std::vector<unsigned char> buf_;
};

// Writes `ids` as a token file in one go (atomically). Returns the header written.
inline token_file_info write_token_file(const std::filesystem::path& path, std::span<const std::int32_t> ids,
                                        std::uint64_t vocab_size, std::uint64_t sequence_length = 0,
                                        std::uint64_t documents = 0) {
  token_file_writer w(path, vocab_size, sequence_length);
  w.append(ids);
  w.add_documents(documents);
  return w.commit();
}

}  // namespace sparselm::data
