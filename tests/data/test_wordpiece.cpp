// WordPiece (uncased BERT) on the real bert-base-uncased vocabulary: known ids, each rule of the
// basic tokenizer, [UNK], bad vocab files and bad input; and agreement with an independent Python
// implementation (tests/reference/wordpiece_reference.py) on the bundled corpus plus a Unicode
// stress text.
#include <doctest/doctest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "sparselm/data/wordpiece.hpp"

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

TEST_CASE("wordpiece: the same ids as the independent Python implementation") {
  if (std::system("/usr/bin/python3 -c 'import unicodedata' > /dev/null 2>&1") != 0) {
    MESSAGE("no /usr/bin/python3: skipping the comparison");
    return;
  }
  // The first 2000 lines of the training corpus, one State of the Union address, and a stress text.
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
    for (auto id : vocab().encode(text)) got += (got.empty() ? "" : " ") + std::to_string(id);
    if (got != want && ++differ <= 5) MESSAGE("line " << n + 1 << ": '" << text << "'\n  ours   " << got << "\n  python " << want);
    ++n;
  }
  CHECK(n > 2000);
  CHECK(differ == 0);
}
