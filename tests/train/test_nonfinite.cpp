// The training guard: a step whose loss or gradient norm is not finite applies no update; with
// on_nonfinite = stop it throws at once, with skip it counts the step and throws after
// max_skipped steps in a row. Parameters and optimiser state stay exactly as before the step.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "../common/tiny_gpt.hpp"
#include "sparselm/models/gpt.hpp"
#include "sparselm/optim/lamb.hpp"
#include "sparselm/train/trainer.hpp"

// Each test file is its own namespace: the area's files are compiled as one unity translation unit
// (tests/CMakeLists.txt), and their helpers must not meet.
namespace SPARSELM_UNITY_ID {

using namespace sparselm;

namespace {
struct setup {
  gpt<> model;
  std::vector<std::int32_t> ids, targets;
  explicit setup() : model(config()) {
    model.init(3);
    for (int i = 0; i < 2 * 8; ++i) {
      ids.push_back(i % 16);
      targets.push_back((i + 1) % 16);
    }
  }
  static gpt_config config() { return test::tiny_gpt_config(); }
  std::vector<token_batch> micro() const { return {{ids, targets, {}, 2, 8}}; }
  std::vector<float> snapshot() { return test::param_snapshot(model); }
};
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}
}  // namespace

TEST_CASE("trainer: a non-finite loss stops the step before any update (on_nonfinite = stop)") {
  setup s;
  trainer<gpt<>> t(s.model, {}, optim::adamw<>(), optim::make_schedule({{"type", "constant"}, {"lr", 1e-3}}));
  auto m = t.train_step(s.micro());  // a good step first
  CHECK(std::isfinite(m.loss.mean_loss()));
  CHECK_FALSE(m.skipped);
  s.model.params()[0][5] = std::numeric_limits<float>::quiet_NaN();  // an embedding row the batch uses
  const auto before = s.snapshot();
  const auto opt_step = t.optimizer().state().step;
  bool thrown = false;
  try {
    t.train_step(s.micro());
  } catch (const nonfinite_error& e) {
    thrown = true;
    CHECK(e.step == 2);
    CHECK(std::string(e.what()).find("step 2: the loss is nan") != std::string::npos);
    CHECK(std::string(e.what()).find("the update was not applied") != std::string::npos);
  }
  CHECK(thrown);
  CHECK(t.step() == 1);
  CHECK(t.optimizer().state().step == opt_step);
  CHECK(same_bits(s.snapshot(), before));
}

TEST_CASE("trainer: on_nonfinite = skip counts steps without updates, then stops") {
  setup s;
  trainer_options o = trainer_options::from_json({{"on_nonfinite", "skip"}, {"max_skipped_steps", 2}});
  CHECK(o.on_nonfinite == nonfinite_action::skip);
  CHECK(o.max_skipped == 2);
  trainer<gpt<>> t(s.model, o, optim::adamw<>(), optim::make_schedule({{"type", "constant"}, {"lr", 1e-3}}));
  s.model.params()[0][5] = std::numeric_limits<float>::infinity();
  const auto before = s.snapshot();
  for (int k = 1; k <= 2; ++k) {
    auto m = t.train_step(s.micro());
    CHECK(m.skipped);
    CHECK(m.step == std::size_t(k));
  }
  CHECK_THROWS_AS(t.train_step(s.micro()), nonfinite_error);
  CHECK(t.step() == 2);
  CHECK(same_bits(s.snapshot(), before));
  CHECK(t.optimizer().state().step == 0);
  CHECK_THROWS_WITH_AS(trainer_options::from_json({{"on_nonfinite", "ignore"}}), doctest::Contains("on_nonfinite"),
                       sparselm::error);
}

// Issue 60, defect 3: the optimisers report whether their update wrote only finite parameters and
// slots (checked inside the update), including values a 16-bit slot cannot store.
template <class Opt>
bool state_after_gradient(float g, const char* name, const nlohmann::json& config = nlohmann::json::object()) {
  CAPTURE(name);
  CAPTURE(g);
  setup s;
  Opt opt(config);
  opt.attach(s.model.layout());
  CHECK(opt.state_finite());
  for (float& x : s.model.grads().all()) x = g;
  opt.step(s.model.params(), s.model.grads(), 1e-3f);
  bool params_finite = true;
  for (float x : s.model.params().all()) params_finite = params_finite && std::isfinite(x);
  CHECK(params_finite);  // only the optimiser state overflows
  return opt.state_finite();
}

TEST_CASE("optimisers: an update that overflows the optimiser state reports it (finite gradients)") {
  // Adam(W)'s v = (1 - β2)·g²: 1e-3 · 1e40 overflows float; 1e20 itself is finite
  CHECK(state_after_gradient<optim::adamw<>>(1.0f, "adamw"));
  CHECK_FALSE(state_after_gradient<optim::adamw<>>(1e20f, "adamw"));
  CHECK_FALSE(state_after_gradient<optim::adam<bf16>>(1e20f, "adam bf16"));
  CHECK_FALSE(state_after_gradient<optim::lamb<>>(1e20f, "lamb"));
  // half slots hold sqrt(v): sqrt(1e-3)·3e6 = 9.5e4 is past half's 65504, although v = 9e9 is a
  // finite float (and m = (1 - β1)·g = 3e4 fits)
  const nlohmann::json slow_m = {{"beta1", 0.99}};
  CHECK(state_after_gradient<optim::adamw<half>>(1e6f, "adamw half", slow_m));
  CHECK_FALSE(state_after_gradient<optim::adamw<half>>(3e6f, "adamw half", slow_m));
  // bf16 slots overflow where float does, at 3.4e38
  CHECK_FALSE(state_after_gradient<optim::sgd<bf16>>(std::numeric_limits<float>::max(), "sgd bf16"));
  // the next good state is reported as such (attach, restore)
  setup s;
  optim::adamw<> opt;
  opt.attach(s.model.layout());
  for (float& x : s.model.grads().all()) x = 1e20f;
  opt.step(s.model.params(), s.model.grads(), 1e-3f);
  CHECK_FALSE(opt.state_finite());
  opt.attach(s.model.layout());
  CHECK(opt.state_finite());
}

}  // namespace SPARSELM_UNITY_ID
