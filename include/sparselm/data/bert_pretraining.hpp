#pragma once
// BERT pre-training examples from documents: segment pairs for next-sentence prediction and
// masked-LM targets, as BERT's pre-training data was made.
//
//   auto docs = bert_documents(text, wp);                    // documents of tokenised sentences
//   bert_example_options o{.seq_len = 128, .max_predictions = 20};
//   bert_example_stats st;
//   auto examples = make_bert_examples(docs, wp, o, st);     // dupe_factor passes, shuffled
//
// Documents (bert_documents): blank lines separate documents (or, with bert_document_split::none,
// the text is one document); inside one, the text is split into sentences after '.', '!' or '?'
// (and any closing quotes or brackets) followed by white space and a word that does not start
// with a lower-case ASCII letter ("e.g. this" stays one sentence), and at each line end. Invalid UTF-8 is an error naming its byte offset and line. Each sentence is
// WordPiece-tokenised; empty sentences are dropped, and a document with text but no token
// (controls only, say) is dropped and counted (empty_documents).
//
// Examples (make_bert_examples), for each of dupe_factor passes over every document:
//   target length = seq_len − 3, or with probability short_seq_prob a length uniform in
//   [2, seq_len − 3]; sentences are gathered into a chunk until it has at least two sentences and
//   reaches the target, or the document ends (a single sentence left at the end makes no pair
//   and is counted). Segment A is the chunk's first a_end sentences (a_end uniform in
//   [1, sentences − 1]). With probability random_next_prob (1/2) segment B is random: sentences of
//   another document from a random start, up to the remaining length, and the chunk's unused
//   sentences go back for the next example; otherwise B is the rest of the chunk. Every chunk
//   has two sentences, so the coin alone decides the NSP label (BERT's original script gives a
//   one-sentence chunk a random B, which pushes the share of random pairs above 1/2). The pair is truncated to seq_len − 3 tokens by removing
//   tokens one at a time from the longer segment (B on a tie), from its front or back with equal
//   probability. The example is
//   [CLS] A [SEP] B [SEP], token types 0 for [CLS] A [SEP], 1 for B [SEP].
//   Masking: n = min(max_predictions, max(1, round(tokens · mlm_prob))) positions other than [CLS]
//   and [SEP] (round half to even), chosen uniformly; each becomes [MASK] with probability 0.8,
//   stays with 0.1, or becomes a uniformly random vocabulary id with 0.1. The label is the
//   original id. With whole_word_mask (off by default) the candidates are whole words (a piece
//   and the "##" pieces after it, within one segment), taken in random order while they fit in n.
//   A document with fewer than two sentences yields no example of its own (counted); it can still
//   be drawn as a random segment B. Finally all examples are shuffled.
// Every random draw comes from a counter-based stream of `seed`, so the same inputs and seed give
// the same examples on any machine.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "sparselm/core/error.hpp"
#include "sparselm/core/rng.hpp"
#include "sparselm/data/wordpiece.hpp"

namespace sparselm::data {

using bert_sentence = std::vector<std::int32_t>;
using bert_document = std::vector<bert_sentence>;

struct bert_example {
  std::vector<std::int32_t> ids, token_types;        // length = tokens (≤ seq_len), no padding
  std::vector<std::int32_t> masked_positions, masked_labels;  // sorted by position
  std::int32_t nsp_label = 0;                        // 0: B follows A, 1: B is random
};

// Where documents end: at blank lines, or nowhere (the whole text is one document; bert_data's
// --documents file makes each input file one document).
enum class bert_document_split { blank_lines, none };

struct bert_example_options {
  std::size_t seq_len = 128;
  std::size_t max_predictions = 20;
  std::size_t dupe_factor = 5;
  double mlm_prob = 0.15;
  double short_seq_prob = 0.1;
  double random_next_prob = 0.5;
  bool whole_word_mask = false;  // mask all pieces of a word together
  std::uint64_t seed = 12345;
};

struct bert_example_stats {
  // empty_documents: documents whose text gives no token (only controls, say); skipped
  std::size_t documents = 0, sentences = 0, empty_documents = 0, single_sentence_documents = 0;
  std::size_t examples = 0, random_next = 0, masked = 0, tokens = 0;
  std::size_t unpaired_sentences = 0;  // single sentences left at a document's end in a pass (no example)
};

// The number of positions to predict in a sequence of `tokens` tokens: tokens · mlm_prob rounded
// half to even (as Python's round), at least 1, at most max_predictions.
inline std::size_t bert_masked_count(std::size_t tokens, const bert_example_options& o) {
  const double wanted = std::nearbyint(double(tokens) * o.mlm_prob);  // the default mode rounds half to even
  return std::min(o.max_predictions, std::max<std::size_t>(1, std::size_t(wanted)));
}

namespace detail {
// A sequential view of a counter_rng stream.
class rng_stream {
 public:
  rng_stream(const counter_rng& rng, std::uint64_t stream) : rng_(rng), stream_(stream) {}
  double uniform() { return rng_.uniform(stream_, i_++); }
  std::size_t below(std::size_t n) { return std::size_t(rng_.below(stream_, i_++, n)); }  // [0, n)
  std::size_t between(std::size_t lo, std::size_t hi) { return lo + below(hi - lo + 1); }  // [lo, hi]

 private:
  const counter_rng& rng_;
  std::uint64_t stream_, i_ = 0;
};

inline bool sentence_end_at(std::string_view line, std::size_t i) {
  const char c = line[i];
  if (c != '.' && c != '!' && c != '?') return false;
  std::size_t j = i + 1;
  while (j < line.size() && (line[j] == '"' || line[j] == '\'' || line[j] == ')' || line[j] == ']')) ++j;
  if (j == line.size()) return true;
  if (line[j] != ' ' && line[j] != '\t') return false;
  while (j < line.size() && (line[j] == ' ' || line[j] == '\t')) ++j;
  return j == line.size() || !(line[j] >= 'a' && line[j] <= 'z');  // "e.g. this" is one sentence
}
}  // namespace detail

// Documents of tokenised sentences from text (rules above); counts documents and sentences in stats.
inline std::vector<bert_document> bert_documents(std::string_view text, const wordpiece& wp,
                                                 bert_example_stats* stats = nullptr,
                                                 bert_document_split split = bert_document_split::blank_lines) {
  if (const std::size_t bad = invalid_utf8_offset(text); bad != std::string_view::npos)
    fail("invalid UTF-8 at byte ", bad, " (line ", std::count(text.begin(), text.begin() + std::ptrdiff_t(bad), '\n') + 1,
         ", byte 0x", std::hex, int(static_cast<unsigned char>(text[bad])), ")");
  std::vector<bert_document> docs(1);
  std::size_t start = 0, empty = 0;
  bool has_text = false;  // the current document has a non-blank line
  auto add = [&](std::string_view s) {
    auto ids = wp.encode(s);
    if (!ids.empty()) docs.back().push_back(std::move(ids));
  };
  auto end_document = [&] {
    if (!docs.back().empty()) docs.emplace_back();
    else if (has_text) ++empty;  // text without a single token
    has_text = false;
  };
  while (start <= text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) {
      if (split == bert_document_split::blank_lines) end_document();
    } else {
      has_text = true;
      std::size_t s0 = 0;
      for (std::size_t i = 0; i < line.size(); ++i)
        if (detail::sentence_end_at(line, i)) {
          std::size_t j = i + 1;
          while (j < line.size() && line[j] != ' ' && line[j] != '\t') ++j;
          add(line.substr(s0, j - s0));
          s0 = j;
          i = j;
        }
      if (s0 < line.size()) add(line.substr(s0));
    }
    start = end + 1;
  }
  end_document();
  docs.pop_back();  // the empty document end_document() leaves open
  if (stats) {
    stats->empty_documents += empty;
    stats->documents += docs.size();
    for (auto& d : docs) stats->sentences += d.size();
  }
  return docs;
}

namespace detail {
inline void truncate_pair(std::vector<std::int32_t>& a, std::vector<std::int32_t>& b, std::size_t max_tokens,
                          rng_stream& r) {
  while (a.size() + b.size() > max_tokens) {
    auto& longer = a.size() > b.size() ? a : b;
    if (r.uniform() < 0.5) longer.erase(longer.begin());
    else longer.pop_back();
  }
}

inline void mask_example(bert_example& e, const wordpiece& wp, const bert_example_options& o, rng_stream& r) {
  // Candidates: [first, end) position ranges, one per token other than [CLS] / [SEP]; with
  // whole_word_mask a word's "##" continuations join its first piece (never across a [SEP]).
  std::vector<std::pair<std::size_t, std::size_t>> cand;
  const std::int32_t cls = wp.cls_id(), sep = wp.sep_id(), mask = wp.mask_id();
  bool after_special = true;
  for (std::size_t i = 0; i < e.ids.size(); ++i) {
    if (e.ids[i] == cls || e.ids[i] == sep) {
      after_special = true;
      continue;
    }
    if (o.whole_word_mask && !after_special && wp.token(e.ids[i]).starts_with("##")) cand.back().second = i + 1;
    else cand.emplace_back(i, i + 1);
    after_special = false;
  }
  for (std::size_t i = cand.size(); i > 1; --i) std::swap(cand[i - 1], cand[r.below(i)]);  // Fisher-Yates
  const std::size_t n = bert_masked_count(e.ids.size(), o);
  std::vector<std::size_t> chosen;
  for (const auto& [first, end] : cand) {
    if (chosen.size() >= n) break;
    if (chosen.size() + (end - first) > n) continue;  // a whole word that does not fit
    for (std::size_t p = first; p < end; ++p) chosen.push_back(p);
  }
  std::sort(chosen.begin(), chosen.end());
  for (std::size_t pos : chosen) {
    const std::int32_t original = e.ids[pos];
    const double u = r.uniform();
    if (u < 0.8) e.ids[pos] = mask;
    else if (u >= 0.9) e.ids[pos] = std::int32_t(r.below(wp.size()));
    e.masked_positions.push_back(std::int32_t(pos));
    e.masked_labels.push_back(original);
  }
}
}  // namespace detail

// The examples of all documents over dupe_factor passes, shuffled (rules above).
inline std::vector<bert_example> make_bert_examples(const std::vector<bert_document>& docs, const wordpiece& wp,
                                                    const bert_example_options& o, bert_example_stats& stats) {
  SPARSELM_CHECK(o.seq_len >= 5, "bert examples: seq_len ", o.seq_len, " is too short (at least 5)");
  SPARSELM_CHECK(o.max_predictions >= 1 && o.max_predictions <= o.seq_len, "bert examples: max_predictions ",
                 o.max_predictions, " must be in [1, seq_len]");
  SPARSELM_CHECK(o.mlm_prob > 0 && o.mlm_prob < 1, "bert examples: mlm_prob ", o.mlm_prob, " must be in (0, 1)");
  SPARSELM_CHECK(o.dupe_factor >= 1, "bert examples: dupe_factor must be at least 1");
  SPARSELM_CHECK(!docs.empty(), "bert examples: no documents (empty input)");
  const counter_rng rng(o.seed);
  const std::size_t max_tokens = o.seq_len - 3;
  std::vector<bert_example> out;
  for (const auto& d : docs) {
    if (d.empty()) ++stats.empty_documents;
    else if (d.size() < 2) ++stats.single_sentence_documents;
  }
  for (std::size_t pass = 0; pass < o.dupe_factor; ++pass)
    for (std::size_t di = 0; di < docs.size(); ++di) {
      const bert_document& doc = docs[di];
      if (doc.size() < 2) continue;
      detail::rng_stream r(rng, (pass << 32) | di);
      std::size_t target = max_tokens;
      if (r.uniform() < o.short_seq_prob) target = r.between(2, max_tokens);
      std::vector<const bert_sentence*> chunk;
      std::size_t length = 0;
      for (std::size_t i = 0; i < doc.size(); ++i) {
        chunk.push_back(&doc[i]);
        length += doc[i].size();
        if (i + 1 != doc.size() && (length < target || chunk.size() < 2)) continue;
        if (chunk.size() < 2) {  // one sentence left at the document's end: no pair
          ++stats.unpaired_sentences;
          break;
        }
        const std::size_t a_end = r.between(1, chunk.size() - 1);
        std::vector<std::int32_t> a, b;
        for (std::size_t k = 0; k < a_end; ++k) a.insert(a.end(), chunk[k]->begin(), chunk[k]->end());
        bool random_next = false;
        if (r.uniform() < o.random_next_prob && docs.size() > 1) {
          random_next = true;
          const std::size_t target_b = target > a.size() ? target - a.size() : 1;
          std::size_t other = di;
          for (int tries = 0; tries < 10 && (other == di || docs[other].empty()); ++tries) other = r.below(docs.size());
          if (other == di || docs[other].empty()) random_next = false;
          else {
            const bert_document& od = docs[other];
            for (std::size_t k = r.below(od.size()); k < od.size() && b.size() < target_b; ++k)
              b.insert(b.end(), od[k].begin(), od[k].end());
            i -= chunk.size() - a_end;  // the unused sentences start the next chunk
          }
        }
        if (!random_next)
          for (std::size_t k = a_end; k < chunk.size(); ++k) b.insert(b.end(), chunk[k]->begin(), chunk[k]->end());
        chunk.clear();
        length = 0;
        if (a.empty() || b.empty()) continue;
        detail::truncate_pair(a, b, max_tokens, r);
        bert_example e;
        e.ids.push_back(wp.cls_id());
        e.ids.insert(e.ids.end(), a.begin(), a.end());
        e.ids.push_back(wp.sep_id());
        e.token_types.assign(e.ids.size(), 0);
        e.ids.insert(e.ids.end(), b.begin(), b.end());
        e.ids.push_back(wp.sep_id());
        e.token_types.resize(e.ids.size(), 1);
        e.nsp_label = random_next ? 1 : 0;
        detail::mask_example(e, wp, o, r);
        stats.random_next += random_next;
        stats.masked += e.masked_positions.size();
        stats.tokens += e.ids.size();
        out.push_back(std::move(e));
      }
    }
  detail::rng_stream shuffle(rng, ~std::uint64_t(0));
  for (std::size_t i = out.size(); i > 1; --i) std::swap(out[i - 1], out[shuffle.below(i)]);
  stats.examples = out.size();
  return out;
}

}  // namespace sparselm::data
