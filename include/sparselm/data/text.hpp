#pragma once
// Text primitives shared by the tokenizers: a UTF-8 reader that never fails, the character
// classes of GPT-2's pre-tokenisation rule, and small file helpers.
//
// Invalid UTF-8. A byte sequence is read as a code point only when it is a well-formed UTF-8
// encoding (Unicode Table 3-7: shortest form, no surrogates, at most U+10FFFF). Otherwise the
// first byte alone is an *invalid byte*: a one-byte character of class `other`, and reading
// resumes at the next byte. This is what Python gives for `bytes.decode("utf-8",
// "surrogateescape")` (each invalid byte becomes one lone surrogate, class Cs, which is neither a
// letter, a number nor white space), so a byte-level tokenizer built on it accepts any input.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>

#include "sparselm/core/error.hpp"
#include "sparselm/core/input_file.hpp"
#include "sparselm/io/atomic_file.hpp"
#include "sparselm/data/unicode_tables.hpp"

namespace sparselm::data {

using detail::char_class;

namespace detail {

// Class of a code point by binary search in the generated range table.
constexpr char_class classify_code_point(char32_t cp) noexcept {
  std::size_t lo = 0, hi = std::size(unicode_class_ranges);
  while (lo < hi) {
    std::size_t mid = (lo + hi) / 2;
    const auto& r = unicode_class_ranges[mid];
    if (cp < r.first) hi = mid;
    else if (cp > r.last) lo = mid + 1;
    else return r.cls;
  }
  return char_class::other;
}

struct ascii_class_table {
  char_class cls[128];
  constexpr ascii_class_table() : cls{} {
    for (char32_t c = 0; c < 128; ++c) cls[c] = classify_code_point(c);
  }
};
inline constexpr ascii_class_table ascii_classes{};

}  // namespace detail

// One character as read from UTF-8 text: its length in bytes (1..4), its class, its code point
// (meaningless when `invalid`).
struct utf8_char {
  std::uint32_t length;
  char_class cls;
  bool invalid;
  char32_t code_point;
};

// Reads the character starting at p (p < end). Never fails: see the note on invalid UTF-8 above.
inline utf8_char read_utf8(const unsigned char* p, const unsigned char* end) noexcept {
  const unsigned b0 = p[0];
  if (b0 < 0x80) return {1, detail::ascii_classes.cls[b0], false, char32_t(b0)};
  const std::ptrdiff_t avail = end - p;
  auto cont = [&](std::ptrdiff_t k, unsigned lo = 0x80, unsigned hi = 0xBF) {
    return k < avail && p[k] >= lo && p[k] <= hi;
  };
  char32_t cp = 0;
  std::uint32_t len = 0;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    if (cont(1)) { cp = ((b0 & 0x1Fu) << 6) | (p[1] & 0x3Fu); len = 2; }
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    const unsigned lo = b0 == 0xE0 ? 0xA0 : 0x80, hi = b0 == 0xED ? 0x9F : 0xBF;
    if (cont(1, lo, hi) && cont(2)) {
      cp = ((b0 & 0x0Fu) << 12) | ((p[1] & 0x3Fu) << 6) | (p[2] & 0x3Fu);
      len = 3;
    }
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    const unsigned lo = b0 == 0xF0 ? 0x90 : 0x80, hi = b0 == 0xF4 ? 0x8F : 0xBF;
    if (cont(1, lo, hi) && cont(2) && cont(3)) {
      cp = ((b0 & 0x07u) << 18) | ((p[1] & 0x3Fu) << 12) | ((p[2] & 0x3Fu) << 6) | (p[3] & 0x3Fu);
      len = 4;
    }
  }
  if (len == 0) return {1, char_class::other, true, char32_t(b0)};
  return {len, detail::classify_code_point(cp), false, cp};
}

// Appends the UTF-8 encoding of a code point (cp <= U+10FFFF, not a surrogate).
inline void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

// Reads a whole file as bytes (core/input_file.hpp's read_input: a regular file of at most
// `max_bytes`); sparselm::error names the file when it cannot be read, is not a regular file (a
// FIFO would block, a device never end) or is over the limit.
inline std::string read_file_bytes(const std::filesystem::path& path, const char* what = "text file",
                                   std::uint64_t max_bytes = max_text_bytes) {
  return read_input(path, what, max_bytes);
}

// 1-based line number of byte offset `pos` in `text` (for error messages).
inline std::size_t line_of_offset(std::string_view text, std::size_t pos) {
  std::size_t line = 1;
  for (std::size_t i = 0; i < pos && i < text.size(); ++i) line += text[i] == '\n';
  return line;
}

}  // namespace sparselm::data
