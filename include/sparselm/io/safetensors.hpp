#pragma once
// safetensors files: the tensor container HuggingFace tools read and write.
//
// Layout: an 8-byte little-endian header length N, N bytes of JSON, then the data bytes. The JSON
// maps each tensor name to {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]} (offsets
// into the data bytes, end exclusive) and may hold "__metadata__": {string: string}. Tensors are
// row-major, little-endian. We pad the header with spaces to a multiple of 8 bytes, so every tensor
// we write starts 8-byte aligned.
//
//   io::safetensors_writer w;
//   w.add("wte.weight", io::st_dtype::f32, {V, C}, params[i]);      // the bytes must outlive write()
//   w.set_metadata("format", "pt");
//   w.write("runs/x/model.safetensors");                          // atomic: temporary file + rename
//
//   io::safetensors_file f("runs/x/model.safetensors");           // validates the header, checksums
//   f.read_f32("wte.weight", {V, C}, dst);                        // checks name, shape; converts F16/BF16
//
// Every problem (truncated file, bad JSON, unknown dtype, offsets outside the data, size that does
// not match the shape, bytes that belong to no tensor, a tensor whose CRC-32C differs from the one
// recorded in the metadata, missing tensor, wrong shape) is a sparselm::error naming the file and
// tensor. Files that are not regular (FIFO, device) are refused before anything is read.

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "sparselm/core/checked.hpp"
#include "sparselm/core/dtype.hpp"
#include "sparselm/core/error.hpp"
#include "sparselm/core/json.hpp"
#include "sparselm/io/atomic_file.hpp"
#include "sparselm/io/crc32c.hpp"

namespace sparselm::io {

// The metadata key of the per-tensor checksums (see safetensors_writer::write).
inline constexpr const char* checksum_key = "sparselm.crc32c";

enum class st_dtype { f32, f16, bf16, i32, i64, u8, boolean };  // boolean: HF's causal-mask buffers

inline const char* to_string(st_dtype d) noexcept {
  switch (d) {
    case st_dtype::f32: return "F32";
    case st_dtype::f16: return "F16";
    case st_dtype::bf16: return "BF16";
    case st_dtype::i32: return "I32";
    case st_dtype::i64: return "I64";
    case st_dtype::u8: return "U8";
    case st_dtype::boolean: return "BOOL";
  }
  return "?";
}
inline std::size_t dtype_size(st_dtype d) noexcept {
  switch (d) {
    case st_dtype::f32: case st_dtype::i32: return 4;
    case st_dtype::f16: case st_dtype::bf16: return 2;
    case st_dtype::i64: return 8;
    case st_dtype::u8: case st_dtype::boolean: return 1;
  }
  return 0;
}
inline bool parse_dtype(const std::string& s, st_dtype& out) noexcept {
  for (st_dtype d : {st_dtype::f32, st_dtype::f16, st_dtype::bf16, st_dtype::i32, st_dtype::i64, st_dtype::u8,
                     st_dtype::boolean})
    if (s == to_string(d)) return out = d, true;
  return false;
}
// The safetensors dtype of a storage type (float, bf16, half).
template <storage_type S>
constexpr st_dtype dtype_of() noexcept {
  if constexpr (std::is_same_v<S, float>) return st_dtype::f32;
  else if constexpr (std::is_same_v<S, bf16>) return st_dtype::bf16;
  else return st_dtype::f16;
}

// The safetensors dtype of a storage dtype (core/dtype.hpp).
constexpr st_dtype dtype_of(dtype t) noexcept {
  return t == dtype::f32 ? st_dtype::f32 : t == dtype::bf16 ? st_dtype::bf16 : st_dtype::f16;
}

inline std::string dims_string(const std::vector<std::size_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}
inline std::size_t element_count(const std::vector<std::size_t>& shape) {
  return checked_product(shape, "safetensors: shape " + dims_string(shape));
}

struct st_tensor_info {
  std::string name;
  st_dtype dtype = st_dtype::f32;
  std::vector<std::size_t> shape;
  std::size_t begin = 0, end = 0;  // byte offsets into the data section
  std::size_t elements() const { return element_count(shape); }
};

// ---- writing ----------------------------------------------------------------------------------

class safetensors_writer {
 public:
  // Adds a tensor whose bytes are at `data` (bytes = elements · dtype size). The pointer is only
  // read by write(). Names must be unique.
  void add(std::string name, st_dtype dtype, std::vector<std::size_t> shape, const void* data) {
    SPARSELM_CHECK(!name.empty(), "safetensors: empty tensor name");
    SPARSELM_CHECK(name != "__metadata__", "safetensors: '__metadata__' cannot name a tensor");
    for (auto& e : entries_)
      SPARSELM_CHECK(e.info.name != name, "safetensors: tensor '", name, "' added twice");
    const std::size_t bytes = element_count(shape) * dtype_size(dtype);
    SPARSELM_CHECK(data != nullptr || bytes == 0, "safetensors: tensor '", name, "' has no data");
    entries_.push_back({{std::move(name), dtype, std::move(shape), 0, 0}, data});
  }
  void add(std::string name, std::vector<std::size_t> shape, std::span<const float> v) {
    SPARSELM_CHECK(v.size() == element_count(shape), "safetensors: tensor '", name, "' has ", v.size(),
                   " values for shape ", dims_string(shape));
    add(std::move(name), st_dtype::f32, std::move(shape), v.data());
  }
  void add(std::string name, std::vector<std::size_t> shape, std::span<const std::int32_t> v) {
    SPARSELM_CHECK(v.size() == element_count(shape), "safetensors: tensor '", name, "' has ", v.size(),
                   " values for shape ", dims_string(shape));
    add(std::move(name), st_dtype::i32, std::move(shape), v.data());
  }
  // Keeps a copy of the int32 values (for small metadata tensors built on the fly).
  void add_owned(std::string name, std::vector<std::size_t> shape, std::vector<std::int32_t> v) {
    owned_.push_back(std::move(v));
    add(std::move(name), std::move(shape), std::span<const std::int32_t>(owned_.back()));
  }
  // A sink takes a tensor's bytes in pieces; a source hands all of them to it, in order.
  using byte_sink = std::function<void(const void*, std::size_t)>;
  using byte_source = std::function<void(const byte_sink&)>;
  // Adds a tensor whose bytes write() takes from `source` as it writes them (another process's
  // data arriving in chunks: io/slot_stream.hpp), with their CRC-32C known beforehand (the
  // header precedes the data). write() fails, leaving no file, when the source hands over another
  // number of bytes or bytes with another checksum.
  void add_streamed(std::string name, st_dtype dtype, std::vector<std::size_t> shape, std::uint32_t crc,
                    byte_source source) {
    SPARSELM_CHECK(source != nullptr, "safetensors: tensor '", name, "' has no source");
    static const char empty = 0;
    add(std::move(name), dtype, std::move(shape), &empty);
    entries_.back().data = nullptr;
    entries_.back().source = std::move(source);
    entries_.back().crc = crc;
  }
  // Calls `done` each time write() has read the last added tensor's bytes (its checksum, then its
  // copy into the file): an offloaded arena pages them out again (core/arena.hpp, page_out).
  void after_reading_last(std::function<void()> done) {
    SPARSELM_CHECK(!entries_.empty(), "safetensors: after_reading_last() before any add()");
    entries_.back().after_read = std::move(done);
  }
  void set_metadata(const std::string& key, std::string value) { meta_[key] = std::move(value); }
  std::size_t size() const noexcept { return entries_.size(); }

  // Without checksums the file carries no "sparselm.crc32c" metadata (on by default).
  void set_checksums(bool on) noexcept { checksums_ = on; }

  // Writes the file atomically (temporary file + fsync + rename). With checksums, the metadata
  // key "sparselm.crc32c" holds a JSON object {tensor name: CRC-32C of its bytes, 8 hex digits}.
  void write(const std::filesystem::path& path) {
    nlohmann::ordered_json h = nlohmann::ordered_json::object();
    std::size_t off = 0;
    nlohmann::json sums = nlohmann::json::object();
    for (auto& e : entries_) {
      const std::size_t bytes = e.info.elements() * dtype_size(e.info.dtype);
      e.info.begin = off;
      e.info.end = off + bytes;
      off += bytes;
      if (checksums_) sums[e.info.name] = crc32c_hex(e.source ? e.crc : crc32c(e.data, bytes));
      if (checksums_ && e.after_read) e.after_read();
    }
    if (checksums_) meta_[checksum_key] = sums.dump();
    if (!meta_.empty()) h["__metadata__"] = meta_;
    for (auto& e : entries_)
      h[e.info.name] = {{"dtype", to_string(e.info.dtype)}, {"shape", e.info.shape}, {"data_offsets", {e.info.begin, e.info.end}}};
    std::string header = h.dump();
    header.append((8 - header.size() % 8) % 8, ' ');
    atomic_write(path, [&](std::FILE* f) {
      unsigned char len[8];
      std::uint64_t n = header.size();
      for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));
      write_bytes(f, len, 8, path.string());
      write_bytes(f, header.data(), header.size(), path.string());
      for (auto& e : entries_) {
        const std::size_t bytes = e.info.end - e.info.begin;
        const std::string what = path.string() + " tensor '" + e.info.name + "'";
        if (!e.source) {
          write_bytes(f, e.data, bytes, what);
          if (e.after_read) e.after_read();
          continue;
        }
        std::size_t got = 0;
        std::uint32_t crc = 0;
        e.source([&](const void* p, std::size_t n) {
          SPARSELM_CHECK(got + n <= bytes, what, ": its source handed over more than its ", bytes, " bytes");
          write_bytes(f, p, n, what);
          crc = crc32c(p, n, crc);
          got += n;
        });
        SPARSELM_CHECK(got == bytes, what, ": its source handed over ", got, " of its ", bytes, " bytes");
        SPARSELM_CHECK(crc == e.crc, what, ": the streamed bytes have CRC-32C ", crc32c_hex(crc), ", announced ",
                       crc32c_hex(e.crc), " (corrupted in transit?)");
      }
    });
  }

 private:
  struct entry {
    st_tensor_info info;
    const void* data;
    byte_source source = nullptr;  // add_streamed
    std::uint32_t crc = 0;         // of a streamed tensor's bytes
    std::function<void()> after_read = nullptr;  // after_reading_last
  };
  std::vector<entry> entries_;
  std::vector<std::vector<std::int32_t>> owned_;  // stable: add_owned keeps spans into these
  std::map<std::string, std::string> meta_;
  bool checksums_ = true;
};

// ---- reading ----------------------------------------------------------------------------------

// A memory-mapped, fully validated safetensors file.
class safetensors_file {
 public:
  static constexpr std::uint64_t max_header_bytes = 100u << 20;

  // verify: check the tensors' CRC-32C against the "sparselm.crc32c" metadata when the file has it
  // (files written by other tools have none and are read unverified).
  explicit safetensors_file(const std::filesystem::path& path, bool verify = true) : path_(path) {
    const std::string p = path.string();
    const int fd = open_regular(path, "safetensors file");
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      const int e = errno;
      ::close(fd);
      fail(p, ": cannot stat: ", detail::errno_message(e));
    }
    size_ = std::size_t(st.st_size);
    if (size_ > 0) {
      void* m = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
      const int e = errno;  // read before close() can change it
      ::close(fd);
      SPARSELM_CHECK(m != MAP_FAILED, p, ": cannot map: ", detail::errno_message(e));
      map_ = static_cast<const unsigned char*>(m);
    } else {
      ::close(fd);
    }
    try {
      parse();
      if (verify) verify_checksums();
    } catch (...) {
      unmap();
      throw;
    }
  }
  // Reads a safetensors image already in memory (not copied: `bytes` must outlive this object);
  // `name` stands for the file in messages.
  safetensors_file(std::span<const unsigned char> bytes, const std::filesystem::path& name, bool verify = true)
      : path_(name), map_(bytes.data()), size_(bytes.size()), owned_(false) {
    parse();
    if (verify) verify_checksums();
  }
  safetensors_file(const safetensors_file&) = delete;
  safetensors_file& operator=(const safetensors_file&) = delete;
  ~safetensors_file() { unmap(); }

  const std::filesystem::path& path() const noexcept { return path_; }
  const std::map<std::string, std::string>& metadata() const noexcept { return meta_; }
  // The metadata value of `key`; throws naming the file when absent.
  const std::string& metadata(const std::string& key) const {
    auto it = meta_.find(key);
    SPARSELM_CHECK(it != meta_.end(), path_.string(), ": metadata has no key '", key, "'");
    return it->second;
  }
  bool contains(const std::string& name) const { return index_.contains(name); }
  const std::vector<st_tensor_info>& tensors() const noexcept { return tensors_; }
  const st_tensor_info& info(const std::string& name) const {
    auto it = index_.find(name);
    SPARSELM_CHECK(it != index_.end(), path_.string(), ": no tensor named '", name, "'");
    return tensors_[it->second];
  }
  std::span<const unsigned char> bytes(const st_tensor_info& t) const { return {data_ + t.begin, t.end - t.begin}; }

  // Copies tensor `name` into dst as float, converting F16/BF16. Checks the shape (when
  // `expected` is not empty) and the element count.
  void read_f32(const std::string& name, const std::vector<std::size_t>& expected, std::span<float> dst) const {
    const auto& t = check_as<float>(name, expected, dst.size());
    const unsigned char* src = data_ + t.begin;
    if (t.dtype == st_dtype::f32)
      std::memcpy(dst.data(), src, dst.size() * 4);
    else if (t.dtype == st_dtype::bf16)
      convert<bf16>(src, dst);
    else
      convert<half>(src, dst);
    drop_pages(t);
  }
  // Checks that read_as<S>(name, expected, dst of n values) would succeed and returns the tensor's
  // info; throws its error if not. read_as<S> accepts, for float, F32, F16 or BF16 (converted); for
  // bf16 and half their own dtype (bit for bit) or F32 (rounded).
  template <storage_type S>
  const st_tensor_info& check_as(const std::string& name, const std::vector<std::size_t>& expected,
                                 std::size_t n) const {
    const auto& t = checked(name, expected, n);
    constexpr bool to_float = std::is_same_v<S, float>;
    const bool ok = to_float ? (t.dtype == st_dtype::f32 || t.dtype == st_dtype::bf16 || t.dtype == st_dtype::f16)
                             : (t.dtype == dtype_of<S>() || t.dtype == st_dtype::f32);
    SPARSELM_CHECK(ok, path_.string(), ": tensor '", name, "' has dtype ", to_string(t.dtype), ", expected ",
                   to_float ? std::string("F32, F16 or BF16") : std::string(to_string(dtype_of<S>())) + " or F32");
    return t;
  }

  // Copies tensor `name` into dst in storage type S: float as read_f32; bf16 or half from their own
  // dtype bit for bit, or from F32 rounded to nearest even (optimiser slots saved under another
  // storage type). Other dtypes are errors naming the tensor (check_as).
  template <storage_type S>
  void read_as(const std::string& name, const std::vector<std::size_t>& expected, std::span<S> dst) const {
    if constexpr (std::is_same_v<S, float>) {
      read_f32(name, expected, dst);
    } else {
      const auto& t = check_as<S>(name, expected, dst.size());
      const unsigned char* src = data_ + t.begin;
      if (t.dtype == dtype_of<S>()) {
        std::memcpy(static_cast<void*>(dst.data()), src, dst.size() * sizeof(S));
      } else {
        for (std::size_t i = 0; i < dst.size(); ++i) {
          float x;
          std::memcpy(&x, src + 4 * i, 4);
          dst[i] = from_float<S>(x);
        }
      }
      drop_pages(t);
    }
  }
  std::vector<std::int32_t> read_i32(const std::string& name, const std::vector<std::size_t>& expected = {}) const {
    const auto& t = info(name);
    SPARSELM_CHECK(t.dtype == st_dtype::i32, path_.string(), ": tensor '", name, "' has dtype ", to_string(t.dtype),
                   ", expected I32");
    std::vector<std::int32_t> v(t.elements());
    checked(name, expected, v.size());
    std::memcpy(v.data(), data_ + t.begin, v.size() * 4);
    return v;
  }

 private:
  template <class S>
  static void convert(const unsigned char* src, std::span<float> dst) {
    for (std::size_t i = 0; i < dst.size(); ++i) {
      S x;
      std::memcpy(&x, src + 2 * i, 2);
      dst[i] = float(x);
    }
  }

  const st_tensor_info& checked(const std::string& name, const std::vector<std::size_t>& expected, std::size_t n) const {
    const auto& t = info(name);
    SPARSELM_CHECK(expected.empty() || t.shape == expected, path_.string(), ": tensor '", name, "' has shape ",
                   dims_string(t.shape), ", expected ", dims_string(expected));
    SPARSELM_CHECK(t.elements() == n, path_.string(), ": tensor '", name, "' has ", t.elements(),
                   " elements, the destination ", n);
    return t;
  }
  void parse() {
    const std::string p = path_.string();
    SPARSELM_CHECK(size_ >= 8, p, ": truncated safetensors file (", size_, " bytes, the header length alone is 8)");
    std::uint64_t n = 0;
    for (int i = 0; i < 8; ++i) n |= std::uint64_t(map_[i]) << (8 * i);
    SPARSELM_CHECK(n <= max_header_bytes, p, ": header length ", n, " is implausible (not a safetensors file?)");
    SPARSELM_CHECK(n <= size_ - 8, p, ": truncated safetensors file: header of ", n, " bytes but only ", size_ - 8,
                   " bytes follow");
    data_ = map_ + 8 + n;
    const std::size_t data_size = size_ - 8 - std::size_t(n);
    nlohmann::json h;
    h = parse_json(std::string_view(reinterpret_cast<const char*>(map_ + 8), std::size_t(n)), p + ": header");
    SPARSELM_CHECK(h.is_object(), p, ": header is not a JSON object");
    for (auto it = h.begin(); it != h.end(); ++it) {
      const std::string& key = it.key();
      const auto& v = it.value();
      if (key == "__metadata__") {
        SPARSELM_CHECK(v.is_object(), p, ": __metadata__ is not an object");
        for (auto m = v.begin(); m != v.end(); ++m) {
          SPARSELM_CHECK(m.value().is_string(), p, ": metadata '", m.key(), "' is not a string");
          meta_[m.key()] = m.value().get<std::string>();
        }
        continue;
      }
      const std::string what = p + ": tensor '" + key + "'";
      SPARSELM_CHECK(v.is_object() && v.contains("dtype") && v.contains("shape") && v.contains("data_offsets"), what,
                     ": entry needs dtype, shape and data_offsets");
      st_tensor_info t;
      t.name = key;
      SPARSELM_CHECK(v["dtype"].is_string() && parse_dtype(v["dtype"].get<std::string>(), t.dtype), what,
                     ": unsupported dtype ", v["dtype"].dump());
      SPARSELM_CHECK(v["shape"].is_array(), what, ": shape is not an array");
      for (auto& d : v["shape"]) {
        SPARSELM_CHECK(d.is_number_unsigned(), what, ": shape ", v["shape"].dump(), " has a non-integer dimension");
        t.shape.push_back(d.get<std::size_t>());
      }
      const auto& o = v["data_offsets"];
      SPARSELM_CHECK(o.is_array() && o.size() == 2 && o[0].is_number_unsigned() && o[1].is_number_unsigned(), what,
                     ": data_offsets ", o.dump(), " is not [begin, end]");
      t.begin = o[0].get<std::size_t>();
      t.end = o[1].get<std::size_t>();
      SPARSELM_CHECK(t.begin <= t.end && t.end <= data_size, what, ": data_offsets [", t.begin, ", ", t.end,
                     "] outside the ", data_size, " data bytes (truncated file?)");
      SPARSELM_CHECK(t.shape.size() <= 8, what, ": shape ", dims_string(t.shape), " has more than 8 dimensions");
      const std::size_t bytes = checked_mul(checked_product(t.shape, what), dtype_size(t.dtype), what);
      SPARSELM_CHECK(t.end - t.begin == bytes, what, ": ", t.end - t.begin, " bytes for shape ", dims_string(t.shape),
                     " of ", to_string(t.dtype), " (expected ", bytes, ")");
      index_[key] = tensors_.size();
      tensors_.push_back(std::move(t));
    }
    // Tensors must not overlap.
    std::vector<const st_tensor_info*> order;
    for (auto& t : tensors_) order.push_back(&t);
    std::sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->begin < b->begin; });
    for (std::size_t i = 1; i < order.size(); ++i)
      SPARSELM_CHECK(order[i]->begin >= order[i - 1]->end, p, ": tensors '", order[i - 1]->name, "' and '",
                     order[i]->name, "' overlap");
    // ... and cover the data section exactly: no gap, nothing after the last one.
    std::size_t covered = 0;
    for (auto* t : order) {
      SPARSELM_CHECK(t->begin == covered, p, ": ", t->begin - covered, " bytes before tensor '", t->name,
                     "' belong to no tensor");
      covered = t->end;
    }
    SPARSELM_CHECK(covered == data_size, p, ": ", data_size - covered,
                   " bytes after the last tensor belong to no tensor (a damaged or foreign file?)");
  }

  void verify_checksums() const {
    auto it = meta_.find(checksum_key);
    if (it == meta_.end()) return;
    const std::string p = path_.string();
    const nlohmann::json sums = parse_json(it->second, p + ": metadata '" + checksum_key + "'");
    SPARSELM_CHECK(sums.is_object() && sums.size() == tensors_.size(), p, ": metadata '", checksum_key,
                   "' does not list the file's ", tensors_.size(), " tensors (a damaged file?)");
    for (const auto& t : tensors_) {
      auto s = sums.find(t.name);
      SPARSELM_CHECK(s != sums.end() && s->is_string(), p, ": tensor '", t.name, "' has no checksum in '",
                     checksum_key, "' (a damaged file?)");
      const std::string have = crc32c_hex(crc32c(data_ + t.begin, t.end - t.begin));
      drop_pages(t);
      SPARSELM_CHECK(have == s->get<std::string>(), p, ": tensor '", t.name, "' is damaged: its CRC-32C is ", have,
                     ", the file records ", s->get<std::string>(), " (load with --no-verify to skip the check)");
    }
  }

  // Gives back the mapped pages wholly inside tensor t's bytes once they have been read (checked or
  // copied out): the mapping is private and never written, so the pages read the file again if
  // touched later, and a checkpoint's bytes do not stay in the process's resident memory beside
  // the arenas they were copied into (a resume's peak RSS; docs/design/precision.md).
  void drop_pages(const st_tensor_info& t) const noexcept {
    if (!owned_ || map_ == nullptr) return;
    static const std::size_t page = std::size_t(::sysconf(_SC_PAGESIZE));
    const auto b = reinterpret_cast<std::uintptr_t>(data_ + t.begin),
               e = reinterpret_cast<std::uintptr_t>(data_ + t.end);
    const std::uintptr_t lo = (b + page - 1) / page * page, hi = e / page * page;
    if (hi > lo) ::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED);
  }

  void unmap() noexcept {
    if (map_ && owned_) ::munmap(const_cast<unsigned char*>(map_), size_);
    map_ = nullptr;
  }

  std::filesystem::path path_;
  const unsigned char* map_ = nullptr;
  const unsigned char* data_ = nullptr;
  std::size_t size_ = 0;
  bool owned_ = true;  // map_ is our mapping (not a caller's buffer)
  std::vector<st_tensor_info> tensors_;
  std::map<std::string, std::size_t> index_;
  std::map<std::string, std::string> meta_;
};

}  // namespace sparselm::io
