#include <doctest/doctest.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "data_test_paths.hpp"
#include "sparselm/core/rng.hpp"
#include "sparselm/data/gpt2_bpe.hpp"

// Each test file is its own namespace: the area's files are compiled as one unity translation unit
// (tests/CMakeLists.txt), and their helpers must not meet.
namespace SPARSELM_UNITY_ID {

using namespace sparselm;
using namespace sparselm::data;
namespace fs = std::filesystem;

namespace {

using test::gpt2_dir;

gpt2_bpe& tokenizer() {
  static gpt2_bpe tok = gpt2_bpe::from_directory(gpt2_dir);
  return tok;
}

struct golden {
  std::string encoding, sample;
  std::vector<std::int32_t> ids;
  std::size_t line;
};

// Blocks of "EncodingName: X" / "Sample: text" / "Encoded: [a, b, ...]" separated by blank lines.
std::vector<golden> read_test_plans(const fs::path& path) {
  std::string text = read_file_bytes(path);
  std::vector<golden> out;
  golden cur;
  std::size_t pos = 0, line_no = 0;
  while (pos < text.size()) {
    std::size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    std::string line = text.substr(pos, nl - pos);
    pos = nl + 1;
    ++line_no;
    if (line.rfind("EncodingName: ", 0) == 0) {
      cur = golden{line.substr(14), {}, {}, line_no};
    } else if (line.rfind("Sample: ", 0) == 0) {
      cur.sample = line.substr(8);
    } else if (line.rfind("Encoded: [", 0) == 0) {
      std::string list = line.substr(10);
      REQUIRE_MESSAGE(!list.empty(), "TestPlans.txt:", line_no);
      REQUIRE_MESSAGE(list.back() == ']', "TestPlans.txt:", line_no);
      list.pop_back();
      std::size_t p = 0;
      while (p < list.size()) {
        std::size_t q = list.find(',', p);
        if (q == std::string::npos) q = list.size();
        cur.ids.push_back(std::int32_t(std::stol(list.substr(p, q - p))));
        p = q + 1;
      }
      out.push_back(cur);
    } else {
      REQUIRE_MESSAGE(line.empty(), "TestPlans.txt:", line_no, ": unexpected line");
    }
  }
  return out;
}

std::string hexdump(std::string_view s) {
  static constexpr char hex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) {
    out += hex[c >> 4];
    out += hex[c & 15];
    out += ' ';
  }
  return out;
}

}  // namespace

TEST_CASE("gpt2 bpe: exact on every r50k_base vector of TestPlans.txt") {
  const fs::path plans = gpt2_dir / "TestPlans.txt";
  REQUIRE_MESSAGE(fs::exists(plans), plans.string(), " missing: run scripts/fetch_assets.sh --refresh-data");
  auto all = read_test_plans(plans);
  auto& tok = tokenizer();
  std::size_t checked = 0;
  for (const auto& g : all) {
    if (g.encoding != "r50k_base") continue;
    ++checked;
    auto ids = tok.encode(g.sample);
    CHECK_MESSAGE(ids == g.ids, "TestPlans.txt:", g.line, ": ", g.sample);
    CHECK(tok.decode(ids) == g.sample);
  }
  MESSAGE("checked ", checked, " r50k_base vectors of ", all.size(), " in TestPlans.txt");
  CHECK(checked == 64);
}

TEST_CASE("gpt2 bpe: vocabulary facts") {
  auto& tok = tokenizer();
  CHECK(tok.vocab_size() == 50257);
  CHECK(tok.merge_count() == 50000);
  CHECK(tok.endoftext_id() == gpt2_endoftext_id);
  CHECK(tok.uses_heap_bpe());
  CHECK(tok.token_bytes(15496) == "Hello");
  CHECK(tok.token_bytes(995) == " world");
  CHECK(tok.token_id(" world") == 995);
  CHECK(tok.token_id("no such token at all") == -1);
}

TEST_CASE("gpt2 bpe: hand-checked encodings") {
  auto& tok = tokenizer();
  using v = std::vector<std::int32_t>;
  CHECK(tok.encode("Hello world") == v{15496, 995});
  CHECK(tok.encode("I'm here, they're not; we'll see") == v{40, 1101, 994, 11, 484, 821, 407, 26, 356, 1183, 766});
  // White space: a run before a word leaves its last space to the word; a run at the end stays whole.
  CHECK(tok.encode("  two  spaces\n\nnew\tline  ") == v{220, 734, 220, 9029, 198, 198, 3605, 197, 1370, 220, 220});
  CHECK(tok.encode("12345 678.9") == v{10163, 2231, 718, 3695, 13, 24});
  CHECK(tok.encode("don't   stop") == v{9099, 470, 220, 220, 2245});
  CHECK(tok.encode("''s") == v{7061, 82});
  CHECK(tok.encode(" 's") == v{705, 82});
  CHECK(tok.encode("a\u3000\u3000b") == v{64, 5099, 222, 5099, 222, 65});  // ideographic spaces
  CHECK(tok.encode("x  \n y") == v{87, 220, 220, 198, 331});
  CHECK(tok.encode("").empty());
}

TEST_CASE("gpt2 pre-tokenisation pieces") {
  using sv = std::vector<std::string_view>;
  CHECK(gpt2_pretokenize("Hello, world!") == sv{"Hello", ",", " world", "!"});
  CHECK(gpt2_pretokenize("it's 'sam' they'LL") == sv{"it", "'s", " '", "sam", "'", " they", "'", "LL"});
  CHECK(gpt2_pretokenize("a   b") == sv{"a", "  ", " b"});
  CHECK(gpt2_pretokenize("a \n\n b") == sv{"a", " \n\n", " b"});
  CHECK(gpt2_pretokenize("a\tb") == sv{"a", "\t", "b"});
  CHECK(gpt2_pretokenize("end  ") == sv{"end", "  "});
  CHECK(gpt2_pretokenize("x1 23 ?!") == sv{"x", "1", " 23", " ?!"});
  CHECK(gpt2_pretokenize("caf\xC3\xA9 \xE2\x82\xAC" "5") == sv{"caf\xC3\xA9", " \xE2\x82\xAC", "5"});
  // Invalid bytes are "other" characters, one byte each, and join neighbouring punctuation.
  CHECK(gpt2_pretokenize("a\xFF\xFE" "b") == sv{"a", "\xFF\xFE", "b"});
  CHECK(gpt2_pretokenize("x \xC3(") == sv{"x", " \xC3(", });
  CHECK(gpt2_pretokenize("\xE2\x82 z") == sv{"\xE2\x82", " z"});  // truncated 3-byte sequence
  CHECK(gpt2_pretokenize("\xED\xA0\x80" "a") == sv{"\xED\xA0\x80", "a"});  // encoded surrogate
  CHECK(gpt2_pretokenize("\xC0\xAF" "a") == sv{"\xC0\xAF", "a"});          // overlong '/'
  CHECK(gpt2_pretokenize("'") == sv{"'"});
}

TEST_CASE("gpt2 bpe: decode(encode(bytes)) == bytes for random bytes, invalid UTF-8 included") {
  auto& tok = tokenizer();
  counter_rng rng(42);
  // Fragments that stress the UTF-8 reader and the pre-tokeniser.
  const std::vector<std::string> frags = {"a", " ", "  ", "\n", "\t", "'s", "'", "x", "7", "\xC3\xA9", "\xE2\x82\xAC",
                                          "\xF0\x9F\x98\x80", "\xE3\x80\x80", "\xC3", "\xE2\x82", "\xF0\x9F\x98",
                                          "\x80", "\xBF", "\xC0\xAF", "\xED\xA0\x80", "\xF4\x90\x80\x80", "\xFF",
                                          "\xFE", "<|endoftext|>", "\x00", "\xC2\xA0", "\xE2\x80\xA8"};
  std::uint64_t idx = 0;
  for (int trial = 0; trial < 400; ++trial) {
    std::string s;
    std::size_t len = rng.below(1, idx++, 200);
    for (std::size_t i = 0; i < len; ++i) {
      if (trial % 2 == 0) s += char(rng.below(2, idx++, 256));  // raw random bytes
      else s += frags[rng.below(3, idx++, frags.size())];
    }
    auto ids = tok.encode(s);
    for (auto id : ids) REQUIRE((id >= 0 && id < 50257));
    REQUIRE_MESSAGE(tok.decode(ids) == s, "bytes: ", hexdump(s));
    auto with_specials = tok.encode(s, specials::allow);
    REQUIRE_MESSAGE(tok.decode(with_specials) == s, "bytes: ", hexdump(s));
  }
}

TEST_CASE("gpt2 bpe: the heap form of BPE equals the reference form") {
  gpt2_bpe simple = tokenizer(), heap = tokenizer();
  simple.set_heap_threshold(SIZE_MAX);
  heap.set_heap_threshold(0);
  std::string text = read_file_bytes(test::corpus_dir / "valid/moby_dick.txt").substr(0, 60000);
  CHECK(simple.encode(text) == heap.encode(text));
  counter_rng rng(7);
  for (int t = 0; t < 50; ++t) {
    std::string word;  // long pieces: letters only, digits only, punctuation only
    const char* alphabet = t % 3 == 0 ? "abcdeghilmnorst" : t % 3 == 1 ? "0123456789" : "!?.,-=*#";
    std::size_t k = std::strlen(alphabet);
    for (int i = 0; i < 300; ++i) word += alphabet[rng.below(t, i, k)];
    CHECK(simple.encode(word) == heap.encode(word));
  }
  CHECK(simple.encode(std::string(5000, 'a')) == heap.encode(std::string(5000, 'a')));
}

TEST_CASE("gpt2 bpe: <|endoftext|> is special only when allowed") {
  auto& tok = tokenizer();
  using v = std::vector<std::int32_t>;
  CHECK(tok.encode("<|endoftext|>") == v{27, 91, 437, 1659, 5239, 91, 29});
  CHECK(tok.encode("<|endoftext|>", specials::allow) == v{50256});
  CHECK(tok.encode("a<|endoftext|>b", specials::allow) == v{64, 50256, 65});
  CHECK(tok.encode("Hi<|endoftext|><|endoftext|> there", specials::allow) == v{17250, 50256, 50256, 612});
  CHECK(tok.encode("<|endoftext", specials::allow) == tok.encode("<|endoftext"));
  CHECK(tok.decode(v{50256}) == "<|endoftext|>");
  // Appending form keeps what is already there.
  v out{1};
  tok.encode("a", out);
  CHECK(out == v{1, 64});
}

TEST_CASE("gpt2 bpe: decode rejects out-of-range ids naming the id and its position") {
  auto& tok = tokenizer();
  std::vector<std::int32_t> ids{15496, 995, 50257};
  CHECK_THROWS_WITH_AS(tok.decode(ids), doctest::Contains("token id 50257 at position 2"), sparselm::error);
  ids = {-1};
  CHECK_THROWS_WITH_AS(tok.decode(ids), doctest::Contains("token id -1 at position 0"), sparselm::error);
  CHECK_THROWS_AS(tok.token_bytes(60000), sparselm::error);
}

namespace {
// A tiny valid vocabulary: the 256 byte tokens (ids 0..255 in byte order) + merges.
std::string tiny_encoder(const std::vector<std::string>& extra) {
  nlohmann::json j = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) {
    std::string key;
    append_utf8(key, data::detail::gpt2_bytes.to_cp[b]);
    j[key] = b;
  }
  int id = 256;
  for (const auto& e : extra) j[e] = id++;
  return j.dump(1);
}
}  // namespace

TEST_CASE("gpt2 bpe: custom vocabulary and merge order") {
  // "ab" then "abc": merges happen by rank, all occurrences of the best pair at once.
  auto tok = gpt2_bpe::from_strings(tiny_encoder({"ab", "abc", "bc"}), "#version: 0.2\na b\nab c\nb c\n", "tiny");
  CHECK(tok.vocab_size() == 259);
  CHECK(tok.endoftext_id() == -1);
  using v = std::vector<std::int32_t>;
  CHECK(tok.encode("abc") == v{257});
  CHECK(tok.encode("bcab") == v{258, 256});
  CHECK(tok.encode("abab") == v{256, 256});
  CHECK(tok.encode("<|endoftext|>", specials::allow) == tok.encode("<|endoftext|>"));  // no special id
}

TEST_CASE("gpt2 bpe: malformed files are rejected naming the file and the line or key") {
  const std::string good = tiny_encoder({"ab"});
  auto err = [](auto&& f) {
    try {
      f();
    } catch (const sparselm::error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  // JSON syntax error on line 3.
  std::string bad_json = "{\n\"a\": 1,\n\"b\" 2\n}";
  CHECK_MESSAGE(err([&] { gpt2_bpe::from_strings(bad_json, "", "t"); }).find("t/encoder.json:3: invalid JSON") !=
                    std::string::npos,
                err([&] { gpt2_bpe::from_strings(bad_json, "", "t"); }));
  CHECK(err([&] { gpt2_bpe::from_strings("[1, 2]", "", "t"); }).find("t/encoder.json: expected a JSON object") !=
        std::string::npos);
  CHECK(err([&] { gpt2_bpe::from_strings(R"({"a": "x"})", "", "t"); }).find("key \"a\": id must be an integer") !=
        std::string::npos);
  CHECK(err([&] { gpt2_bpe::from_strings(R"({"a": 5})", "", "t"); }).find("key \"a\": id 5 is outside") !=
        std::string::npos);
  CHECK(err([&] { gpt2_bpe::from_strings(R"({"a": 0, "b": 0})", "", "t"); }).find("id 0 is used by both") !=
        std::string::npos);
  CHECK(err([&] { gpt2_bpe::from_strings(R"({"a b": 0})", "", "t"); }).find("outside GPT-2's byte alphabet") !=
        std::string::npos);
  CHECK(err([&] { gpt2_bpe::from_strings(R"({"a": 0})", "", "t"); }).find("no token for byte 0") != std::string::npos);
  // vocab.bpe errors name the line.
  CHECK(err([&] { gpt2_bpe::from_strings(good, "#version: 0.2\na b\nab\n", "t"); }).find("t/vocab.bpe:3: expected two tokens") !=
        std::string::npos);
  CHECK(err([&] { gpt2_bpe::from_strings(good, "#version: 0.2\nb c\n", "t"); }).find("t/vocab.bpe:2: merged token \"bc\" is not in the encoder") !=
        std::string::npos);
  CHECK(err([&] { gpt2_bpe::from_strings(good, "a b\na b\n", "t"); }).find("t/vocab.bpe:2: merge \"a b\" is listed twice") !=
        std::string::npos);
  CHECK(err([&] { gpt2_bpe::from_strings(good, "a zz\n", "t"); }).find("t/vocab.bpe:1: token \"zz\" is not in the encoder") !=
        std::string::npos);
  CHECK(err([] { gpt2_bpe::from_files("/nonexistent/encoder.json", "/nonexistent/vocab.bpe"); })
            .find("/nonexistent/encoder.json: cannot open") != std::string::npos);
}

}  // namespace SPARSELM_UNITY_ID
