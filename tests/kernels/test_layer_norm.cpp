#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "sparselm/testing/gradcheck.hpp"
#include "pointwise_reference.hpp"
#include "sparselm/kernels/layer_norm.hpp"

// Each test file is its own namespace: the area's files are compiled as one unity translation unit
// (tests/CMakeLists.txt), and their helpers must not meet.
namespace SPARSELM_UNITY_ID {

using namespace sparselm;
using namespace sparselm::test;
using namespace sparselm::testing;

TEST_CASE_TEMPLATE("layer_norm forward/backward match the double reference", Arch, SPARSELM_TEST_ARCHS) {
  for (std::size_t N : {1, 7, 33}) {
    for (std::size_t C : {1, 7, 33, 129, 768}) {
      CAPTURE(N);
      CAPTURE(C);
      const float eps = 1e-5f;
      fvec x = random_vector(N * C, 1, -2, 3), g = random_vector(C, 2, 0.5f, 1.5f), b = random_vector(C, 3);
      fvec dy = random_vector(N * C, 4);
      fvec y(N * C), mean(N), rstd(N), dx(N * C), dg = random_vector(C, 5), db = random_vector(C, 6);
      const fvec dg0 = dg, db0 = db;
      kernels::layer_norm_forward<Arch>({x.data(), N, C}, g, b, {y.data(), N, C}, mean, rstd, eps);
      auto r = layer_norm_ref(x, g, b, N, C, eps);
      CHECK(max_rel_err(y, r.y) < 2e-5);
      CHECK(max_rel_err(mean, r.mean) < 1e-6);
      CHECK(max_rel_err(rstd, r.rstd) < 2e-5);
      kernels::layer_norm_backward<Arch>({dy.data(), N, C}, {x.data(), N, C}, g, mean, rstd, {dx.data(), N, C}, dg, db);
      auto rb = layer_norm_backward_ref(dy, x, g, N, C, eps);
      CHECK(max_abs_err(dx, rb.dx) < 2e-5 * (1 + C / 64.0));
      dvec edg(C), edb(C);
      for (std::size_t c = 0; c < C; ++c) {
        edg[c] = rb.dg[c] + dg0[c];
        edb[c] = rb.db[c] + db0[c];
      }
      CHECK(max_abs_err(dg, edg) < 1e-5 * N);
      CHECK(max_abs_err(db, edb) < 1e-5 * N);
      // accumulate_dx adds the same dx on top
      fvec dx2(N * C, 0.5f), dgs(C), dbs(C);
      kernels::layer_norm_backward<Arch>({dy.data(), N, C}, {x.data(), N, C}, g, mean, rstd, {dx2.data(), N, C}, dgs, dbs,
                                         true);
      for (std::size_t i = 0; i < N * C; ++i) REQUIRE(dx2[i] == doctest::Approx(0.5f + dx[i]).epsilon(1e-6));
    }
  }
}

TEST_CASE("layer_norm with strided views and in-place y") {
  const std::size_t N = 5, C = 13, ld = 20;
  fvec x = random_vector(N * ld, 7), g = random_vector(C, 8), b = random_vector(C, 9);
  fvec xc(N * C);
  for (std::size_t i = 0; i < N; ++i)
    for (std::size_t c = 0; c < C; ++c) xc[i * C + c] = x[i * ld + c];
  fvec y(N * C), mean(N), rstd(N);
  kernels::layer_norm_forward({xc.data(), N, C}, g, b, {y.data(), N, C}, mean, rstd, 1e-5f);
  fvec xs = x;
  kernels::layer_norm_forward({xs.data(), N, C, ld}, g, b, {xs.data(), N, C, ld}, mean, rstd, 1e-5f);
  for (std::size_t i = 0; i < N; ++i)
    for (std::size_t c = 0; c < ld; ++c) REQUIRE(xs[i * ld + c] == (c < C ? y[i * C + c] : x[i * ld + c]));
}

TEST_CASE("layer_norm parameter gradients are identical for 1, 2 and 3 threads") {
  const std::size_t N = 1000, C = 96;
  fvec x = random_vector(N * C, 10), g = random_vector(C, 11), dy = random_vector(N * C, 12);
  fvec y(N * C), mean(N), rstd(N), b(C, 0.0f);
  kernels::layer_norm_forward({x.data(), N, C}, g, b, {y.data(), N, C}, mean, rstd, 1e-5f);
  int old = num_threads();
  std::vector<fvec> dgs, dxs;
  for (int t : {1, 2, 3}) {
    set_num_threads(t);
    fvec dx(N * C), dg(C), db(C);
    kernels::layer_norm_backward({dy.data(), N, C}, {x.data(), N, C}, g, mean, rstd, {dx.data(), N, C}, dg, db);
    dgs.push_back(dg);
    dgs.push_back(db);
    dxs.push_back(dx);
  }
  set_num_threads(old);
  CHECK(dgs[0] == dgs[2]);
  CHECK(dgs[0] == dgs[4]);
  CHECK(dgs[1] == dgs[3]);
  CHECK(dgs[1] == dgs[5]);
  CHECK(dxs[0] == dxs[1]);
}

TEST_CASE("layer_norm backward passes a finite-difference check (x, gamma, beta)") {
  const std::size_t N = 3, C = 11;
  const float eps = 1e-5f;
  fvec x = random_vector(N * C, 13, -2, 2), g = random_vector(C, 14, 0.5f, 1.5f), b = random_vector(C, 15);
  fvec w = random_vector(N * C, 16);
  // packed input: x | gamma | beta
  fvec v = x;
  v.insert(v.end(), g.begin(), g.end());
  v.insert(v.end(), b.begin(), b.end());
  auto f = [&](std::span<const float> p) {
    fvec y(N * C), mean(N), rstd(N);
    kernels::layer_norm_forward({p.data(), N, C}, p.subspan(N * C, C), p.subspan(N * C + C, C), {y.data(), N, C}, mean,
                                rstd, eps);
    return dot(y, w);
  };
  fvec y(N * C), mean(N), rstd(N), dx(N * C), dg(C), db(C);
  kernels::layer_norm_forward({x.data(), N, C}, g, b, {y.data(), N, C}, mean, rstd, eps);
  kernels::layer_norm_backward({w.data(), N, C}, {x.data(), N, C}, g, mean, rstd, {dx.data(), N, C}, dg, db);
  fvec grad = dx;
  grad.insert(grad.end(), dg.begin(), dg.end());
  grad.insert(grad.end(), db.begin(), db.end());
  auto r = gradcheck(f, v, grad);
  CHECK_MESSAGE(r.ok, r.message);
}

TEST_CASE("layer_norm of a constant row is finite") {
  fvec x(8, 3.0f), g(8, 1.0f), b(8, 0.5f), y(8), mean(1), rstd(1);
  kernels::layer_norm_forward({x.data(), 1, 8}, g, b, {y.data(), 1, 8}, mean, rstd, 1e-5f);
  for (float v : y) CHECK(v == 0.5f);
  CHECK(mean[0] == 3.0f);
}

TEST_CASE("layer_norm rejects bad shapes with precise messages") {
  fvec x(12), y(12), g(4), b(3), m(3), r(3), big(40);
  const_matrix_view<float> xv(x.data(), 3, 4);
  CHECK_THROWS_WITH_AS(kernels::layer_norm_forward(xv, g, b, {y.data(), 3, 4}, m, r, 1e-5f),
                       "layer_norm_forward: beta has 3 entries for x (3x4)", sparselm::error);
  CHECK_THROWS_WITH_AS(kernels::layer_norm_forward(xv, g, g, {y.data(), 4, 3}, m, r, 1e-5f),
                       "layer_norm_forward: y (4x3) does not match x (3x4)", sparselm::error);
  CHECK_THROWS_WITH_AS(kernels::layer_norm_forward(xv, g, g, {y.data(), 3, 4}, std::span<float>(big.data(), 2), r, 1e-5f),
                       "layer_norm_forward: mean has 2 entries for x (3x4)", sparselm::error);
  CHECK_THROWS_WITH_AS(kernels::layer_norm_forward(xv, b, g, {y.data(), 3, 4}, m, r, 1e-5f),
                       "layer_norm_forward: gamma has 3 entries for x (3x4)", sparselm::error);
  fvec dg(4), db(5);
  CHECK_THROWS_WITH_AS(kernels::layer_norm_backward(xv, xv, g, m, r, {y.data(), 3, 4}, dg, db),
                       "layer_norm_backward: dbeta has 5 entries for x (3x4)", sparselm::error);
  CHECK_THROWS_WITH_AS(kernels::layer_norm_backward({x.data(), 2, 4}, xv, g, m, r, {y.data(), 3, 4}, dg, dg),
                       "layer_norm_backward: dy (2x4) does not match x (3x4)", sparselm::error);
  CHECK_THROWS_WITH_AS(kernels::layer_norm_forward(xv, g, g, {y.data(), 3, 4}, m, r, -1.0f),
                       "layer_norm_forward: eps must be >= 0, got -1", sparselm::error);
}

}  // namespace SPARSELM_UNITY_ID
