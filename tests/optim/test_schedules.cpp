// Learning-rate schedules against their formulas at chosen steps, the JSON factory and its errors,
// and the sparse learning-rate scale.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <nlohmann/json.hpp>
#include <numbers>
#include <string>

#include "sparselm/optim/schedules.hpp"

// Each test file is its own namespace: the area's files are compiled as one unity translation unit
// (tests/CMakeLists.txt), and their helpers must not meet.
namespace SPARSELM_UNITY_ID {

using namespace sparselm;
using doctest::Approx;
using nlohmann::json;

TEST_CASE("constant") {
  optim::constant_schedule s(3e-4f);
  CHECK(s(0) == 3e-4f);
  CHECK(s(123456) == 3e-4f);
  CHECK(optim::make_schedule(json{{"type", "constant"}, {"lr", 0.5}})(7) == 0.5f);
}

TEST_CASE("warmup_cosine: linear warmup from 0, cosine to min_lr, then flat") {
  optim::warmup_cosine_schedule s(1e-3f, 1100, 100, 1e-5f);
  auto cosine = [](double p) { return 1e-5 + (1e-3 - 1e-5) * 0.5 * (1 + std::cos(std::numbers::pi * p)); };
  CHECK(s(0) == 0.0f);
  CHECK(s(50) == Approx(0.5e-3).epsilon(1e-6));
  CHECK(s(99) == Approx(0.99e-3).epsilon(1e-6));
  CHECK(s(100) == Approx(1e-3).epsilon(1e-6));  // warmup boundary: the peak
  CHECK(s(600) == Approx(cosine(0.5)).epsilon(1e-6));
  CHECK(s(850) == Approx(cosine(0.75)).epsilon(1e-6));
  CHECK(s(1100) == Approx(1e-5).epsilon(1e-6));  // last
  CHECK(s(5000) == Approx(1e-5).epsilon(1e-6));
  auto f = optim::make_schedule(json{
      {"type", "warmup_cosine"}, {"max_lr", 1e-3}, {"min_lr", 1e-5}, {"warmup_steps", 100}, {"total_steps", 1100}});
  CHECK(f.name() == "warmup_cosine");
  for (std::size_t t : {0, 100, 600, 1100}) CHECK(f(t) == s(t));
}

TEST_CASE("linear (S2/S4): 1e-7 up to max over total*warmup_proportion steps, then down to 1e-7") {
  optim::linear_schedule s(2e-4f, 1000, 0.1f);  // warm = 100
  CHECK(s.warmup_steps() == 100);
  auto up = [](double t) { return 1e-7 + (2e-4 - 1e-7) * t / 100; };
  auto down = [](double t) { return 2e-4 + (1e-7 - 2e-4) * (t - 100) / 900; };
  CHECK(s(0) == Approx(1e-7).epsilon(1e-6));
  CHECK(s(37) == Approx(up(37)).epsilon(1e-6));
  CHECK(s(100) == Approx(2e-4).epsilon(1e-6));  // warmup boundary
  CHECK(s(101) == Approx(down(101)).epsilon(1e-6));
  CHECK(s(550) == Approx(down(550)).epsilon(1e-6));
  CHECK(s(999) == Approx(down(999)).epsilon(1e-6));
  CHECK(s(1000) == Approx(1e-7).epsilon(1e-6));  // last
  CHECK(s(2000) == Approx(1e-7).epsilon(1e-6));
  // no warmup: starts at max
  optim::linear_schedule flat(1e-3f, 10);
  CHECK(flat(0) == Approx(1e-3).epsilon(1e-6));
  CHECK(flat(5) == Approx(1e-3 + (1e-7 - 1e-3) * 0.5).epsilon(1e-6));
  // int(total * proportion) truncates
  CHECK(optim::linear_schedule(1.0f, 10, 0.15f).warmup_steps() == 1);
  auto f = optim::make_schedule(
      json{{"type", "linear"}, {"max_lr", 2e-4}, {"total_steps", 1000}, {"warmup_proportion", 0.1}});
  for (std::size_t t : {0, 100, 550, 1000}) CHECK(f(t) == s(t));
}

TEST_CASE("up_down (S3): step/warm*max, then max*(total-step-1)/(total-warm), floored at 1e-7") {
  optim::up_down_schedule s(6e-3f, 1000, 0.2f);  // warm = 200
  CHECK(s.warmup_steps() == 200);
  CHECK(s(0) == Approx(1e-7).epsilon(1e-6));  // 0, floored
  CHECK(s(50) == Approx(50.0 / 200 * 6e-3).epsilon(1e-6));
  CHECK(s(199) == Approx(199.0 / 200 * 6e-3).epsilon(1e-6));
  CHECK(s(200) == Approx(6e-3 * (1000 - 200 - 1) / 800.0).epsilon(1e-6));  // warmup boundary
  CHECK(s(600) == Approx(6e-3 * (1000 - 600 - 1) / 800.0).epsilon(1e-6));
  CHECK(s(998) == Approx(6e-3 * 1 / 800.0).epsilon(1e-6));
  CHECK(s(999) == Approx(1e-7).epsilon(1e-6));  // last: 0, floored
  CHECK(s(5000) == Approx(1e-7).epsilon(1e-6));
  auto f =
      optim::make_schedule(json{{"type", "up_down"}, {"max_lr", 6e-3}, {"total_steps", 1000}, {"warmup_frac", 0.2}});
  for (std::size_t t : {0, 200, 600, 999}) CHECK(f(t) == s(t));
}

TEST_CASE("bert_power (S1 BertSchedule)") {
  // the S1 README values: warmup 1000, cooldown 10000, peak 2e-4, min 8e-6, power 0.5
  optim::bert_power_schedule s(2e-4f, 10000, 1000, 8e-6f);
  auto decay = [](double t, double power) {
    return (2e-4 - 8e-6) * std::pow(1 - std::min(t - 1000, 10000.0) / 10000, power) + 8e-6;
  };
  CHECK(s(0) == 0.0f);
  CHECK(s(500) == Approx(1e-4).epsilon(1e-6));
  CHECK(s(1000) == Approx(2e-4).epsilon(1e-6));  // warmup boundary
  CHECK(s(6000) == Approx(decay(6000, 0.5)).epsilon(1e-6));
  CHECK(s(10999) == Approx(decay(10999, 0.5)).epsilon(1e-6));
  CHECK(s(11000) == Approx(8e-6).epsilon(1e-6));  // end of cooldown
  CHECK(s(50000) == Approx(8e-6).epsilon(1e-6));
  optim::bert_power_schedule p(2.5e-4f, 10000, 2000, 8e-6f, 0.8f);
  auto decay8 = [](double t) { return (2.5e-4 - 8e-6) * std::pow(1 - (t - 2000) / 10000, 0.8) + 8e-6; };
  CHECK(p(7000) == Approx(decay8(7000)).epsilon(1e-6));
  auto f = optim::make_schedule(json{
      {"type", "bert_power"}, {"peak_lr", 2e-4}, {"min_lr", 8e-6}, {"warmup_steps", 1000}, {"cooldown_steps", 10000}});
  for (std::size_t t : {0, 1000, 6000, 11000}) CHECK(f(t) == s(t));
}

TEST_CASE("sparse_lr_scale and scaled schedules") {
  CHECK(optim::sparse_lr_scale(0.0) == 1.0);
  CHECK(optim::sparse_lr_scale(0.9) == Approx(std::exp(1.969 * 0.81 + 0.2905 * 0.9)));
  CHECK(optim::sparse_lr_scale(0.9) == Approx(6.40).epsilon(0.001));
  CHECK_THROWS_WITH_AS(optim::sparse_lr_scale(1.0), doctest::Contains("outside [0, 1)"), error);
  auto s = optim::make_schedule(json{{"type", "constant"}, {"lr", 1e-4}}).scaled(optim::sparse_lr_scale(0.5));
  CHECK(s(3) == Approx(1e-4 * std::exp(1.969 * 0.25 + 0.2905 * 0.5)).epsilon(1e-6));
  // the run-config key: "sparse_lr_rescale": s on any schedule type
  auto r = optim::make_schedule(json{{"type", "warmup_cosine"}, {"max_lr", 1e-3}, {"total_steps", 100},
                                     {"warmup_steps", 10}, {"sparse_lr_rescale", 0.9}});
  auto plain = optim::make_schedule(json{{"type", "warmup_cosine"}, {"max_lr", 1e-3}, {"total_steps", 100},
                                         {"warmup_steps", 10}});
  for (std::size_t t : {0, 5, 10, 50, 99}) CHECK(r(t) == Approx(plain(t) * 6.40027).epsilon(1e-5));
  CHECK_THROWS_WITH_AS(optim::make_schedule(json{{"type", "constant"}, {"lr", 1}, {"sparse_lr_rescale", "yes"}}),
                       doctest::Contains("'sparse_lr_rescale' must be the sparsity"), error);
  CHECK_THROWS_WITH_AS(optim::make_schedule(json{{"type", "constant"}, {"lr", 1}, {"sparse_lr_rescale", 1.5}}),
                       doctest::Contains("outside [0, 1)"), error);
  optim::schedule custom([](std::size_t t) { return float(t); }, "ramp");
  CHECK(custom(4) == 4.0f);
  CHECK(custom.scaled(2)(4) == 8.0f);
}

TEST_CASE("schedule configs: every error names the schedule and the field") {
  struct bad {
    json j;
    const char* message;
  };
  const bad cases[] = {
      {json::array(), "schedule: expected a JSON object"},
      {json{{"lr", 1}}, "schedule: missing required field 'type'"},
      {json{{"type", 3}}, "schedule: field 'type' must be a string"},
      {json{{"type", "cosine_restarts"}}, "schedule: unknown type 'cosine_restarts'"},
      {json{{"type", "constant"}}, "schedule 'constant': missing required field 'lr'"},
      {json{{"type", "constant"}, {"lr", -1}}, "schedule 'constant': field 'lr' must be >= 0, got -1"},
      {json{{"type", "constant"}, {"lr", "1e-3"}}, "schedule 'constant': field 'lr' must be a number"},
      {json{{"type", "constant"}, {"lr", 1}, {"warmup", 3}}, "schedule 'constant': unknown field 'warmup'"},
      {json{{"type", "warmup_cosine"}, {"max_lr", 1}},
       "schedule 'warmup_cosine': missing required field 'total_steps'"},
      {json{{"type", "warmup_cosine"}, {"max_lr", 1}, {"total_steps", 0}}, "field 'total_steps' must be >= 1"},
      {json{{"type", "warmup_cosine"}, {"max_lr", 1}, {"total_steps", 10}, {"warmup_steps", 11}},
       "field 'warmup_steps' (11) must not exceed 'total_steps' (10)"},
      {json{{"type", "warmup_cosine"}, {"max_lr", 1}, {"total_steps", 10.5}}, "field 'total_steps' must be an integer"},
      {json{{"type", "warmup_cosine"}, {"max_lr", 1}, {"total_steps", -10}},
       "field 'total_steps' must not be negative"},
      {json{{"type", "linear"}, {"total_steps", 10}}, "schedule 'linear': missing required field 'max_lr'"},
      {json{{"type", "linear"}, {"max_lr", 1}, {"total_steps", 10}, {"warmup_proportion", 1.5}},
       "schedule 'linear': field 'warmup_proportion' must be in [0, 1]"},
      {json{{"type", "linear"}, {"max_lr", 1}, {"total_steps", 10}, {"warmup_frac", 0.1}},
       "schedule 'linear': unknown field 'warmup_frac'"},
      {json{{"type", "up_down"}, {"max_lr", 1}, {"total_steps", 10}, {"warmup_frac", 1.0}},
       "schedule 'up_down': field 'warmup_frac' must be in [0, 1)"},
      {json{{"type", "up_down"}, {"max_lr", 1}, {"total_steps", 10}, {"min_lr", -1e-7}},
       "schedule 'up_down': field 'min_lr' must be >= 0"},
      {json{{"type", "bert_power"}, {"peak_lr", 1}}, "schedule 'bert_power': missing required field 'cooldown_steps'"},
      {json{{"type", "bert_power"}, {"peak_lr", 1}, {"cooldown_steps", 10}, {"power", 0}},
       "schedule 'bert_power': field 'power' must be > 0"},
      {json{{"type", "bert_power"}, {"peak_lr", 1}, {"cooldown_steps", 0}}, "field 'cooldown_steps' must be >= 1"},
  };
  for (const auto& b : cases) {
    CAPTURE(b.j.dump());
    CHECK_THROWS_WITH_AS(optim::make_schedule(b.j), doctest::Contains(b.message), error);
  }
  CHECK_THROWS_WITH_AS(optim::warmup_cosine_schedule(1.0f, 10, 20), doctest::Contains("must not exceed"), error);
  CHECK_THROWS_WITH_AS(optim::bert_power_schedule(1.0f, 0), doctest::Contains("'cooldown_steps' must be >= 1"), error);
  CHECK_THROWS_WITH_AS(optim::linear_schedule(-1.0f, 10), doctest::Contains("'max_lr' must be >= 0"), error);
}

}  // namespace SPARSELM_UNITY_ID
