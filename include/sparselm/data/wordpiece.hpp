#pragma once
// BERT's uncased WordPiece tokenizer, from a vocab.txt (one token per line, id = line number).
//
//   auto tok = sparselm::data::wordpiece::from_file(SPARSELM_SOURCE_DIR "/data/bert/vocab.txt");
//   std::vector<std::int32_t> ids = tok.encode("Héllo, world!");   // hello , world !
//   std::string text = tok.decode(ids);                            // "hello , world !"
//
// Pipeline (BERT's basic tokenizer, then WordPiece):
//   1. clean: drop U+0000, U+FFFD and control characters (General_Category C*, except tab, newline
//      and carriage return); white space (those three, space, Zs, U+2028/9) becomes a boundary;
//   2. every CJK ideograph is a word of its own;
//   3. each white-space separated word is lower-cased as Python's str.lower() does it (Σ becomes ς
//      after a cased and before no cased character, case-ignorable ones skipped) and its accents
//      stripped (NFD, Mn marks dropped), then split so that every punctuation character
//      (ASCII 33-47, 58-64, 91-96, 123-126, General_Category P*) is a word of its own;
//   4. WordPiece: each word longer than 100 code points is [UNK]; otherwise greedy longest match
//      from the left, continuation pieces prefixed "##"; a word with an unmatchable rest is [UNK].
// The Unicode data are generated tables (data/wordpiece_tables.hpp, scripts/gen_wordpiece_tables.py).
// Invalid UTF-8 is an error naming the byte offset.
//
// A wordpiece is immutable after loading; encode() is safe from several threads at once.

#include <algorithm>
#include <cstring>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "sparselm/core/error.hpp"
#include "sparselm/data/detail/gpt2_vocab.hpp"  // hash_bytes
#include "sparselm/data/text.hpp"
#include "sparselm/data/wordpiece_tables.hpp"

namespace sparselm::data {

namespace detail {

template <class Range, class Cls>
constexpr Cls wp_range_lookup(const Range* table, std::size_t n, char32_t cp, Cls none) noexcept {
  std::size_t lo = 0, hi = n;
  while (lo < hi) {
    const std::size_t mid = (lo + hi) / 2;
    if (cp < table[mid].first) hi = mid;
    else if (cp > table[mid].last) lo = mid + 1;
    else return table[mid].cls;
  }
  return none;
}

constexpr wp_class wp_class_lookup(char32_t cp) noexcept {
  return wp_range_lookup(wp_class_ranges, std::size(wp_class_ranges), cp, wp_class::other);
}

struct wp_ascii_table {
  wp_class cls[128];
  constexpr wp_ascii_table() : cls{} {
    for (char32_t c = 0; c < 128; ++c) cls[c] = wp_class_lookup(c);
  }
};
inline constexpr wp_ascii_table wp_ascii{};

constexpr wp_class wp_class_of(char32_t cp) noexcept { return cp < 128 ? wp_ascii.cls[cp] : wp_class_lookup(cp); }

inline wp_sigma wp_sigma_of(char32_t cp) noexcept {
  return wp_range_lookup(wp_sigma_ranges, std::size(wp_sigma_ranges), cp, wp_sigma::other);
}

// Canonical combining class of a code point that folding keeps (0 for all but a few Mc marks).
inline std::uint8_t wp_combining_class(char32_t cp) noexcept {
  if (cp < wp_combining_classes[0].cp) return 0;
  const auto* end = wp_combining_classes + std::size(wp_combining_classes);
  const auto* it = std::lower_bound(wp_combining_classes, end, cp, [](const wp_combining& c, char32_t x) { return c.cp < x; });
  return it != end && it->cp == cp ? it->ccc : 0;
}

// The fold table parsed once: code point -> 1..3 code points (lower-case, NFD, Mn dropped).
inline const std::unordered_map<char32_t, std::u32string>& wp_fold_map() {
  static const std::unordered_map<char32_t, std::u32string> map = [] {
    std::unordered_map<char32_t, std::u32string> m;
    std::string_view s(wp_folds);
    std::size_t i = 0;
    auto hex = [&](char stop1, char stop2) {
      char32_t v = 0;
      while (i < s.size() && s[i] != stop1 && s[i] != stop2) {
        const char c = s[i++];
        v = v * 16 + char32_t(c <= '9' ? c - '0' : c - 'A' + 10);
      }
      return v;
    };
    while (i < s.size()) {
      const char32_t cp = hex('>', '>');
      ++i;  // '>'
      std::u32string out;
      while (true) {
        out += hex('.', ';');
        if (s[i++] == ';') break;
      }
      m.emplace(cp, std::move(out));
    }
    return m;
  }();
  return map;
}

// Python's str.lower() turns the U+03A3 at word[i] into final sigma when a cased character
// precedes it and none follows it, case-ignorable characters skipped both ways.
inline bool wp_final_sigma(std::u32string_view word, std::size_t i) noexcept {
  std::size_t j = i;
  while (j > 0 && wp_sigma_of(word[j - 1]) == wp_sigma::case_ignorable) --j;
  if (j == 0 || wp_sigma_of(word[j - 1]) != wp_sigma::cased) return false;
  for (j = i + 1; j < word.size() && wp_sigma_of(word[j]) == wp_sigma::case_ignorable; ++j) {
  }
  return j == word.size() || wp_sigma_of(word[j]) != wp_sigma::cased;
}

// Appends the folded form of one non-ASCII code point that is not dropped (lower case, NFD,
// Mn marks dropped).
inline void wp_fold(char32_t cp, bool final_sigma, std::u32string& out) {
  if (cp >= 0xAC00 && cp <= 0xD7A3) {  // Hangul syllable: NFD to its two or three jamo
    const char32_t s = cp - 0xAC00;
    out += char32_t(0x1100 + s / 588);
    out += char32_t(0x1161 + (s % 588) / 28);
    if (s % 28) out += char32_t(0x11A7 + s % 28);
    return;
  }
  if (cp == 0x3A3 && final_sigma) {
    out += char32_t(0x3C2);
    return;
  }
  const auto& m = wp_fold_map();
  const auto it = m.find(cp);
  if (it == m.end()) out += cp;
  else out += it->second;
}

// out = the folded form of a white-space separated word: lower-cased as by Python's str.lower(),
// NFD, Mn marks dropped; the few marks that survive are put in canonical order as NFD of the
// whole word would (a stable sort by combining class within each run of non-starters).
inline void wp_fold_word(std::u32string_view word, std::u32string& out) {
  out.clear();
  std::size_t run = 0;  // where the current run of non-starters begins in out
  for (std::size_t i = 0; i < word.size(); ++i) {
    const char32_t cp = word[i];
    if (cp < 0x80) {
      out += (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
      run = out.size();
      continue;
    }
    const wp_class cls = wp_class_lookup(cp);
    if (cls == wp_class::drop) continue;
    if (cls == wp_class::drop_starter) {
      run = out.size();
      continue;
    }
    const std::size_t first = out.size();
    wp_fold(cp, cp == 0x3A3 && wp_final_sigma(word, i), out);
    for (std::size_t k = first; k < out.size(); ++k) {
      const std::uint8_t ccc = wp_combining_class(out[k]);
      if (ccc == 0) {
        run = k + 1;
        continue;
      }
      for (std::size_t j = k; j > run && wp_combining_class(out[j - 1]) > ccc; --j) std::swap(out[j - 1], out[j]);
    }
  }
}

// Token text -> id: open addressing with linear probing over a power-of-two table at most half
// full; a slot holds 32 bits of the key's hash and its entry number + 1 (0: empty), so a miss
// usually ends at the first slot without touching a key.
class wp_token_table {
 public:
  // Inserts key -> id; false (and no change) when the key is present.
  bool insert(std::string_view key, std::int32_t id) {
    if (2 * (entries_.size() + 1) > slots_.size()) grow();
    const std::uint64_t h = hash(key);
    std::size_t i = std::size_t(h) & mask_;
    for (; slots_[i].entry; i = (i + 1) & mask_)
      if (slots_[i].tag == std::uint32_t(h >> 32) && key_of(slots_[i].entry - 1) == key) return false;
    slots_[i] = {std::uint32_t(h >> 32), std::uint32_t(entries_.size() + 1)};
    entries_.push_back({pool_.size(), key.size(), id});
    pool_.append(key);
    return true;
  }
  // The id of key, or -1.
  std::int32_t find(std::string_view key) const noexcept {
    if (entries_.empty()) return -1;
    const std::uint64_t h = hash(key);
    for (std::size_t i = std::size_t(h) & mask_; slots_[i].entry; i = (i + 1) & mask_)
      if (slots_[i].tag == std::uint32_t(h >> 32) && key_of(slots_[i].entry - 1) == key)
        return entries_[slots_[i].entry - 1].id;
    return -1;
  }

 private:
  struct slot {
    std::uint32_t tag = 0, entry = 0;
  };
  struct entry {
    std::size_t offset, length;
    std::int32_t id;
  };
  static std::uint64_t hash(std::string_view s) noexcept { return hash_bytes(s); }
  std::string_view key_of(std::size_t e) const noexcept {
    return std::string_view(pool_).substr(entries_[e].offset, entries_[e].length);
  }
  void grow() {
    std::vector<slot> old(std::max<std::size_t>(64, 2 * slots_.size()));
    old.swap(slots_);
    mask_ = slots_.size() - 1;
    for (const slot& o : old)
      if (o.entry) {
        std::size_t i = std::size_t(hash(key_of(o.entry - 1))) & mask_;
        while (slots_[i].entry) i = (i + 1) & mask_;
        slots_[i] = o;
      }
  }

  std::vector<slot> slots_;
  std::vector<entry> entries_;
  std::string pool_;
  std::size_t mask_ = 0;
};

}  // namespace detail

// The byte offset of the first byte that does not start a well-formed UTF-8 character, or npos.
inline std::size_t invalid_utf8_offset(std::string_view text) noexcept {
  const auto* const base = reinterpret_cast<const unsigned char*>(text.data());
  const auto* const end = base + text.size();
  for (const auto* p = base; p < end;) {
    if (*p < 0x80) {
      ++p;
      continue;
    }
    const utf8_char c = read_utf8(p, end);
    if (c.invalid) return std::size_t(p - base);
    p += c.length;
  }
  return std::string_view::npos;
}

class wordpiece {
 public:
  static constexpr std::size_t max_word_chars = 100;

  // Builds the vocabulary from vocab.txt's text (one token per line; `name` names it in errors).
  static wordpiece from_text(std::string_view text, const std::string& name) {
    wordpiece w;
    auto v = std::make_shared<vocab>();
    std::size_t line = 1, start = 0;
    while (start < text.size()) {
      std::size_t end = text.find('\n', start);
      if (end == std::string_view::npos) end = text.size();
      std::string_view tok = text.substr(start, end - start);
      if (!tok.empty() && tok.back() == '\r') tok.remove_suffix(1);
      SPARSELM_CHECK(!tok.empty(), name, ": line ", line, " is empty (every line must hold one token)");
      const auto id = std::int32_t(v->tokens.size());
      if (!v->ids.insert(tok, id))
        fail(name, ": line ", line, ": token '", tok, "' is a duplicate of line ", v->ids.find(tok) + 1);
      if (tok.size() > 2 && tok.starts_with("##")) v->continuations.insert(tok.substr(2), id);
      else v->initials.insert(tok, id);
      v->max_bytes = std::max(v->max_bytes, tok.size());
      v->tokens.emplace_back(tok);
      start = end + 1;
      ++line;
    }
    SPARSELM_CHECK(!v->tokens.empty(), name, ": the vocabulary is empty");
    for (const char* special : {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"})
      SPARSELM_CHECK(v->ids.find(special) >= 0, name, ": the special token ", special, " is missing");
    v->unk = v->ids.find("[UNK]");
    w.v_ = std::move(v);
    return w;
  }
  static wordpiece from_file(const std::filesystem::path& path) {
    return from_text(read_file_bytes(path, "vocabulary", max_vocab_bytes), path.string());
  }

  std::size_t size() const noexcept { return v_->tokens.size(); }
  // The id of a token, or -1.
  std::int32_t id(std::string_view token) const { return v_->ids.find(token); }
  std::int32_t unk_id() const noexcept { return v_->unk; }
  std::int32_t cls_id() const { return id("[CLS]"); }
  std::int32_t sep_id() const { return id("[SEP]"); }
  std::int32_t mask_id() const { return id("[MASK]"); }
  std::int32_t pad_id() const { return id("[PAD]"); }
  const std::string& token(std::int32_t id) const {
    SPARSELM_CHECK(id >= 0 && std::size_t(id) < v_->tokens.size(), "wordpiece: token id ", id,
                   " is outside the vocabulary of ", v_->tokens.size());
    return v_->tokens[std::size_t(id)];
  }

  // The words of BERT's basic tokenizer (steps 1-3 above), as UTF-8 strings.
  std::vector<std::string> basic_tokens(std::string_view text) const {
    std::vector<std::string> out;
    for_each_word(text, [&](std::string_view w, std::size_t) { out.emplace_back(w); });
    return out;
  }

  // Token ids of text (no [CLS] / [SEP] added).
  std::vector<std::int32_t> encode(std::string_view text) const {
    std::vector<std::int32_t> ids;
    encode(text, ids);
    return ids;
  }
  // Appends the ids of text to ids.
  void encode(std::string_view text, std::vector<std::int32_t>& ids) const {
    for_each_word(text, [&](std::string_view w, std::size_t chars) { word_pieces(w, chars, ids); });
  }

  // Tokens joined by spaces, "##" continuations glued to the previous token.
  std::string decode(std::span<const std::int32_t> ids) const {
    std::string s;
    for (auto id : ids) {
      const std::string& t = token(id);
      if (t.size() > 2 && t[0] == '#' && t[1] == '#' && !s.empty()) {
        s.append(t, 2);
      } else {
        if (!s.empty()) s += ' ';
        s += t;
      }
    }
    return s;
  }

 private:
  struct vocab {
    std::vector<std::string> tokens;
    detail::wp_token_table ids;                       // every token
    detail::wp_token_table initials, continuations;  // tokens that start a word; "##" tokens without "##"
    std::size_t max_bytes = 0;                     // the longest token
    std::int32_t unk = 0;
  };

  // Calls f(word, code points) for each word (UTF-8) after cleaning, CJK splitting, folding and
  // punctuation splitting.
  template <class F>
  static void for_each_word(std::string_view text, F&& f) {
    const auto* const base = reinterpret_cast<const unsigned char*>(text.data());
    const auto* const end = base + text.size();
    std::u32string raw, folded;
    std::string word;
    std::size_t chars = 0;
    auto emit = [&] {
      if (chars) f(std::string_view(word), chars);
      word.clear();
      chars = 0;
    };
    auto flush_raw = [&] {
      if (raw.empty()) return;
      detail::wp_fold_word(raw, folded);
      raw.clear();
      for (char32_t c : folded) {
        if (detail::wp_class_of(c) == detail::wp_class::punct) {
          emit();
          append_utf8(word, c);
          chars = 1;
          emit();
        } else {
          append_utf8(word, c);
          ++chars;
        }
      }
      emit();
    };
    for (const auto* p = base; p < end;) {
      const utf8_char c = read_utf8(p, end);
      SPARSELM_CHECK(!c.invalid, "wordpiece: invalid UTF-8 at byte ", p - base, " (0x", std::hex, int(*p), ")");
      p += c.length;
      const char32_t cp = c.code_point;
      switch (detail::wp_class_of(cp)) {
        case detail::wp_class::control: break;
        case detail::wp_class::space: flush_raw(); break;
        case detail::wp_class::cjk:
          flush_raw();
          raw.assign(1, cp);
          flush_raw();
          break;
        default: raw += cp;
      }
    }
    flush_raw();
  }

  // Greedy longest-match-first pieces of one word (UTF-8, `chars` code points).
  void word_pieces(std::string_view w, std::size_t chars, std::vector<std::int32_t>& ids) const {
    if (chars > max_word_chars) {
      ids.push_back(v_->unk);
      return;
    }
    auto boundary = [&](std::size_t i) { return i == w.size() || (static_cast<unsigned char>(w[i]) & 0xC0) != 0x80; };
    const std::size_t first = ids.size();
    for (std::size_t start = 0; start < w.size();) {
      const detail::wp_token_table& table = start ? v_->continuations : v_->initials;
      std::size_t end = std::min(w.size(), start + v_->max_bytes);  // no longer piece is in the vocabulary
      while (!boundary(end)) --end;
      std::int32_t found = -1;
      for (; end > start;) {
        found = table.find(w.substr(start, end - start));
        if (found >= 0) break;
        do --end;
        while (!boundary(end));
      }
      if (found < 0) {  // unmatchable rest: the whole word is [UNK]
        ids.resize(first);
        ids.push_back(v_->unk);
        return;
      }
      ids.push_back(found);
      start = end;
    }
  }

  std::shared_ptr<const vocab> v_;
};

}  // namespace sparselm::data
