// BERT's fine-tuning models against the PyTorch reference (tests/reference/bert_finetune_reference.py):
// the classification and span (SQuAD) losses and every parameter gradient, and 6 AdamW steps as S4
// fine-tunes (no bias correction, ε 1e-6, linear decay).
//
// The committed reference (tests/reference/data/bert_finetune_parity.json) is used when torch is
// not importable; when it is, the script regenerates the reference first and the test also checks
// that the committed file still equals it.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "../common/parity.hpp"
#include "sparselm/models/bert_finetune.hpp"
#include "sparselm/optim/adam.hpp"
#include "sparselm/train/trainer.hpp"

// Each test file is its own namespace: the area's files are compiled as one unity translation unit
// (tests/CMakeLists.txt), and their helpers must not meet.
namespace SPARSELM_UNITY_ID {

using namespace sparselm;

namespace {

json reference() {
  return test::parity_reference("bert_finetune_parity", "bert_finetune_reference.py", [](const json& f, const json& c) {
    CHECK(f["config"] == c["config"]);
    CHECK(f["ids"] == c["ids"]);
    for (const char* k : {"classify", "span"})
      CHECK_MESSAGE(std::fabs(f[k]["loss"].get<double>() - c[k]["loss"].get<double>()) <= 1e-6,
                    "committed reference is stale (" << k << "): regenerate it with bert_finetune_reference.py");
    CHECK(std::fabs(f["train"]["final_loss"].get<double>() - c["train"]["final_loss"].get<double>()) <= 1e-6);
  });
}

// Every gradient of the model against the reference's, with the worst reported. A tensor whose
// reference gradient is below 1e-6 of the largest is zero in exact arithmetic (the span model's
// last ln_2.bias gets Σ_t (softmax − onehot)·Wqa = 0): there both are rounding noise, and the
// check is |ours − ref| <= 1e-6 · largest instead of a relative error.
template <class Model>
void check_grads(Model& m, const json& g) {
  double scale = 0;
  for (const auto& [name, v] : g.items())
    for (const auto& x : v) scale = std::max(scale, std::fabs(x.template get<double>()));
  double worst = 0;
  std::string worst_name;
  for (const auto& t : *m.layout()) {
    REQUIRE_MESSAGE(g.contains(t.name), "reference has no gradient for " << t.name);
    const auto ref = g[t.name].template get<std::vector<double>>();
    const auto ours = m.grads().at(t.name);
    double ref_max = 0, diff = 0;
    for (std::size_t i = 0; i < ref.size(); ++i)
      ref_max = std::max(ref_max, std::fabs(ref[i])), diff = std::max(diff, std::fabs(double(ours[i]) - ref[i]));
    if (ref_max < 1e-6 * scale) {
      CHECK_MESSAGE(diff <= 1e-6 * scale, t.name << ": gradient zero in exact arithmetic, |ours - ref| " << diff);
      continue;
    }
    const double e = test::rel_err(ours, ref);
    CHECK_MESSAGE(e <= 1e-4, t.name << ": gradient relative error " << e);
    if (e > worst) worst = e, worst_name = t.name;
  }
  MESSAGE("worst gradient relative error " << worst << " (" << worst_name << ")");
}

template <class Model>
void load(Model& m, const json& part) {
  test::load_reference_params(m, json{{"params", part["params"]}});
}

}  // namespace

TEST_CASE("bert_classifier and bert_qa match PyTorch: losses, gradients, AdamW (S4) steps") {
  const json r = reference();
  const auto cfg = bert_config::from_json(r["config"], "reference config");
  const std::size_t B = r["batch"].get<std::size_t>(), T = r["seq"].get<std::size_t>();
  auto v = [&](const char* k) { return r[k].get<std::vector<std::int32_t>>(); };
  const auto ids = v("ids"), types = v("token_types"), lengths = v("lengths"), labels = v("class_labels"),
             starts = v("start_positions"), ends = v("end_positions");

  SUBCASE("classification") {
    bert_classifier<> m(cfg, r["labels"].get<std::size_t>());
    load(m, r["classify"]);
    const bert_classify_batch b{ids, types, lengths, labels, B, T};
    m.grads().zero();
    const auto st = m.forward_backward({}, b, 1.0f);
    CHECK(st.mean_loss() == doctest::Approx(r["classify"]["loss"].get<double>()).epsilon(1e-5));
    check_grads(m, r["classify"]["grads"]);

    load(m, r["classify"]);
    const json& tr = r["train"];
    trainer<bert_classifier<>> t(m, {.clip = clip_mode::none}, optim::adamw<>(tr["optimizer"]),
                                 optim::make_schedule(tr["schedule"]));
    for (std::size_t k = 0; k < tr["steps"].get<std::size_t>(); ++k) {
      const auto sm = t.train_step(std::span<const bert_classify_batch>(&b, 1));
      const double ref = tr["losses"][k].get<double>();
      CHECK_MESSAGE(std::fabs(sm.loss.mean_loss() - ref) <= 1e-4 * std::fabs(ref),
                    "step " << k << ": loss " << sm.loss.mean_loss() << " vs PyTorch " << ref);
    }
    CHECK(m.evaluate(b).mean_loss() == doctest::Approx(tr["final_loss"].get<double>()).epsilon(1e-4));
  }
  SUBCASE("span (SQuAD)") {
    bert_qa<> m(cfg);
    load(m, r["span"]);
    const bert_span_batch b{ids, types, lengths, starts, ends, B, T};
    m.grads().zero();
    const auto st = m.forward_backward({}, b, 1.0f);
    CHECK(st.mean_loss() == doctest::Approx(r["span"]["loss"].get<double>()).epsilon(1e-5));
    CHECK(st.mean_ce() == doctest::Approx(r["span"]["start_loss"].get<double>()).epsilon(1e-5));
    CHECK(st.aux_mean_loss() == doctest::Approx(r["span"]["end_loss"].get<double>()).epsilon(1e-5));
    check_grads(m, r["span"]["grads"]);
  }
}

}  // namespace SPARSELM_UNITY_ID
