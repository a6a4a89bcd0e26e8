#pragma once
// Parameter arena: every tensor of a model in one aligned allocation, with named views.
//
// An arena_layout records (name, shape, flags) per tensor and gives each a 64-byte aligned offset.
// An arena<T> is storage that follows a layout; gradients and optimiser slots are further arenas
// over the *same* layout, so "the gradient of tensor i" is grads[i] and an optimiser is one loop
// over the flat buffers. A checkpoint is the arena plus the names.
//
//   auto layout = std::make_shared<arena_layout>();
//   auto w = layout->add("h.0.mlp.c_fc.weight", {768, 3072});
//   arena<float> params(layout), grads(layout);
//   std::span<float> wv = params[w];

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "sparselm/core/checked.hpp"
#include "sparselm/core/dtype.hpp"
#include "sparselm/core/error.hpp"
#include "sparselm/core/huge_pages.hpp"
#include "sparselm/core/offload_stats.hpp"
#include "sparselm/core/view.hpp"

#if defined(__linux__)
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#endif

namespace sparselm {

// Per-tensor flags that optimisers and tools read.
enum param_flags : unsigned {
  param_none = 0,
  param_no_decay = 1u << 0,    // excluded from weight decay (norms, biases)
  param_no_trust = 1u << 1,    // LAMB: no trust ratio (bias, beta, gamma)
  param_sparse = 1u << 2,      // values of a block-sparse weight (shape = {nnz_blocks, B, B})
  param_frozen = 1u << 3,      // not updated by the optimiser
};

struct tensor_info {
  std::string name;
  std::vector<std::size_t> shape;
  std::size_t offset = 0;  // in elements, multiple of the alignment unit
  std::size_t size = 0;    // product of shape
  unsigned flags = param_none;
};

inline std::string shape_string(const std::vector<std::size_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

class arena_layout {
 public:
  // Offsets are aligned to this many elements (64 bytes of float).
  static constexpr std::size_t align_elems = 16;

  // Adds a tensor; returns its index. Names must be unique and sizes non-zero.
  std::size_t add(std::string name, std::vector<std::size_t> shape, unsigned flags = param_none) {
    SPARSELM_CHECK(!name.empty(), "arena: tensor name is empty");
    SPARSELM_CHECK(!index_.contains(name), "arena: duplicate tensor name '", name, "'");
    SPARSELM_CHECK(!shape.empty(), "arena: tensor '", name, "' has an empty shape");
    for (auto d : shape)
      SPARSELM_CHECK(d > 0, "arena: tensor '", name, "' has a zero dimension in shape ", shape_string(shape));
    const std::string what = "arena: tensor '" + name + "' of shape " + shape_string(shape);
    const std::size_t n = checked_product(shape, what);
    const std::size_t padded = checked_add(n, align_elems - 1, what) / align_elems * align_elems;
    SPARSELM_CHECK(padded <= limits::arena_elements - total_, what, ": the arena would hold more than ",
                   limits::arena_elements, " elements (the limit of one arena)");
    tensor_info t{std::move(name), std::move(shape), total_, n, flags};
    total_ += padded;
    index_.emplace(t.name, tensors_.size());
    tensors_.push_back(std::move(t));
    return tensors_.size() - 1;
  }

  std::size_t count() const noexcept { return tensors_.size(); }
  // Elements including alignment padding (the length of the flat buffer).
  std::size_t total() const noexcept { return total_; }
  // Elements excluding padding (the number of parameters).
  std::size_t parameters() const noexcept {
    std::size_t n = 0;
    for (auto& t : tensors_) n += t.size;
    return n;
  }

  const tensor_info& operator[](std::size_t i) const {
    SPARSELM_CHECK(i < tensors_.size(), "arena: tensor index ", i, " out of range (", tensors_.size(), " tensors)");
    return tensors_[i];
  }
  std::optional<std::size_t> find(const std::string& name) const {
    auto it = index_.find(name);
    if (it == index_.end()) return std::nullopt;
    return it->second;
  }
  std::size_t at(const std::string& name) const {
    auto i = find(name);
    SPARSELM_CHECK(i.has_value(), "arena: no tensor named '", name, "'");
    return *i;
  }
  auto begin() const noexcept { return tensors_.begin(); }
  auto end() const noexcept { return tensors_.end(); }

  // Two layouts are compatible when names, shapes and order agree.
  bool same_as(const arena_layout& o) const noexcept {
    if (tensors_.size() != o.tensors_.size()) return false;
    for (std::size_t i = 0; i < tensors_.size(); ++i)
      if (tensors_[i].name != o.tensors_[i].name || tensors_[i].shape != o.tensors_[i].shape) return false;
    return true;
  }

 private:
  std::vector<tensor_info> tensors_;
  std::unordered_map<std::string, std::size_t> index_;
  std::size_t total_ = 0;
};

namespace detail {
// Frees an arena's block: munmap for a mapped one (`mapped` bytes), free otherwise.
struct aligned_free {
  std::size_t mapped = 0;
  void operator()(void* p) const noexcept {
#if defined(__linux__)
    if (mapped) {
      munmap(p, mapped);
      return;
    }
#endif
    std::free(p);
  }
};
// Arenas from this size on are mapped from the system directly (zero pages that take memory only
// once written, so a part a process never writes, such as another pipeline stage's gradients,
// costs nothing; backed by huge pages where the system allows, core/huge_pages.hpp); smaller ones
// come from aligned_alloc and are zeroed.
inline constexpr std::size_t arena_map_bytes = std::size_t(4) << 20;
// The file descriptor of an offloaded arena's file (kept for zeroing by punching holes and for
// starting write-back), closed with the arena.
class unique_fd {
 public:
  unique_fd() = default;
  explicit unique_fd(int fd) noexcept : fd_(fd) {}
  unique_fd(unique_fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  unique_fd& operator=(unique_fd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  ~unique_fd() { reset(); }
  int get() const noexcept { return fd_; }
  void reset() noexcept {
#if defined(__linux__)
    if (fd_ >= 0) ::close(fd_);
#endif
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};
}  // namespace detail

// Where an offloaded arena keeps its values: an unnamed file in `dir` (Linux O_TMPFILE: it has no
// name and goes away with the process, a crash included), `what` naming it in messages.
struct file_backing {
  std::filesystem::path dir;
  std::string what = "arena";
};

// Zero-initialised storage for every tensor of a layout, in one 64-byte aligned block.
//
// Offloaded (constructed with a file_backing): the block is a shared mapping of a file on disk,
// its space reserved up front (a full disk is an error here, never a SIGBUS later). Pages are
// read in on use; page_out() drops them from the process (the values stay in the file and the
// page cache, written back by the system), so the process holds only what it uses between.
// prefetch() asks for pages ahead of their use, populate() waits for them (timed: the run's I/O
// wait), write_behind() starts writing a range back and drops it; zero() punches the file's
// blocks out (and reserves them again) instead of writing zeros through memory.
template <storage_type T>
class arena {
 public:
  arena() = default;
#if defined(__linux__)
  arena(std::shared_ptr<const arena_layout> layout, const file_backing& backing) : layout_(std::move(layout)) {
    SPARSELM_CHECK(layout_ != nullptr, "arena: null layout");
    std::size_t bytes = layout_->total() * sizeof(T);
    bytes = (bytes + 63) / 64 * 64;
    if (bytes == 0) return;
    const std::string where = backing.what + " offloaded to '" + backing.dir.string() + "'";
    int fd = ::open(backing.dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    SPARSELM_CHECK(fd >= 0, where, ": cannot create a file there: ", std::strerror(errno),
                   errno == ENOENT || errno == ENOTDIR ? " (not an existing directory)" : "");
    const int err = ::posix_fallocate(fd, 0, off_t(bytes));
    if (err != 0) {
      ::close(fd);
      fail(where, ": cannot reserve ", bytes, " bytes: ", std::strerror(err),
           err == ENOSPC ? " (not enough free space on that disk)" : "");
    }
    void* m = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    const int e = errno;
    fd_ = detail::unique_fd(fd);  // closed with the arena; the mapping keeps the file alive anyway
    SPARSELM_CHECK(m != MAP_FAILED, where, ": cannot map ", bytes, " bytes: ", std::strerror(e));
    data_ = std::unique_ptr<T, detail::aligned_free>(static_cast<T*>(m), detail::aligned_free{bytes});
    file_backed_ = true;
    where_ = where;
  }
#endif
  explicit arena(std::shared_ptr<const arena_layout> layout) : layout_(std::move(layout)) {
    SPARSELM_CHECK(layout_ != nullptr, "arena: null layout");
    std::size_t bytes = layout_->total() * sizeof(T);  // total() <= limits::arena_elements: no overflow
    bytes = (bytes + 63) / 64 * 64;
    if (bytes == 0) return;
#if defined(__linux__)
    if (bytes >= detail::arena_map_bytes) {
      void* m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      SPARSELM_CHECK(m != MAP_FAILED, "arena: cannot map ", bytes, " bytes (", layout_->count(), " tensors, the first '",
                     (*layout_)[0].name, "'): out of memory");
      detail::advise_huge_pages(m, bytes);  // 2 MiB pages: one fault per 512 first touches
      data_ = std::unique_ptr<T, detail::aligned_free>(static_cast<T*>(m), detail::aligned_free{bytes});
      return;
    }
#endif
    void* p = std::aligned_alloc(64, bytes);
    SPARSELM_CHECK(p != nullptr, "arena: cannot allocate ", bytes, " bytes (", layout_->count(),
                   " tensors, the first '", (*layout_)[0].name, "'): out of memory");
    std::memset(p, 0, bytes);
    data_.reset(static_cast<T*>(p));
  }

  arena(arena&& o) noexcept
      : layout_(std::move(o.layout_)),
        data_(std::move(o.data_)),
        file_backed_(std::exchange(o.file_backed_, false)),
        fd_(std::move(o.fd_)),
        where_(std::move(o.where_)) {}
  arena& operator=(arena&& o) noexcept {
    data_ = std::move(o.data_);  // unmapped before the file's descriptor closes
    layout_ = std::move(o.layout_);
    file_backed_ = std::exchange(o.file_backed_, false);
    fd_ = std::move(o.fd_);
    where_ = std::move(o.where_);
    return *this;
  }
  // Deep copy (same layout, copied values).
  arena clone() const {
    arena r(layout_);
    if (layout_ && layout_->total()) std::memcpy(r.data_.get(), data_.get(), layout_->total() * sizeof(T));
    return r;
  }

  const arena_layout& layout() const noexcept { return *layout_; }
  // Whether the values live in a file (constructed with a file_backing).
  bool file_backed() const noexcept { return file_backed_; }
  const std::shared_ptr<const arena_layout>& layout_ptr() const noexcept { return layout_; }
  bool empty() const noexcept { return !data_; }

  // The whole flat buffer, padding included (padding stays zero unless written through all()).
  std::span<T> all() noexcept { return {data_.get(), layout_ ? layout_->total() : 0}; }
  std::span<const T> all() const noexcept { return {data_.get(), layout_ ? layout_->total() : 0}; }

  std::span<T> operator[](std::size_t i) {
    const auto& t = (*layout_)[i];
    return {data_.get() + t.offset, t.size};
  }
  std::span<const T> operator[](std::size_t i) const {
    const auto& t = (*layout_)[i];
    return {data_.get() + t.offset, t.size};
  }
  std::span<T> at(const std::string& name) { return (*this)[layout_->at(name)]; }
  std::span<const T> at(const std::string& name) const { return (*this)[layout_->at(name)]; }

  // Rank-2 tensor i as a matrix; rank > 2 is viewed as (product of leading dims) x last dim.
  matrix_view<T> matrix(std::size_t i) {
    const auto& t = (*layout_)[i];
    std::size_t cols = t.shape.back();
    return {data_.get() + t.offset, t.size / cols, cols, cols};
  }
  matrix_view<const T> matrix(std::size_t i) const {
    const auto& t = (*layout_)[i];
    std::size_t cols = t.shape.back();
    return {data_.get() + t.offset, t.size / cols, cols, cols};
  }

  // Offloaded: the file's blocks are punched out (reading as zero, the process's pages dropped,
  // nothing written through memory) and reserved again, so a full disk is still an error here;
  // a file system that cannot punch holes gets zeros written a chunk at a time, paged out behind.
  void zero() {
    if (!data_) return;
#if defined(__linux__)
    if (file_backed_) {
      const std::size_t bytes = (layout_->total() * sizeof(T) + 63) / 64 * 64;
      if (::fallocate(fd_.get(), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, off_t(bytes)) == 0) {
        const int err = ::posix_fallocate(fd_.get(), 0, off_t(bytes));
        SPARSELM_CHECK(err == 0, where_, ": cannot reserve ", bytes, " bytes again after zeroing: ",
                       std::strerror(err), err == ENOSPC ? " (not enough free space on that disk)" : "");
        return;
      }
      constexpr std::size_t chunk = (std::size_t(16) << 20) / sizeof(T);
      for (std::size_t b = 0; b < layout_->total(); b += chunk) {
        const std::size_t e = std::min(layout_->total(), b + chunk);
        std::memset(data_.get() + b, 0, (e - b) * sizeof(T));
        write_behind(b, e);
      }
      return;
    }
#endif
    std::memset(data_.get(), 0, layout_->total() * sizeof(T));
  }

  // Zeroes elements [first, last) and gives the whole memory pages among them back to the system
  // (Linux: madvise MADV_DONTNEED; they read as zero and take memory again only once written), so
  // that a part of the arena this process does not use costs no memory.
  void release(std::size_t first, std::size_t last) noexcept {
    if (!data_) return;
    last = std::min(last, layout_->total());
    if (first >= last) return;
    auto* b = reinterpret_cast<char*>(data_.get() + first);
    auto* e = reinterpret_cast<char*>(data_.get() + last);
    if (file_backed_) {  // dropped pages of a file read back its values: zero them in the file
      std::memset(b, 0, std::size_t(e - b));
      page_out(first, last);
      return;
    }
#if defined(__linux__)
    const long ps = sysconf(_SC_PAGESIZE);
    if (ps > 0) {
      const auto page = std::uintptr_t(ps);
      auto* pb = reinterpret_cast<char*>((reinterpret_cast<std::uintptr_t>(b) + page - 1) / page * page);
      auto* pe = reinterpret_cast<char*>(reinterpret_cast<std::uintptr_t>(e) / page * page);
      if (pb < pe && madvise(pb, std::size_t(pe - pb), MADV_DONTNEED) == 0) {
        std::memset(b, 0, std::size_t(pb - b));
        std::memset(pe, 0, std::size_t(e - pe));
        return;
      }
    }
#endif
    std::memset(b, 0, std::size_t(e - b));
  }

  // Offloaded arenas: drops the pages that hold elements [first, last) from this process (every
  // page they touch, shared edges included: a shared file page keeps its values, written or not,
  // and a later access reads it back). Nothing for an arena in memory, whose pages hold the only
  // copy of their values.
  void page_out(std::size_t first, std::size_t last) const noexcept {
#if defined(__linux__)
    if (const auto r = pages_of(first, last)) ::madvise(r->data, r->bytes, MADV_DONTNEED);
#endif
  }
  void page_out_all() const noexcept {
    if (layout_) page_out(0, layout_->total());
  }
  // Offloaded arenas: reads elements [first, last) in now (for writing too when `write`), the time
  // counted as I/O wait (core/offload_stats.hpp), so that the compute after it does not fault.
  void populate(std::size_t first, std::size_t last, [[maybe_unused]] bool write = false) const noexcept {
#if defined(__linux__)
    const auto r = pages_of(first, last);
    if (!r) return;
    detail::offload_timer timer(detail::offload_counts().wait_ns);
#if defined(MADV_POPULATE_READ) && defined(MADV_POPULATE_WRITE)
    if (::madvise(r->data, r->bytes, write ? MADV_POPULATE_WRITE : MADV_POPULATE_READ) == 0) return;
#endif
    volatile const char* p = static_cast<const char*>(r->data);  // older kernels: touch each page
    char sink = 0;
    for (std::size_t a = 0; a < r->bytes; a += r->page) sink = char(sink ^ p[a]);
    (void)sink;
#endif
  }
  // Offloaded arenas: starts writing elements [first, last) back to the file (asynchronously,
  // Linux sync_file_range) and drops their pages from the process (page_out).
  void write_behind(std::size_t first, std::size_t last) const noexcept {
#if defined(__linux__)
    const auto r = pages_of(first, last);
    if (!r) return;
    detail::offload_timer timer(detail::offload_counts().writeback_ns);
    const auto at = static_cast<const char*>(r->data) - reinterpret_cast<const char*>(data_.get());
    ::sync_file_range(fd_.get(), off_t(at), off_t(r->bytes), SYNC_FILE_RANGE_WRITE);
    ::madvise(r->data, r->bytes, MADV_DONTNEED);
#endif
  }
  // Whether any page holding elements [first, last) is in memory (Linux mincore; true elsewhere).
  // An arena in memory whose pages were never touched reads as zero without them: a copy of it can
  // skip them instead of faulting them in.
  bool any_resident(std::size_t first, std::size_t last) const {
    if (!data_) return false;
    last = std::min(last, layout_->total());
    if (first >= last) return false;
#if defined(__linux__)
    const long ps = sysconf(_SC_PAGESIZE);
    if (ps > 0) {
      const auto page = std::uintptr_t(ps);
      const auto b = reinterpret_cast<std::uintptr_t>(data_.get() + first) / page * page;
      const auto e = (reinterpret_cast<std::uintptr_t>(data_.get() + last) + page - 1) / page * page;
      std::vector<unsigned char> in((e - b) / page);
      if (::mincore(reinterpret_cast<void*>(b), std::size_t(e - b), in.data()) == 0)
        return std::any_of(in.begin(), in.end(), [](unsigned char c) { return (c & 1) != 0; });
    }
#endif
    return true;
  }
  // Asks the system to read elements [first, last) of an offloaded arena ahead of their use.
  void prefetch(std::size_t first, std::size_t last) const noexcept {
#if defined(__linux__)
    if (const auto r = pages_of(first, last)) ::madvise(r->data, r->bytes, MADV_WILLNEED);
#endif
  }

 private:
  std::shared_ptr<const arena_layout> layout_;
  // The whole pages that hold elements [first, last) of an offloaded arena (none for one in memory
  // or an empty range); the block is page-aligned, so they start at or after data_.
  struct page_span {
    void* data;
    std::size_t bytes, page;
  };
  std::optional<page_span> pages_of(std::size_t first, std::size_t last) const noexcept {
#if defined(__linux__)
    if (!file_backed_ || !data_) return std::nullopt;
    last = std::min(last, layout_->total());
    const long ps = sysconf(_SC_PAGESIZE);
    if (first >= last || ps <= 0) return std::nullopt;
    const auto page = std::uintptr_t(ps);
    const auto b = reinterpret_cast<std::uintptr_t>(data_.get() + first) / page * page;
    const auto e = (reinterpret_cast<std::uintptr_t>(data_.get() + last) + page - 1) / page * page;
    return page_span{reinterpret_cast<void*>(b), std::size_t(e - b), std::size_t(page)};
#else
    (void)first, (void)last;
    return std::nullopt;
#endif
  }

  std::unique_ptr<T, detail::aligned_free> data_;
  bool file_backed_ = false;
  detail::unique_fd fd_;  // offloaded: the file
  std::string where_;     // offloaded: what and where, for messages
};

}  // namespace sparselm
