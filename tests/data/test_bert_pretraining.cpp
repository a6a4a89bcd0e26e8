// BERT pre-training data: documents and sentences from text, each rule of example creation on
// hand-built documents (layout, token types, truncation, NSP ratio, masking count, cap and 80/10/10
// split, short sequences, duplication, determinism), and the example file's round trip and errors.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "sparselm/data/bert_examples.hpp"

// Each test file is its own namespace: the area's files are compiled as one unity translation unit
// (tests/CMakeLists.txt), and their helpers must not meet.
namespace SPARSELM_UNITY_ID {

using namespace sparselm;
using namespace sparselm::data;

namespace {
const wordpiece& vocab() {
  static const wordpiece w = wordpiece::from_file(SPARSELM_SOURCE_DIR "/data/bert/vocab.txt");
  return w;
}
// n documents of `sentences` sentences of 5..14 tokens with ids from [2000, 3000).
std::vector<bert_document> synthetic(std::size_t n, std::size_t sentences, std::uint64_t seed = 1) {
  counter_rng r(seed);
  std::vector<bert_document> docs(n);
  std::uint64_t k = 0;
  for (auto& d : docs)
    for (std::size_t s = 0; s < sentences; ++s) {
      bert_sentence sent(5 + r.below(0, k++, 10));
      for (auto& id : sent) id = std::int32_t(2000 + r.below(1, k++, 1000));
      d.push_back(sent);
    }
  return docs;
}
// The example's ids before masking: masked labels put back at their positions.
std::vector<std::int32_t> original_ids(const bert_example& e) {
  auto ids = e.ids;
  for (std::size_t m = 0; m < e.masked_positions.size(); ++m) ids[std::size_t(e.masked_positions[m])] = e.masked_labels[m];
  return ids;
}
// Segments A and B of an example (original ids), split at its first [SEP].
std::pair<std::vector<std::int32_t>, std::vector<std::int32_t>> segments(const bert_example& e) {
  const auto ids = original_ids(e);
  const auto sep = std::size_t(std::find(ids.begin(), ids.end(), vocab().sep_id()) - ids.begin());
  return {{ids.begin() + 1, ids.begin() + std::ptrdiff_t(sep)}, {ids.begin() + std::ptrdiff_t(sep) + 1, ids.end() - 1}};
}
}  // namespace

TEST_CASE("bert examples: the number of predictions rounds half to even, at least 1, capped") {
  const bert_example_options o{.seq_len = 128, .max_predictions = 20};
  CHECK(bert_masked_count(1, o) == 1);     // round(0.15) = 0 -> at least 1
  CHECK(bert_masked_count(10, o) == 2);    // 1.5 -> 2
  CHECK(bert_masked_count(30, o) == 4);    // 4.5 -> 4 (half to even, as Python's round)
  CHECK(bert_masked_count(70, o) == 10);   // 10.5 -> 10
  CHECK(bert_masked_count(100, o) == 15);
  CHECK(bert_masked_count(128, o) == 19);  // 19.2
  CHECK(bert_masked_count(134, o) == 20);  // 20.1 -> 20
  CHECK(bert_masked_count(384, {.seq_len = 384, .max_predictions = 56}) == 56);  // 57.6 -> capped at 56
}

TEST_CASE("bert examples: segment B follows A in its document, or comes from another document; truncation from the longer segment at either end") {
  // Two-sentence documents of 40 tokens per sentence, target 64 - 3 = 61 tokens: the chunk is both
  // sentences, A is sentence 0, B sentence 1 or text of another document (then sentence 1 is left
  // alone at the end and makes no pair); each pair is 80 tokens and must lose 19. Token ids name
  // document, sentence and index.
  const std::size_t docs_n = 20;
  std::vector<bert_document> docs(docs_n);
  for (std::size_t d = 0; d < docs_n; ++d)
    for (std::size_t sent = 0; sent < 2; ++sent) {
      bert_sentence s(40);
      for (std::size_t t = 0; t < 40; ++t) s[t] = std::int32_t(1000 + d * 1000 + sent * 100 + t);
      docs[d].push_back(s);
    }
  const auto doc_of = [](std::int32_t id) { return (id - 1000) / 1000; };
  const auto sentence_of = [](std::int32_t id) { return (id - 1000) % 1000 / 100; };
  bert_example_stats st;
  const auto ex = make_bert_examples(
      docs, vocab(), {.seq_len = 64, .max_predictions = 10, .dupe_factor = 10, .short_seq_prob = 0, .seed = 11}, st);
  std::size_t random_next = 0, cut_front = 0, cut_back = 0;
  for (const auto& e : ex) {
    REQUIRE(e.ids.size() == 64);
    const auto [a, b] = segments(e);
    REQUIRE(a.size() + b.size() == 61);
    CHECK((a.size() == 30 || a.size() == 31));  // the longer segment loses a token each time
    for (const auto* seg : {&a, &b})
      for (std::size_t t = 1; t < seg->size(); ++t) REQUIRE((*seg)[t] == (*seg)[t - 1] + 1);  // contiguous
    CHECK(sentence_of(a.front()) == 0);
    if (e.nsp_label == 0) {  // the next sentence of the same document
      CHECK(doc_of(b.front()) == doc_of(a.front()));
      CHECK(sentence_of(b.front()) == 1);
    } else {
      CHECK(doc_of(b.front()) != doc_of(a.front()));  // another document's text
    }
    random_next += std::size_t(e.nsp_label);
    for (const auto* seg : {&a, &b}) {  // tokens removed at each end (a segment starts as one 40-token sentence)
      cut_front += std::size_t(((*seg).front() - 1000) % 100);
      cut_back += std::size_t(39 - ((*seg).back() - 1000) % 100);
    }
  }
  MESSAGE("examples " << ex.size() << ", random next " << random_next
                      << "; tokens cut at the front " << cut_front << ", at the back " << cut_back);
  CHECK(ex.size() == docs_n * 10);  // one pair per document and pass
  CHECK(st.unpaired_sentences == random_next);  // a random B leaves sentence 1 alone
  CHECK(random_next > 70);  // 1/2 of 200
  CHECK(random_next < 130);
  REQUIRE(cut_front + cut_back == 19 * ex.size());
  const double front = double(cut_front) / double(cut_front + cut_back);
  CHECK(front > 0.45);  // either end with probability 1/2
  CHECK(front < 0.55);
}

TEST_CASE("bert examples: whole-word masking (off by default) masks a word's pieces together") {
  // Sentences of words of 1-3 pieces: a word-initial token then "##" continuations, ids from the real vocabulary.
  std::vector<std::int32_t> initials, continuations;
  for (std::int32_t id = 1000; id < 30522 && continuations.size() < 200; ++id)
    (vocab().token(id).starts_with("##") ? continuations : initials).push_back(id);
  REQUIRE(continuations.size() == 200);
  counter_rng r(9);
  std::uint64_t k = 0;
  std::vector<bert_document> docs(30);
  for (auto& d : docs)
    for (int sent = 0; sent < 12; ++sent) {
      bert_sentence s;
      for (int w = 0; w < 8; ++w) {
        s.push_back(initials[r.below(0, k++, initials.size())]);
        for (auto c = r.below(0, k++, 3); c > 0; --c) s.push_back(continuations[r.below(0, k++, continuations.size())]);
      }
      d.push_back(s);
    }
  auto is_cont = [](std::int32_t id) { return vocab().token(id).starts_with("##"); };
  auto split_words = [&](const bert_example_options& o) {
    bert_example_stats st;
    std::size_t split = 0, masked = 0, examples = 0;
    for (const auto& e : make_bert_examples(docs, vocab(), o, st)) {
      const auto ids = original_ids(e);
      std::set<std::int32_t> pos(e.masked_positions.begin(), e.masked_positions.end());
      CHECK(e.masked_positions.size() <= bert_masked_count(e.ids.size(), o));
      CHECK(e.masked_positions.size() + 3 > bert_masked_count(e.ids.size(), o));  // words of up to 3 pieces
      // words: a piece and the "##" pieces after it, within one segment; all masked or none
      for (std::size_t first = 1; first < ids.size();) {
        std::size_t end = first + 1;
        if (ids[first] != vocab().sep_id())
          while (end < ids.size() && is_cont(ids[end])) ++end;
        std::size_t in = 0;
        for (auto t = first; t < end; ++t) in += pos.contains(std::int32_t(t));
        split += in != 0 && in != end - first;
        first = end;
      }
      masked += pos.size();
      ++examples;
    }
    MESSAGE("examples " << examples << ", masked " << masked << ", words split by the mask " << split);
    return split;
  };
  bert_example_options o{.seq_len = 128, .max_predictions = 20, .dupe_factor = 2, .seed = 5};
  CHECK(!o.whole_word_mask);
  CHECK(split_words(o) > 100);  // token masking cuts words
  o.whole_word_mask = true;
  CHECK(split_words(o) == 0);
}

TEST_CASE("bert documents: blank lines separate documents, sentences split at . ! ? before a space and a non-lower-case word") {
  bert_example_stats st;
  const auto docs = bert_documents("The cat sat. It was \"happy.\" Was it?\nYes!\n\n\n  \nA new one. Two\n", vocab(), &st);
  REQUIRE(docs.size() == 2);
  CHECK(docs[0].size() == 4);
  CHECK(docs[1].size() == 2);
  CHECK(vocab().decode(docs[0][1]) == "it was \" happy . \"");
  CHECK(st.documents == 2);
  CHECK(st.sentences == 6);
  CHECK(bert_documents("", vocab()).empty());
  bert_example_stats se;  // documents with text but no token are dropped and counted
  const auto kept = bert_documents("\x01\x02\n\nOne. Two.\n\n\x7f\n\n\n\u200b\n", vocab(), &se);
  CHECK(kept.size() == 1);
  CHECK(se.documents == 1);
  CHECK(se.empty_documents == 3);
  const auto whole = bert_documents("One. Two.\n\n\nThree.\nFour.\n", vocab(), nullptr, bert_document_split::none);
  REQUIRE(whole.size() == 1);  // blank lines do not end the document
  CHECK(whole[0].size() == 4);
  CHECK_THROWS_WITH_AS(bert_documents("Fine.\n\nA \xe2\x82 cut character.", vocab()),
                       "invalid UTF-8 at byte 9 (line 3, byte 0xe2)", error);
  CHECK(bert_documents("\n\n \n", vocab()).empty());
  CHECK(bert_documents("3.14 is pi. So e.g. this", vocab()).front().size() == 2);  // no split inside "3.14" or "e.g. this"
}

TEST_CASE("bert examples: layout, token types, truncation and masking rules") {
  const auto docs = synthetic(40, 30);
  bert_example_options o{.seq_len = 128, .max_predictions = 20, .dupe_factor = 6, .seed = 7};
  bert_example_stats st;
  const auto ex = make_bert_examples(docs, vocab(), o, st);
  REQUIRE(ex.size() > 800);
  CHECK(st.examples == ex.size());
  std::size_t random_next = 0, masked = 0, as_mask = 0, kept = 0, replaced = 0, shorter = 0;
  for (const auto& e : ex) {
    REQUIRE(e.ids.size() <= o.seq_len);
    REQUIRE(e.ids.size() == e.token_types.size());
    CHECK(e.ids.front() == vocab().cls_id());
    CHECK(e.ids.back() == vocab().sep_id());
    const auto seps = std::count(e.ids.begin(), e.ids.end(), vocab().sep_id());
    CHECK(seps == 2);
    const auto first_sep = std::size_t(std::find(e.ids.begin(), e.ids.end(), vocab().sep_id()) - e.ids.begin());
    for (std::size_t t = 0; t < e.ids.size(); ++t) CHECK(e.token_types[t] == (t <= first_sep ? 0 : 1));
    const auto n = std::min<std::size_t>(20, std::max<std::size_t>(1, std::size_t(std::nearbyint(double(e.ids.size()) * 0.15))));
    CHECK(e.masked_positions.size() == n);
    CHECK(std::is_sorted(e.masked_positions.begin(), e.masked_positions.end()));
    CHECK(std::set<std::int32_t>(e.masked_positions.begin(), e.masked_positions.end()).size() == n);
    for (std::size_t m = 0; m < n; ++m) {
      const auto pos = std::size_t(e.masked_positions[m]);
      CHECK(pos > 0);
      CHECK(pos != first_sep);
      CHECK(pos + 1 < e.ids.size());
      CHECK(e.masked_labels[m] >= 2000);  // the original (synthetic) token
      as_mask += e.ids[pos] == vocab().mask_id();
      kept += e.ids[pos] == e.masked_labels[m];
      replaced += e.ids[pos] != vocab().mask_id() && e.ids[pos] != e.masked_labels[m];
    }
    masked += n;
    random_next += std::size_t(e.nsp_label);
    shorter += e.ids.size() < 100;
  }
  CHECK(st.random_next == random_next);
  const double rn = double(random_next) / double(ex.size()), fm = double(as_mask) / double(masked),
               fk = double(kept) / double(masked), fr = double(replaced) / double(masked);
  MESSAGE("examples " << ex.size() << ", masked " << masked << ", random next " << rn << ", [MASK] " << fm
                      << ", kept " << fk << ", random id " << fr);
  CHECK(rn > 0.43);  // B is random with probability 1/2 (~1000 examples: over 4 standard deviations)
  CHECK(rn < 0.57);
  CHECK(fm > 0.77);  // 80 % [MASK]
  CHECK(fm < 0.83);
  CHECK(fk > 0.07);  // 10 % kept (plus the rare random id equal to the original)
  CHECK(fk < 0.13);
  CHECK(fr > 0.07);  // 10 % a random id
  CHECK(fr < 0.13);
  CHECK(shorter > 0);  // short_seq_prob 0.1: some examples aim at a random shorter length
}

TEST_CASE("bert examples: each duplicate of a pair is masked differently") {
  // Two-sentence documents and no random B: every pass makes the same pair of each document, so
  // the dupe_factor copies differ only by their masks.
  const auto docs = synthetic(20, 2, 8);
  bert_example_stats st;
  const auto ex = make_bert_examples(
      docs, vocab(), {.seq_len = 128, .max_predictions = 20, .dupe_factor = 5, .random_next_prob = 0, .seed = 2}, st);
  REQUIRE(ex.size() == 20 * 5);
  std::map<std::vector<std::int32_t>, std::set<std::vector<std::int32_t>>> masks;  // pair -> its distinct masks
  for (const auto& e : ex) masks[original_ids(e)].insert(e.masked_positions);
  CHECK(masks.size() == 20);
  std::size_t distinct = 0;
  for (const auto& [pair, m] : masks) distinct += m.size();
  MESSAGE("distinct masks of 100 copies of 20 pairs: " << distinct);
  CHECK(distinct >= 95);  // a copy repeats a mask of its pair only by rare chance
}

TEST_CASE("bert examples: the prediction cap, duplication, determinism, single-sentence documents") {
  const auto docs = synthetic(10, 200, 3);
  bert_example_stats st;
  bert_example_options o{.seq_len = 384, .max_predictions = 56, .dupe_factor = 1, .short_seq_prob = 0.0, .seed = 3};
  const auto ex = make_bert_examples(docs, vocab(), o, st);
  for (const auto& e : ex)
    if (e.ids.size() == 384) CHECK(e.masked_positions.size() == 56);  // round(384 · 0.15) = 58, capped
  bert_example_stats st2, st3;
  CHECK(make_bert_examples(docs, vocab(), o, st2).size() == ex.size());
  auto o3 = o;
  o3.dupe_factor = 3;
  const auto ex3 = make_bert_examples(docs, vocab(), o3, st3);
  CHECK(ex3.size() > 2 * ex.size());
  const auto again = make_bert_examples(docs, vocab(), o, st2);
  CHECK(again.size() == ex.size());
  for (std::size_t i = 0; i < ex.size(); ++i) CHECK(again[i].ids == ex[i].ids);
  auto o4 = o;
  o4.seed = 4;
  CHECK(make_bert_examples(docs, vocab(), o4, st2).front().ids != ex.front().ids);

  std::vector<bert_document> mixed = synthetic(3, 1);  // one sentence each
  auto more = synthetic(2, 5);
  mixed.insert(mixed.end(), more.begin(), more.end());
  bert_example_stats sm;
  make_bert_examples(mixed, vocab(), {.dupe_factor = 1}, sm);
  CHECK(sm.single_sentence_documents == 3);
  CHECK_THROWS_WITH_AS(make_bert_examples({}, vocab(), {}, sm), "bert examples: no documents (empty input)", error);
  CHECK_THROWS_WITH_AS(make_bert_examples(mixed, vocab(), {.seq_len = 128, .max_predictions = 200}, sm),
                       "bert examples: max_predictions 200 must be in [1, seq_len]", error);
}

TEST_CASE("bert example files: round trip through the loader, and damaged files named") {
  namespace fs = std::filesystem;
  const auto docs = synthetic(8, 20, 5);
  bert_example_stats st;
  const auto ex = make_bert_examples(docs, vocab(), {.seq_len = 64, .max_predictions = 10, .dupe_factor = 1}, st);
  const fs::path dir = fs::path(SPARSELM_TEST_TMPDIR) / "bert_examples";
  fs::create_directories(dir);
  const fs::path file = dir / "ex.bex";
  write_bert_examples(file, ex, {.seq_len = 64, .max_predictions = 10, .vocab_size = 30522});
  bert_example_file f(file);
  REQUIRE(f.size() == ex.size());
  bert_batch_arrays a;
  const std::vector<std::size_t> pick{2, 0};
  a.assemble(f, pick);
  CHECK(a.batch == 2);
  CHECK(a.seq == 64);
  for (std::size_t b = 0; b < 2; ++b) {
    const auto& e = ex[pick[b]];
    CHECK(std::size_t(a.lengths[b]) == e.ids.size());
    CHECK(std::vector<std::int32_t>(a.ids.begin() + std::ptrdiff_t(b * 64), a.ids.begin() + std::ptrdiff_t(b * 64 + e.ids.size())) == e.ids);
    CHECK(a.ids[b * 64 + 63] == (e.ids.size() == 64 ? e.ids[63] : 0));
    CHECK(a.nsp_labels[b] == e.nsp_label);
    for (std::size_t m = 0; m < 10; ++m) {
      if (m < e.masked_labels.size()) {
        CHECK(a.masked_labels[b * 10 + m] == e.masked_labels[m]);
        CHECK(a.masked_positions[b * 10 + m] == e.masked_positions[m]);
      } else {
        CHECK(a.masked_labels[b * 10 + m] == -1);
      }
    }
  }
  // damaged files
  const std::string bytes = [&] {
    std::ifstream in(file, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }();
  auto write = [&](const std::string& name, const std::string& content) {
    std::ofstream(dir / name, std::ios::binary) << content;
    return dir / name;
  };
  CHECK_THROWS_WITH_AS(bert_example_file{write("short.bex", bytes.substr(0, 10))}, doctest::Contains("truncated header"),
                       error);
  CHECK_THROWS_WITH_AS(bert_example_file(write("cut.bex", bytes.substr(0, bytes.size() - 1))),
                       doctest::Contains("truncated or trailing data"), error);
  CHECK_THROWS_WITH_AS(bert_example_file{write("long.bex", bytes + "x")}, doctest::Contains("truncated or trailing data"),
                       error);
  std::string foreign = bytes;
  foreign[0] = 'X';
  CHECK_THROWS_WITH_AS(bert_example_file{write("foreign.bex", foreign)}, doctest::Contains("bad magic"), error);
  std::string bad_id = bytes;
  bad_id[32] = char(0xFF);
  bad_id[33] = char(0xFF);  // id 65535 >= 30522
  CHECK_THROWS_WITH_AS(bert_example_file(write("bad_id.bex", bad_id)),
                       doctest::Contains("example 0: token id 65535 at position 0 outside the vocabulary"), error);
  CHECK_THROWS_WITH_AS(bert_example_file{dir / "absent.bex"}, doctest::Contains("absent.bex: cannot open"), error);
  CHECK_THROWS_WITH_AS(bert_example_file{dir}, doctest::Contains("not a regular file"), error);
}

// Issue 60, defects 1 and 2: an example file truncated while a job reads it gave records of zeros
// inside the last mapped page ("MLM loss 0.0000") and SIGBUS past it. Every record read now checks
// the file's size against its header first, and the mapping is in the SIGBUS guard.
TEST_CASE("bert example files: truncated while in use is an error naming the file, never zeros") {
  namespace fs = std::filesystem;
  const auto docs = synthetic(8, 20, 5);
  bert_example_stats st;
  const auto ex = make_bert_examples(docs, vocab(), {.seq_len = 64, .max_predictions = 10, .dupe_factor = 1}, st);
  REQUIRE(ex.size() >= 2);
  const fs::path dir = fs::path(SPARSELM_TEST_TMPDIR) / "bert_examples";
  fs::create_directories(dir);
  const fs::path file = dir / "shrinking.bex";
  const bert_examples_info info{.seq_len = 64, .max_predictions = 10, .vocab_size = 30522};
  for (const std::uint64_t cut : {std::uint64_t(32), std::uint64_t(32 + info.record_bytes() + 10)}) {
    write_bert_examples(file, ex, info);
    bert_example_file f(file);
    bert_batch_arrays a;
    const std::vector<std::size_t> first{0}, second{1};
    a.assemble(f, second);
    CHECK(a.lengths[0] >= 2);
    fs::resize_file(file, cut);  // the header alone, or into example 1 (both inside page 0)
    CHECK_THROWS_WITH_AS(a.assemble(f, second),
                         doctest::Contains(("example file '" + file.string() + "' was truncated or overwritten while in use").c_str()),
                         error);
    if (cut == 32)
      CHECK_THROWS_WITH_AS(a.assemble(f, first), doctest::Contains("it is now 32 bytes"), error);
  }
}

}  // namespace SPARSELM_UNITY_ID
