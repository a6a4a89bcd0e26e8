// BERT against the PyTorch reference (tests/reference/bert_reference.py): MLM and NSP losses,
// every parameter gradient, and the losses of 10 LAMB steps.
//
// The committed reference (tests/reference/data/bert_tiny_parity.json) is used when torch is not
// importable. When it is, the script regenerates the reference first; the test then compares
// against the fresh file and also checks that the committed file still equals it.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "../common/parity.hpp"
#include "sparselm/models/bert.hpp"
#include "sparselm/optim/lamb.hpp"
#include "sparselm/train/trainer.hpp"

// Each test file is its own namespace: the area's files are compiled as one unity translation unit
// (tests/CMakeLists.txt), and their helpers must not meet.
namespace SPARSELM_UNITY_ID {

using namespace sparselm;

namespace {

json reference() {
  return test::parity_reference("bert_tiny_parity", "bert_reference.py", [](const json& f, const json& c) {
    CHECK(f["config"] == c["config"]);
    CHECK(f["batches"] == c["batches"]);
    for (std::size_t k = 0; k < f["losses"].size(); ++k)
      CHECK_MESSAGE(std::fabs(f["losses"][k].get<double>() - c["losses"][k].get<double>()) <= 1e-5,
                    "committed reference is stale (step " << k << "): regenerate it with tests/reference/bert_reference.py");
  });
}

// The batch's arrays, kept alive beside the spans of a bert_batch.
struct batch_data {
  std::vector<std::int32_t> ids, types, lengths, positions, labels, nsp;
  bert_batch view(std::size_t B, std::size_t T) const { return {ids, types, lengths, positions, labels, nsp, B, T}; }
};
batch_data batch_of(const json& b) {
  auto v = [&](const char* k) { return b[k].get<std::vector<std::int32_t>>(); };
  return {v("ids"), v("token_types"), v("lengths"), v("masked_positions"), v("masked_labels"), v("nsp_labels")};
}

struct lamb_policies : default_policies {
  using optimizer = optim::lamb<>;
};

}  // namespace

TEST_CASE("bert matches PyTorch: MLM and NSP losses, gradients, 10 LAMB steps") {
  const json r = reference();
  auto cfg = bert_config::from_json(r["config"], "reference config");
  bert<> m(cfg);
  test::load_reference_params(m, r);
  const std::size_t B = r["batch"].get<std::size_t>(), T = r["seq"].get<std::size_t>();
  const batch_data d0 = batch_of(r["batches"][0]), d1 = batch_of(r["batches"][1]);

  m.grads().zero();
  const auto st = m.forward_backward({}, d0.view(B, T), 1.0f);
  const double mlm = r["mlm_loss"].get<double>(), nsp = r["nsp_loss"].get<double>();
  CHECK(st.ce_sum / double(st.count) == doctest::Approx(mlm).epsilon(1e-5));
  CHECK(st.aux_mean_loss() == doctest::Approx(nsp).epsilon(1e-5));
  CHECK(st.mean_loss() == doctest::Approx(mlm + nsp).epsilon(1e-5));
  double worst = 0;
  std::string worst_name;
  for (const auto& t : *m.layout()) {
    const double e = test::rel_err(m.grads().at(t.name), r["grads"][t.name].get<std::vector<double>>());
    CHECK_MESSAGE(e <= 1e-4, t.name << ": gradient relative error " << e);
    if (e > worst) worst = e, worst_name = t.name;
  }
  MESSAGE("worst gradient relative error " << worst << " (" << worst_name << ")");

  test::load_reference_params(m, r);
  const json& tr = r["train"];
  trainer<bert<>, lamb_policies> t(m, {.clip = clip_mode::none}, optim::lamb<>(tr["optimizer"]),
                                   optim::make_schedule(tr["schedule"]));
  const bert_batch batches[2] = {d0.view(B, T), d1.view(B, T)};
  for (std::size_t k = 0; k < tr["steps"].get<std::size_t>(); ++k) {
    auto sm = t.train_step(std::span<const bert_batch>(&batches[k % 2], 1));
    const double ref = r["losses"][k].get<double>();
    CHECK_MESSAGE(std::fabs(sm.loss.mean_loss() - ref) <= 1e-4 * std::fabs(ref),
                  "step " << k << ": loss " << sm.loss.mean_loss() << " vs PyTorch " << ref);
  }
  const double fin = m.evaluate(batches[tr["steps"].get<std::size_t>() % 2]).mean_loss();
  CHECK(fin == doctest::Approx(r["final_loss"].get<double>()).epsilon(1e-4));
}

}  // namespace SPARSELM_UNITY_ID
