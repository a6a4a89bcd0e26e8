#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "../common/errors.hpp"
#include "../common/scratch.hpp"
#include "sparselm/data/text_classification.hpp"

// Each test file is its own namespace: the area's files are compiled as one unity translation unit
// (tests/CMakeLists.txt), and their helpers must not meet.
namespace SPARSELM_UNITY_ID {

using namespace sparselm::data;

using sparselm::test::error_of;

TEST_CASE("email_text: subject, quoted-printable body, HTML and long words dropped, whitespace collapsed") {
  const std::string raw =
      "From someone  Thu Aug 22 13:17:22 2002\n"
      "Return-Path: <a@b.c>\n"
      "Subject: Life Insurance -\n"
      "\tWhy Pay More?\n"
      "Content-Type: text/html; charset=\"iso-8859-1\"\n"
      "Content-Transfer-Encoding: quoted-printable\n"
      "\n"
      "<HTML><HEAD><STYLE>p { color: red }</STYLE></HEAD><BODY>Save =\n"
      "up to 70%&nbsp;today &amp; =3D more<BR>\n"
      "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA end</BODY></HTML>\n";
  CHECK(email_text(raw) == "Life Insurance - Why Pay More? Save up to 70% today & = more end");
  // Without quoted-printable, "=3D" stays; a message without headers is all body.
  CHECK(email_text("Subject: hi\n\na =3D b") == "hi a =3D b");
  CHECK(email_text("no headers at all") == "no headers at all");
  // max_bytes cuts at a character boundary.
  const std::string cut = email_text("Subject: x\n\nabc \xC3\xA9\xC3\xA9", 6);
  CHECK(cut == "x abc ");
  // Latin-1 bytes become UTF-8: "caf\xE9" -> "café"; valid UTF-8 stays.
  CHECK(email_text("Subject: caf\xE9\n\n\xC3\xA9t\xE9") == "caf\xC3\xA9 \xC3\xA9t\xC3\xA9");
  // An unterminated tag drops the rest, never reads past the end.
  CHECK(email_text("Subject: s\n\nkeep <a href=") == "s keep");
}

TEST_CASE("read_spamassassin: labels by group, split fixed by the MD5 in the name, clear errors") {
  const auto dir = sparselm::test::fresh_dir("text_classification", "spam");
  for (const char* g : {"easy-ham-1", "easy-ham-2", "hard-ham-1", "spam-1", "spam-2"})
    std::filesystem::create_directories(dir / g);
  using sparselm::test::spit;
  // 0x1000/65536 = 0.0625 < 0.2: held out; 0xf000: training
  spit(dir / "easy-ham-1/00001.1000aaaa.txt", "Subject: meeting\n\nsee you at noon\n");
  spit(dir / "easy-ham-1/00002.f000aaaa.txt", "Subject: lunch\n\nsandwiches\n");
  spit(dir / "easy-ham-1/00002.f000aaaa.json", "{}");  // not a .txt: ignored
  spit(dir / "easy-ham-2/00001.f100aaaa.txt", "Subject: a\n\nb\n");
  spit(dir / "hard-ham-1/00001.f200aaaa.txt", "Subject: c\n\nd\n");
  spit(dir / "spam-1/00001.2000aaaa.txt", "Subject: WIN\n\nmoney now\n");
  spit(dir / "spam-2/00001.e000aaaa.txt", "Subject: FREE\n\ncash\n");
  const auto set = read_spamassassin(dir, 0.2);
  CHECK(set.label_names == std::vector<std::string>{"ham", "spam"});
  REQUIRE(set.test.size() == 2);
  REQUIRE(set.train.size() == 4);
  CHECK(set.test[0].id == "easy-ham-1/00001.1000aaaa.txt");
  CHECK(set.test[0].label == 0);
  CHECK(set.test[0].text == "meeting see you at noon");
  CHECK(set.test[1].label == 1);
  CHECK(set.train.back().label == 1);
  CHECK(set.train.back().text == "FREE cash");
  // At 0.9 (threshold 58982) 0xe000 = 57344 is held out too; 0xf000.. stay in training.
  CHECK(read_spamassassin(dir, 0.9).test.size() == 3);

  spit(dir / "spam-2/bad-name.txt", "x");
  CHECK(error_of([&] { read_spamassassin(dir); }).find("bad-name.txt: name is not NNNNN.<md5>.txt") !=
        std::string::npos);
  std::filesystem::remove(dir / "spam-2/bad-name.txt");
  std::filesystem::remove_all(dir / "hard-ham-1");
  CHECK(error_of([&] { read_spamassassin(dir); }).find("hard-ham-1: missing") != std::string::npos);
  CHECK(error_of([&] { read_spamassassin(dir / "nowhere"); }).find("not a directory") != std::string::npos);
}

TEST_CASE("read_labelled_jsonl: string and number labels, errors naming the line") {
  const auto dir = sparselm::test::fresh_dir("text_classification", "jsonl");
  using sparselm::test::spit;
  spit(dir / "train.jsonl", "{\"text\": \"a\", \"label\": \"pos\"}\n\n{\"text\": \"b\", \"label\": \"neg\"}\n");
  std::vector<std::string> names;
  const auto train = read_labelled_jsonl(dir / "train.jsonl", names, true);
  REQUIRE(train.size() == 2);
  CHECK(names == std::vector<std::string>{"pos", "neg"});
  CHECK(train[1].label == 1);
  CHECK(train[1].id == "line 3");
  spit(dir / "test.jsonl", "{\"text\": \"c\", \"label\": \"neg\"}\n{\"text\": \"d\", \"label\": \"other\"}\n");
  CHECK(error_of([&] { read_labelled_jsonl(dir / "test.jsonl", names, false); })
            .find("test.jsonl:2: label 'other' is not one of the training labels") != std::string::npos);
  spit(dir / "num.jsonl", "{\"text\": \"c\", \"label\": 1}\n{\"text\": \"d\", \"label\": 5}\n");
  CHECK(error_of([&] { read_labelled_jsonl(dir / "num.jsonl", names, false); })
            .find("num.jsonl:2: label 5 is not below the 2 training labels") != std::string::npos);
  spit(dir / "bad.jsonl", "{\"text\": \"c\", \"label\": -1}\n");
  CHECK(error_of([&] { read_labelled_jsonl(dir / "bad.jsonl", names, false); })
            .find("bad.jsonl:1: label must be a string or a whole number >= 0") != std::string::npos);
  spit(dir / "notext.jsonl", "{\"label\": 0}\n");
  CHECK(error_of([&] { read_labelled_jsonl(dir / "notext.jsonl", names, false); }).find("notext.jsonl:1: no string") !=
        std::string::npos);
  spit(dir / "broken.jsonl", "{\"text\": \"c\"\n");
  CHECK(error_of([&] { read_labelled_jsonl(dir / "broken.jsonl", names, false); })
            .find("broken.jsonl:1 is not valid JSON") != std::string::npos);
  spit(dir / "latin1.jsonl", "{\"text\": \"caf\xE9\", \"label\": \"a\"}\n");
  CHECK(error_of([&] { read_labelled_jsonl(dir / "latin1.jsonl", names, true); }).find("latin1.jsonl:1 is not valid JSON") !=
        std::string::npos);
  spit(dir / "array.jsonl", "[1, 2]\n");
  CHECK(error_of([&] { read_labelled_jsonl(dir / "array.jsonl", names, true); }).find("array.jsonl:1: not a JSON object") !=
        std::string::npos);
  spit(dir / "empty.jsonl", "\n");
  CHECK(error_of([&] { read_labelled_jsonl(dir / "empty.jsonl", names, false); }).find("empty.jsonl: no examples") !=
        std::string::npos);
  CHECK(error_of([&] { read_labelled_jsonl(dir / "missing.jsonl", names, false); }).find("cannot open") !=
        std::string::npos);
}

}  // namespace SPARSELM_UNITY_ID
