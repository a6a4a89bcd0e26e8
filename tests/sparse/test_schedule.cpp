// The cosine prune schedule, update steps, configs from JSON.
#include <doctest/doctest.h>

#include <cmath>
#include <numbers>

#include <nlohmann/json.hpp>

#include "sparselm/sparse/schedule.hpp"
#include "sparselm/sparse/update.hpp"

// Each test file is its own namespace: the area's files are compiled as one unity translation unit
// (tests/CMakeLists.txt), and their helpers must not meet.
namespace SPARSELM_UNITY_ID {

using namespace sparselm;
using namespace sparselm::sparse;
using doctest::Approx;
using doctest::Contains;
using nlohmann::json;

static prune_schedule make(double ratio, std::size_t T, std::size_t period_steps = 10, std::size_t zero = 0) {
  prune_schedule s;
  s.prune_ratio = ratio;
  s.total_steps = T;
  s.update_period = period_steps;
  s.zero_steps = zero;
  return s;
}

TEST_CASE("default cosine: f = 0.5 (1 + cos(pi t / T))") {
  auto s = make(0.3, 100);
  CHECK(s.fraction(0) == Approx(1.0));
  CHECK(s.fraction(25) == Approx(0.5 * (1 + std::sqrt(0.5))));  // 0.853553
  CHECK(s.fraction(50) == Approx(0.5));
  CHECK(s.fraction(75) == Approx(0.5 * (1 - std::sqrt(0.5))));  // 0.146447
  CHECK(s.fraction(100) == Approx(0.0));
}

TEST_CASE("k = ceil(ceil(prune_ratio * nnz) * f)") {
  auto s = make(0.3, 100);
  // ceil(0.3 * 10) = 3 (not 4: 0.3 * 10 = 3.0000000000000004 in binary).
  CHECK(s.prune_count(10, 0) == 3);
  CHECK(s.prune_count(10, 25) == 3);   // 3 * 0.8536 = 2.56 -> 3
  CHECK(s.prune_count(10, 50) == 2);   // 1.5 -> 2
  CHECK(s.prune_count(10, 75) == 1);   // 0.44 -> 1
  CHECK(s.prune_count(10, 99) == 1);   // last update step: tiny f still prunes one block
  CHECK(s.prune_count(10, 100) == 0);  // f(T) = 0
  auto h = make(0.5, 100);
  CHECK(h.prune_count(7, 0) == 4);     // ceil(3.5)
  CHECK(h.prune_count(7, 50) == 2);    // 4 * 0.5
  CHECK(h.prune_count(922, 50) == 231);  // ceil(461 * 0.5) = ceil(230.5)
  CHECK(make(0.0, 100).prune_count(10, 10) == 0);
  CHECK(make(1.0, 100).prune_count(10, 0) == 10);
}

TEST_CASE("zero_steps: f = 0 before, restarts the cosine at zero_steps") {
  auto s = make(0.3, 100, 10, 20);
  CHECK(s.fraction(0) == 0.0);
  CHECK(s.fraction(19) == 0.0);
  CHECK(s.prune_count(10, 10) == 0);
  CHECK(s.fraction(20) == Approx(1.0));
  CHECK(s.fraction(60) == Approx(0.5));  // (60 - 20) / (100 - 20) = 1/2 of the half period
  CHECK(s.fraction(100) == Approx(0.0));
}

TEST_CASE("period and phase_delay") {
  auto s = make(0.3, 100);
  s.period = 1.0;  // a full cosine: 1 -> 0 -> 1
  CHECK(s.fraction(50) == Approx(0.0));
  CHECK(s.fraction(100) == Approx(1.0));
  s.period = 0.5;
  s.phase_delay = std::numbers::pi / 2;  // starts at the midpoint
  CHECK(s.fraction(0) == Approx(0.5));
  CHECK(s.fraction(50) == Approx(0.0));
}

TEST_CASE("is_update_step: every update_period steps, never at t = 0 or t >= T, not before zero_steps") {
  auto s = make(0.3, 100, 10);
  CHECK_FALSE(s.is_update_step(0));
  CHECK(s.is_update_step(10));
  CHECK_FALSE(s.is_update_step(15));
  CHECK(s.is_update_step(90));
  CHECK_FALSE(s.is_update_step(100));  // the last step, although a multiple of 10
  CHECK_FALSE(s.is_update_step(110));
  auto t = make(0.3, 95, 5);
  CHECK(t.is_update_step(90));
  CHECK_FALSE(t.is_update_step(95));
  auto z = make(0.3, 100, 10, 20);
  CHECK_FALSE(z.is_update_step(10));
  CHECK(z.is_update_step(20));
  auto one = make(0.3, 3, 1);
  CHECK(one.is_update_step(1));
  CHECK(one.is_update_step(2));
  CHECK_FALSE(one.is_update_step(3));
}

TEST_CASE("schedule validation names the field") {
  auto s = make(0.3, 100);
  s.prune_ratio = 1.5;
  CHECK_THROWS_WITH_AS(s.validate(), Contains("'prune_ratio'"), error);
  s = make(0.3, 100, 0);
  CHECK_THROWS_WITH_AS(s.is_update_step(10), Contains("'update_period'"), error);
  s = make(0.3, 0);
  CHECK_THROWS_WITH_AS(s.fraction(10), Contains("'total_steps'"), error);
  s = make(0.3, 100, 10, 100);
  CHECK_THROWS_WITH_AS(s.prune_count(10, 10), Contains("'zero_steps'"), error);
  s = make(0.3, 100);
  s.period = std::nan("");
  CHECK_THROWS_WITH_AS(s.validate(), Contains("'period'"), error);
}

TEST_CASE("prune_schedule from/to JSON") {
  auto s = prune_schedule::from_json(json{{"prune_ratio", 0.5}, {"update_period", 25}, {"total_steps", 1000},
                                          {"zero_steps", 100}, {"phase_delay", 0.25}, {"period", 1.0}});
  CHECK(s.prune_ratio == 0.5);
  CHECK(s.update_period == 25);
  CHECK(s.total_steps == 1000);
  CHECK(s.zero_steps == 100);
  CHECK(s.phase_delay == 0.25);
  CHECK(s.period == 1.0);
  json j = s;
  auto r = prune_schedule::from_json(j);
  CHECK(r.fraction(300) == s.fraction(300));
  auto d = prune_schedule::from_json(json::object());  // defaults
  CHECK(d.prune_ratio == 0.3);
  CHECK(d.period == 0.5);
  CHECK(d.zero_steps == 0);
}

TEST_CASE("bad schedule JSON: errors name the field") {
  CHECK_THROWS_WITH_AS(prune_schedule::from_json(json{{"prune_ratio", "high"}}),
                       Contains("field 'prune_ratio' must be a number"), error);
  CHECK_THROWS_WITH_AS(prune_schedule::from_json(json{{"update_period", -1}}),
                       Contains("field 'update_period' must not be negative, got -1"), error);
  CHECK_THROWS_WITH_AS(prune_schedule::from_json(json{{"update_period", 2.5}}), Contains("'update_period'"), error);
  CHECK_THROWS_WITH_AS(prune_schedule::from_json(json{{"prune_ration", 0.3}}), Contains("unknown field 'prune_ration'"),
                       error);
  CHECK_THROWS_WITH_AS(prune_schedule::from_json(json::array()), Contains("expected a JSON object"), error);
  CHECK_THROWS_WITH_AS(prune_schedule::from_json(json{{"period", "x"}}, "sparse_lm.json: sparsity"),
                       Contains("sparse_lm.json: sparsity: field 'period'"), error);
}

TEST_CASE("update_config JSON: schedule fields plus metric, regrow, pooling") {
  auto c = update_config::from_json(
      json{{"prune_ratio", 0.5}, {"total_steps", 500}, {"prune_metric", "max"}, {"regrow", "rigl"}, {"pooling", "sum"}});
  CHECK(c.schedule.prune_ratio == 0.5);
  CHECK(c.schedule.total_steps == 500);
  CHECK(c.metric == prune_metric::max_abs);
  CHECK(c.regrow == regrow_method::rigl);
  CHECK(c.pooling == grad_pooling::sum);
  json j = c;
  CHECK(j["prune_metric"] == "max");
  CHECK(j["regrow"] == "rigl");
  CHECK(j["pooling"] == "sum");
  auto r = update_config::from_json(j);
  CHECK(r.metric == c.metric);
  CHECK(r.schedule.total_steps == 500);
  auto d = update_config::from_json(json::object());
  CHECK(d.metric == prune_metric::l1);
  CHECK(d.regrow == regrow_method::random);

  CHECK_THROWS_WITH_AS(update_config::from_json(json{{"regrow", "magnitude"}}),
                       Contains("field 'regrow': unknown regrow method 'magnitude'"), error);
  CHECK_THROWS_WITH_AS(update_config::from_json(json{{"prune_metric", "l3"}}), Contains("field 'prune_metric'"), error);
  CHECK_THROWS_WITH_AS(update_config::from_json(json{{"pooling", 1}}), Contains("field 'pooling' must be a string"),
                       error);
  CHECK_THROWS_WITH_AS(update_config::from_json(json{{"sparsity", 0.9}}), Contains("unknown field 'sparsity'"), error);
}

TEST_CASE("sparse learning-rate scale exp(1.969 s^2 + 0.2905 s)") {
  CHECK(sparse_lr_scale(0.0) == 1.0);
  CHECK(sparse_lr_scale(0.9) == Approx(6.40027).epsilon(1e-5));  // exp(1.59489 + 0.26145) = exp(1.85634)
  CHECK(sparse_lr_scale(0.5) == Approx(std::exp(0.49225 + 0.14525)));
  CHECK_THROWS_AS(sparse_lr_scale(1.0), error);
}

}  // namespace SPARSELM_UNITY_ID
