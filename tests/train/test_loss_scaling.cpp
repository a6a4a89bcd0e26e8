// Loss scaling in the trainer (trainer_options::loss_scaling): a static power-of-two scale changes
// nothing but the gradients' exponent (the same update as without scaling); a dynamic scale skips
// the steps whose scaled gradients overflow, backs off, grows after growth_interval good steps,
// stops with loss_scale_underflow at min_scale, and is checkpointed and resumed exactly.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "../common/scratch.hpp"
#include "../common/tiny_gpt.hpp"
#include "sparselm/io/checkpoint.hpp"
#include "sparselm/models/gpt.hpp"
#include "sparselm/train/trainer.hpp"

// Each test file is its own namespace: the area's files are compiled as one unity translation unit
// (tests/CMakeLists.txt), and their helpers must not meet.
namespace SPARSELM_UNITY_ID {

using namespace sparselm;

namespace {
gpt_config tiny() { return test::tiny_gpt_config(); }
struct data {
  std::vector<std::int32_t> ids, targets;
  data() {
    for (int i = 0; i < 2 * 8; ++i) {
      ids.push_back((3 * i) % 16);
      targets.push_back((3 * i + 1) % 16);
    }
  }
  std::vector<token_batch> micro() const { return {{ids, targets, {}, 2, 8}}; }
};
std::vector<float> snapshot(gpt<>& m) { return test::param_snapshot(m); }
optim::schedule constant_lr() { return optim::make_schedule({{"type", "constant"}, {"lr", 1e-2}}); }
trainer_options with_scaling(const json& j) {
  trainer_options o;
  o.loss_scaling = optim::loss_scale_config(j);
  return o;
}
constexpr float huge = 1.7014118e38f;  // 2^127, the largest power of two a float holds
// A model whose final LayerNorm gain is large: gradients of order 100, which overflow at 2^127.
void steep(gpt<>& m) {
  auto& p = m.params();
  for (auto& g : p[p.layout().at("ln_f.weight")]) g = 1000.0f;
}
}  // namespace

TEST_CASE("loss scaling: a static power-of-two scale gives the unscaled run's updates") {
  data d;
  gpt<> a(tiny()), b(tiny());
  a.init(5);
  b.init(5);
  trainer<gpt<>> ta(a, {}, optim::adamw<>(), constant_lr());
  trainer<gpt<>> tb(b, with_scaling({{"type", "static"}, {"scale", 4096}}), optim::adamw<>(), constant_lr());
  for (int s = 0; s < 4; ++s) {
    const auto ma = ta.train_step(d.micro()), mb = tb.train_step(d.micro());
    CHECK(ma.loss_scale == 1.0f);
    CHECK(mb.loss_scale == 4096.0f);
    CHECK_FALSE(mb.skipped);
    CHECK(mb.loss.mean_loss() == doctest::Approx(ma.loss.mean_loss()).epsilon(1e-6));
    CHECK(mb.grad_norm == doctest::Approx(ma.grad_norm).epsilon(1e-6));  // reported unscaled
  }
  const auto pa = snapshot(a), pb = snapshot(b);
  double worst = 0;
  for (std::size_t i = 0; i < pa.size(); ++i) worst = std::max(worst, double(std::fabs(pa[i] - pb[i])));
  CHECK(worst <= 1e-6);
  CHECK(snapshot(a) != [&] {  // and the steps did move the weights
    gpt<> c(tiny());
    c.init(5);
    return snapshot(c);
  }());
}

TEST_CASE("loss scaling: dynamic scale skips overflowing steps, backs off and grows") {
  data d;
  gpt<> m(tiny());
  m.init(5);
  steep(m);
  trainer<gpt<>> t(m,
                   with_scaling({{"type", "dynamic"},
                                 {"scale", huge},
                                 {"max_scale", huge},
                                 {"growth_interval", 2},
                                 {"backoff_factor", 0.5}}),
                   optim::adamw<>(), constant_lr());
  std::size_t overflows = 0, good_in_row = 0, grew = 0;
  for (int s = 0; s < 40; ++s) {
    const auto before = snapshot(m);
    const float scale = t.scaler().scale();
    const auto r = t.train_step(d.micro());
    CHECK(r.loss_scale == scale);
    CHECK(r.step == std::size_t(s + 1));  // a skipped step still counts (the schedule moves on)
    if (r.overflow) {
      ++overflows;
      good_in_row = 0;
      CHECK(r.skipped);
      CHECK(snapshot(m) == before);  // nothing applied
      CHECK(t.scaler().scale() == scale * 0.5f);
    } else {
      CHECK_FALSE(r.skipped);
      CHECK(std::isfinite(r.grad_norm));
      CHECK(snapshot(m) != before);
      if (++good_in_row == 2) {
        CHECK(t.scaler().scale() == std::min(huge, scale * 2.0f));
        good_in_row = 0;
        ++grew;
      } else {
        CHECK(t.scaler().scale() == scale);
      }
    }
  }
  // 2^127 overflows the steep model's gradients: the scaler must have backed off at least once, then
  // trained, grown again and met overflow again.
  CHECK(overflows >= 2);
  CHECK(grew >= 2);
  CHECK(t.scaler().skipped_steps() == overflows);
}

TEST_CASE("loss scaling: an overflow at the minimum scale is an error, with the model untouched") {
  data d;
  gpt<> m(tiny());
  m.init(5);
  steep(m);
  trainer<gpt<>> t(m,
                   with_scaling({{"type", "dynamic"}, {"scale", huge}, {"min_scale", huge}, {"max_scale", huge}}),
                   optim::adamw<>(), constant_lr());
  const auto before = snapshot(m);
  std::string what;
  try {
    t.train_step(d.micro());
  } catch (const loss_scale_underflow& e) {
    what = e.what();
  }
  CHECK(what.find("minimum loss scale") != std::string::npos);
  CHECK(what.find("min_scale") != std::string::npos);
  CHECK(snapshot(m) == before);
}

TEST_CASE("loss scaling: the dynamic scaler's state is checkpointed and resumed") {
  data d;
  const auto dir = test::fresh_dir("train", "loss_scaling");
  const json cfg = {{"type", "dynamic"}, {"scale", huge}, {"max_scale", huge}, {"growth_interval", 3}};
  gpt<> a(tiny());
  a.init(5);
  steep(a);
  trainer<gpt<>> ta(a, with_scaling(cfg), optim::adamw<>(), constant_lr());
  for (int s = 0; s < 6; ++s) ta.train_step(d.micro());
  REQUIRE(ta.scaler().skipped_steps() > 0);
  io::save_model(dir, a);
  io::save_training_state(dir / io::state_file, ta, json::object());

  gpt<> b(tiny());
  b.init(9);
  trainer<gpt<>> tb(b, with_scaling(cfg), optim::adamw<>(), constant_lr());
  io::load_model(dir, b);
  io::load_training_state(dir / io::state_file, tb);
  CHECK(tb.scaler().scale() == ta.scaler().scale());
  CHECK(tb.scaler().good_steps() == ta.scaler().good_steps());
  CHECK(tb.scaler().skipped_steps() == ta.scaler().skipped_steps());
  for (int s = 0; s < 5; ++s) {  // the two continue identically
    const auto ra = ta.train_step(d.micro()), rb = tb.train_step(d.micro());
    CHECK(ra.loss_scale == rb.loss_scale);
    CHECK(ra.overflow == rb.overflow);
  }
  CHECK(snapshot(a) == snapshot(b));
}

TEST_CASE("loss scaling: the trainer config reads loss_scaling and refuses bad values") {
  auto o = trainer_options::from_json({{"loss_scaling", {{"type", "dynamic"}, {"growth_interval", 100}}}});
  CHECK(o.loss_scaling.dynamic);
  CHECK(o.loss_scaling.growth_interval == 100);
  CHECK(trainer_options::from_json({{"loss_scaling", 512}}).loss_scaling.scale == 512.0f);
  CHECK_THROWS_WITH_AS(trainer_options::from_json({{"loss_scaling", {{"type", "dynamic"}, {"backoff_factor", 2}}}}),
                       doctest::Contains("backoff_factor"), error);
  CHECK_THROWS_WITH_AS(trainer_options::from_json({{"loss_scaling", {{"type", "sometimes"}}}}),
                       doctest::Contains("'type'"), error);
}

}  // namespace SPARSELM_UNITY_ID
