// libFuzzer: SQuAD v1.1 JSON (data/squad.hpp) through the whole fine-tuning data path: the reader,
// examples, features (windows of 24 tokens, stride 5, the bundled WordPiece vocabulary) and the
// post-processing of logits derived from the input into answer texts. A bad file may only be a
// sparselm::error (or skips); every answer must come from its context's words (or be "empty").
#include <string>
#include <vector>

#include "fuzz_common.hpp"
#include "sparselm/core/json.hpp"
#include "sparselm/data/squad.hpp"
#include "sparselm/data/squad_eval.hpp"
#include "sparselm/data/squad_features.hpp"

namespace sd = sparselm::data;

SPARSELM_FUZZ_TARGET(squad) {
  static const sd::wordpiece wp = sd::wordpiece::from_file(SPARSELM_SOURCE_DIR "/data/bert/vocab.txt");
  fuzz::expect_clean([&] {
    const auto doc = sparselm::json::parse(fuzz::text(data, size), nullptr, /*allow_exceptions=*/false);
    if (doc.is_discarded()) return;
    const sd::squad_dataset d = sd::parse_squad(doc, "fuzz.json");
    const auto examples = sd::squad_examples(d);
    const sd::squad_feature_options fo{.max_seq = 24, .max_query_tokens = 8, .doc_stride = 5};
    for (bool training : {true, false}) {
      const auto features = sd::squad_features(examples, wp, fo, training);
      std::vector<std::vector<float>> s(features.size()), e(features.size());
      for (std::size_t f = 0; f < features.size(); ++f)
        for (std::size_t p = 0; p < features[f].ids.size(); ++p) {
          s[f].push_back(float(data[(f + p) % size]));
          e[f].push_back(float(data[(f + 3 * p + 1) % size]));
        }
      const auto answers = sd::squad_best_answers(wp, examples, features, s, e, {.n_best = 4, .max_answer_tokens = 6});
      for (const auto& ex : examples) {
        const auto it = answers.find(ex.question->id);
        if (it == answers.end()) std::abort();
        std::string words;  // the context's words, one space apart: every answer is a piece of it
        for (const auto& w : ex.words) words += (words.empty() ? "" : " ") + w;
        if (it->second != "empty" && words.find(it->second) == std::string::npos) std::abort();
      }
      (void)sd::squad_evaluate(d.graded(), answers);
    }
  });
  return 0;
}
