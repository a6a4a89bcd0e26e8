#pragma once
// Internals of the GPT-2 tokenizer (data/gpt2_bpe.hpp): the byte alphabet, the merge table, the
// piece cache, the immutable vocabulary and the loaders of encoder.json and vocab.bpe.

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "sparselm/core/error.hpp"
#include "sparselm/core/json.hpp"
#include "sparselm/data/text.hpp"

namespace sparselm::data {

// Whether special-token text (`<|endoftext|>`) in the input becomes its special id.
enum class specials { as_text, allow };

inline constexpr std::string_view gpt2_endoftext = "<|endoftext|>";
inline constexpr std::int32_t gpt2_endoftext_id = 50256;

namespace detail {

// GPT-2's reversible byte -> printable code point map: bytes 33..126, 161..172 and 174..255 map
// to themselves, the other 68 bytes to 256, 257, ... in byte order.
struct gpt2_byte_alphabet {
  std::array<char32_t, 256> to_cp{};
  std::array<std::int16_t, 324> to_byte{};  // code point -> byte, -1 if not in the alphabet
  constexpr gpt2_byte_alphabet() {
    for (auto& v : to_byte) v = -1;
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      bool self = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      to_cp[b] = self ? char32_t(b) : next++;
      to_byte[to_cp[b]] = std::int16_t(b);
    }
  }
};
inline constexpr gpt2_byte_alphabet gpt2_bytes{};

inline std::uint64_t hash_bytes(std::string_view s) noexcept {
  // FNV-1a over 8-byte words, then a 64-bit finaliser: fast for the short pieces BPE sees.
  std::uint64_t h = 0xCBF29CE484222325ull ^ s.size();
  std::size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    std::uint64_t w;
    std::memcpy(&w, s.data() + i, 8);
    h = (h ^ w) * 0x100000001B3ull;
    h ^= h >> 29;
  }
  std::uint64_t tail = 0;
  std::memcpy(&tail, s.data() + i, s.size() - i);
  h = (h ^ tail) * 0x9E3779B97F4A7C15ull;
  h ^= h >> 32;
  h *= 0xD6E8FEB86659FD93ull;
  return h ^ (h >> 32);
}

// Open-addressing map (left id, right id) -> (merge rank, merged id).
class merge_table {
 public:
  struct entry {
    std::uint64_t key = empty_key;
    std::uint32_t rank = 0;
    std::int32_t merged = 0;
  };
  static constexpr std::uint64_t empty_key = ~0ull;
  static constexpr std::uint32_t no_rank = std::numeric_limits<std::uint32_t>::max();

  void reserve(std::size_t n) {
    std::size_t cap = 16;
    while (cap < 2 * n) cap <<= 1;
    slots_.assign(cap, entry{});
    mask_ = cap - 1;
  }
  static std::uint64_t key(std::int32_t a, std::int32_t b) noexcept {
    return (std::uint64_t(std::uint32_t(a)) << 32) | std::uint32_t(b);
  }
  // Returns false if the pair is already present.
  bool insert(std::int32_t a, std::int32_t b, std::uint32_t rank, std::int32_t merged) {
    std::uint64_t k = key(a, b);
    for (std::size_t i = slot(k);; i = (i + 1) & mask_) {
      if (slots_[i].key == k) return false;
      if (slots_[i].key == empty_key) {
        slots_[i] = {k, rank, merged};
        return true;
      }
    }
  }
  const entry* find(std::int32_t a, std::int32_t b) const noexcept {
    std::uint64_t k = key(a, b);
    for (std::size_t i = slot(k);; i = (i + 1) & mask_) {
      if (slots_[i].key == k) return &slots_[i];
      if (slots_[i].key == empty_key) return nullptr;
    }
  }

 private:
  std::size_t slot(std::uint64_t k) const noexcept {
    k *= 0x9E3779B97F4A7C15ull;
    return std::size_t(k >> 32) & mask_;
  }
  std::vector<entry> slots_;
  std::size_t mask_ = 0;
};

// Cache piece bytes -> token ids, with keys and values in flat arenas. Cleared when full.
class piece_cache {
 public:
  explicit piece_cache(std::size_t max_entries = std::size_t(1) << 18) : max_entries_(max_entries) { clear(); }

  std::span<const std::int32_t> find(std::string_view piece, std::uint64_t h) const noexcept {
    for (std::size_t i = h & mask_;; i = (i + 1) & mask_) {
      const slot& s = slots_[i];
      if (s.key_len == empty) return {};
      if (s.hash == h && s.key_len == piece.size() &&
          std::memcmp(keys_.data() + s.key_off, piece.data(), piece.size()) == 0)
        return {values_.data() + s.val_off, s.val_len};
    }
  }
  void insert(std::string_view piece, std::uint64_t h, std::span<const std::int32_t> ids) {
    if (size_ + 1 > max_entries_) clear();
    if (2 * (size_ + 1) > slots_.size()) grow();
    slot s{h, std::uint32_t(keys_.size()), std::uint32_t(piece.size()), std::uint32_t(values_.size()),
           std::uint32_t(ids.size())};
    keys_.append(piece);
    values_.insert(values_.end(), ids.begin(), ids.end());
    place(s);
    ++size_;
  }
  void clear() {
    slots_.assign(1024, slot{});
    mask_ = slots_.size() - 1;
    keys_.clear();
    values_.clear();
    size_ = 0;
  }
  std::size_t size() const noexcept { return size_; }

 private:
  static constexpr std::uint32_t empty = ~0u;
  struct slot {
    std::uint64_t hash = 0;
    std::uint32_t key_off = 0, key_len = empty, val_off = 0, val_len = 0;
  };
  void place(const slot& s) {
    for (std::size_t i = s.hash & mask_;; i = (i + 1) & mask_)
      if (slots_[i].key_len == empty) {
        slots_[i] = s;
        return;
      }
  }
  void grow() {
    std::vector<slot> old = std::move(slots_);
    slots_.assign(old.size() * 2, slot{});
    mask_ = slots_.size() - 1;
    for (const slot& s : old)
      if (s.key_len != empty) place(s);
  }
  std::vector<slot> slots_;
  std::size_t mask_ = 0;
  std::string keys_;
  std::vector<std::int32_t> values_;
  std::size_t size_ = 0;
  std::size_t max_entries_;
};

// The immutable vocabulary: token bytes, byte tokens, merges.
struct gpt2_vocab {
  std::string token_pool;                   // bytes of all tokens, concatenated
  std::vector<std::uint32_t> token_offset;  // token i is token_pool[offset[i], offset[i+1])
  std::unordered_map<std::string, std::int32_t> id_of;
  std::array<std::int32_t, 256> byte_token{};
  merge_table merges;
  std::size_t merge_count = 0;
  bool heap_exact = false;  // a merge's inputs are only produced by earlier merges
  std::int32_t endoftext = -1;

  std::string_view bytes(std::int32_t id) const noexcept {
    return std::string_view(token_pool).substr(token_offset[id], token_offset[id + 1] - token_offset[id]);
  }
  std::size_t size() const noexcept { return token_offset.size() - 1; }
};

// Bytes of a token string written in GPT-2's byte alphabet; nullopt-like: returns false on a
// character outside the alphabet (cp reported through bad_cp).
inline bool alphabet_to_bytes(std::string_view s, std::string& out, char32_t& bad_cp) {
  out.clear();
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const auto* end = p + s.size();
  while (p < end) {
    utf8_char c = read_utf8(p, end);
    if (c.invalid || c.code_point >= gpt2_bytes.to_byte.size() || gpt2_bytes.to_byte[c.code_point] < 0) {
      bad_cp = c.code_point;
      return false;
    }
    out += char(gpt2_bytes.to_byte[c.code_point]);
    p += c.length;
  }
  return true;
}

inline std::string quote_for_error(std::string_view s) {
  std::string q = "\"";
  for (unsigned char ch : s) {
    if (ch < 0x20 || ch == 0x7F) {
      static constexpr char hex[] = "0123456789abcdef";
      q += "\\x";
      q += hex[ch >> 4];
      q += hex[ch & 15];
    } else {
      q += char(ch);
    }
  }
  return q + "\"";
}

inline std::string hex_cp(char32_t cp) {
  static constexpr char hex[] = "0123456789ABCDEF";
  std::string s;
  for (int shift = 20; shift >= 0; shift -= 4)
    if ((cp >> shift) || shift < 16) s += hex[(cp >> shift) & 15];
  return "U+" + s;
}

inline void load_gpt2_encoder(gpt2_vocab& v, std::string_view text, const std::string& name) {
  nlohmann::json j;
  const std::size_t depth = ::sparselm::detail::json_depth(text);
  SPARSELM_CHECK(depth <= max_json_depth, name, ": JSON nested ", depth, " levels deep (the limit is ", max_json_depth,
                 ")");
  try {
    j = ::sparselm::detail::parse_unique_keys(text, name);  // a token spelled twice: refused, naming it
  } catch (const nlohmann::json::parse_error& e) {
    fail(name, ":", line_of_offset(text, e.byte > 0 ? e.byte - 1 : 0), ": invalid JSON: ", e.what());
  } catch (const nlohmann::json::exception& e) {  // out_of_range: a number such as 1e999
    fail(name, ": invalid JSON: ", e.what());
  }
  SPARSELM_CHECK(j.is_object(), name, ": expected a JSON object mapping token strings to ids");
  SPARSELM_CHECK(!j.empty(), name, ": the vocabulary is empty");
  const std::size_t n = j.size();
  std::vector<std::string> tokens(n);
  std::vector<bool> seen(n, false);
  std::vector<std::string> key_of(n);
  std::string bytes;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& key = it.key();
    const auto& val = it.value();
    SPARSELM_CHECK(val.is_number_integer(), name, ": key ", quote_for_error(key), ": id must be an integer, got ",
                   val.dump());
    const auto id = val.get<std::int64_t>();
    SPARSELM_CHECK(id >= 0 && std::uint64_t(id) < n, name, ": key ", quote_for_error(key), ": id ", id,
                   " is outside 0..", n - 1, " (ids must be dense)");
    SPARSELM_CHECK(!seen[id], name, ": id ", id, " is used by both ", quote_for_error(key_of[id]), " and ",
                   quote_for_error(key));
    char32_t bad = 0;
    SPARSELM_CHECK(!key.empty(), name, ": empty token string (id ", id, ")");
    SPARSELM_CHECK(alphabet_to_bytes(key, bytes, bad), name, ": key ", quote_for_error(key), " (id ", id,
                   ") has character ", hex_cp(bad), " outside GPT-2's byte alphabet");
    seen[id] = true;
    key_of[id] = key;
    tokens[id] = bytes;
  }
  v.token_offset.assign(1, 0);
  v.token_pool.clear();
  v.id_of.clear();
  v.id_of.reserve(2 * n);
  for (std::size_t id = 0; id < n; ++id) {
    v.token_pool += tokens[id];
    v.token_offset.push_back(std::uint32_t(v.token_pool.size()));
    auto [it, fresh] = v.id_of.emplace(tokens[id], std::int32_t(id));
    SPARSELM_CHECK(fresh, name, ": keys ", quote_for_error(key_of[it->second]), " and ", quote_for_error(key_of[id]),
                   " decode to the same bytes");
  }
  for (int b = 0; b < 256; ++b) {
    auto it = v.id_of.find(std::string(1, char(b)));
    SPARSELM_CHECK(it != v.id_of.end(), name, ": no token for byte ", b, " (key ",
                   quote_for_error(std::string(1, char(b))), " in GPT-2's byte alphabet is missing)");
    v.byte_token[b] = it->second;
  }
  auto eot = v.id_of.find(std::string(gpt2_endoftext));
  v.endoftext = eot == v.id_of.end() ? -1 : eot->second;
}

inline void load_gpt2_merges(gpt2_vocab& v, std::string_view text, const std::string& name) {
  // Count lines first to size the table.
  std::size_t lines = std::size_t(std::count(text.begin(), text.end(), '\n')) + 1;
  v.merges.reserve(lines);
  std::vector<std::int64_t> last_made(v.size(), -1);  // highest rank of a merge producing a token
  struct rec {
    std::int32_t a, b;
  };
  std::vector<rec> recs;
  recs.reserve(lines);
  std::string left, right, joined;
  std::size_t pos = 0, line_no = 0;
  std::uint32_t rank = 0;
  while (pos < text.size()) {
    std::size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) nl = text.size();
    std::string_view line = text.substr(pos, nl - pos);
    pos = nl + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    if (line_no == 1 && line.starts_with("#version")) continue;
    std::size_t sp = line.find(' ');
    SPARSELM_CHECK(sp != std::string_view::npos && sp > 0 && sp + 1 < line.size() &&
                       line.find(' ', sp + 1) == std::string_view::npos,
                   name, ":", line_no, ": expected two tokens separated by one space, got ", quote_for_error(line));
    char32_t bad = 0;
    std::string_view l = line.substr(0, sp), r = line.substr(sp + 1);
    SPARSELM_CHECK(alphabet_to_bytes(l, left, bad), name, ":", line_no, ": token ", quote_for_error(l),
                   " has character ", hex_cp(bad), " outside GPT-2's byte alphabet");
    SPARSELM_CHECK(alphabet_to_bytes(r, right, bad), name, ":", line_no, ": token ", quote_for_error(r),
                   " has character ", hex_cp(bad), " outside GPT-2's byte alphabet");
    auto ia = v.id_of.find(left), ib = v.id_of.find(right);
    SPARSELM_CHECK(ia != v.id_of.end(), name, ":", line_no, ": token ", quote_for_error(l), " is not in the encoder");
    SPARSELM_CHECK(ib != v.id_of.end(), name, ":", line_no, ": token ", quote_for_error(r), " is not in the encoder");
    joined = left + right;
    auto ic = v.id_of.find(joined);
    SPARSELM_CHECK(ic != v.id_of.end(), name, ":", line_no, ": merged token ", quote_for_error(std::string(l) + std::string(r)),
                   " is not in the encoder");
    SPARSELM_CHECK(v.merges.insert(ia->second, ib->second, rank, ic->second), name, ":", line_no, ": merge ",
                   quote_for_error(line), " is listed twice");
    recs.push_back({ia->second, ib->second});
    last_made[ic->second] = std::max<std::int64_t>(last_made[ic->second], rank);
    ++rank;
  }
  SPARSELM_CHECK(rank > 0, name, ": no merges (an empty or truncated vocab.bpe?)");
  v.merge_count = rank;
  // The heap form of BPE is exact when every pair a merge creates ranks after that merge.
  v.heap_exact = true;
  for (std::uint32_t r = 0; r < recs.size(); ++r)
    if (last_made[recs[r].a] >= std::int64_t(r) || last_made[recs[r].b] >= std::int64_t(r)) v.heap_exact = false;
}

}  // namespace detail

}  // namespace sparselm::data
