#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "sparselm/data/squad.hpp"
#include "sparselm/data/squad_eval.hpp"
#include "sparselm/data/squad_features.hpp"

// Each test file is its own namespace: the area's files are compiled as one unity translation unit
// (tests/CMakeLists.txt), and their helpers must not meet.
namespace SPARSELM_UNITY_ID {

using namespace sparselm::data;
using sparselm::json;

namespace {

std::string parse_error(const std::string& text) {
  try {
    parse_squad(json::parse(text), "t.json");
  } catch (const sparselm::error& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("squad normalisation: case, punctuation, articles, white space") {
  CHECK(squad_normalize("The Cat's HAT!") == "cats hat");
  CHECK(squad_normalize("  a   whale,\tan oil-lamp\n the end ") == "whale oillamp end");
  // Articles only as whole words: inside words they stay.
  CHECK(squad_normalize("theatre another anthem a-b") == "theatre another anthem ab");
  // Punctuation is removed before articles: "the." becomes the article "the".
  CHECK(squad_normalize("(the) A. an!") == "");
  // '_' is a word character for \b, and digits too.
  CHECK(squad_normalize("a_b the1 1the") == "ab the1 1the");
  // Non-ASCII: letters are word characters, no-break space and em space are white space,
  // the em dash is neither (kept, but it bounds the article).
  CHECK(squad_normalize("caf\xC3\xA9 the\xE2\x80\x94" "a\xC2\xA0the\xE2\x80\x83whale") == "caf\xC3\xA9 \xE2\x80\x94 whale");
  CHECK(squad_tokens("The Pequod's  captain") == std::vector<std::string>{"pequods", "captain"});
  CHECK(squad_tokens("").empty());
}

TEST_CASE("squad exact match and F1 by hand") {
  CHECK(squad_exact_match("The Pequod", "pequod"));
  CHECK(squad_exact_match("Captain Ahab.", "captain  ahab"));
  CHECK_FALSE(squad_exact_match("Ahab", "Captain Ahab"));
  // "the white whale of Nantucket" -> [white, whale, of, nantucket] (4 tokens);
  // "a great white whale" -> [great, white, whale] (3 tokens); common = 2.
  // P = 2/4, R = 2/3, F1 = 2PR/(P+R) = (2/3)/(7/6) = 4/7.
  CHECK(squad_f1("the white whale of Nantucket", "a great white whale") == doctest::Approx(4.0 / 7.0));
  // Bag semantics: repeated tokens count as often as both sides have them.
  // pred [whale whale whale] vs truth [whale whale ship]: common 2, P = 2/3, R = 2/3, F1 = 2/3.
  CHECK(squad_f1("whale whale whale", "whale, whale, ship") == doctest::Approx(2.0 / 3.0));
  CHECK(squad_f1("Ahab", "Starbuck") == 0.0);
  CHECK(squad_f1("The Pequod!", "pequod") == 1.0);
  // Empty prediction: no common token, F1 0, not an exact match of a non-empty truth.
  CHECK(squad_f1("", "Ahab") == 0.0);
  CHECK_FALSE(squad_exact_match("", "Ahab"));
  // A prediction made only of an article normalises to empty.
  CHECK(squad_f1("the", "Ahab") == 0.0);
}

TEST_CASE("squad score: maximum over several ground truths, totals in percent") {
  const std::vector<std::string> truths{"Captain Ahab", "Ahab", "the captain of the Pequod"};
  squad_question_score s = squad_score("ahab", truths);
  CHECK(s.exact_match == 1.0);
  CHECK(s.f1 == 1.0);
  // "captain of Pequod": vs "Captain Ahab" common 1, P 1/3 R 1/2 -> 0.4; vs "Ahab" 0;
  // vs "the captain of the Pequod" -> [captain of pequod] exact -> 1.
  s = squad_score("captain of Pequod", truths);
  CHECK(s.exact_match == 1.0);
  s = squad_score("the old captain", truths);
  // vs "Captain Ahab": [old captain] vs [captain ahab]: common 1, P 1/2, R 1/2 -> 0.5;
  // vs [captain of pequod]: common 1, P 1/2, R 1/3 -> 0.4. Maximum 0.5.
  CHECK(s.exact_match == 0.0);
  CHECK(s.f1 == doctest::Approx(0.5));

  const std::vector<squad_graded_question> qs{{"q1", {"Ahab"}}, {"q2", {"white whale"}}, {"q3", {"Nantucket"}},
                                              {"q4", {"Starbuck"}}};
  const std::map<std::string, std::string> preds{{"q1", "Ahab"}, {"q2", "the whale"}, {"q4", "Stubb"}};
  const squad_totals t = squad_evaluate(qs, preds);
  CHECK(t.questions == 4);
  CHECK(t.unanswered == 1);
  // EM: 1 of 4 -> 25 %. F1: q1 1, q2 [whale] vs [white whale] P 1 R 1/2 -> 2/3, q3 0, q4 0.
  CHECK(t.exact_match == doctest::Approx(25.0));
  CHECK(t.f1 == doctest::Approx(100.0 * (1.0 + 2.0 / 3.0) / 4.0));
}

TEST_CASE("squad reader: code-point offsets over UTF-8, skips counted and reported") {
  // "Caf\u00e9 \U0001F40B whale": answer_start counts code points as Python does:
  // C a f é ' ' 🐋 ' ' w -> "whale" starts at character 7, byte 1+1+1+2+1+4+1 = 11.
  const std::string doc = R"({"version": "1.1", "data": [{"title": "T", "paragraphs": [
    {"context": "Caf\u00e9 \ud83d\udc0b whale", "qas": [
      {"id": "q1", "question": "What?", "answers": [{"text": "whale", "answer_start": 7},
                                                     {"text": "whale", "answer_start": 8}]},
      {"id": "q2", "question": "Where?", "answers": [{"text": "Caf\u00e9", "answer_start": 0}]},
      {"id": "q3", "question": "  ", "answers": [{"text": "Caf", "answer_start": 0}]},
      {"id": "q4", "question": "Which?", "answers": [{"text": "whale", "answer_start": 99}]}]},
    {"context": "", "qas": [{"id": "q5", "question": "Who?", "answers": [{"text": "x", "answer_start": 0}]}]}]}]})";
  const squad_dataset d = parse_squad(json::parse(doc), "t.json");
  REQUIRE(d.articles.size() == 1);
  CHECK(d.articles[0].title == "T");
  REQUIRE(d.paragraph_count() == 1);
  const squad_paragraph& p = d.articles[0].paragraphs[0];
  REQUIRE(p.questions.size() == 2);
  CHECK(p.questions[0].id == "q1");
  REQUIRE(p.questions[0].answers.size() == 1);  // the one at character 8 is skipped
  CHECK(p.questions[0].answers[0].start_char == 7);
  CHECK(p.questions[0].answers[0].start_byte == 11);
  CHECK(p.context.substr(11, 5) == "whale");
  CHECK(p.questions[1].answers[0].text == "Caf\xC3\xA9");
  CHECK(d.skipped.answers_not_found == 2);
  CHECK(d.skipped.empty_questions == 1);
  CHECK(d.skipped.questions_without_answers == 1);
  CHECK(d.skipped.empty_contexts == 1);
  CHECK(d.skipped.questions_in_empty_contexts == 1);
  REQUIRE(d.skipped.messages.size() == 5);
  CHECK(d.skipped.messages[0] ==
        "data[0].paragraphs[0].qas[0].answers[1].answer_start: text \"whale\" not found at character 8 of the "
        "context (answer skipped)");
  CHECK(d.question_count() == 2);
  const auto g = d.graded();
  REQUIRE(g.size() == 2);
  CHECK(g[1].id == "q2");
}

TEST_CASE("squad reader: errors name the path, the field and the value") {
  const std::string head = R"({"data": [{"title": "T", "paragraphs": [{"context": "abc", "qas": [)";
  CHECK(parse_error(head + R"({"id": "q", "question": "?", "answers": [{"text": "a", "answer_start": "x"}]}]}]}]})") ==
        "t.json: data[0].paragraphs[0].qas[0].answers[0]: field 'answer_start' must be an integer, got \"x\"");
  CHECK(parse_error(head + R"({"id": "q", "question": "?", "answers": [{"text": "a", "answer_start": -1}]}]}]}]})") ==
        "t.json: data[0].paragraphs[0].qas[0].answers[0]: field 'answer_start' must not be negative, got -1");
  CHECK(parse_error(head + R"({"id": "q", "answers": []}]}]}]})") ==
        "t.json: data[0].paragraphs[0].qas[0]: missing required field 'question'");
  CHECK(parse_error(head + R"({"id": "q", "question": "?", "answers": [], "is_impossible": true}]}]}]})")
            .starts_with("t.json: data[0].paragraphs[0].qas[0]: unknown field 'is_impossible'"));
  CHECK(parse_error(head + R"({"id": "q", "question": "?", "answers": []}, {"id": "q", "question": "?", "answers": []}]}]}]})") ==
        "t.json: data[0].paragraphs[0].qas[1]: duplicate question id \"q\" (first at data[0].paragraphs[0].qas[0])");
  CHECK(parse_error(R"({"data": {}})") == "t.json: field 'data' must be an array, got {}");
  CHECK(parse_error(R"({"data": [{"paragraphs": [{"qas": []}]}]})") ==
        "t.json: data[0].paragraphs[0]: missing required field 'context'");
}

namespace {

const std::filesystem::path squad_dir = std::filesystem::path(SPARSELM_SOURCE_DIR) / "data" / "squad";

std::string run_capture(const std::string& cmd) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  REQUIRE(pclose(p) == 0);
  return out;
}

}  // namespace

TEST_CASE("squad: the committed dataset loads with every answer found, contexts disjoint") {
  std::set<std::string> contexts[2];
  std::size_t questions = 0;
  int k = 0;
  for (const char* name : {"train-v1.1.json", "dev-v1.1.json"}) {
    const squad_dataset d = read_squad(squad_dir / name);
    CAPTURE(name);
    CHECK(d.skipped.total() == 0);
    CHECK(d.skipped.messages.empty());
    for (const auto& a : d.articles)
      for (const auto& p : a.paragraphs) {
        contexts[k].insert(p.context);
        for (const auto& q : p.questions) {
          CHECK(!q.answers.empty());
          CHECK(q.answers.size() <= (k == 0 ? 1u : 3u));
          for (const auto& ans : q.answers) CHECK(p.context.compare(ans.start_byte, ans.text.size(), ans.text) == 0);
        }
      }
    questions += d.question_count();
    ++k;
  }
  CHECK(questions >= 300);
  CHECK(contexts[0].size() + contexts[1].size() >= 30);
  for (const std::string& c : contexts[1]) CHECK(!contexts[0].contains(c));
}

TEST_CASE("squad: scores equal an independent Python scorer on perturbed predictions") {
  if (!std::filesystem::exists("/usr/bin/python3")) {
    MESSAGE("skipped: /usr/bin/python3 not found");
    return;
  }
  const std::string script = (std::filesystem::path(SPARSELM_SOURCE_DIR) / "tests" / "reference" /
                              "squad_eval_reference.py").string();
  const std::filesystem::path tmp = std::filesystem::path(SPARSELM_TEST_TMPDIR) / "data_squad";
  std::filesystem::create_directories(tmp);
  // The committed files are what scripts/make_squad_set.py builds from data/squad/questions.txt.
  run_capture("/usr/bin/python3 " + (std::filesystem::path(SPARSELM_SOURCE_DIR) / "scripts" / "make_squad_set.py").string() +
              " --check");
  int compared = 0;
  for (const char* name : {"train-v1.1.json", "dev-v1.1.json"})
    for (int seed : {1, 2, 3}) {
      const std::string data = (squad_dir / name).string();
      const std::string preds = (tmp / ("preds-" + std::to_string(seed) + "-" + name)).string();
      run_capture("/usr/bin/python3 " + script + " --perturb " + std::to_string(seed) + " " + data + " " + preds);
      const json py = json::parse(run_capture("/usr/bin/python3 " + script + " " + data + " " + preds));
      const squad_totals t = squad_evaluate(read_squad(data).graded(), read_squad_predictions(preds));
      CAPTURE(name);
      CAPTURE(seed);
      CHECK(t.exact_match == doctest::Approx(py["exact_match"].get<double>()).epsilon(1e-12));
      CHECK(t.f1 == doctest::Approx(py["f1"].get<double>()).epsilon(1e-12));
      CHECK(t.unanswered == py["unanswered"].get<std::size_t>());
      // The perturbations give a spread of scores, not all 0 or all 100.
      CHECK(t.f1 > 20.0);
      CHECK(t.f1 < 95.0);
      ++compared;
    }
  CHECK(compared == 6);
}

TEST_CASE("squad features: windows, segments, max context, answer positions; post-processing") {
  const auto wp = wordpiece::from_file(std::filesystem::path(SPARSELM_SOURCE_DIR) / "data" / "bert" / "vocab.txt");
  const std::string ctx = "one two three four five six Seven eight nine ten";
  const std::string doc = R"({"data": [{"paragraphs": [{"context": ")" + ctx +
                          R"(", "qas": [{"id": "q", "question": "what number?", "answers": [{"text": "Seven eight", "answer_start": 28}]}]}]}]})";
  const squad_dataset d = parse_squad(json::parse(doc), "t.json");
  REQUIRE(d.question_count() == 1);
  const auto ex = squad_examples(d);
  REQUIRE(ex.size() == 1);
  REQUIRE(ex[0].words.size() == 10);
  CHECK(ex[0].words[6] == "Seven");
  REQUIRE(wp.encode(ctx).size() == 10);            // one token per word
  REQUIRE(wp.encode("what number?").size() == 3);  // what number ?

  // max_seq 10: 10 - 3 - 3 = 4 context tokens per window, stride 2 -> windows at 0, 2, 4, 6.
  squad_feature_options o;
  o.max_seq = 10;
  o.doc_stride = 2;
  const auto f = squad_features(ex, wp, o, true);
  REQUIRE(f.size() == 4);
  const std::vector<std::int32_t> head{wp.cls_id(), wp.id("what"), wp.id("number"), wp.id("?"), wp.sep_id()};
  for (std::size_t w = 0; w < 4; ++w) {
    CAPTURE(w);
    CHECK(std::equal(head.begin(), head.end(), f[w].ids.begin()));
    CHECK(f[w].ids[9] == wp.sep_id());
    CHECK(f[w].segments == std::vector<std::int32_t>{0, 0, 0, 0, 0, 1, 1, 1, 1, 1});
    CHECK(f[w].mask == std::vector<std::int32_t>(10, 1));
    CHECK(f[w].token_to_word.size() == 4);
    CHECK(f[w].token_to_word.at(5) == 2 * w);  // first context position -> word 2w
  }
  // The answer (tokens 6..7) is whole only in windows 2 (start 4) and 3 (start 6).
  CHECK((f[0].start == 0 && f[0].end == 0));
  CHECK((f[1].start == 0 && f[1].end == 0));
  CHECK((f[2].start == 5 + 2 && f[2].end == 5 + 3));
  CHECK((f[3].start == 5 && f[3].end == 6));
  // Token 6: window 2 scores min(2, 1) + 0.04, window 3 min(0, 3) + 0.04 -> window 2.
  // Token 7: window 2 min(3, 0), window 3 min(1, 2) -> window 3.
  CHECK(f[2].max_context.at(7));
  CHECK_FALSE(f[3].max_context.at(5));
  CHECK_FALSE(f[2].max_context.at(8));
  CHECK(f[3].max_context.at(6));

  // Padding: one window of 10 context tokens in max_seq 20, 4 [PAD] with mask 0.
  o.max_seq = 20;
  const auto g = squad_features(ex, wp, o, false);
  REQUIRE(g.size() == 1);
  CHECK(g[0].ids[15] == wp.sep_id());
  CHECK(g[0].ids[16] == wp.pad_id());
  CHECK(g[0].mask[15] == 1);
  CHECK(g[0].mask[16] == 0);
  CHECK((g[0].start == 0 && g[0].end == 0));  // not training

  // Post-processing over the four windows of max_seq 10.
  std::vector<std::vector<float>> s(4, std::vector<float>(10, 0.0f)), e = s;
  s[0][1] = 100.0f;  // a question token: never an answer
  s[3][5] = 50.0f;   // token 6 in window 3, not its max-context window: rejected
  e[3][5] = 50.0f;   // (and no other start <= this end is allowed)
  s[2][7] = 5.0f;    // token 6 in window 2 (max context) ...
  e[2][8] = 4.0f;    // ... to token 7: "Seven eight", the original words
  s[1][8] = 20.0f;   // start after end: rejected
  e[1][5] = 20.0f;   // (token 2, whose max context is window 0: no start in window 1 fits)
  squad_postprocess_options po;
  auto best = squad_best_answers(wp, ex, f, s, e, po);
  CHECK(best.at("q") == "Seven eight");
  po.max_answer_tokens = 1;  // the two-token answer is too long; the best one-token pair wins
  best = squad_best_answers(wp, ex, f, s, e, po);
  CHECK(best.at("q") == "Seven");
  // get_final_text: the words are trimmed to the predicted tokens' characters.
  CHECK(squad_final_text(wp, "1851", "(1851).") == "1851");
  CHECK(squad_final_text(wp, "ahab ' s", "Ahab's") == "Ahab's");
  CHECK(squad_final_text(wp, "pequod", "Pequod,") == "Pequod");
  CHECK(squad_final_text(wp, "whale", "(1851).") == "(1851).");  // not found: the words unchanged
  // Wrong logit shapes are an error.
  s[0].resize(9);
  CHECK_THROWS_AS(squad_best_answers(wp, ex, f, s, e, po), sparselm::error);
}

TEST_CASE("squad features on the committed train set: every answer lands on its words") {
  const auto wp = wordpiece::from_file(std::filesystem::path(SPARSELM_SOURCE_DIR) / "data" / "bert" / "vocab.txt");
  const squad_dataset d = read_squad(squad_dir / "train-v1.1.json");
  const auto ex = squad_examples(d);
  const auto f = squad_features(ex, wp, {}, true);
  std::vector<int> found(ex.size(), 0);
  for (const squad_feature& x : f) {
    REQUIRE(x.ids.size() == 384);
    if (x.start == 0) continue;
    ++found[x.question];
    const squad_example& e = ex[x.question];
    const squad_answer& a = e.question->answers[0];
    CHECK(x.start <= x.end);
    CHECK(x.token_to_word.at(x.start) == e.char_to_word[a.start_byte]);
    CHECK(x.token_to_word.at(x.end) == e.char_to_word[a.start_byte + a.text.size() - 1]);
  }
  // Contexts of at most 250 words fit one 384-token window: every answer is found once.
  CHECK(f.size() == ex.size());
  CHECK(std::count(found.begin(), found.end(), 1) == std::ptrdiff_t(ex.size()));
}

}  // namespace SPARSELM_UNITY_ID
