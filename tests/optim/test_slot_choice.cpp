// optim::slot_choice<Opt>: the slot storage type chosen at run time ("slots" in the optimiser's
// config) trains exactly as Opt<float>, Opt<bf16> or Opt<half> itself, for every optimiser; its
// state is float (the stored values widened), restore() rounds back, so a state round trip
// changes nothing; sharded shards export the same float state; bad "slots" values are errors.
#include <doctest/doctest.h>

#include <bit>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "sparselm/core/error.hpp"
#include "sparselm/optim/adam.hpp"
#include "sparselm/optim/lamb.hpp"
#include "sparselm/optim/sgd.hpp"
#include "sparselm/optim/shard.hpp"
#include "sparselm/optim/slot_choice.hpp"
#include "test_helpers.hpp"

// Each test file is its own namespace: the area's files are compiled as one unity translation unit
// (tests/CMakeLists.txt), and their helpers must not meet.
namespace SPARSELM_UNITY_ID {

using namespace sparselm;
using nlohmann::json;
using optim_test::bitwise_equal;

namespace {

template <template <class> class Opt>
json base_config() {
  if constexpr (std::is_same_v<Opt<float>, optim::sgd<float>>)
    return {{"momentum", 0.9}, {"weight_decay", 0.01}};
  else if constexpr (std::is_same_v<Opt<float>, optim::adam<float>>)
    return {{"eps", 1e-3}};
  else
    return {{"weight_decay", 0.05}};
}

template <storage_type S>
bool same_bits(float a, S b) {
  return std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(to_float(b));
}

// slot_choice<Opt> with slots S against Opt<S> on the same gradients: bit-identical parameters,
// state() = the typed slots widened, and the same bytes of slot storage.
template <template <storage_type> class Opt, storage_type S>
void check_same_as_typed(const char* slots) {
  INFO(Opt<float>::name, " with ", slots, " slots");
  optim_test::model a, b;
  json cfg = base_config<Opt>();
  Opt<S> typed(cfg);
  cfg["slots"] = slots;
  optim::slot_choice<Opt> chosen(cfg);
  CHECK(chosen.slot_dtype() == dtype_of<S>());
  typed.attach(a.layout);
  chosen.attach(b.layout);
  for (std::size_t t = 1; t <= 4; ++t) {
    a.fill_grads(t);
    b.fill_grads(t);
    typed.step(a.params, a.grads, 1e-2f, 0.5f);
    chosen.step(b.params, b.grads, 1e-2f, 0.5f);
  }
  CHECK(bitwise_equal(a.params, b.params));
  CHECK(chosen.step_count() == 4);
  CHECK(chosen.slot_bytes() == typed.slot_bytes());
  const auto ts = typed.state();
  const auto cs = chosen.state();
  REQUIRE(ts.slots.size() == cs.slots.size());
  CHECK(cs.step == 4);
  for (std::size_t k = 0; k < ts.slots.size(); ++k) {
    CHECK(cs.slots[k].name == ts.slots[k].name);
    const auto x = ts.slots[k].slots->all();
    const auto y = cs.slots[k].slots->all();
    REQUIRE(x.size() == y.size());
    std::size_t differ = 0;
    for (std::size_t i = 0; i < x.size(); ++i) differ += !same_bits(y[i], x[i]);
    CHECK(differ == 0);
  }
}

// state() after 2 steps, restored into a fresh optimiser, then 2 more steps: the same as 4 steps
// without the round trip.
template <template <class> class Opt>
void check_round_trip(const char* slots) {
  INFO(Opt<float>::name, " with ", slots, " slots");
  json cfg = base_config<Opt>();
  cfg["slots"] = slots;
  optim_test::model a, b;
  optim::slot_choice<Opt> full(cfg), first(cfg), second(cfg);
  full.attach(a.layout);
  first.attach(b.layout);
  for (std::size_t t = 1; t <= 2; ++t) {
    a.fill_grads(t), b.fill_grads(t);
    full.step(a.params, a.grads, 1e-2f);
    first.step(b.params, b.grads, 1e-2f);
  }
  // a copy of the float state, as a checkpoint holds it
  const auto st = first.state();
  std::vector<arena<float>> saved;
  saved.reserve(st.slots.size());
  optim::optimizer_state<float> ckpt;
  ckpt.step = st.step;
  for (const auto& s : st.slots) {
    saved.emplace_back(s.slots->layout_ptr());
    std::copy(s.slots->all().begin(), s.slots->all().end(), saved.back().all().begin());
    ckpt.slots.push_back({s.name, &saved.back()});
  }
  second.attach(b.layout);
  second.restore(ckpt);
  CHECK(second.step_count() == 2);
  for (std::size_t t = 3; t <= 4; ++t) {
    a.fill_grads(t), b.fill_grads(t);
    full.step(a.params, a.grads, 1e-2f);
    second.step(b.params, b.grads, 1e-2f);
  }
  CHECK(bitwise_equal(a.params, b.params));
}

template <template <class> class Opt>
void check_all() {
  check_same_as_typed<Opt, float>("float");
  check_same_as_typed<Opt, bf16>("bf16");
  check_same_as_typed<Opt, half>("half");
  check_round_trip<Opt>("bf16");
  check_round_trip<Opt>("half");
  check_round_trip<Opt>("float");
}

}  // namespace

TEST_CASE("slot_choice: every optimiser with float, bf16 and half slots trains as the typed optimiser") {
  check_all<optim::adamw>();
  check_all<optim::adam>();
  check_all<optim::sgd>();
  check_all<optim::lamb>();
  static_assert(optim::sharded_optimizer<optim::slot_choice<optim::adamw>>);
  // the default is float; 16-bit slots take half the bytes
  optim_test::model m;
  optim::slot_choice<optim::adamw> f(json::object()), h(json{{"slots", "half"}});
  CHECK(f.slot_dtype() == dtype::f32);
  f.attach(m.layout);
  h.attach(m.layout);
  CHECK(f.slot_bytes() == 2 * h.slot_bytes());
  CHECK(h.state().slots[1].name == "sqrt_v");  // half keeps sqrt(v) (optim/lanes.hpp)
}

TEST_CASE("slot_choice: float slots restored into bf16 ones are rounded to nearest even") {
  optim_test::model a, b;
  optim::slot_choice<optim::adamw> wide(json::object()), narrow(json{{"slots", "bf16"}});
  wide.attach(a.layout);
  narrow.attach(b.layout);
  for (std::size_t t = 1; t <= 3; ++t) {
    a.fill_grads(t);
    wide.step(a.params, a.grads, 1e-2f);
  }
  const auto st = wide.state();
  narrow.restore(st);
  const auto got = narrow.state();
  REQUIRE(got.slots.size() == st.slots.size());
  std::size_t wrong = 0, changed = 0;
  for (std::size_t k = 0; k < st.slots.size(); ++k) {
    const auto x = st.slots[k].slots->all(), y = got.slots[k].slots->all();
    for (std::size_t i = 0; i < x.size(); ++i) {
      wrong += !same_bits(y[i], bf16(x[i]));
      changed += y[i] != x[i];
    }
  }
  CHECK(wrong == 0);
  CHECK(changed > 0);  // the rounding happened
  CHECK(narrow.step_count() == 3);
}

TEST_CASE("slot_choice: sharded bf16 slots export the unsharded float state") {
  json cfg = {{"weight_decay", 0.05}, {"slots", "bf16"}};
  optim_test::model whole;
  optim::slot_choice<optim::adamw> ref(cfg);
  ref.attach(whole.layout);
  const auto parts = optim::partition_tensors(*whole.layout, 2);
  std::vector<optim_test::model> reps(2);
  std::vector<optim::slot_choice<optim::adamw>> shards;
  for (std::size_t r = 0; r < 2; ++r) shards.emplace_back(cfg).attach(reps[r].layout, parts[r]);
  for (std::size_t t = 1; t <= 3; ++t) {
    whole.fill_grads(t);
    ref.step(whole.params, whole.grads, 1e-2f);
    for (std::size_t r = 0; r < 2; ++r) {
      reps[r].fill_grads(t);
      shards[r].step(reps[r].params, reps[r].grads, 1e-2f);
    }
  }
  for (std::size_t r = 0; r < 2; ++r) {
    CHECK(shards[r].sharded());
    CHECK(shards[r].owned_slot_bytes(0).size() == shards[r].owned_elements().size() * sizeof(float));
  }
  arena<float> m(whole.layout), v(whole.layout);
  optim::optimizer_state<float> full;
  full.slots = {{"m", &m}, {"v", &v}};
  for (auto& s : shards) s.export_owned(full);
  CHECK(full.step == 3);
  const auto want = ref.state();
  CHECK(bitwise_equal(*want.slots[0].slots, m));
  CHECK(bitwise_equal(*want.slots[1].slots, v));
  arena<float> extra(whole.layout);
  optim::optimizer_state<float> bad;
  bad.slots = {{"m", &m}, {"v", &v}, {"w", &extra}};
  CHECK_THROWS_WITH_AS(shards[0].export_owned(bad), doctest::Contains("export_owned: unexpected slot 'w'"), error);
}

TEST_CASE("slot_choice: a bad 'slots' value is an error naming the field") {
  using opt = optim::slot_choice<optim::adam>;
  CHECK_THROWS_WITH_AS(opt(json{{"slots", "fp8"}}),
                       doctest::Contains("adam config: field 'slots' is 'fp8'; expected float, bf16 or half"), error);
  CHECK_THROWS_WITH_AS(opt(json{{"slots", nullptr}}), doctest::Contains("field 'slots' must be a string"), error);
  CHECK_THROWS_WITH_AS(opt(json{{"slots", 16}}), doctest::Contains("field 'slots' must be a string"), error);
  CHECK_THROWS_AS(opt(json{{"slots", "bf16"}, {"weight_decay", 0.1}}), error);  // adam's own checks still apply
  CHECK(opt(json{{"slots", "fp16"}}).slot_dtype() == dtype::f16);
  CHECK(opt(json{{"slots", "bfloat16"}}).slot_dtype() == dtype::bf16);
}

}  // namespace SPARSELM_UNITY_ID
