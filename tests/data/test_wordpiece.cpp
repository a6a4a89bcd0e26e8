// WordPiece (uncased BERT) on the real bert-base-uncased vocabulary: known ids, each rule of the
// basic tokenizer, [UNK], bad vocab files and bad input; and agreement with an independent Python
// implementation (tests/reference/wordpiece_reference.py) on the bundled corpus, a Unicode stress
// text and 3,000 lines of random Unicode.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "sparselm/core/rng.hpp"
#include "sparselm/data/wordpiece.hpp"

// Each test file is its own namespace: the area's files are compiled as one unity translation unit
// (tests/CMakeLists.txt), and their helpers must not meet.
namespace SPARSELM_UNITY_ID {

using namespace sparselm;
using data::wordpiece;

namespace {
const wordpiece& vocab() {
  static const wordpiece w = wordpiece::from_file(SPARSELM_SOURCE_DIR "/data/bert/vocab.txt");
  return w;
}
std::vector<std::string> pieces(const std::string& text) {
  std::vector<std::string> r;
  for (auto id : vocab().encode(text)) r.push_back(vocab().token(id));
  return r;
}
using strings = std::vector<std::string>;

// Lines of random text that stress every rule: ASCII, Latin, Greek with sigma contexts, combining
// marks (some that survive accent stripping), CJK, Hangul, controls, odd white space, and code
// points drawn from all of Unicode (no surrogates, no '\n').
std::string random_unicode_lines(std::size_t lines, std::uint64_t seed) {
  static const std::u32string pools[] = {
      U"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 .,;:!?'\"-()[]{}#$%&*+/<=>@\\^_`|~",
      U"\u00c0\u00e9\u00ef\u00f1\u00df\u0130\u0131\u01c5\ufb01\u1e9e\u212a\u00aa\u02b0\u00b5",
      U"\u03a3\u03a3\u03c3\u03c2\u0391\u03b1\u1fbc\u0345'.:\u00b7\u00ad\u2019\u0640\u064a",
      U"\u0300\u0301\u0308\u0327\u093c\u0b56\u0e48\u0f71\u1b44\u302e\U0001D15F\U0001D165\U0001D16D\u20dd",
      U"\u4e2d\u6587\u3400\U00020000\uf900\u3042\u30ab\uac00\ud55c\u1100\u0416\u05d0\u0627\u0e01",
      U"\t\r\u000b\u0001\u007f\u0085\u00a0\u1680\u2003\u200b\u2028\u2029\u3000\ufeff\ufffd\U000E0001",
  };
  const counter_rng rng(seed);
  std::uint64_t k = 0;
  std::string out;
  for (std::size_t l = 0; l < lines; ++l) {
    const std::size_t n = 1 + rng.below(0, k++, 40);
    for (std::size_t i = 0; i < n; ++i) {
      char32_t c;
      if (rng.uniform(0, k++) < 0.75f) {
        const auto& pool = pools[rng.below(0, k++, std::size(pools))];
        c = pool[rng.below(0, k++, pool.size())];
      } else {
        do c = char32_t(rng.below(0, k++, 0x110000));
        while ((c >= 0xD800 && c <= 0xDFFF) || c == '\n');
      }
      data::append_utf8(out, c);
    }
    out += '\n';
  }
  return out;
}
}  // namespace

TEST_CASE("wordpiece: the bert-base-uncased vocabulary and known ids") {
  const auto& w = vocab();
  CHECK(w.size() == 30522);
  CHECK(w.pad_id() == 0);
  CHECK(w.unk_id() == 100);
  CHECK(w.cls_id() == 101);
  CHECK(w.sep_id() == 102);
  CHECK(w.mask_id() == 103);
  CHECK(w.token(1) == "[unused0]");
  CHECK(w.encode("Hello, world!") == std::vector<std::int32_t>{7592, 1010, 2088, 999});
  CHECK(w.encode("the") == std::vector<std::int32_t>{1996});
  CHECK(pieces("unaffable") == strings{"una", "##ffa", "##ble"});
  CHECK(w.decode(w.encode("unaffable, Hello")) == "unaffable , hello");
}

TEST_CASE("wordpiece: lower case, accents, punctuation, CJK, control characters, white space") {
  CHECK(pieces("HÉLLO naïve") == strings{"hello", "naive"});
  CHECK(pieces("a.b-c") == strings{"a", ".", "b", "-", "c"});
  CHECK(pieces("“quoted”") == strings{"“", "quoted", "”"});  // General_Category P*
  CHECK(pieces("中文") == strings{"中", "文"});                 // each ideograph a word
  CHECK(pieces("ab\x01\x7f" "cd") == pieces("abcd"));          // control characters dropped
  CHECK(pieces(std::string("ab\0cd", 5)) == pieces("abcd"));  // so is NUL
  CHECK(pieces("a\u00a0b\tc\u2028d") == strings{"a", "b", "c", "d"});  // Zs, tab, line separator
  CHECK(pieces("ΣΟΦΟΣ") == pieces("σοφος"));  // final sigma: ΣΟΦΟΣ lower-cases to σοφος with ς
  // Python's final-sigma context: a cased letter before, none after; case-ignorable ' and . skipped
  CHECK(vocab().basic_tokens("ΑΣ'Α") == strings{"ασ", "'", "α"});
  CHECK(vocab().basic_tokens("Α'Σ Α.Σ") == strings{"α", "'", "ς", "α", ".", "ς"});
  CHECK(vocab().basic_tokens("\u064aΣ Σ") == strings{"\u064aσ", "σ"});  // Arabic letters are not cased
  // canonical ordering of the marks that survive accent stripping (classes 226 and 216), unless a
  // starter (U+0B56, Mn of class 0, dropped) separates them
  CHECK(vocab().basic_tokens("a\U0001D16D\u0300\U0001D165") == strings{"a\U0001D165\U0001D16D"});
  CHECK(vocab().basic_tokens("a\U0001D16D\u0B56\U0001D165") == strings{"a\U0001D16D\U0001D165"});
  CHECK(vocab().basic_tokens("Don't STOP!") == strings{"don", "'", "t", "stop", "!"});
  CHECK(vocab().basic_tokens("") .empty());
  CHECK(vocab().basic_tokens(" \t\n ").empty());
  CHECK(vocab().basic_tokens("\ud55c") == strings{"\u1112\u1161\u11ab"});  // Hangul: NFD to jamo
}

TEST_CASE("wordpiece: [UNK] for unmatchable words and words over 100 characters") {
  CHECK(pieces("ＡＢＣ") == strings{"[UNK]"});
  const std::string long_word(101, 'a'), ok_word(100, 'a');
  CHECK(pieces(long_word) == strings{"[UNK]"});
  CHECK(pieces(ok_word) != strings{"[UNK]"});
  CHECK(pieces("a " + long_word + " b") == strings{"a", "[UNK]", "b"});
  // characters are code points, counted after accent stripping: 100 two-byte letters are fine,
  // 101 are not, and 100 letters with a combining accent each (200 code points) are 100
  std::string zhe100, zhe101, accented;
  for (int i = 0; i < 100; ++i) zhe100 += "\u0436", accented += "e\u0301";
  zhe101 = zhe100 + "\u0436";
  CHECK(vocab().encode(zhe100).size() == 100);  // \u0436 then 99 x ##\u0436
  CHECK(pieces(zhe101) == strings{"[UNK]"});
  CHECK(pieces(accented) != strings{"[UNK]"});
}

TEST_CASE("wordpiece: bad vocabularies and bad input are errors naming the culprit") {
  CHECK_THROWS_WITH_AS(wordpiece::from_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\nhello\n", "v.txt"),
                       "v.txt: line 7: token 'hello' is a duplicate of line 6", error);
  CHECK_THROWS_WITH_AS(wordpiece::from_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\n", "v.txt"),
                       "v.txt: the special token [MASK] is missing", error);
  CHECK_THROWS_WITH_AS(wordpiece::from_text("[PAD]\n\n[UNK]\n", "v.txt"),
                       "v.txt: line 2 is empty (every line must hold one token)", error);
  CHECK_THROWS_WITH_AS(wordpiece::from_text("", "v.txt"), "v.txt: the vocabulary is empty", error);
  CHECK_THROWS_WITH_AS(wordpiece::from_file("/nonexistent/vocab.txt"), doctest::Contains("/nonexistent/vocab.txt"),
                       error);
  CHECK_THROWS_WITH_AS(vocab().encode("ok \xff"), "wordpiece: invalid UTF-8 at byte 3 (0xff)", error);
  CHECK_THROWS_WITH_AS(vocab().encode("\xed\xa0\x80"), doctest::Contains("invalid UTF-8 at byte 0"), error);
  CHECK_THROWS_WITH_AS(vocab().token(30522), "wordpiece: token id 30522 is outside the vocabulary of 30522", error);
}

TEST_CASE("wordpiece: golden encodings of the independent Python implementation (committed)") {
  // tests/reference/data/wordpiece_golden.jsonl, written by tests/reference/make_wordpiece_golden.py
  std::ifstream f(SPARSELM_SOURCE_DIR "/tests/reference/data/wordpiece_golden.jsonl");
  REQUIRE(f.good());
  std::string line;
  std::size_t n = 0, differ = 0, tokens = 0;
  while (std::getline(f, line)) {
    const auto j = nlohmann::json::parse(line);
    const auto text = j.at(0).get<std::string>();
    const auto want = j.at(1).get<std::vector<std::int32_t>>();
    const auto got = vocab().encode(text);
    if (got != want && ++differ <= 5) MESSAGE("golden line " << n + 1 << ": '" << text << "'");
    tokens += want.size();
    ++n;
  }
  CHECK(n == 600);
  CHECK(tokens > 10000);
  CHECK(differ == 0);
}

TEST_CASE("wordpiece: the same ids as the independent Python implementation") {
  if (std::system("/usr/bin/python3 -c 'import unicodedata' > /dev/null 2>&1") != 0) {
    MESSAGE("no /usr/bin/python3: skipping the comparison");
    return;
  }
  // The first 2000 lines of the training corpus, one State of the Union address, a stress text and
  // random Unicode.
  std::ostringstream in;
  {
    std::ifstream moby(SPARSELM_SOURCE_DIR "/data/corpus/train/moby_dick.txt");
    std::ifstream sotu(SPARSELM_SOURCE_DIR "/data/corpus/valid/sotu/2017_donald_j_trump_r.txt");
    REQUIRE(moby.good());
    REQUIRE(sotu.good());
    std::string line;
    for (int i = 0; i < 2000 && std::getline(moby, line); ++i) in << line << '\n';
    in << sotu.rdbuf();
  }
  in << "Ünïcödé çåfé — “quotes” ‘single’ naïve résumé Ångström\n"
     << "日本語のテキスト 한국어 텍스트 中文文本 ﾃｽﾄ ＦＵＬＬ\n"
     << "ΑΒΓ αβγ ΣΟΦΟΣ Привет, мир! Ελληνικά İstanbul ǅ ﬁ ß ẞ\n"
     << "tabs\there\u00a0nbsp\u2003em\u200bzero-width\u2028line\u202fnarrow\n"
     << "math ≠ ≤ ∑ √ ∞ … emoji 😀🎉 ‰ ¿¡ § ¶ • · ° ™ ©\n"
     << "x\u0301\u0327 a\u0300e\u0301 combining\u0308 marks\n"
     << std::string(150, 'z') << " after-a-long-word\n";
  // Random code points from all of Unicode only when the Python has the tables' Unicode version
  // (characters assigned in a later version are classified differently there).
  const std::string version_cmd = std::string("/usr/bin/python3 -c 'import sys, unicodedata; sys.exit(unicodedata.unidata_version != \"") +
                                  data::detail::wordpiece_tables_version + "\")'";
  const bool same_unicode = std::system(version_cmd.c_str()) == 0;
  if (same_unicode) in << random_unicode_lines(3000, 2024);
  else MESSAGE("python3's Unicode version is not " << data::detail::wordpiece_tables_version << ": no random Unicode lines");
  const std::string input = SPARSELM_TEST_TMPDIR "/wordpiece_in.txt", expected = SPARSELM_TEST_TMPDIR "/wordpiece_ref.txt";
  {
    std::ofstream f(input, std::ios::binary);
    f << in.str();
  }
  const std::string cmd = "/usr/bin/python3 " SPARSELM_SOURCE_DIR "/tests/reference/wordpiece_reference.py " SPARSELM_SOURCE_DIR
                          "/data/bert/vocab.txt " + input + " " + expected;
  REQUIRE_MESSAGE(std::system(cmd.c_str()) == 0, cmd);
  std::ifstream ref(expected);
  std::istringstream lines(in.str() + "\n");  // the reference writes one line per '\n'-separated piece
  std::string text, want;
  std::size_t n = 0, differ = 0;
  while (std::getline(ref, want)) {
    if (!std::getline(lines, text)) text.clear();
    std::string got;
    for (auto id : vocab().encode(text)) {
      if (!got.empty()) got += ' ';
      got += std::to_string(id);
    }
    if (got != want && ++differ <= 5) MESSAGE("line " << n + 1 << ": '" << text << "'\n  ours   " << got << "\n  python " << want);
    ++n;
  }
  CHECK(n > (same_unicode ? 5000 : 2000));
  CHECK(differ == 0);
}

}  // namespace SPARSELM_UNITY_ID
