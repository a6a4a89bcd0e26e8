#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "sparselm/testing/gradcheck.hpp"
#include "pointwise_reference.hpp"
#include "sparselm/kernels/gelu.hpp"

// Each test file is its own namespace: the area's files are compiled as one unity translation unit
// (tests/CMakeLists.txt), and their helpers must not meet.
namespace SPARSELM_UNITY_ID {

using namespace sparselm;
using namespace sparselm::test;
using namespace sparselm::testing;
using kernels::gelu_kind;

namespace {
template <gelu_kind K>
double ref_value(double x) {
  return K == gelu_kind::tanh ? gelu_tanh_ref(x) : gelu_erf_ref(x);
}
template <gelu_kind K>
double ref_grad(double x) {
  return K == gelu_kind::tanh ? gelu_tanh_grad_ref(x) : gelu_erf_grad_ref(x);
}

template <gelu_kind K, class Arch>
void check_against_reference(std::size_t n) {
  fvec x = random_vector(n, 1, -6.0f, 6.0f), dy = random_vector(n, 2), y(n), dx(n);
  kernels::gelu_forward<K, Arch>(x, y);
  kernels::gelu_backward<K, Arch>(x, dy, dx);
  std::size_t bad_y = 0, bad_g = 0;
  for (std::size_t i = 0; i < n; ++i) {
    // float rounding of x bounds the attainable absolute accuracy near the zeros of gelu and gelu'
    const double floor = 1e-7 * (1.0 + std::fabs(x[i]));
    const double ry = ref_value<K>(x[i]), rg = ref_grad<K>(x[i]) * dy[i];
    bad_y += !(std::fabs(y[i] - ry) <= 1e-5 * std::fabs(ry) + floor);
    bad_g += !(std::fabs(dx[i] - rg) <= 1e-5 * std::fabs(rg) + floor);
  }
  CHECK(bad_y == 0);
  CHECK(bad_g == 0);
  // accumulate adds to what is there
  fvec acc(n, 1.0f);
  kernels::gelu_backward<K, Arch>(x, dy, acc, true);
  for (std::size_t i = 0; i < n; ++i) REQUIRE(acc[i] == doctest::Approx(1.0f + dx[i]).epsilon(1e-6));
}
}  // namespace

TEST_CASE_TEMPLATE("gelu tanh and erf match the double reference", Arch, SPARSELM_TEST_ARCHS) {
  for (std::size_t n : {1, 7, 33, 129, 4099}) {
    CAPTURE(n);
    SUBCASE("tanh") { check_against_reference<gelu_kind::tanh, Arch>(n); }
    SUBCASE("erf") { check_against_reference<gelu_kind::erf, Arch>(n); }
  }
}

TEST_CASE_TEMPLATE("gelu saturates without NaN for huge inputs", Arch, SPARSELM_TEST_ARCHS) {
  fvec x{-1e30f, -200.f, -90.f, -20.f, 0.f, 20.f, 90.f, 200.f, 1e30f}, y(x.size()), dy(x.size(), 1.0f), dx(x.size());
  kernels::gelu_forward<gelu_kind::tanh, Arch>(x, y);
  kernels::gelu_backward<gelu_kind::tanh, Arch>(x, dy, dx);
  for (std::size_t i = 0; i < x.size(); ++i) {
    CAPTURE(x[i]);
    CHECK(std::isfinite(y[i]));
    CHECK(std::isfinite(dx[i]));
    CHECK(y[i] == doctest::Approx(gelu_tanh_ref(x[i])).epsilon(1e-6));
    CHECK(dx[i] == doctest::Approx(gelu_tanh_grad_ref(x[i])).epsilon(1e-5));
  }
  kernels::gelu_forward<gelu_kind::erf, Arch>(x, y);
  kernels::gelu_backward<gelu_kind::erf, Arch>(x, dy, dx);
  for (std::size_t i = 0; i < x.size(); ++i) {
    CAPTURE(x[i]);
    CHECK(std::isfinite(y[i]));
    CHECK(std::isfinite(dx[i]));
    CHECK(y[i] == doctest::Approx(gelu_erf_ref(x[i])).epsilon(1e-6));
  }
}

TEST_CASE("gelu in place (y aliases x, dx aliases dy) and thread independence") {
  const std::size_t n = 100003;
  fvec x = random_vector(n, 3, -4, 4), dy = random_vector(n, 4);
  fvec y(n), dx(n);
  kernels::gelu_forward<gelu_kind::tanh>(x, y);
  kernels::gelu_backward<gelu_kind::tanh>(x, dy, dx);
  fvec xi = x, di = dy;
  kernels::gelu_forward<gelu_kind::tanh>(xi, xi);
  kernels::gelu_backward<gelu_kind::tanh>(x, di, di);
  CHECK(xi == y);
  CHECK(di == dx);
  int old = num_threads();
  set_num_threads(1);
  fvec y1(n);
  kernels::gelu_forward<gelu_kind::tanh>(x, y1);
  set_num_threads(old);
  CHECK(y1 == y);
}

TEST_CASE("gelu backward passes a finite-difference check") {
  const std::size_t n = 67;
  fvec x = random_vector(n, 5, -3, 3), w = random_vector(n, 6);
  for (auto kind : {gelu_kind::tanh, gelu_kind::erf}) {
    auto f = [&](std::span<const float> v) {
      fvec y(n);
      if (kind == gelu_kind::tanh)
        kernels::gelu_forward<gelu_kind::tanh>(v, y);
      else
        kernels::gelu_forward<gelu_kind::erf>(v, y);
      return dot(y, w);
    };
    fvec g(n);
    if (kind == gelu_kind::tanh)
      kernels::gelu_backward<gelu_kind::tanh>(x, w, g);
    else
      kernels::gelu_backward<gelu_kind::erf>(x, w, g);
    auto r = gradcheck(f, x, g);
    CHECK_MESSAGE(r.ok, r.message);
  }
}

TEST_CASE("gelu rejects mismatched sizes") {
  fvec x(5), y(4), d(5);
  CHECK_THROWS_WITH_AS(kernels::gelu_forward<gelu_kind::tanh>(x, y), "gelu_forward: x has 5 elements but y has 4",
                       sparselm::error);
  CHECK_THROWS_WITH_AS(kernels::gelu_backward<gelu_kind::erf>(x, d, y), "gelu_backward: sizes differ: x 5, dy 5, dx 4",
                       sparselm::error);
}

}  // namespace SPARSELM_UNITY_ID
