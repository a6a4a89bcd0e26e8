// When pattern updates happen in a training run: after every update_period-th optimiser step,
// never after the last one, at the step numbers the metrics report.
#include <doctest/doctest.h>

#include <vector>

#include "sparselm/models/gpt.hpp"
#include "sparselm/train/dynamic_sparsity.hpp"
#include "sparselm/train/trainer.hpp"

// Each test file is its own namespace: the area's files are compiled as one unity translation unit
// (tests/CMakeLists.txt), and their helpers must not meet.
namespace SPARSELM_UNITY_ID {

using namespace sparselm;

namespace {
// Steps (as the trainer's metrics number them) after which the pattern was updated, in a run of
// `steps` steps with updates every `period`.
std::vector<std::size_t> update_steps(std::size_t steps, std::size_t period, std::size_t resume_at = 0) {
  auto cfg = gpt_config::from_json(read_json_file(SPARSELM_SOURCE_DIR "/configs/gpt-tiny.json"));
  using model_t = gpt<float, block_sparse<4>>;
  model_t m(cfg, sparse_plan{0.5});
  m.init(3);
  const std::size_t B = 1, T = 4;
  std::vector<std::int32_t> ids{1, 2, 3, 4}, tg{2, 3, 4, 5};
  const token_batch batch{ids, tg, {}, B, T};
  trainer<model_t> t(m, {}, optim::adamw<>(json{{"weight_decay", 0.0}}), optim::schedule(optim::constant_schedule(1e-3f)));
  dynamic_sparsity<model_t, trainer<model_t>> ds(
      m, t, sparse::update_config::from_json(json{{"update_period", period}, {"total_steps", steps}, {"regrow", "rigl"}}), 5);
  t.set_step(resume_at);
  std::vector<std::size_t> at;
  for (std::size_t k = resume_at; k < steps; ++k) {
    const auto sm = t.train_step(std::span<const token_batch>(&batch, 1));
    const auto j = ds.take_metrics();
    if (j.contains("sparsity_update")) {
      CHECK(j["sparsity_update"]["step"].get<std::size_t>() == sm.step);  // the log names the step just taken
      at.push_back(sm.step);
    }
  }
  CHECK(ds.updates() == at.size());
  return at;
}
}  // namespace

TEST_CASE("pattern updates follow every update_period-th step and never the last one") {
  using v = std::vector<std::size_t>;
  CHECK(update_steps(21, 5) == v{5, 10, 15, 20});  // T − 1 a multiple of the period: 20 updates, 21 does not
  CHECK(update_steps(20, 5) == v{5, 10, 15});      // T a multiple: the last step does not update
  CHECK(update_steps(12, 4) == v{4, 8});
  CHECK(update_steps(4, 5).empty());  // shorter than one period
  CHECK(update_steps(7, 1) == v{1, 2, 3, 4, 5, 6});
}

TEST_CASE("a resumed run updates at the same steps as an uninterrupted one") {
  using v = std::vector<std::size_t>;
  CHECK(update_steps(21, 5, 8) == v{10, 15, 20});
  CHECK(update_steps(21, 5, 10) == v{15, 20});  // resumed just after an update
}

}  // namespace SPARSELM_UNITY_ID
