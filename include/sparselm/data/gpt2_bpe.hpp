#pragma once
// GPT-2 byte-level BPE tokenizer (r50k_base), exact to the reference encoder.
//
//   auto tok = sparselm::data::gpt2_bpe::from_directory(SPARSELM_SOURCE_DIR "/data/gpt2");
//   std::vector<std::int32_t> ids = tok.encode("Hello world");          // {15496, 995}
//   std::string text = tok.decode(ids);                                 // "Hello world"
//   tok.encode("a<|endoftext|>b", sparselm::data::specials::allow);    // {64, 50256, 65}
//
// Pipeline: text -> pre-tokenisation pieces -> bytes of each piece as byte tokens -> BPE merges.
//
// - Pre-tokenisation is GPT-2's rule, implemented by hand (no regex engine):
//     's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//   with \p{L}, \p{N} and \s (the White_Space property) from a generated table
//   (data/unicode_tables.hpp, scripts/gen_unicode_tables.py). Alternatives are tried in order at
//   each position, each one greedy; `\s+(?!\S)` takes a run of white space that ends the text, or
//   all but the last white-space character of a longer run, which then prefixes the next word.
// - Invalid UTF-8 is never rejected: each invalid byte is one character of class "other" (see
//   data/text.hpp), so it joins neighbouring punctuation in ` ?[^\s\p{L}\p{N}]+`. Every byte has
//   a token, hence decode(encode(b)) == b for any byte string b.
// - BPE: the pair with the lowest merge rank is merged everywhere in the piece (left to right,
//   non-overlapping), repeatedly, as in the reference. Long pieces use an equivalent O(n log n)
//   heap form when the merge list allows it (checked at load time). Results are cached per piece.
// - `<|endoftext|>` (id 50256) is a special token only with specials::allow; by default the text
//   "<|endoftext|>" is encoded as ordinary text, like the original GPT-2 encoder.
//
// A gpt2_bpe is cheap to copy (the vocabulary is shared and immutable). encode() updates the
// piece cache, so one object must not be used by two threads at once: copy it per thread.

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <queue>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "sparselm/core/error.hpp"
#include "sparselm/data/text.hpp"

namespace sparselm::data {

// Whether special-token text (`<|endoftext|>`) in the input becomes its special id.
enum class specials { as_text, allow };

inline constexpr std::string_view gpt2_endoftext = "<|endoftext|>";
inline constexpr std::int32_t gpt2_endoftext_id = 50256;

// ---------------------------------------------------------------------------------------------
// Pre-tokenisation
// ---------------------------------------------------------------------------------------------

// Calls on_piece(begin, end) with the byte offsets of each GPT-2 pre-tokenisation piece of
// `text`, in order; the pieces tile the text exactly.
template <class OnPiece>
void gpt2_pretokenize(std::string_view text, OnPiece&& on_piece) {
  const auto* const base = reinterpret_cast<const unsigned char*>(text.data());
  const auto* const end = base + text.size();
  const auto* p = base;
  // End of the run of characters of class `cls` starting at q.
  auto run_end = [end](const unsigned char* q, char_class cls) {
    while (q < end) {
      utf8_char c = read_utf8(q, end);
      if (c.cls != cls) break;
      q += c.length;
    }
    return q;
  };
  while (p < end) {
    const unsigned char b = *p;
    // 's 't 're 've 'm 'll 'd
    if (b == '\'' && p + 1 < end) {
      const unsigned char c1 = p[1];
      if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') {
        on_piece(std::size_t(p - base), std::size_t(p + 2 - base));
        p += 2;
        continue;
      }
      if (p + 2 < end && ((c1 == 'r' && p[2] == 'e') || (c1 == 'v' && p[2] == 'e') || (c1 == 'l' && p[2] == 'l'))) {
        on_piece(std::size_t(p - base), std::size_t(p + 3 - base));
        p += 3;
        continue;
      }
    }
    utf8_char c = read_utf8(p, end);
    // ` ?X+` for X in letter, number, other: an optional space, then a run of one class.
    const unsigned char* q = p;
    char_class cls = c.cls;
    if (b == ' ' && p + 1 < end) {
      utf8_char n = read_utf8(p + 1, end);
      if (n.cls != char_class::whitespace) {
        q = p + 1;
        cls = n.cls;
      }
    }
    if (cls != char_class::whitespace) {
      const unsigned char* e = run_end(q, cls);
      on_piece(std::size_t(p - base), std::size_t(e - base));
      p = e;
      continue;
    }
    // `\s+(?!\S)|\s+`: scan the white-space run, remembering where its last character starts.
    const unsigned char* last = p;
    const unsigned char* e = p + c.length;
    while (e < end) {
      utf8_char n = read_utf8(e, end);
      if (n.cls != char_class::whitespace) break;
      last = e;
      e += n.length;
    }
    if (e < end && last != p) e = last;  // followed by non-space: leave the last one
    on_piece(std::size_t(p - base), std::size_t(e - base));
    p = e;
  }
}

// The pieces as views into `text`.
inline std::vector<std::string_view> gpt2_pretokenize(std::string_view text) {
  std::vector<std::string_view> out;
  gpt2_pretokenize(text, [&](std::size_t b, std::size_t e) { out.push_back(text.substr(b, e - b)); });
  return out;
}

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
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    fail(name, ":", line_of_offset(text, e.byte > 0 ? e.byte - 1 : 0), ": invalid JSON: ", e.what());
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
  v.merge_count = rank;
  // The heap form of BPE is exact when every pair a merge creates ranks after that merge.
  v.heap_exact = true;
  for (std::uint32_t r = 0; r < recs.size(); ++r)
    if (last_made[recs[r].a] >= std::int64_t(r) || last_made[recs[r].b] >= std::int64_t(r)) v.heap_exact = false;
}

}  // namespace detail

// ---------------------------------------------------------------------------------------------
// Tokenizer
// ---------------------------------------------------------------------------------------------

class gpt2_bpe {
 public:
  // Loads `encoder.json` (token string -> id) and `vocab.bpe` (merges). Malformed input raises
  // sparselm::error naming the file and the line (vocab.bpe, JSON syntax) or the key.
  static gpt2_bpe from_files(const std::filesystem::path& encoder_json, const std::filesystem::path& vocab_bpe) {
    auto v = std::make_shared<detail::gpt2_vocab>();
    detail::load_gpt2_encoder(*v, read_file_bytes(encoder_json), encoder_json.string());
    detail::load_gpt2_merges(*v, read_file_bytes(vocab_bpe), vocab_bpe.string());
    return gpt2_bpe(std::move(v));
  }
  // The same from in-memory contents; `name` prefixes error messages.
  static gpt2_bpe from_strings(std::string_view encoder_json, std::string_view vocab_bpe,
                               const std::string& name = "<memory>") {
    auto v = std::make_shared<detail::gpt2_vocab>();
    detail::load_gpt2_encoder(*v, encoder_json, name + "/encoder.json");
    detail::load_gpt2_merges(*v, vocab_bpe, name + "/vocab.bpe");
    return gpt2_bpe(std::move(v));
  }
  // `dir/encoder.json` + `dir/vocab.bpe`.
  static gpt2_bpe from_directory(const std::filesystem::path& dir) {
    return from_files(dir / "encoder.json", dir / "vocab.bpe");
  }

  // Number of ids (50257 for GPT-2); valid ids are 0 .. vocab_size()-1.
  std::size_t vocab_size() const noexcept { return vocab_->size(); }
  std::size_t merge_count() const noexcept { return vocab_->merge_count; }
  // Id of `<|endoftext|>`, or -1 if the vocabulary has none.
  std::int32_t endoftext_id() const noexcept { return vocab_->endoftext; }

  // Appends the ids of `text` to `out`.
  void encode(std::string_view text, std::vector<std::int32_t>& out, specials sp = specials::as_text) {
    if (sp == specials::allow && vocab_->endoftext >= 0) {
      std::size_t pos = 0;
      for (std::size_t hit; (hit = text.find(gpt2_endoftext, pos)) != std::string_view::npos;
           pos = hit + gpt2_endoftext.size()) {
        encode_ordinary(text.substr(pos, hit - pos), out);
        out.push_back(vocab_->endoftext);
      }
      text = text.substr(pos);
    }
    encode_ordinary(text, out);
  }
  std::vector<std::int32_t> encode(std::string_view text, specials sp = specials::as_text) {
    std::vector<std::int32_t> out;
    out.reserve(text.size() / 3 + 4);
    encode(text, out, sp);
    return out;
  }

  // Bytes of `ids` concatenated. An id outside 0..vocab_size()-1 raises sparselm::error naming
  // the id and its position.
  std::string decode(std::span<const std::int32_t> ids) const {
    std::string out;
    append_decoded(ids, out);
    return out;
  }
  void append_decoded(std::span<const std::int32_t> ids, std::string& out) const {
    const std::size_t n = vocab_size();
    for (std::size_t i = 0; i < ids.size(); ++i) {
      SPARSELM_CHECK(ids[i] >= 0 && std::size_t(ids[i]) < n, "gpt2_bpe::decode: token id ", ids[i], " at position ",
                     i, " is outside the vocabulary 0..", n - 1);
      out += vocab_->bytes(ids[i]);
    }
  }
  // Raw bytes of one token (checked like decode).
  std::string_view token_bytes(std::int32_t id) const {
    SPARSELM_CHECK(id >= 0 && std::size_t(id) < vocab_size(), "gpt2_bpe::token_bytes: token id ", id,
                   " is outside the vocabulary 0..", vocab_size() - 1);
    return vocab_->bytes(id);
  }
  // Id of the token whose bytes are exactly `bytes`, or -1.
  std::int32_t token_id(std::string_view bytes) const {
    auto it = vocab_->id_of.find(std::string(bytes));
    return it == vocab_->id_of.end() ? -1 : it->second;
  }

  std::size_t cache_size() const noexcept { return cache_.size(); }
  void clear_cache() { cache_.clear(); }
  // Whether long pieces may use the heap form of BPE (true for GPT-2's merges).
  bool uses_heap_bpe() const noexcept { return vocab_->heap_exact; }
  // Pieces longer than this many bytes use the heap form (default 48). For tests: 0 sends every
  // piece through the heap, SIZE_MAX none. Clears the cache.
  void set_heap_threshold(std::size_t bytes) {
    short_piece_ = bytes;
    cache_.clear();
  }

 private:
  explicit gpt2_bpe(std::shared_ptr<const detail::gpt2_vocab> v) : vocab_(std::move(v)) {}

  // Pieces longer than this are not cached (they are rare and would fill the cache).
  static constexpr std::size_t max_cached_piece = 256;
  std::size_t short_piece_ = 48;

  void encode_ordinary(std::string_view text, std::vector<std::int32_t>& out) {
    gpt2_pretokenize(text, [&](std::size_t b, std::size_t e) { encode_piece(text.substr(b, e - b), out); });
  }

  void encode_piece(std::string_view piece, std::vector<std::int32_t>& out) {
    const auto& v = *vocab_;
    if (piece.size() == 1) {
      out.push_back(v.byte_token[static_cast<unsigned char>(piece[0])]);
      return;
    }
    const bool cacheable = piece.size() <= max_cached_piece;
    std::uint64_t h = 0;
    if (cacheable) {
      h = detail::hash_bytes(piece);
      auto hit = cache_.find(piece, h);
      if (!hit.empty()) {
        out.insert(out.end(), hit.begin(), hit.end());
        return;
      }
    }
    syms_.resize(piece.size());
    for (std::size_t i = 0; i < piece.size(); ++i) syms_[i] = v.byte_token[static_cast<unsigned char>(piece[i])];
    std::size_t n = (piece.size() <= short_piece_ || !v.heap_exact) ? merge_simple(syms_.data(), syms_.size())
                                                                   : merge_heap(syms_.data(), syms_.size());
    std::span<const std::int32_t> ids(syms_.data(), n);
    if (cacheable) cache_.insert(piece, h, ids);
    out.insert(out.end(), ids.begin(), ids.end());
  }

  // The reference algorithm: merge the lowest-ranked pair everywhere, repeat. O(n^2) per piece.
  std::size_t merge_simple(std::int32_t* s, std::size_t n) const {
    const auto& m = vocab_->merges;
    while (n >= 2) {
      std::uint32_t best = detail::merge_table::no_rank;
      std::size_t at = 0;
      std::int32_t merged = 0;
      for (std::size_t i = 0; i + 1 < n; ++i) {
        const auto* e = m.find(s[i], s[i + 1]);
        if (e && e->rank < best) {
          best = e->rank;
          at = i;
          merged = e->merged;
        }
      }
      if (best == detail::merge_table::no_rank) break;
      const std::int32_t a = s[at], b = s[at + 1];
      std::size_t w = at, i = at;
      while (i < n) {
        if (i + 1 < n && s[i] == a && s[i + 1] == b) {
          s[w++] = merged;
          i += 2;
        } else {
          s[w++] = s[i++];
        }
      }
      n = w;
    }
    return n;
  }

  // Equivalent O(n log n) form over a linked list with a heap of (rank, position); exact when
  // every pair a merge creates ranks after it (vocab.heap_exact), so ranks pop in order and
  // equal ranks pop left to right, as the reference merges them.
  std::size_t merge_heap(std::int32_t* s, std::size_t n) {
    const auto& m = vocab_->merges;
    struct cand {
      std::uint32_t rank;
      std::uint32_t pos, right;
      std::int32_t a, b, merged;
      bool operator>(const cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
    };
    prev_.resize(n);
    next_.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
      prev_[i] = std::uint32_t(i) - 1;  // wraps to UINT32_MAX for the first
      next_[i] = std::uint32_t(i + 1);
    }
    constexpr std::uint32_t none = std::numeric_limits<std::uint32_t>::max();
    const std::uint32_t nn = std::uint32_t(n);
    std::vector<cand> heap_storage;
    heap_storage.reserve(n);
    std::priority_queue<cand, std::vector<cand>, std::greater<>> heap(std::greater<>{}, std::move(heap_storage));
    auto push = [&](std::uint32_t i) {
      if (i == none || next_[i] >= nn) return;
      std::uint32_t j = next_[i];
      if (const auto* e = m.find(s[i], s[j])) heap.push({e->rank, i, j, s[i], s[j], e->merged});
    };
    for (std::uint32_t i = 0; i + 1 < nn; ++i) push(i);
    constexpr std::int32_t dead = -1;
    while (!heap.empty()) {
      cand c = heap.top();
      heap.pop();
      if (s[c.pos] != c.a || next_[c.pos] != c.right || c.right >= nn || s[c.right] != c.b) continue;
      s[c.pos] = c.merged;
      s[c.right] = dead;
      std::uint32_t after = next_[c.right];
      next_[c.pos] = after;
      if (after < nn) prev_[after] = c.pos;
      push(prev_[c.pos]);
      push(c.pos);
    }
    std::size_t w = 0;
    for (std::uint32_t i = 0; i < nn; i = next_[i]) s[w++] = s[i];
    return w;
  }

  std::shared_ptr<const detail::gpt2_vocab> vocab_;
  detail::piece_cache cache_;
  std::vector<std::int32_t> syms_;
  std::vector<std::uint32_t> prev_, next_;
};

}  // namespace sparselm::data
