#pragma once
// SQuAD v1.1 scoring: the answer normalisation of the official v1.1 evaluation, exact match and
// token-bag F1, the maximum over a question's ground-truth answers, and totals in percent.
//
// Normalisation, in this order (as the official script does):
//   1. lowercase (ASCII letters; other letters are kept as they are, see below);
//   2. remove every ASCII punctuation character (Python's string.punctuation, the 32 characters
//      !"#$%&'()*+,-./:;<=>?@[\]^_`{|}~);
//   3. replace the articles "a", "an", "the" by a space when they stand as whole words, i.e. as a
//      maximal run of word characters (word character = Unicode letter or number, or '_', which
//      is what Python's Unicode \b uses);
//   4. split on white space and join the pieces with one space.
// Exact match: the normalised strings are equal. F1: over the bags of normalised tokens,
// common = size of the multiset intersection; 0 when common = 0, else 2PR/(P+R) with
// P = common/|prediction tokens|, R = common/|truth tokens|.
//
// Known difference from Python: step 1 lowercases ASCII only (Python's str.lower also folds
// non-ASCII capitals such as 'É'). Texts are read as UTF-8 with text.hpp's reader (invalid bytes
// are kept as characters of class `other`).
//
//   sparselm::data::squad_normalize("The Cat's hat!")        == "cats hat"
//   sparselm::data::squad_f1("the white whale", "whale")    == 2/3
//   sparselm::data::squad_score(pred, {"truth 1", "truth 2"}) -> {exact, f1} maxima

#include <algorithm>
#include <cstddef>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "sparselm/data/text.hpp"

namespace sparselm::data {

namespace detail {

constexpr bool squad_ascii_punct(char32_t c) noexcept {
  return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) ||
         (c >= 0x7B && c <= 0x7E);
}

// Python's str.split() white space: the White_Space property plus U+001C..U+001F.
constexpr bool squad_space(char32_t cp, char_class cls) noexcept {
  return cls == char_class::whitespace || (cp >= 0x1C && cp <= 0x1F);
}

constexpr bool squad_word(char32_t cp, char_class cls) noexcept {
  return cls == char_class::letter || cls == char_class::number || cp == U'_';
}

}  // namespace detail

// The normalised tokens of a text (steps 1-4 above, before the final join).
inline std::vector<std::string> squad_tokens(std::string_view text) {
  struct piece {
    std::string bytes;
    bool word, space;
  };
  // Steps 1 and 2: characters after lowercasing and punctuation removal.
  std::vector<piece> chars;
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const auto* end = p + text.size();
  while (p < end) {
    const utf8_char c = read_utf8(p, end);
    if (c.length == 1 && !c.invalid) {
      char32_t a = c.code_point;
      if (!detail::squad_ascii_punct(a)) {
        if (a >= U'A' && a <= U'Z') a = a - U'A' + U'a';
        chars.push_back({std::string(1, char(a)), detail::squad_word(a, c.cls), detail::squad_space(a, c.cls)});
      }
    } else {
      chars.push_back({std::string(reinterpret_cast<const char*>(p), c.length), !c.invalid && detail::squad_word(c.code_point, c.cls),
                       !c.invalid && detail::squad_space(c.code_point, c.cls)});
    }
    p += c.length;
  }
  // Step 3: maximal word runs equal to an article become one space.
  std::vector<piece> out;
  for (std::size_t i = 0; i < chars.size();) {
    if (!chars[i].word) {
      out.push_back(std::move(chars[i++]));
      continue;
    }
    std::size_t j = i;
    std::string run;
    while (j < chars.size() && chars[j].word) run += chars[j++].bytes;
    if (run == "a" || run == "an" || run == "the") {
      out.push_back({" ", false, true});
    } else {
      for (std::size_t k = i; k < j; ++k) out.push_back(std::move(chars[k]));
    }
    i = j;
  }
  // Step 4: split on white space.
  std::vector<std::string> tokens;
  std::string cur;
  for (const piece& c : out) {
    if (c.space) {
      if (!cur.empty()) tokens.push_back(std::move(cur));
      cur.clear();
    } else {
      cur += c.bytes;
    }
  }
  if (!cur.empty()) tokens.push_back(std::move(cur));
  return tokens;
}

// The normalised text: the tokens joined by single spaces.
inline std::string squad_normalize(std::string_view text) {
  std::string s;
  for (const std::string& t : squad_tokens(text)) {
    if (!s.empty()) s += ' ';
    s += t;
  }
  return s;
}

inline bool squad_exact_match(std::string_view prediction, std::string_view truth) {
  return squad_normalize(prediction) == squad_normalize(truth);
}

// Token-bag F1 in [0, 1].
inline double squad_f1(std::string_view prediction, std::string_view truth) {
  const std::vector<std::string> pt = squad_tokens(prediction), tt = squad_tokens(truth);
  std::map<std::string, std::size_t> bag;
  for (const std::string& t : tt) ++bag[t];
  std::size_t common = 0;
  for (const std::string& t : pt) {
    auto it = bag.find(t);
    if (it != bag.end() && it->second > 0) {
      --it->second;
      ++common;
    }
  }
  if (common == 0) return 0.0;
  const double precision = double(common) / double(pt.size());
  const double recall = double(common) / double(tt.size());
  return 2.0 * precision * recall / (precision + recall);
}

// Scores of one prediction: the maxima over the ground truths (exact match as 0 or 1).
struct squad_question_score {
  double exact_match = 0.0;
  double f1 = 0.0;
};

inline squad_question_score squad_score(std::string_view prediction, const std::vector<std::string>& truths) {
  squad_question_score s;
  for (const std::string& t : truths) {
    s.exact_match = std::max(s.exact_match, squad_exact_match(prediction, t) ? 1.0 : 0.0);
    s.f1 = std::max(s.f1, squad_f1(prediction, t));
  }
  return s;
}

// Totals over a set of questions, in percent of `questions`. A question without a prediction
// scores 0 on both and is counted in `unanswered` (as the official script does).
struct squad_totals {
  double exact_match = 0.0;  // percent
  double f1 = 0.0;           // percent
  std::size_t questions = 0;
  std::size_t unanswered = 0;
};

struct squad_graded_question {
  std::string id;
  std::vector<std::string> answers;  // ground-truth texts
};

inline squad_totals squad_evaluate(const std::vector<squad_graded_question>& questions,
                                   const std::map<std::string, std::string>& predictions) {
  squad_totals t;
  double em = 0.0, f1 = 0.0;
  for (const squad_graded_question& q : questions) {
    ++t.questions;
    auto it = predictions.find(q.id);
    if (it == predictions.end()) {
      ++t.unanswered;
      continue;
    }
    const squad_question_score s = squad_score(it->second, q.answers);
    em += s.exact_match;
    f1 += s.f1;
  }
  if (t.questions > 0) {
    t.exact_match = 100.0 * em / double(t.questions);
    t.f1 = 100.0 * f1 / double(t.questions);
  }
  return t;
}

}  // namespace sparselm::data
