#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "sparselm/testing/gradcheck.hpp"
#include "pointwise_reference.hpp"
#include "sparselm/kernels/softmax.hpp"

// Each test file is its own namespace: the area's files are compiled as one unity translation unit
// (tests/CMakeLists.txt), and their helpers must not meet.
namespace SPARSELM_UNITY_ID {

using namespace sparselm;
using namespace sparselm::test;
using namespace sparselm::testing;
using kernels::softmax_mask;

TEST_CASE_TEMPLATE("softmax forward/backward match the reference for every mask", Arch, SPARSELM_TEST_ARCHS) {
  for (std::size_t N : {1, 7, 33}) {
    for (std::size_t C : {1, 7, 33, 129}) {
      for (std::size_t off : {std::size_t(0), std::size_t(3)}) {
        for (std::size_t valid : {std::size_t(SIZE_MAX), C / 2}) {
          CAPTURE(N);
          CAPTURE(C);
          CAPTURE(off);
          CAPTURE(valid);
          fvec x = random_vector(N * C, 1, -8, 8), dy = random_vector(N * C, 2);
          for (auto m : {softmax_mask::none, softmax_mask::causal, softmax_mask::padding}) {
            CAPTURE(int(m));
            fvec y(N * C), dx(N * C);
            kernels::softmax_forward<Arch>({x.data(), N, C}, {y.data(), N, C}, m, off, valid);
            auto ref = softmax_ref(x, N, C, [&](std::size_t r) {
              std::size_t L = std::min(C, valid);
              if (m == softmax_mask::causal) L = std::min(L, r + off + 1);
              return L;
            });
            CHECK(max_abs_err(y, ref) < 1e-6);
            kernels::softmax_backward<Arch>({y.data(), N, C}, {dy.data(), N, C}, {dx.data(), N, C});
            CHECK(max_abs_err(dx, softmax_backward_ref(y, dy, N, C)) < 1e-6);
          }
        }
      }
    }
  }
}

TEST_CASE("softmax: fully masked rows are zeros, huge logits are stable") {
  const std::size_t N = 4, C = 9;
  fvec x = random_vector(N * C, 3, -1e30f, 1e30f), y(N * C, 7.0f);
  kernels::softmax_forward({x.data(), N, C}, {y.data(), N, C}, softmax_mask::padding, 0, 0);
  for (float v : y) CHECK(v == 0.0f);
  kernels::softmax_forward({x.data(), N, C}, {y.data(), N, C}, softmax_mask::none);
  for (std::size_t r = 0; r < N; ++r) {
    double s = 0;
    for (std::size_t c = 0; c < C; ++c) {
      REQUIRE(std::isfinite(y[r * C + c]));
      s += y[r * C + c];
    }
    CHECK(s == doctest::Approx(1.0));
  }
  // masked -inf entries inside the visible range are fine too
  fvec z(C, -INFINITY), yz(C);
  z[4] = 2.0f;
  kernels::softmax_forward({z.data(), 1, C}, {yz.data(), 1, C}, softmax_mask::none);
  for (std::size_t c = 0; c < C; ++c) CHECK(yz[c] == (c == 4 ? 1.0f : 0.0f));
}

TEST_CASE("softmax in place and with strided views") {
  const std::size_t N = 6, C = 19, ld = 24;
  fvec x = random_vector(N * ld, 4, -3, 3), y(N * C);
  fvec xc(N * C);
  for (std::size_t i = 0; i < N; ++i)
    for (std::size_t c = 0; c < C; ++c) xc[i * C + c] = x[i * ld + c];
  kernels::softmax_forward({xc.data(), N, C}, {y.data(), N, C}, softmax_mask::causal, 2);
  kernels::softmax_forward({x.data(), N, C, ld}, {x.data(), N, C, ld}, softmax_mask::causal, 2);
  for (std::size_t i = 0; i < N; ++i)
    for (std::size_t c = 0; c < C; ++c) REQUIRE(x[i * ld + c] == y[i * C + c]);
}

TEST_CASE("softmax backward passes a finite-difference check (causal)") {
  const std::size_t N = 5, C = 7;
  fvec x = random_vector(N * C, 5, -2, 2), w = random_vector(N * C, 6);
  auto f = [&](std::span<const float> v) {
    fvec y(N * C);
    kernels::softmax_forward({v.data(), N, C}, {y.data(), N, C}, softmax_mask::causal, 1);
    return dot(y, w);
  };
  fvec y(N * C), dx(N * C);
  kernels::softmax_forward({x.data(), N, C}, {y.data(), N, C}, softmax_mask::causal, 1);
  kernels::softmax_backward({y.data(), N, C}, {w.data(), N, C}, {dx.data(), N, C});
  auto r = gradcheck(f, x, dx, {.atol = 1e-5});
  CHECK_MESSAGE(r.ok, r.message);
}

TEST_CASE("softmax rejects bad shapes") {
  fvec a(12), b(12);
  CHECK_THROWS_WITH_AS(kernels::softmax_forward({a.data(), 3, 4}, {b.data(), 4, 3}, softmax_mask::none),
                       "softmax_forward: y (4x3) does not match x (3x4)", sparselm::error);
  CHECK_THROWS_WITH_AS(kernels::softmax_backward({a.data(), 3, 4}, {b.data(), 3, 4}, {b.data(), 2, 4}),
                       "softmax_backward: shapes differ: y (3x4), dy (3x4), dx (2x4)", sparselm::error);
  CHECK_THROWS_WITH_AS(kernels::softmax_forward({a.data(), 3, 4}, {b.data(), 3, 4}, softmax_mask(7)),
                       "softmax_forward: unknown mask code 7", sparselm::error);
  CHECK_THROWS_WITH_AS(kernels::softmax_forward({a.data(), 2, 4, 3}, {b.data(), 2, 4}, softmax_mask::none),
                       "softmax_forward: x: leading dimension 3 is smaller than the column count in (2x4, ld 3)",
                       sparselm::error);
}

}  // namespace SPARSELM_UNITY_ID
