// BERT pre-training data: documents and sentences from text, each rule of example creation on
// hand-built documents (layout, token types, truncation, NSP ratio, masking count, cap and 80/10/10
// split, short sequences, duplication, determinism), and the example file's round trip and errors.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "sparselm/data/bert_examples.hpp"

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
}  // namespace

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
  CHECK(bert_documents("\n\n \n", vocab()).empty());
  CHECK(bert_documents("3.14 is pi. So e.g. this", vocab()).front().size() == 2);  // no split inside "3.14" or "e.g. this"
}

TEST_CASE("bert examples: layout, token types, truncation and masking rules") {
  const auto docs = synthetic(40, 30);
  bert_example_options o{.seq_len = 128, .max_predictions = 20, .dupe_factor = 2, .seed = 7};
  bert_example_stats st;
  const auto ex = make_bert_examples(docs, vocab(), o, st);
  REQUIRE(ex.size() > 200);
  CHECK(st.examples == ex.size());
  std::size_t random_next = 0, masked = 0, as_mask = 0, kept = 0, shorter = 0;
  for (const auto& e : ex) {
    REQUIRE(e.ids.size() <= o.seq_len);
    REQUIRE(e.ids.size() == e.token_types.size());
    CHECK(e.ids.front() == vocab().cls_id());
    CHECK(e.ids.back() == vocab().sep_id());
    const auto seps = std::count(e.ids.begin(), e.ids.end(), vocab().sep_id());
    CHECK(seps == 2);
    const auto first_sep = std::size_t(std::find(e.ids.begin(), e.ids.end(), vocab().sep_id()) - e.ids.begin());
    for (std::size_t t = 0; t < e.ids.size(); ++t) CHECK(e.token_types[t] == (t <= first_sep ? 0 : 1));
    const auto n = std::min<std::size_t>(20, std::max<long long>(1, std::llround(double(e.ids.size()) * 0.15)));
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
    }
    masked += n;
    random_next += std::size_t(e.nsp_label);
    shorter += e.ids.size() < 100;
  }
  CHECK(st.random_next == random_next);
  const double rn = double(random_next) / double(ex.size()), fm = double(as_mask) / double(masked),
               fk = double(kept) / double(masked);
  MESSAGE("examples " << ex.size() << ", random next " << rn << ", [MASK] " << fm << ", kept " << fk);
  // B is random with probability 1/2, and always for a one-sentence chunk (short targets)
  CHECK(rn > 0.45);
  CHECK(rn < 0.65);
  CHECK(fm > 0.77);  // 80 % [MASK]
  CHECK(fm < 0.83);
  CHECK(fk > 0.07);  // 10 % kept (plus the rare random id equal to the original)
  CHECK(fk < 0.13);
  CHECK(shorter > 0);  // short_seq_prob 0.1: some examples aim at a random shorter length
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
