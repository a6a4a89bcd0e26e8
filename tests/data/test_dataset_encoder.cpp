#include <doctest/doctest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "data_test_paths.hpp"
#include "sparselm/core/rng.hpp"
#include "sparselm/data/dataset_encoder.hpp"
#include "sparselm/data/lm_batches.hpp"

// Each test file is its own namespace: the area's files are compiled as one unity translation unit
// (tests/CMakeLists.txt), and their helpers must not meet.
namespace SPARSELM_UNITY_ID {

using namespace sparselm;
using namespace sparselm::data;
namespace fs = std::filesystem;

namespace {

fs::path tmp_path(const std::string& name) { return test::tmp_path("data_dataset_encoder", name); }

void spit(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << text;
}

gpt2_bpe& tokenizer() {
  static gpt2_bpe tok = gpt2_bpe::from_directory(test::gpt2_dir);
  return tok;
}

std::string decode_file(const fs::path& p) { return tokenizer().decode(token_file(p).read_all()); }

// The documents of a directory as encode_dataset sees them, joined with <|endoftext|>.
std::string joined(const std::vector<fs::path>& inputs) {
  std::string s;
  bool first = true;
  for (const auto& f : collect_text_files(inputs)) {
    if (!first) s += gpt2_endoftext;
    s += read_file_bytes(f);
    first = false;
  }
  return s;
}

}  // namespace

TEST_CASE("wikitext articles: text between headings, headings and blank lines dropped") {
  const std::string text =
      " = Title A = \n"
      " \n"
      " First paragraph of A .\n"
      " \n"
      " Second paragraph of A .\n"
      " \n"
      " = = Section of A = = \n"
      " \n"
      " Section text .\n"
      " \n"
      " = Title B = \n"
      " \n"
      " B text , no final newline";
  auto a = wikitext_articles(text);
  REQUIRE(a.size() == 3);
  CHECK(a[0] == " First paragraph of A .\n Second paragraph of A .\n");  // one blank line does not split
  CHECK(a[1] == " Section text .\n");
  CHECK(a[2] == " B text , no final newline");
  // CRLF lines, tabs and Unicode spaces count as blank; '=' after leading white space is a heading.
  auto b = wikitext_articles("x\r\n\t\r\n\xE3\x80\x80=h=\r\ny\r\n");
  REQUIRE(b.size() == 2);
  CHECK(b[0] == "x\r\n");
  CHECK(b[1] == "y\r\n");
  CHECK(wikitext_articles("").empty());
  CHECK(wikitext_articles(" = only a heading = \n\n").empty());
}

TEST_CASE("parallel encoding: safe cuts and encode_texts give the sequential encoding") {
  gpt2_bpe tok = tokenizer();
  const std::string text = read_file_bytes(test::corpus_dir / "valid" / "moby_dick.txt");
  auto whole = tok.encode(text);
  auto cuts = gpt2_safe_cuts(text, 500);
  CHECK(cuts.size() > 20);
  std::vector<std::int32_t> pieces;
  for (std::size_t i = 0; i + 1 < cuts.size(); ++i) tok.encode(std::string_view(text).substr(cuts[i], cuts[i + 1] - cuts[i]), pieces);
  CHECK(pieces == whole);
  // Hand case: cuts before the last white-space byte of each run.
  const std::string small = "a\nb c\n d\n\ne\nf";
  auto sc = gpt2_safe_cuts(small, 1);
  CHECK(sc == std::vector<std::size_t>{0, 1, 3, 6, 9, 11, 13});
  std::vector<std::int32_t> small_pieces;
  for (std::size_t i = 0; i + 1 < sc.size(); ++i) tok.encode(std::string_view(small).substr(sc[i], sc[i + 1] - sc[i]), small_pieces);
  CHECK(small_pieces == tok.encode(small));
  // Random texts over awkward fragments, cut everywhere the rule allows.
  const std::vector<std::string> frags = {"a", "Z", " ", "  ", "\n", "\n\n", "\t", "\r\n", "'s", "'", "7", ".", "\xC3\xA9",
                                          "\xE3\x80\x80", "\xC2\xA0", "\xFF", "\x1C", "<|endoftext|>", " ?"};
  counter_rng rng(3);
  std::uint64_t k = 0;
  for (int trial = 0; trial < 300; ++trial) {
    std::string s;
    for (std::uint64_t i = 0, n = rng.below(0, k++, 60); i < n; ++i) s += frags[rng.below(1, k++, frags.size())];
    auto c = gpt2_safe_cuts(s, 1);
    std::vector<std::int32_t> parts;
    for (std::size_t i = 0; i + 1 < c.size(); ++i) tok.encode(std::string_view(s).substr(c[i], c[i + 1] - c[i]), parts);
    REQUIRE(parts == tok.encode(s));
  }
  std::string big;
  while (big.size() < 400000) big += text;
  std::vector<std::string_view> texts{big, "short one", ""};
  auto enc = encode_texts(tokenizer(), texts);
  REQUIRE(enc.size() == 3);
  CHECK(enc[0] == tok.encode(big));
  CHECK(enc[1] == tok.encode("short one"));
  CHECK(enc[2].empty());
}

TEST_CASE("encode_dataset gpt mode: the bundled corpus into a train/validation pair") {
  encode_dataset_options o;
  o.inputs = {test::corpus_dir / "train"};
  o.validation_inputs = {test::corpus_dir / "valid"};
  o.output = tmp_path("corpus_train.tok");
  o.validation_output = tmp_path("corpus_valid.tok");
  auto r = encode_dataset(tokenizer(), o);
  REQUIRE(r.validation);
  MESSAGE("train ", r.train.info.tokens, " tokens, validation ", r.validation->info.tokens, " tokens, ",
          r.train.documents + r.validation->documents, " documents in ", r.seconds, " s");
  CHECK(r.train.documents == 58);  // moby_dick.txt + 57 addresses
  CHECK(r.validation->documents == 6);
  CHECK(r.train.info.vocab_size == 50257);
  CHECK(r.train.info.dtype == token_dtype::uint16);
  CHECK(r.train.info.tokens > 600000);
  // Decoding a file gives its documents back, joined by <|endoftext|>.
  CHECK(decode_file(o.output) == joined(o.inputs));
  CHECK(decode_file(o.validation_output) == joined(o.validation_inputs));
  token_file tf(o.output);
  CHECK(tf.documents() == 58);
  // Ready for training: windows of 128 tokens.
  lm_data d(o.output, o.validation_output, {.batch_size = 4, .windows = {.seq_len = 128}, .seed = 1});
  lm_batch b;
  d.train().next(b);
  CHECK(b.inputs.size() == 4 * 128);
  CHECK(d.validation().windows() > 500);
}

TEST_CASE("encode_dataset gpt mode: validation fraction splits the stream at a document start") {
  auto dir = tmp_path("docs");
  fs::create_directories(dir);
  for (int i = 0; i < 10; ++i) spit(dir / ("doc" + std::to_string(i) + ".txt"), "Document number " + std::to_string(i) + " says hello.");
  encode_dataset_options o;
  o.inputs = {dir};
  o.output = tmp_path("frac_train.tok");
  o.validation_output = tmp_path("frac_valid.tok");
  o.validation_fraction = 0.25;
  auto r = encode_dataset(tokenizer(), o);
  REQUIRE(r.validation);
  CHECK(r.train.documents + r.validation->documents == 10);
  CHECK(r.validation->documents >= 1);
  auto train = token_file(o.output).read_all(), valid = token_file(o.validation_output).read_all();
  CHECK(train.back() == gpt2_endoftext_id);  // the training part ends where a document ends
  CHECK(valid.front() != gpt2_endoftext_id);
  std::string all = tokenizer().decode(train) + tokenizer().decode(valid);
  CHECK(all == joined({dir}));
  CHECK(tokenizer().decode(valid).rfind("Document number", 0) == 0);
}

TEST_CASE("encode_dataset gpt mode: one document per line") {
  auto f = tmp_path("lines.txt");
  spit(f, "first line\n\n  \nsecond line\r\nthird");
  encode_dataset_options o;
  o.inputs = {f};
  o.output = tmp_path("lines.tok");
  o.documents = document_split::line;
  auto r = encode_dataset(tokenizer(), o);
  CHECK(r.train.documents == 3);
  CHECK(decode_file(o.output) == "first line<|endoftext|>second line<|endoftext|>third");
}

TEST_CASE("encode_dataset wikitext mode: short articles discarded, long ones cropped, sequences kept apart") {
  auto f = tmp_path("wiki.train.raw");
  const std::string long_a = " The quick brown fox jumps over the lazy dog again and again and again .\n";
  const std::string long_b = " Colourless green ideas sleep furiously , said a linguist once upon a time .\n";
  spit(f, " = A = \n \n" + long_a + " \n = B = \n \n short .\n \n = C = \n \n" + long_b);
  encode_dataset_options o;
  o.mode = dataset_mode::wikitext;
  o.inputs = {f};
  o.output = tmp_path("wiki_train.tok");
  o.seq_len = 8;
  auto r = encode_dataset(tokenizer(), o);
  CHECK(r.train.documents == 3);
  CHECK(r.train.discarded == 1);
  token_file tf(o.output);
  CHECK(tf.sequence_length() == 8);
  CHECK(tf.size() == 16);
  auto ids = tf.read_all();
  auto ea = tokenizer().encode(long_a), eb = tokenizer().encode(long_b);
  CHECK(std::vector<std::int32_t>(ids.begin(), ids.begin() + 8) == std::vector<std::int32_t>(ea.begin(), ea.begin() + 8));
  CHECK(std::vector<std::int32_t>(ids.begin() + 8, ids.end()) == std::vector<std::int32_t>(eb.begin(), eb.begin() + 8));
  // One window per sequence with seq_len = L - 1 (S1 style), never crossing sequences.
  lm_sampler s(tf, {.batch_size = 2, .windows = {.seq_len = 7}, .order = lm_order::sequential});
  CHECK(s.windows_per_epoch() == 2);
  lm_batch b = s.next();
  CHECK(b.inputs[7] == ids[8]);
  CHECK(b.targets[6] == ids[7]);
  // All articles too short: an empty dataset.
  o.seq_len = 1000;
  CHECK_THROWS_WITH_AS(encode_dataset(tokenizer(), o), doctest::Contains("empty dataset: all 3 articles are shorter"),
                       sparselm::error);
}

TEST_CASE("encode_dataset: bad options and inputs are reported clearly") {
  encode_dataset_options o;
  o.inputs = {tmp_path("no_such_input.txt")};
  o.output = tmp_path("never.tok");
  CHECK_THROWS_WITH_AS(encode_dataset(tokenizer(), o), doctest::Contains("no_such_input.txt: No such file or directory"),
                       sparselm::error);
  auto empty = tmp_path("empty.txt");
  spit(empty, "");
  o.inputs = {empty};
  CHECK_THROWS_WITH_AS(encode_dataset(tokenizer(), o), doctest::Contains("never.tok: empty dataset"), sparselm::error);
  CHECK_FALSE(fs::exists(o.output));
  o.inputs = {test::corpus_dir / "valid"};
  o.validation_fraction = 0.1;
  CHECK_THROWS_WITH_AS(encode_dataset(tokenizer(), o), doctest::Contains("no validation output path"), sparselm::error);
  o.validation_output = tmp_path("v.tok");
  o.validation_inputs = {test::corpus_dir / "valid"};
  CHECK_THROWS_WITH_AS(encode_dataset(tokenizer(), o), doctest::Contains("not both"), sparselm::error);
  o.validation_inputs.clear();
  o.validation_fraction = 0;
  CHECK_THROWS_WITH_AS(encode_dataset(tokenizer(), o), doctest::Contains("needs validation inputs"), sparselm::error);
  o.validation_output.clear();
  o.mode = dataset_mode::wikitext;
  CHECK_THROWS_WITH_AS(encode_dataset(tokenizer(), o), doctest::Contains("seq_len > 0"), sparselm::error);
  auto emptydir = tmp_path("empty_dir");
  fs::create_directories(emptydir);
  CHECK_THROWS_WITH_AS(collect_text_files({emptydir}), doctest::Contains("has no *.txt or *.raw files"), sparselm::error);
}

}  // namespace SPARSELM_UNITY_ID
