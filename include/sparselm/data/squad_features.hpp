#pragma once
// SQuAD features for BERT fine-tuning and the post-processing of its start/end logits, following
// the rules of the reference BERT run_squad:
//
//   - the context is split into whitespace words (space, tab, CR, LF, U+202F); each word is
//     WordPiece-tokenized; tok_to_word maps every context token back to its word;
//   - the question is tokenized and cut to max_query_tokens (64);
//   - windows of at most max_seq - |question| - 3 context tokens start every doc_stride (128)
//     tokens until one reaches the end: [CLS] question [SEP] window [SEP], segment 0 up to and
//     including the first [SEP], 1 after; padded with [PAD] (mask 0) to max_seq (384);
//   - max_context[i]: the window in which context token i has the largest
//     min(left context, right context) + 0.01 * window length (the first on ties);
//   - training answer: the word span of the answer, as tokens, narrowed to the tokens of the
//     tokenized answer text when they occur inside it; a window that does not contain the whole
//     span gets start = end = 0 ([CLS]).
//
// Post-processing (squad_best_answers): per feature the n_best (20) highest start and end logits;
// a pair is kept when both positions are context tokens of the window, start is in its max-context
// window, start <= end and end - start + 1 <= max_answer_tokens (30); candidates of all windows of
// a question are ranked by start + end logit; the answer is the original context words from the
// start token's word to the end token's word, joined by single spaces, trimmed to the predicted
// tokens as run_squad's get_final_text does ("(1851)." -> "1851"; see squad_final_text).
//
//   auto examples = sparselm::data::squad_examples(dataset);
//   auto feats = sparselm::data::squad_features(examples, wp, {}, /*training=*/true);
//   auto preds = sparselm::data::squad_best_answers(wp, examples, feats, start_logits, end_logits, {});

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sparselm/core/error.hpp"
#include "sparselm/data/squad.hpp"
#include "sparselm/data/text.hpp"
#include "sparselm/data/wordpiece.hpp"

namespace sparselm::data {

struct squad_feature_options {
  std::size_t max_seq = 384;
  std::size_t max_query_tokens = 64;
  std::size_t doc_stride = 128;
};

struct squad_feature {
  std::size_t question = 0;  // index into squad_examples()
  std::size_t window = 0;    // window number within the question
  std::vector<std::int32_t> ids, segments, mask;  // max_seq each
  std::map<std::size_t, std::size_t> token_to_word;  // position -> context word, for context tokens
  std::map<std::size_t, bool> max_context;           // position -> max-context flag, for context tokens
  std::size_t start = 0, end = 0;                    // training targets (0, 0: not in this window)
};

// One question with its context split into words, in dataset order. Points into the
// squad_dataset it was made from, which must outlive it.
struct squad_example {
  const squad_question* question = nullptr;
  std::vector<std::string> words;        // whitespace words of the context
  std::vector<std::size_t> char_to_word;  // byte offset in the context -> word index
};

namespace detail {

inline bool squad_ws(char32_t c) { return c == U' ' || c == U'\t' || c == U'\r' || c == U'\n' || c == 0x202F; }

inline void squad_split_words(const std::string& context, squad_example& e) {
  e.char_to_word.assign(context.size(), 0);
  const auto* b = reinterpret_cast<const unsigned char*>(context.data());
  bool prev_ws = true;
  for (std::size_t i = 0; i < context.size();) {
    const utf8_char c = read_utf8(b + i, b + context.size());
    const bool ws = !c.invalid && squad_ws(c.code_point);
    if (!ws) {
      if (prev_ws) e.words.emplace_back();
      e.words.back().append(context, i, c.length);
    }
    prev_ws = ws;
    for (std::size_t k = 0; k < c.length; ++k) e.char_to_word[i + k] = e.words.empty() ? 0 : e.words.size() - 1;
    i += c.length;
  }
}

}  // namespace detail

// Every question of the dataset with its context words, in dataset order.
inline std::vector<squad_example> squad_examples(const squad_dataset& d) {
  std::vector<squad_example> out;
  for (const auto& a : d.articles)
    for (const auto& p : a.paragraphs) {
      squad_example base;
      detail::squad_split_words(p.context, base);
      for (const auto& q : p.questions) {
        squad_example e = base;
        e.question = &q;
        out.push_back(std::move(e));
      }
    }
  return out;
}

inline std::vector<squad_feature> squad_features(const std::vector<squad_example>& examples, const wordpiece& wp,
                                                 const squad_feature_options& o, bool training) {
  SPARSELM_CHECK(o.doc_stride > 0, "squad features: doc_stride must be > 0");
  std::vector<squad_feature> out;
  for (std::size_t qi = 0; qi < examples.size(); ++qi) {
    const squad_example& ex = examples[qi];
    std::vector<std::int32_t> q = wp.encode(ex.question->question);
    if (q.size() > o.max_query_tokens) q.resize(o.max_query_tokens);
    std::vector<std::int32_t> doc;
    std::vector<std::size_t> tok_to_word, word_to_tok;
    for (std::size_t w = 0; w < ex.words.size(); ++w) {
      word_to_tok.push_back(doc.size());
      for (std::int32_t id : wp.encode(ex.words[w])) {
        doc.push_back(id);
        tok_to_word.push_back(w);
      }
    }
    word_to_tok.push_back(doc.size());
    // Training answer span in context tokens (the first answer).
    std::size_t tok_start = 0, tok_end = 0;
    bool has_answer = false;
    if (training && !doc.empty()) {
      const squad_answer& a = ex.question->answers.at(0);
      const std::size_t w0 = ex.char_to_word.at(a.start_byte);
      const std::size_t w1 = ex.char_to_word.at(a.start_byte + a.text.size() - 1);
      tok_start = word_to_tok[w0];
      tok_end = word_to_tok[w1 + 1] - 1;
      has_answer = tok_start <= tok_end && word_to_tok[w1 + 1] > 0;
      const std::vector<std::int32_t> ans = wp.encode(a.text);
      bool narrowed = false;
      for (std::size_t s = tok_start; has_answer && !narrowed && s <= tok_end; ++s)
        for (std::size_t e = tok_end + 1; e-- > s;)
          if (e - s + 1 == ans.size() && std::equal(ans.begin(), ans.end(), doc.begin() + std::ptrdiff_t(s))) {
            tok_start = s, tok_end = e, narrowed = true;
            break;
          }
    }
    SPARSELM_CHECK(q.size() + 4 <= o.max_seq, "squad features: question ", ex.question->id, " has ", q.size(),
                   " tokens, which leave no room for the context in max_seq ", o.max_seq);
    const std::size_t max_doc = o.max_seq - q.size() - 3;
    struct span {
      std::size_t start, length;
    };
    std::vector<span> spans;
    for (std::size_t s = 0; s < doc.size() || spans.empty();) {
      const std::size_t len = std::min(doc.size() - s, max_doc);
      spans.push_back({s, len});
      if (s + len >= doc.size()) break;
      s += std::min(len, o.doc_stride);
    }
    for (std::size_t wi = 0; wi < spans.size(); ++wi) {
      const span sp = spans[wi];
      squad_feature f;
      f.question = qi;
      f.window = wi;
      f.ids.push_back(wp.cls_id());
      f.ids.insert(f.ids.end(), q.begin(), q.end());
      f.ids.push_back(wp.sep_id());
      f.segments.assign(f.ids.size(), 0);
      const std::size_t offset = f.ids.size();
      for (std::size_t k = 0; k < sp.length; ++k) {
        const std::size_t t = sp.start + k;
        f.token_to_word[f.ids.size()] = tok_to_word[t];
        // max context: the window where min(left, right) + 0.01 * length is largest
        std::size_t best = 0;
        double best_score = -1.0;
        for (std::size_t j = 0; j < spans.size(); ++j) {
          const span& o2 = spans[j];
          if (t < o2.start || t >= o2.start + o2.length) continue;
          const double score =
              double(std::min(t - o2.start, o2.start + o2.length - 1 - t)) + 0.01 * double(o2.length);
          if (score > best_score) best_score = score, best = j;
        }
        f.max_context[f.ids.size()] = best == wi;
        f.ids.push_back(doc[t]);
        f.segments.push_back(1);
      }
      f.ids.push_back(wp.sep_id());
      f.segments.push_back(1);
      f.mask.assign(f.ids.size(), 1);
      f.ids.resize(o.max_seq, wp.pad_id());
      f.segments.resize(o.max_seq, 0);
      f.mask.resize(o.max_seq, 0);
      if (has_answer && sp.length > 0 && tok_start >= sp.start && tok_end < sp.start + sp.length) {
        f.start = tok_start - sp.start + offset;
        f.end = tok_end - sp.start + offset;
      }
      out.push_back(std::move(f));
    }
  }
  return out;
}

namespace detail {

// Text without spaces and, for each of its bytes, the byte offset in `text`.
inline std::string squad_strip_spaces(std::string_view text, std::vector<std::size_t>& map) {
  std::string out;
  map.clear();
  for (std::size_t i = 0; i < text.size(); ++i)
    if (text[i] != ' ') {
      out += text[i];
      map.push_back(i);
    }
  return out;
}

}  // namespace detail

// run_squad's get_final_text: the part of the original words `orig` that the predicted tokens
// (`pred`, their decoded text) cover. orig's basic tokens joined by spaces must contain pred, and
// orig without spaces must be as long (in bytes) as those tokens without spaces; otherwise orig.
inline std::string squad_final_text(const wordpiece& wp, std::string_view pred, std::string_view orig) {
  std::string tok_text;
  for (const std::string& t : wp.basic_tokens(orig)) tok_text += (tok_text.empty() ? "" : " ") + t;
  const std::size_t start = tok_text.find(pred);
  if (pred.empty() || start == std::string::npos) return std::string(orig);
  const std::size_t end = start + pred.size() - 1;
  std::vector<std::size_t> orig_map, tok_map;
  const std::string orig_ns = detail::squad_strip_spaces(orig, orig_map);
  const std::string tok_ns = detail::squad_strip_spaces(tok_text, tok_map);
  if (orig_ns.size() != tok_ns.size()) return std::string(orig);
  const auto ns_of = [&](std::size_t pos) -> std::ptrdiff_t {
    const auto it = std::lower_bound(tok_map.begin(), tok_map.end(), pos);
    return it != tok_map.end() && *it == pos ? it - tok_map.begin() : -1;
  };
  const std::ptrdiff_t a = ns_of(start), b = ns_of(end);
  if (a < 0 || b < 0) return std::string(orig);
  return std::string(orig.substr(orig_map[std::size_t(a)], orig_map[std::size_t(b)] - orig_map[std::size_t(a)] + 1));
}

struct squad_postprocess_options {
  std::size_t n_best = 20;
  std::size_t max_answer_tokens = 30;
};

// Best answer text per question id. logits[f] holds max_seq values for feature f.
inline std::map<std::string, std::string> squad_best_answers(const wordpiece& wp,
                                                             const std::vector<squad_example>& examples,
                                                             const std::vector<squad_feature>& features,
                                                             const std::vector<std::vector<float>>& start_logits,
                                                             const std::vector<std::vector<float>>& end_logits,
                                                             const squad_postprocess_options& o) {
  SPARSELM_CHECK(start_logits.size() == features.size() && end_logits.size() == features.size(),
                 "squad post-processing: ", features.size(), " features but ", start_logits.size(), " start and ",
                 end_logits.size(), " end logit rows");
  struct cand {
    double score;
    std::size_t w0, w1, feature, s, e;
  };
  std::vector<std::vector<cand>> per_q(examples.size());
  auto top = [&](const std::vector<float>& v) {
    std::vector<std::size_t> idx(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) idx[i] = i;
    const std::size_t k = std::min(o.n_best, idx.size());
    std::partial_sort(idx.begin(), idx.begin() + std::ptrdiff_t(k), idx.end(),
                      [&](std::size_t a, std::size_t b) { return v[a] > v[b] || (v[a] == v[b] && a < b); });
    idx.resize(k);
    return idx;
  };
  for (std::size_t fi = 0; fi < features.size(); ++fi) {
    const squad_feature& f = features[fi];
    SPARSELM_CHECK(start_logits[fi].size() == f.ids.size() && end_logits[fi].size() == f.ids.size(),
                   "squad post-processing: feature ", fi, " has ", f.ids.size(), " positions but ",
                   start_logits[fi].size(), " start and ", end_logits[fi].size(), " end logits");
    for (std::size_t s : top(start_logits[fi]))
      for (std::size_t e : top(end_logits[fi])) {
        const auto ws = f.token_to_word.find(s), we = f.token_to_word.find(e);
        if (ws == f.token_to_word.end() || we == f.token_to_word.end()) continue;
        if (!f.max_context.at(s) || e < s || e - s + 1 > o.max_answer_tokens) continue;
        per_q[f.question].push_back({double(start_logits[fi][s]) + double(end_logits[fi][e]), ws->second, we->second, fi, s, e});
      }
  }
  std::map<std::string, std::string> out;
  for (std::size_t qi = 0; qi < examples.size(); ++qi) {
    auto& c = per_q[qi];
    std::stable_sort(c.begin(), c.end(), [](const cand& a, const cand& b) { return a.score > b.score; });
    std::string text = "empty";  // run_squad's answer when no candidate survives
    if (!c.empty()) {
      std::string orig;
      for (std::size_t w = c[0].w0; w <= c[0].w1; ++w) orig += (w > c[0].w0 ? " " : "") + examples[qi].words[w];
      const auto& ids = features[c[0].feature].ids;
      const std::string pred = wp.decode(std::span(ids).subspan(c[0].s, c[0].e - c[0].s + 1));
      text = squad_final_text(wp, pred, orig);
    }
    out[examples[qi].question->id] = text;
  }
  return out;
}

}  // namespace sparselm::data
