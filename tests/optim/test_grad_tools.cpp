// Gradient clipping, loss scaling and gradient accumulation.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <span>
#include <vector>

#include "sparselm/core/threads.hpp"
#include "sparselm/optim/accumulation.hpp"
#include "sparselm/optim/clipping.hpp"
#include "sparselm/optim/loss_scaling.hpp"
#include "test_helpers.hpp"

// Each test file is its own namespace: the area's files are compiled as one unity translation unit
// (tests/CMakeLists.txt), and their helpers must not meet.
namespace SPARSELM_UNITY_ID {

using namespace sparselm;
using namespace optim_test;
using doctest::Approx;
using nlohmann::json;

namespace {
double ref_sq(std::span<const float> g) {
  double s = 0;
  for (float x : g) s += double(x) * double(x);
  return s;
}
double ref_norm(const arena<float>& g) {
  double s = 0;
  for (std::size_t i = 0; i < g.layout().count(); ++i)
    if (!(g.layout()[i].flags & param_frozen)) s += ref_sq(g[i]);
  return std::sqrt(s);
}
}  // namespace

TEST_CASE("global norm: double-accumulated, frozen tensors excluded, same for every thread count") {
  model md;
  md.fill_grads(1);
  const double want = ref_norm(md.grads);
  CHECK(optim::global_norm(md.grads) == Approx(want).epsilon(1e-6));
  const int nt = num_threads();
  set_num_threads(1);
  double n1 = optim::global_norm(md.grads);
  set_num_threads(3);
  double n3 = optim::global_norm(md.grads);
  set_num_threads(nt);
  CHECK(n1 == n3);
  auto per = optim::tensor_sum_squares(md.grads);
  for (std::size_t i = 0; i < md.layout->count(); ++i) {
    CAPTURE((*md.layout)[i].name);
    double r = ((*md.layout)[i].flags & param_frozen) ? 0.0 : ref_sq(md.grads[i]);
    CHECK(per[i] == Approx(r).epsilon(1e-6));
  }
  // over a range of offsets (a replica's shard): the tensors starting in it, the same bits
  const std::size_t lo = (*md.layout)[1].offset, hi = (*md.layout)[md.layout->count() - 1].offset;
  const auto ranged = optim::tensor_sum_squares(md.grads, lo, hi);
  for (std::size_t i = 0; i < md.layout->count(); ++i) {
    const std::size_t at = (*md.layout)[i].offset;
    CHECK(ranged[i] == (at >= lo && at < hi ? per[i] : 0.0));
  }
  // a float sum of squares would overflow here; the block is summed again in double
  for (float& x : md.grads[md.big]) x = 1e30f;
  CHECK(optim::global_norm(md.grads) == Approx(ref_norm(md.grads)).epsilon(1e-6));
  CHECK(std::isfinite(optim::global_norm(md.grads)));
  md.grads[md.w][3] = std::numeric_limits<float>::infinity();
  CHECK_FALSE(std::isfinite(optim::global_norm(md.grads)));
}

TEST_CASE("clip_global_norm scales by g_max / max(|g|, g_max) and returns the pre-clip norm") {
  model md;
  md.fill_grads(2);
  const double norm = ref_norm(md.grads);
  arena<float> before = md.grads.clone();

  SUBCASE("within the limit: untouched") {
    CHECK(optim::clip_global_norm(md.grads, float(norm * 2)) == Approx(norm).epsilon(1e-6));
    CHECK(bitwise_equal(md.grads, before));
  }
  SUBCASE("above the limit") {
    const float max_norm = float(norm / 4);
    CHECK(optim::clip_global_norm(md.grads, max_norm) == Approx(norm).epsilon(1e-6));
    CHECK(ref_norm(md.grads) == Approx(max_norm).epsilon(1e-6));
    const float f = optim::clip_factor(norm, max_norm);
    CHECK(f == Approx(0.25).epsilon(1e-6));
    for (std::size_t i = 0; i < md.layout->count(); ++i) {
      const bool frozen = (*md.layout)[i].flags & param_frozen;
      for (std::size_t j = 0; j < md.grads[i].size(); ++j) {
        if (frozen)
          CHECK(md.grads[i][j] == before[i][j]);
        else
          CHECK(md.grads[i][j] == before[i][j] * f);
      }
    }
  }
  CHECK(optim::clip_factor(0.5, 1.0) == 1.0f);
  CHECK(optim::clip_factor(4.0, 1.0) == 0.25f);
  CHECK(optim::clip_factor(std::nan(""), 1.0) == 1.0f);
  CHECK_THROWS_WITH_AS(optim::clip_global_norm(md.grads, 0.0f), doctest::Contains("max_norm must be > 0"), error);
  CHECK_THROWS_WITH_AS(optim::clip_factor(1.0, -1.0), doctest::Contains("max_norm must be > 0"), error);
}

TEST_CASE("per-tensor clip-by-norm (S1)") {
  model md;
  md.fill_grads(3);
  arena<float> before = md.grads.clone();
  const float max_norm = 1.0f;
  auto norms = optim::clip_tensor_norms(md.grads, max_norm);
  bool some_clipped = false, some_kept = false;
  for (std::size_t i = 0; i < md.layout->count(); ++i) {
    CAPTURE((*md.layout)[i].name);
    const bool frozen = (*md.layout)[i].flags & param_frozen;
    const double n = std::sqrt(ref_sq(before[i]));
    CHECK(norms[i] == Approx(frozen ? 0.0 : n).epsilon(1e-6));
    if (frozen || n <= max_norm) {
      some_kept = some_kept || !frozen;
      for (std::size_t j = 0; j < md.grads[i].size(); ++j) CHECK(md.grads[i][j] == before[i][j]);
    } else {
      some_clipped = true;
      CHECK(std::sqrt(ref_sq(md.grads[i])) == Approx(max_norm).epsilon(1e-6));
    }
  }
  CHECK(some_clipped);
  CHECK(some_kept);
}

// A process holding a slice of a tensor (tensor parallelism) clips it by the whole tensor's norm:
// `whole` adds the other slices' sums of squares before the norms are taken. Here a tensor's
// "other slice" is a copy of its own gradient, so its whole norm is sqrt(2) times its own.
TEST_CASE("per-tensor clipping by whole tensors' norms (a slice's squares completed by `whole`)") {
  model md;
  md.fill_grads(3);
  arena<float> before = md.grads.clone();
  const std::size_t t = md.big;
  const double own = std::sqrt(ref_sq(before[t]));
  const float max_norm = float(own * 1.2);  // within the limit alone, beyond it whole
  auto norms = optim::clip_tensor_norms(md.grads, max_norm, 0, SIZE_MAX, [&](std::span<double> sq) { sq[t] *= 2.0; });
  CHECK(norms[t] == Approx(own * std::sqrt(2.0)).epsilon(1e-6));
  // scaled by max_norm / whole norm: its own norm is now max_norm / sqrt(2)
  CHECK(std::sqrt(ref_sq(md.grads[t])) == Approx(max_norm / std::sqrt(2.0)).epsilon(1e-6));
  arena<float> alone = before.clone();
  optim::clip_tensor_norms(alone, max_norm);  // without `whole` the tensor is not clipped
  for (std::size_t j = 0; j < alone[t].size(); ++j) CHECK(alone[t][j] == before[t][j]);
}

// With a flat range [lo, hi) (a stage-local rank's own tensors, train/stage_params.hpp) only the
// tensors that start in it are scaled and clipped, exactly as the whole-arena call does them; the
// others keep their values and report norm 0.
TEST_CASE("per-tensor clipping and scaling restricted to a range of tensors") {
  model md;
  md.fill_grads(3);
  arena<float> whole = md.grads.clone();
  const auto all = optim::clip_tensor_norms(whole, 1.0f);
  optim::scale_grads(whole, 0.25f);
  // the range of tensors b, g, frozen and big
  const std::size_t lo = (*md.layout)[md.b].offset, hi = (*md.layout)[md.zeros].offset;
  CHECK(all[md.big] > 1.0);  // one of the range's tensors is clipped
  arena<float> before = md.grads.clone();
  const auto part = optim::clip_tensor_norms(md.grads, 1.0f, lo, hi);
  optim::scale_grads(md.grads, 0.25f, lo, hi);
  for (std::size_t i = 0; i < md.layout->count(); ++i) {
    CAPTURE(i);
    const bool in = i >= md.b && i < md.zeros;
    CHECK(part[i] == (in ? all[i] : 0.0));
    std::size_t wrong = 0;
    for (std::size_t j = 0; j < md.grads[i].size(); ++j) wrong += md.grads[i][j] != (in ? whole[i][j] : before[i][j]);
    CHECK(wrong == 0);
  }
}

TEST_CASE("scale_grads skips frozen tensors") {
  model md;
  md.fill_grads(1);
  arena<float> before = md.grads.clone();
  optim::scale_grads(md.grads, 0.5f);
  CHECK(md.grads[md.w][5] == before[md.w][5] * 0.5f);
  CHECK(md.grads[md.frozen][5] == before[md.frozen][5]);
  CHECK_THROWS_WITH_AS(optim::scale_grads(md.grads, NAN), doctest::Contains("factor must be finite"), error);
}

TEST_CASE("grads_finite finds inf and NaN anywhere except in frozen tensors") {
  model md;
  md.fill_grads(1);
  CHECK(optim::grads_finite(md.grads));
  md.grads[md.frozen][0] = std::numeric_limits<float>::infinity();
  CHECK(optim::grads_finite(md.grads));
  md.grads[md.big][39999] = std::numeric_limits<float>::quiet_NaN();
  CHECK_FALSE(optim::grads_finite(md.grads));
  md.grads[md.big][39999] = 0;
  md.grads[md.b][18] = -std::numeric_limits<float>::infinity();
  CHECK_FALSE(optim::grads_finite(md.grads));
  md.grads[md.b][18] = std::numeric_limits<float>::max();
  CHECK(optim::grads_finite(md.grads));
}

TEST_CASE("static loss scale") {
  optim::loss_scaler ls(json{{"type", "static"}, {"scale", 4096}});
  CHECK_FALSE(ls.is_dynamic());
  CHECK(ls.scale() == 4096.0f);
  CHECK(ls.inv_scale() == 1.0f / 4096);
  CHECK(ls.update(true));
  CHECK_FALSE(ls.update(false));  // skip the step, keep the scale
  CHECK(ls.scale() == 4096.0f);
  CHECK(ls.skipped_steps() == 1);
  CHECK(optim::loss_scaler(json(512)).scale() == 512.0f);
  CHECK(optim::loss_scaler::fixed(8).scale() == 8.0f);
  CHECK(optim::loss_scaler().scale() == 1.0f);
}

TEST_CASE("dynamic loss scale: x2 after N good steps, halve and skip on overflow, clamped") {
  optim::loss_scaler ls(
      json{{"type", "dynamic"}, {"scale", 1024}, {"growth_interval", 3}, {"min_scale", 256}, {"max_scale", 4096}});
  CHECK(ls.is_dynamic());
  CHECK(ls.update(true));
  CHECK(ls.update(true));
  CHECK(ls.scale() == 1024.0f);
  CHECK(ls.update(true));
  CHECK(ls.scale() == 2048.0f);  // three good steps in a row
  CHECK(ls.update(true));
  CHECK(ls.update(true));
  CHECK_FALSE(ls.update(false));  // overflow: skip, halve, restart the count
  CHECK(ls.scale() == 1024.0f);
  CHECK(ls.good_steps() == 0);
  for (int i = 0; i < 9; ++i) ls.update(true);
  CHECK(ls.scale() == 4096.0f);  // clamped at max_scale
  for (int i = 0; i < 5; ++i) ls.update(false);
  CHECK(ls.scale() == 256.0f);  // clamped at min_scale
  CHECK(ls.skipped_steps() == 6);

  // checkpoint round trip
  ls.update(true);
  optim::loss_scaler other(
      json{{"type", "dynamic"}, {"scale", 1024}, {"growth_interval", 3}, {"min_scale", 256}, {"max_scale", 4096}});
  other.restore(ls.state());
  CHECK(other.scale() == ls.scale());
  CHECK(other.good_steps() == 1);
  CHECK(other.skipped_steps() == 6);
  other.update(true);
  other.update(true);
  CHECK(other.scale() == 512.0f);

  auto d = optim::loss_scaler::dynamic();
  CHECK(d.scale() == 65536.0f);
  CHECK(d.config().growth_interval == 2000);
}

TEST_CASE("loss scaling config errors") {
  struct bad {
    json j;
    const char* message;
  };
  const bad cases[] = {
      {json{{"type", "adaptive"}}, "loss scaling config: field 'type' must be \"static\" or \"dynamic\""},
      {json{{"type", "static"}, {"scale", 0}}, "loss scaling config: field 'scale' must be > 0"},
      {json{{"type", "static"}, {"growth_interval", 10}}, "loss scaling config: unknown field 'growth_interval'"},
      {json{{"type", "dynamic"}, {"growth_factor", 1.0}}, "field 'growth_factor' must be > 1"},
      {json{{"type", "dynamic"}, {"backoff_factor", 1.5}}, "field 'backoff_factor' must be in (0, 1)"},
      {json{{"type", "dynamic"}, {"growth_interval", 0}}, "field 'growth_interval' must be >= 1"},
      {json{{"type", "dynamic"}, {"min_scale", 8}, {"max_scale", 4}, {"scale", 4}}, "'min_scale' (8) must not exceed"},
      {json{{"type", "dynamic"}, {"scale", 1e9}}, "field 'scale' (1e+09) must be within [min_scale, max_scale]"},
      {json(-3), "field 'scale' must be > 0"},
      {json("big"), "loss scaling config: expected a JSON object"},
  };
  for (const auto& b : cases) {
    CAPTURE(b.j.dump());
    CHECK_THROWS_WITH_AS(optim::loss_scaler{b.j}, doctest::Contains(b.message), error);
  }
  optim::loss_scaler ls;
  CHECK_THROWS_WITH_AS(ls.restore(json{{"scale", -1}}), doctest::Contains("loss scaler state: field 'scale'"), error);
}

TEST_CASE("gradient accumulation: Sum and Avg, scaled before or after") {
  using optim::accumulation_mode;
  optim::grad_accumulation sum(4, accumulation_mode::sum);
  CHECK(sum.micro_batch_scale() == 1.0f);
  CHECK(sum.final_scale() == 1.0f);
  optim::grad_accumulation post(4, accumulation_mode::avg);
  CHECK(post.micro_batch_scale() == 1.0f);
  CHECK(post.final_scale() == 0.25f);
  optim::grad_accumulation pre(json{{"steps", 4}, {"mode", "avg"}, {"scale_before", true}});
  CHECK(pre.micro_batch_scale() == 0.25f);
  CHECK(pre.final_scale() == 1.0f);
  CHECK(json(pre).get<optim::grad_accumulation>().scale_before);

  // Both Avg variants give the mean of the micro-batch gradients; Sum gives the sum.
  const std::vector<float> micro = {1.0f, 2.0f, 4.0f, 8.0f};
  for (const auto& a : {sum, post, pre}) {
    float acc = 0;
    for (float g : micro) acc += a.micro_batch_scale() * g;  // backward accumulates (+=)
    acc *= a.final_scale();
    CHECK(acc == (a.mode == accumulation_mode::sum ? 15.0f : 3.75f));
  }

  struct bad {
    json j;
    const char* message;
  };
  const bad cases[] = {
      {json{{"steps", 0}}, "gradient accumulation config: field 'steps' must be >= 1"},
      {json{{"mode", "mean"}}, "field 'mode' must be \"sum\" or \"avg\""},
      {json{{"mode", "sum"}, {"scale_before", true}}, "'scale_before' only applies to mode \"avg\""},
      {json{{"count", 3}}, "unknown field 'count'"},
  };
  for (const auto& b : cases) {
    CAPTURE(b.j.dump());
    CHECK_THROWS_WITH_AS(optim::grad_accumulation{b.j}, doctest::Contains(b.message), error);
  }
}

}  // namespace SPARSELM_UNITY_ID
