#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "sparselm/testing/gradcheck.hpp"
#include "pointwise_reference.hpp"
#include "sparselm/kernels/cross_entropy.hpp"

// Each test file is its own namespace: the area's files are compiled as one unity translation unit
// (tests/CMakeLists.txt), and their helpers must not meet.
namespace SPARSELM_UNITY_ID {

using namespace sparselm;
using namespace sparselm::test;
using namespace sparselm::testing;

namespace {
std::vector<std::int32_t> random_targets(std::size_t N, std::size_t Vv, std::uint64_t stream, std::int32_t ignore,
                                         double ignore_frac) {
  counter_rng rng(3);
  std::vector<std::int32_t> t(N);
  for (std::size_t i = 0; i < N; ++i)
    t[i] = rng.uniform(stream, 2 * i) < ignore_frac ? ignore : std::int32_t(rng.below(stream, 2 * i + 1, Vv));
  return t;
}

template <class Arch>
void compare(std::size_t N, std::size_t V, std::size_t Vv, bool weighted, float lo, float hi) {
  CAPTURE(N);
  CAPTURE(V);
  CAPTURE(Vv);
  CAPTURE(weighted);
  const std::int32_t ignore = -100;
  fvec x = random_vector(N * V, 1, lo, hi);
  auto t = random_targets(N, Vv, 2, ignore, 0.2);
  if (N > 1) t[1] = ignore;
  fvec w = weighted ? random_vector(N, 3, 0.1f, 2.0f) : fvec{};
  const float scale = 0.37f;
  auto ref = cross_entropy_ref(x, N, V, Vv, t, w, ignore, scale);
  // loss only: logits untouched
  fvec xl = x, losses(N, -1.0f);
  auto s0 = kernels::cross_entropy<Arch>({xl.data(), N, V}, t, w, ignore, scale, false, losses, Vv);
  CHECK(xl == x);
  // with gradient
  fvec g = x;
  auto s1 = kernels::cross_entropy<Arch>({g.data(), N, V}, t, w, ignore, scale, true, {}, Vv);
  for (auto* s : {&s0, &s1}) {
    CHECK(s->loss_sum == doctest::Approx(ref.loss_sum).epsilon(1e-5));
    CHECK(s->weight_sum == doctest::Approx(ref.weight_sum).epsilon(1e-6));
    CHECK(s->count == ref.count);
    CHECK(s->correct == ref.correct);
  }
  CHECK(max_rel_err(losses, ref.losses) < 1e-5);
  CHECK(max_abs_err(g, ref.grad) < 1e-6);
}
}  // namespace

TEST_CASE_TEMPLATE("cross_entropy matches the double reference", Arch, SPARSELM_TEST_ARCHS) {
  for (std::size_t N : {1, 7, 33})
    for (std::size_t V : {1, 7, 33, 129, 2049})
      for (bool weighted : {false, true}) {
        compare<Arch>(N, V, V, weighted, -4, 4);
        if (V > 3) compare<Arch>(N, V, V - 3, weighted, -4, 4);
      }
}

TEST_CASE_TEMPLATE("cross_entropy on GPT-2 sized rows with padded vocab and large logits", Arch, SPARSELM_TEST_ARCHS) {
  compare<Arch>(3, 50304, 50257, true, -30, 30);
  compare<Arch>(2, 50304, 50257, false, -1e4f, 1e4f);  // max subtraction keeps this finite
}

TEST_CASE("cross_entropy: ignored rows, padded columns, argmax ties, strided logits") {
  const std::size_t N = 3, V = 10, ld = 12, Vv = 8;
  fvec x(N * ld, 0.0f);
  for (std::size_t i = 0; i < N; ++i)
    for (std::size_t j = 0; j < ld; ++j) x[i * ld + j] = float(j % 4);  // max 3 at j = 3 and 7
  x[2 * ld + 9] = 100.0f;                                            // padding column: ignored
  std::vector<std::int32_t> t{3, -1, 7};
  fvec losses(N);
  auto s = kernels::cross_entropy({x.data(), N, V, ld}, t, {}, -1, 1.0f, true, losses, Vv);
  CHECK(s.count == 2);
  CHECK(s.correct == 1);  // row 0: first maximum is 3; row 2: target 7 is a tie but not the first
  CHECK(losses[1] == 0.0f);
  CHECK(losses[0] == doctest::Approx(losses[2]));
  for (std::size_t j = 0; j < V; ++j) CHECK(x[ld + j] == 0.0f);  // ignored row
  for (std::size_t j = Vv; j < V; ++j) CHECK(x[2 * ld + j] == 0.0f);
  CHECK(x[2 * ld + 10] == 2.0f);  // beyond cols (ld padding) untouched
  double rowsum = 0;
  for (std::size_t j = 0; j < V; ++j) rowsum += x[j];
  CHECK(std::fabs(rowsum) < 1e-6);
}

TEST_CASE("cross_entropy statistics are identical for 1 and 2 threads") {
  const std::size_t N = 64, V = 3001;
  fvec x = random_vector(N * V, 4, -5, 5);
  auto t = random_targets(N, V, 5, -100, 0.1);
  int old = num_threads();
  std::vector<kernels::cross_entropy_stats> st;
  std::vector<fvec> gs;
  for (int th : {1, 2}) {
    set_num_threads(th);
    fvec g = x;
    st.push_back(kernels::cross_entropy({g.data(), N, V}, t, {}, -100, 1.0f / N, true));
    gs.push_back(g);
  }
  set_num_threads(old);
  CHECK(st[0].loss_sum == st[1].loss_sum);
  CHECK(gs[0] == gs[1]);
}

TEST_CASE("cross_entropy gradient passes a finite-difference check") {
  const std::size_t N = 4, V = 37, Vv = 33;
  fvec x = random_vector(N * V, 6, -3, 3), w = random_vector(N, 7, 0.5f, 1.5f);
  std::vector<std::int32_t> t{5, -100, 32, 0};
  const float scale = 0.5f;
  auto f = [&](std::span<const float> v) {
    fvec c(v.begin(), v.end());
    return scale * kernels::cross_entropy({c.data(), N, V}, t, w, -100, 1.0f, false, {}, Vv).loss_sum;
  };
  fvec g = x;
  kernels::cross_entropy({g.data(), N, V}, t, w, -100, scale, true, {}, Vv);
  auto r = gradcheck(f, x, g, {.atol = 1e-5});
  CHECK_MESSAGE(r.ok, r.message);
}

TEST_CASE("cross_entropy rejects bad targets and shapes") {
  fvec x(2 * 5);
  std::vector<std::int32_t> t{1, 5};
  CHECK_THROWS_WITH_AS(kernels::cross_entropy({x.data(), 2, 5}, t, {}, -100, 1.0f, true),
                       "cross_entropy: target 5 at row 1 is outside the vocabulary [0, 5)", sparselm::error);
  t = {-3, 0};
  CHECK_THROWS_WITH_AS(kernels::cross_entropy({x.data(), 2, 5}, t, {}, -100, 1.0f, true),
                       "cross_entropy: target -3 at row 0 is outside the vocabulary [0, 5)", sparselm::error);
  t = {4, 0};
  CHECK_THROWS_WITH_AS(kernels::cross_entropy({x.data(), 2, 5}, t, {}, -100, 1.0f, true, {}, 4),
                       "cross_entropy: target 4 at row 0 is outside the vocabulary [0, 4)", sparselm::error);
  CHECK_THROWS_WITH_AS(kernels::cross_entropy({x.data(), 2, 5}, t, {}, -100, 1.0f, true, {}, 6),
                       "cross_entropy: valid_vocab 6 must be in [1, 5] for logits (2x5)", sparselm::error);
  CHECK_THROWS_WITH_AS(kernels::cross_entropy({x.data(), 2, 5}, std::span<const std::int32_t>(t.data(), 1), {}, -100,
                                              1.0f, true),
                       "cross_entropy: 1 targets for logits (2x5)", sparselm::error);
  fvec w(3), l(1);
  CHECK_THROWS_WITH_AS(kernels::cross_entropy({x.data(), 2, 5}, t, w, -100, 1.0f, true),
                       "cross_entropy: 3 weights for logits (2x5)", sparselm::error);
  CHECK_THROWS_WITH_AS(kernels::cross_entropy({x.data(), 2, 5}, t, {}, -100, 1.0f, true, l),
                       "cross_entropy: losses has 1 entries for logits (2x5)", sparselm::error);
}

}  // namespace SPARSELM_UNITY_ID
