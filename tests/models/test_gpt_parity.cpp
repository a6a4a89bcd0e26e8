// GPT against the PyTorch reference (tests/reference/gpt_reference.py): logits, loss, every
// parameter gradient, and the losses of 10 AdamW steps with clipping and a warmup + cosine schedule.
//
// The committed reference (tests/reference/data/gpt_tiny_parity.json) is used when torch is not
// importable. When it is, the script regenerates the reference first; the test then compares
// against the fresh file and also checks that the committed file still equals it, so neither a
// change in sparselm nor a change in the reference script can hide behind a stale file.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "../common/parity.hpp"
#include "sparselm/models/gpt.hpp"
#include "sparselm/train/trainer.hpp"

// Each test file is its own namespace: the area's files are compiled as one unity translation unit
// (tests/CMakeLists.txt), and their helpers must not meet.
namespace SPARSELM_UNITY_ID {

using namespace sparselm;

namespace {

json reference() {
  return test::parity_reference("gpt_tiny_parity", "gpt_reference.py", [](const json& f, const json& c) {
    // the committed file must match what the script produces now
    CHECK(f["config"] == c["config"]);
    CHECK(f["ids"] == c["ids"]);
    CHECK(std::fabs(f["loss"].get<double>() - c["loss"].get<double>()) <= 1e-6);
    for (std::size_t k = 0; k < f["losses"].size(); ++k)
      CHECK_MESSAGE(std::fabs(f["losses"][k].get<double>() - c["losses"][k].get<double>()) <= 1e-5,
                    "committed reference is stale (step " << k << "): regenerate it with tests/reference/gpt_reference.py");
  });
}

token_batch batch_of(const json& r, std::size_t k, std::vector<std::int32_t>& ids, std::vector<std::int32_t>& tg) {
  ids = r["ids"][k].get<std::vector<std::int32_t>>();
  tg = r["targets"][k].get<std::vector<std::int32_t>>();
  return {ids, tg, {}, r["batch"].get<std::size_t>(), r["seq"].get<std::size_t>()};
}

}  // namespace

TEST_CASE("gpt matches PyTorch: logits, loss, gradients, 10 AdamW steps") {
  const json r = reference();
  auto cfg = gpt_config::from_json(r["config"], "reference config");
  gpt<> m(cfg);
  test::load_reference_params(m, r);
  std::vector<std::int32_t> ids, tg;
  auto b = batch_of(r, 0, ids, tg);

  // logits
  std::vector<float> logits(b.batch * b.seq * cfg.vocab_size);
  m.logits(b.ids, b.batch, b.seq, matrix_view<float>(logits.data(), b.batch * b.seq, cfg.vocab_size));
  const double e_logits = test::rel_err(logits, r["logits"].get<std::vector<double>>());
  CHECK_MESSAGE(e_logits <= 1e-5, "logits relative error " << e_logits);

  // loss and gradients of the mean cross-entropy
  m.grads().zero();
  const double w = b.weight_sum();
  auto st = m.forward_backward({}, b, float(1.0 / w));
  CHECK(st.mean_loss() == doctest::Approx(r["loss"].get<double>()).epsilon(1e-5));
  double worst = 0;
  std::string worst_name;
  for (const auto& t : *m.layout()) {
    const double e = test::rel_err(m.grads().at(t.name), r["grads"][t.name].get<std::vector<double>>());
    CHECK_MESSAGE(e <= 1e-4, t.name << ": gradient relative error " << e);
    if (e > worst) worst = e, worst_name = t.name;
  }
  MESSAGE("worst gradient relative error " << worst << " (" << worst_name << "), logits " << e_logits);

  // 10 AdamW steps with global-norm clipping and warmup + cosine
  test::load_reference_params(m, r);
  const json& tr = r["train"];
  trainer_options o;
  o.clip = clip_mode::global_norm;
  o.max_norm = tr["max_norm"].get<float>();
  trainer<gpt<>> t(m, o, optim::adamw<>(tr["optimizer"]), optim::make_schedule(tr["schedule"]));
  std::vector<std::int32_t> ids2, tg2;
  std::vector<token_batch> batches{batch_of(r, 0, ids, tg), batch_of(r, 1, ids2, tg2)};
  for (std::size_t k = 0; k < tr["steps"].get<std::size_t>(); ++k) {
    auto sm = t.train_step(std::span<const token_batch>(&batches[k % 2], 1));
    const double ref = r["losses"][k].get<double>();
    CHECK_MESSAGE(std::fabs(sm.loss.mean_loss() - ref) <= 1e-4 * std::fabs(ref),
                  "step " << k << ": loss " << sm.loss.mean_loss() << " vs PyTorch " << ref);
    CHECK(sm.grad_norm == doctest::Approx(r["grad_norms"][k].get<double>()).epsilon(1e-4));
  }
  const double fin = m.evaluate(batches[tr["steps"].get<std::size_t>() % 2]).mean_loss();
  CHECK(fin == doctest::Approx(r["final_loss"].get<double>()).epsilon(1e-4));
}

}  // namespace SPARSELM_UNITY_ID
