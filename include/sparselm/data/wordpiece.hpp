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
//   3. each white-space separated word is lower-cased (Σ becomes ς at the end of a word) and its
//      accents stripped (NFD, Mn marks dropped), then split so that every punctuation character
//      (ASCII 33-47, 58-64, 91-96, 123-126, General_Category P*) is a word of its own;
//   4. WordPiece: each word longer than 100 code points is [UNK]; otherwise greedy longest match
//      from the left, continuation pieces prefixed "##"; a word with an unmatchable rest is [UNK].
// The Unicode data are generated tables (data/wordpiece_tables.hpp, scripts/gen_wordpiece_tables.py).
// Invalid UTF-8 is an error naming the byte offset.
//
// A wordpiece is immutable after loading; encode() is safe from several threads at once.

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "sparselm/core/error.hpp"
#include "sparselm/data/text.hpp"
#include "sparselm/data/wordpiece_tables.hpp"

namespace sparselm::data {

namespace detail {

inline wp_class wp_class_of(char32_t cp) noexcept {
  const auto* end = wp_class_ranges + std::size(wp_class_ranges);
  const auto* it = std::upper_bound(wp_class_ranges, end, cp, [](char32_t c, const wp_range& r) { return c < r.first; });
  if (it == wp_class_ranges) return wp_class::other;
  --it;
  return cp <= it->last ? it->cls : wp_class::other;
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

inline bool wp_cjk(char32_t cp) noexcept { return wp_class_of(cp) == wp_class::cjk; }
inline bool wp_space(char32_t cp) noexcept { return wp_class_of(cp) == wp_class::space; }
inline bool wp_punct(char32_t cp) noexcept { return wp_class_of(cp) == wp_class::punct; }

// Appends the folded form of one code point (lower case, accents stripped) to out. `final_sigma`:
// Σ at the end of a word after a letter lower-cases to ς.
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
  if (cp < 0x80) {
    out += (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
    return;
  }
  if (wp_class_of(cp) == wp_class::drop) return;
  const auto& m = wp_fold_map();
  const auto it = m.find(cp);
  if (it == m.end()) out += cp;
  else out += it->second;
}

inline bool wp_letter(char32_t cp) noexcept { return classify_code_point(cp) == char_class::letter; }

}  // namespace detail

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
      SPARSELM_CHECK(v->ids.emplace(std::string(tok), id).second, name, ": line ", line, ": token '", tok,
                     "' is a duplicate of line ", v->ids.at(std::string(tok)) + 1);
      v->tokens.emplace_back(tok);
      start = end + 1;
      ++line;
    }
    SPARSELM_CHECK(!v->tokens.empty(), name, ": the vocabulary is empty");
    for (const char* special : {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"})
      SPARSELM_CHECK(v->ids.contains(special), name, ": the special token ", special, " is missing");
    v->unk = v->ids.at("[UNK]");
    w.v_ = std::move(v);
    return w;
  }
  static wordpiece from_file(const std::filesystem::path& path) {
    return from_text(read_file_bytes(path), path.string());
  }

  std::size_t size() const noexcept { return v_->tokens.size(); }
  // The id of a token, or -1.
  std::int32_t id(std::string_view token) const {
    const auto it = v_->ids.find(std::string(token));
    return it == v_->ids.end() ? -1 : it->second;
  }
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
    for_each_word(text, [&](const std::u32string& w) { out.push_back(utf8(w)); });
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
    std::string piece;
    for_each_word(text, [&](const std::u32string& w) { word_pieces(w, ids, piece); });
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
    std::unordered_map<std::string, std::int32_t> ids;
    std::int32_t unk = 0;
  };

  static std::string utf8(std::u32string_view w) {
    std::string s;
    for (char32_t c : w) append_utf8(s, c);
    return s;
  }

  // Calls f(word) for each word after cleaning, CJK splitting, folding and punctuation splitting.
  template <class F>
  static void for_each_word(std::string_view text, F&& f) {
    const auto* const base = reinterpret_cast<const unsigned char*>(text.data());
    const auto* const end = base + text.size();
    std::u32string raw, folded, word;
    auto flush_raw = [&] {
      if (raw.empty()) return;
      folded.clear();
      for (std::size_t i = 0; i < raw.size(); ++i) {
        const bool final_sigma = raw[i] == 0x3A3 && i > 0 && detail::wp_letter(raw[i - 1]) &&
                                 (i + 1 == raw.size() || !detail::wp_letter(raw[i + 1]));
        detail::wp_fold(raw[i], final_sigma, folded);
      }
      raw.clear();
      for (char32_t c : folded) {
        if (detail::wp_punct(c)) {
          if (!word.empty()) f(word);
          word.assign(1, c);
          f(word);
          word.clear();
        } else {
          word += c;
        }
      }
      if (!word.empty()) f(word);
      word.clear();
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
        default:
          if (cp == 0 || cp == 0xFFFD) break;
          raw += cp;
      }
    }
    flush_raw();
  }

  // Greedy longest-match-first pieces of one word.
  void word_pieces(const std::u32string& w, std::vector<std::int32_t>& ids, std::string& piece) const {
    if (w.size() > max_word_chars) {
      ids.push_back(v_->unk);
      return;
    }
    // byte offset of each code point in the word's UTF-8
    const std::string s = utf8(w);
    std::vector<std::size_t> off;
    off.reserve(w.size() + 1);
    for (std::size_t i = 0, b = 0; i < w.size(); ++i) {
      off.push_back(b);
      b += w[i] < 0x80 ? 1 : w[i] < 0x800 ? 2 : w[i] < 0x10000 ? 3 : 4;
    }
    off.push_back(s.size());
    const std::size_t first = ids.size();
    for (std::size_t start = 0; start < w.size();) {
      std::size_t end = w.size();
      std::int32_t found = -1;
      for (; end > start; --end) {
        piece.assign(start > 0 ? "##" : "");
        piece.append(s, off[start], off[end] - off[start]);
        const auto it = v_->ids.find(piece);
        if (it != v_->ids.end()) {
          found = it->second;
          break;
        }
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
