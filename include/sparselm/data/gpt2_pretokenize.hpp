#pragma once
// GPT-2's pre-tokenisation, implemented by hand (no regex engine):
//     's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// with \p{L}, \p{N} and \s (the White_Space property) from a generated table
// (data/unicode_tables.hpp). Part of the GPT-2 tokenizer (data/gpt2_bpe.hpp).

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "sparselm/core/error.hpp"
#include "sparselm/data/text.hpp"

namespace sparselm::data {

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

}  // namespace sparselm::data
