#pragma once
// Binary files of BERT pre-training examples (data/bert_pretraining.hpp) and their memory-mapped
// loader, which assembles models/bert_heads.hpp-style batches.
//
//   write_bert_examples("train-128.bex", examples, {.seq_len = 128, .max_predictions = 20, .vocab_size = 30522});
//   bert_example_file f("train-128.bex");                 // validated; errors name the file
//   bert_batch_arrays a;
//   a.assemble(f, indices);                              // B examples -> the arrays of a bert_batch
//   bert_batch b{a.ids, a.token_types, a.lengths, a.masked_positions, a.masked_labels, a.nsp_labels, a.batch, a.seq};
//
// Layout (little-endian):
//   offset size
//        0    8  magic "SPLMBERT"
//        8    4  version (1)
//       12    4  seq_len T
//       16    4  max_predictions P
//       20    4  vocab_size (≤ 65536: ids are 16-bit)
//       24    8  count of examples
//       32       records, each 3T + 4P + 5 bytes:
//                ids u16[T] (padded with 0), token types u8[T], length u16 (valid tokens),
//                predictions u16, masked positions u16[P], masked labels u16[P] (unused slots 0),
//                nsp label u8
// Files are written through a temporary name and renamed into place. They are read through
// io::mapped_input: refused unless regular, and each record read checks that the file still has the
// size its header gives (truncation while in use is an error naming the file, not zeros or SIGBUS).

#include <array>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "sparselm/core/error.hpp"
#include "sparselm/data/bert_pretraining.hpp"
#include "sparselm/io/atomic_file.hpp"
#include "sparselm/io/mapped_input.hpp"

namespace sparselm::data {

inline constexpr std::array<char, 8> bert_examples_magic = {'S', 'P', 'L', 'M', 'B', 'E', 'R', 'T'};
inline constexpr std::uint32_t bert_examples_version = 1;
inline constexpr std::size_t bert_examples_header = 32;

struct bert_examples_info {
  std::uint32_t seq_len = 128, max_predictions = 20, vocab_size = 30522;
  std::uint64_t count = 0;
  std::size_t record_bytes() const noexcept { return 3 * std::size_t(seq_len) + 4 * std::size_t(max_predictions) + 5; }
};

namespace detail {
inline void put_u16(unsigned char*& p, std::uint32_t v) {
  p[0] = static_cast<unsigned char>(v & 0xFF);
  p[1] = static_cast<unsigned char>(v >> 8);
  p += 2;
}
inline std::uint32_t get_u16(const unsigned char*& p) {
  const std::uint32_t v = std::uint32_t(p[0]) | (std::uint32_t(p[1]) << 8);
  p += 2;
  return v;
}
inline void put_le(unsigned char* p, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
inline std::uint64_t get_le(const unsigned char* p, int bytes) {
  std::uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= std::uint64_t(p[i]) << (8 * i);
  return v;
}
}  // namespace detail

// Writes examples (each at most seq_len tokens and max_predictions predictions) to path.
inline void write_bert_examples(const std::filesystem::path& path, const std::vector<bert_example>& examples,
                                bert_examples_info info) {
  const std::string name = path.string();
  SPARSELM_CHECK(info.vocab_size >= 1 && info.vocab_size <= 65536, name, ": vocab size ", info.vocab_size,
                 " does not fit 16-bit ids");
  SPARSELM_CHECK(info.seq_len >= 1 && info.seq_len <= 65535, name, ": seq_len ", info.seq_len, " out of range");
  info.count = examples.size();
  std::vector<unsigned char> rec(info.record_bytes());
  io::atomic_write(path, [&](std::FILE* f) {
    unsigned char h[bert_examples_header] = {};
    std::memcpy(h, bert_examples_magic.data(), 8);
    detail::put_le(h + 8, bert_examples_version, 4);
    detail::put_le(h + 12, info.seq_len, 4);
    detail::put_le(h + 16, info.max_predictions, 4);
    detail::put_le(h + 20, info.vocab_size, 4);
    detail::put_le(h + 24, info.count, 8);
    io::write_bytes(f, h, sizeof h, name);
    for (std::size_t k = 0; k < examples.size(); ++k) {
      const bert_example& e = examples[k];
      SPARSELM_CHECK(e.ids.size() <= info.seq_len && e.token_types.size() == e.ids.size(), name, ": example ", k,
                     " has ", e.ids.size(), " tokens and ", e.token_types.size(), " token types (seq_len ",
                     info.seq_len, ")");
      SPARSELM_CHECK(e.masked_positions.size() <= info.max_predictions &&
                         e.masked_labels.size() == e.masked_positions.size(),
                     name, ": example ", k, " has ", e.masked_positions.size(), " predictions (max ",
                     info.max_predictions, ")");
      std::fill(rec.begin(), rec.end(), 0);
      unsigned char* p = rec.data();
      for (std::size_t t = 0; t < info.seq_len; ++t) {
        const std::int32_t id = t < e.ids.size() ? e.ids[t] : 0;
        SPARSELM_CHECK(id >= 0 && std::uint32_t(id) < info.vocab_size, name, ": example ", k, ": token id ", id,
                       " outside the vocabulary of ", info.vocab_size);
        detail::put_u16(p, std::uint32_t(id));
      }
      for (std::size_t t = 0; t < info.seq_len; ++t) *p++ = t < e.token_types.size() && e.token_types[t] ? 1 : 0;
      detail::put_u16(p, std::uint32_t(e.ids.size()));
      detail::put_u16(p, std::uint32_t(e.masked_positions.size()));
      for (std::size_t m = 0; m < info.max_predictions; ++m)
        detail::put_u16(p, m < e.masked_positions.size() ? std::uint32_t(e.masked_positions[m]) : 0);
      for (std::size_t m = 0; m < info.max_predictions; ++m)
        detail::put_u16(p, m < e.masked_labels.size() ? std::uint32_t(e.masked_labels[m]) : 0);
      *p++ = static_cast<unsigned char>(e.nsp_label);
      io::write_bytes(f, rec.data(), rec.size(), name);
    }
  });
}

// A validated, memory-mapped example file.
class bert_example_file {
 public:
  explicit bert_example_file(const std::filesystem::path& path)
      : name_(path.string()), map_(path, "example file") {
    validate();
  }
  bert_example_file(const bert_example_file&) = delete;
  bert_example_file& operator=(const bert_example_file&) = delete;

  const bert_examples_info& info() const noexcept { return info_; }
  std::size_t size() const noexcept { return std::size_t(info_.count); }
  const std::string& name() const noexcept { return name_; }
  // Example k's record, after checking that the file still has the size its header gives (a file
  // truncated or replaced while in use is an error naming it, never records of zeros).
  const unsigned char* record(std::size_t k) const {
    SPARSELM_CHECK(k < size(), name_, ": example ", k, " of ", size());
    return map_.region(offset_of(k), info_.record_bytes());
  }

 private:
  std::uint64_t offset_of(std::size_t k) const noexcept { return bert_examples_header + k * info_.record_bytes(); }

  void validate() {
    const unsigned char* map = map_.bytes().data();
    const std::uint64_t bytes = map_.bytes().size();
    SPARSELM_CHECK(bytes >= bert_examples_header, name_, ": truncated header (", bytes, " bytes; a BERT example file "
                   "starts with 32)");
    SPARSELM_CHECK(std::memcmp(map, bert_examples_magic.data(), 8) == 0, name_,
                   ": not a BERT example file (bad magic; expected \"SPLMBERT\")");
    const auto version = detail::get_le(map + 8, 4);
    SPARSELM_CHECK(version == bert_examples_version, name_, ": version ", version, ", this build reads version ",
                   bert_examples_version);
    info_.seq_len = std::uint32_t(detail::get_le(map + 12, 4));
    info_.max_predictions = std::uint32_t(detail::get_le(map + 16, 4));
    info_.vocab_size = std::uint32_t(detail::get_le(map + 20, 4));
    info_.count = detail::get_le(map + 24, 8);
    SPARSELM_CHECK(info_.seq_len >= 1 && info_.seq_len <= 65535 && info_.max_predictions <= info_.seq_len &&
                       info_.vocab_size >= 1 && info_.vocab_size <= 65536,
                   name_, ": bad header (seq_len ", info_.seq_len, ", max_predictions ", info_.max_predictions,
                   ", vocab_size ", info_.vocab_size, ")");
    const std::uint64_t body = bytes - bert_examples_header;
    SPARSELM_CHECK(info_.count <= body / info_.record_bytes() && body == info_.count * info_.record_bytes(), name_,
                   ": ", body, " bytes of records for ", info_.count, " examples of ", info_.record_bytes(),
                   " bytes (truncated or trailing data)");
    SPARSELM_CHECK(info_.count > 0, name_, ": no examples");
    for (std::size_t k = 0; k < size(); ++k) check_record(k, map + offset_of(k));
  }
  void check_record(std::size_t k, const unsigned char* p) const {
    const std::size_t T = info_.seq_len, P = info_.max_predictions;
    for (std::size_t t = 0; t < T; ++t) {
      const auto id = detail::get_u16(p);
      SPARSELM_CHECK(id < info_.vocab_size, name_, ": example ", k, ": token id ", id, " at position ", t,
                     " outside the vocabulary of ", info_.vocab_size);
    }
    for (std::size_t t = 0; t < T; ++t, ++p)
      SPARSELM_CHECK(*p <= 1, name_, ": example ", k, ": token type ", int(*p), " at position ", t);
    const auto len = detail::get_u16(p), preds = detail::get_u16(p);
    SPARSELM_CHECK(len >= 2 && len <= T && preds <= P, name_, ": example ", k, ": length ", len, " and ", preds,
                   " predictions do not fit seq_len ", T, " and max_predictions ", P);
    for (std::size_t m = 0; m < P; ++m) {
      const auto pos = detail::get_u16(p);
      SPARSELM_CHECK(m >= preds || pos < len, name_, ": example ", k, ": masked position ", pos, " beyond its length ",
                     len);
    }
    for (std::size_t m = 0; m < P; ++m) {
      const auto label = detail::get_u16(p);
      SPARSELM_CHECK(label < info_.vocab_size, name_, ": example ", k, ": masked label ", label);
    }
    SPARSELM_CHECK(*p <= 1, name_, ": example ", k, ": next-sentence label ", int(*p));
  }
  std::string name_;
  io::mapped_input map_;  // guarded (io/mapped_input.hpp)
  bert_examples_info info_;
};

// The arrays of one batch, filled from an example file; view() gives the batch's spans in the
// order of models/bert_heads.hpp's bert_batch (ids, token_types, lengths, masked positions, masked
// labels with −1 for unused slots, nsp labels).
struct bert_batch_arrays {
  std::vector<std::int32_t> ids, token_types, lengths, masked_positions, masked_labels, nsp_labels;
  std::size_t batch = 0, seq = 0;

  void assemble(const bert_example_file& f, std::span<const std::size_t> examples) {
    const std::size_t T = f.info().seq_len, P = f.info().max_predictions, B = examples.size();
    batch = B;
    seq = T;
    ids.assign(B * T, 0);
    token_types.assign(B * T, 0);
    lengths.assign(B, 0);
    masked_positions.assign(B * P, 0);
    masked_labels.assign(B * P, -1);
    nsp_labels.assign(B, 0);
    for (std::size_t b = 0; b < B; ++b) {
      const unsigned char* p = f.record(examples[b]);
      for (std::size_t t = 0; t < T; ++t) ids[b * T + t] = std::int32_t(detail::get_u16(p));
      for (std::size_t t = 0; t < T; ++t) token_types[b * T + t] = *p++;
      lengths[b] = std::int32_t(detail::get_u16(p));
      const std::size_t preds = detail::get_u16(p);
      for (std::size_t m = 0; m < P; ++m) masked_positions[b * P + m] = std::int32_t(detail::get_u16(p));
      for (std::size_t m = 0; m < P; ++m) {
        const auto label = std::int32_t(detail::get_u16(p));
        if (m < preds) masked_labels[b * P + m] = label;
      }
      nsp_labels[b] = *p;
    }
  }
};

}  // namespace sparselm::data
