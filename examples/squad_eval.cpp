// squad_eval: scores SQuAD v1.1 predictions against a dataset file, as the official v1.1
// evaluation does (normalised exact match and token F1, maximum over the ground truths, percent
// over every question of the dataset; a question without a prediction scores 0).
//
//   squad_eval data/squad/dev-v1.1.json predictions.json
//   {"exact_match": 71.25, "f1": 80.4}
//   questions: 80, without a prediction: 3
//
// Rules: sparselm/data/squad_eval.hpp and squad.hpp, docs/design/data.md ("SQuAD").

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>

#include <CLI/CLI.hpp>

#include "cli.hpp"
#include "sparselm/core/json.hpp"
#include "sparselm/core/program.hpp"
#include "sparselm/data/squad.hpp"
#include "sparselm/data/squad_eval.hpp"

namespace sd = sparselm::data;

int main(int argc, char** argv) {
  return sparselm::run_program("squad_eval", [&]() -> int {
    CLI::App app{"Score SQuAD v1.1 predictions ({\"question id\": \"answer text\"}) against a dataset file"};
    std::filesystem::path dataset, predictions;
    examples::reads(app.add_option("dataset", dataset, "SQuAD v1.1 dataset JSON")->required());
    examples::reads(app.add_option("predictions", predictions, "Predictions JSON")->required());
    if (auto status = examples::parse(app, argc, argv)) return *status;

    const sd::squad_dataset d = sd::read_squad(dataset);
    for (const std::string& m : d.skipped.messages) std::cerr << dataset.string() << ": skipped: " << m << "\n";
    const auto preds = sd::read_squad_predictions(predictions);
    const sd::squad_totals t = sd::squad_evaluate(d.graded(), preds);
    SPARSELM_CHECK(t.questions > 0, dataset.string(), ": no question to score");
    const sparselm::json out = {{"exact_match", t.exact_match}, {"f1", t.f1}};
    std::cout << out.dump() << "\n";
    std::cout << "questions: " << t.questions << ", without a prediction: " << t.unanswered << "\n";
    return 0;
  });
}
