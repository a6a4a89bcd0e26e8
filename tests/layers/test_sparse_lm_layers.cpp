// The S1 sparse LM's own layers: sinusoidal positions and the factorised embedding, against naive
// double-precision references and finite differences; and their bad-input errors.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "sparselm/testing/layer_check.hpp"
#include "sparselm/layers/factorised_embedding.hpp"
#include "sparselm/layers/sinusoidal_positions.hpp"

// Each test file is its own namespace: the area's files are compiled as one unity translation unit
// (tests/CMakeLists.txt), and their helpers must not meet.
namespace SPARSELM_UNITY_ID {

using namespace sparselm;
using sparselm::testing::check_layer;
using sparselm::testing::layer_case;

namespace {

// Layer norm of one row in double.
std::vector<double> ln_ref(const std::vector<double>& x, std::span<const float> g, std::span<const float> b, double eps) {
  double m = 0, v = 0;
  for (double a : x) m += a;
  m /= double(x.size());
  for (double a : x) v += (a - m) * (a - m);
  v /= double(x.size());
  std::vector<double> y(x.size());
  for (std::size_t j = 0; j < x.size(); ++j) y[j] = (x[j] - m) / std::sqrt(v + eps) * g[j] + b[j];
  return y;
}

double pe_ref(std::size_t p, std::size_t j, std::size_t E) {
  const std::size_t i = j - j % 2;
  const double w = std::pow(10000.0, -double(i) / double(E));
  return j % 2 == 0 ? std::sin(double(p) * w) : std::cos(double(p) * w);
}

step_context ctx_of(const arena<float>& p, arena<float>& g, scratch& tmp, std::size_t B, std::size_t T) {
  step_context s;
  s.params = &p;
  s.grads = &g;
  s.tmp = &tmp;
  s.batch = B;
  s.seq = T;
  return s;
}

}  // namespace

TEST_CASE("sinusoidal_table: sin on even, cos on odd columns with frequencies 10000^(-2i/E)") {
  const std::size_t T = 9, E = 6;
  std::vector<float> pe(T * E);
  sinusoidal_table(matrix_view<float>(pe.data(), T, E));
  // position 0: sin 0 = 0, cos 0 = 1
  for (std::size_t j = 0; j < E; ++j) CHECK(pe[j] == (j % 2 ? 1.0f : 0.0f));
  CHECK(pe[1 * E + 0] == doctest::Approx(std::sin(1.0)));
  CHECK(pe[1 * E + 1] == doctest::Approx(std::cos(1.0)));
  CHECK(pe[5 * E + 2] == doctest::Approx(std::sin(5.0 / std::pow(10000.0, 2.0 / 6.0))));
  CHECK(pe[8 * E + 5] == doctest::Approx(std::cos(8.0 / std::pow(10000.0, 4.0 / 6.0))));
  for (std::size_t p = 0; p < T; ++p)
    for (std::size_t j = 0; j < E; ++j) CHECK(pe[p * E + j] == doctest::Approx(pe_ref(p, j, E)).epsilon(1e-6));
  CHECK_THROWS_WITH_AS(sinusoidal_table(matrix_view<float>(pe.data(), 1, 5)), doctest::Contains("even"), error);
}

TEST_CASE("sinusoidal_positions: y = x + norm(PE) against a naive reference; finite differences") {
  const std::size_t B = 3, T = 4, E = 6;
  auto layout = std::make_shared<arena_layout>();
  sinusoidal_positions pos(*layout, "pos", 8, E, {1e-5f, 0.1f});
  sinusoidal_positions::cache c;
  auto lay = std::shared_ptr<const arena_layout>(layout);
  arena<float> params(lay), grads(lay);
  pos.norm().init(params);
  CHECK(params.at("pos.weight")[0] == 0.1f);
  counter_rng(3).fill_normal(params.all(), 9, 0.0f, 0.5f);  // non-trivial gamma and beta
  std::vector<float> x(B * T * E), y(B * T * E);
  counter_rng(4).fill_normal(x, 1, 0.0f, 1.0f);
  scratch tmp;
  auto s = ctx_of(params, grads, tmp, B, T);
  pos.forward(s, const_matrix_view<float>(x.data(), B * T, E), matrix_view<float>(y.data(), B * T, E), c);
  double worst = 0;
  for (std::size_t p = 0; p < T; ++p) {
    std::vector<double> row(E);
    for (std::size_t j = 0; j < E; ++j) row[j] = pe_ref(p, j, E);
    auto n = ln_ref(row, params.at("pos.weight"), params.at("pos.bias"), 1e-5);
    for (std::size_t b = 0; b < B; ++b)
      for (std::size_t j = 0; j < E; ++j)
        worst = std::max(worst, std::fabs(double(y[(b * T + p) * E + j]) - (double(x[(b * T + p) * E + j]) + n[j])));
  }
  CHECK(worst < 1e-5);

  layer_case lc{layout, B * T, E, E, B, T};
  lc.forward = [&](auto& st, auto xi, auto yo) { pos.forward(st, xi, yo, c); };
  lc.backward = [&](auto& st, auto dy, auto dx) { pos.backward(st, dy, dx, c); };
  auto r = check_layer(lc);
  CHECK_MESSAGE(r.ok, r.message);
  CHECK(r.checked == layout->total() + B * T * E);

  // errors
  CHECK_THROWS_WITH_AS(sinusoidal_positions(*layout, "odd", 4, 5), doctest::Contains("'odd': width 5 must be even"),
                       error);
  auto s9 = ctx_of(params, grads, tmp, 1, 9);
  std::vector<float> x9(9 * E);
  CHECK_THROWS_WITH_AS(pos.forward(s9, const_matrix_view<float>(x9.data(), 9, E), matrix_view<float>(x9.data(), 9, E), c),
                       doctest::Contains("positions up to 9 exceed the 8 positions"), error);
}

TEST_CASE_TEMPLATE("factorised_embedding: naive reference and finite differences", S, dense, block_sparse<4>) {
  const std::size_t B = 2, T = 3, V = 11, E = 8, H = 12;
  for (bool gelu : {false, true}) {
    CAPTURE(gelu);
    auto layout = std::make_shared<arena_layout>();
    sparse_plan plan;
    plan.sparsity = 0.5;
    factorised_embedding_options o{V, 5, E, H, 1e-5f, 0.1f, 0.0f, gelu, &plan};
    factorised_embedding<float, S> emb(*layout, "embedding", o);
    typename factorised_embedding<float, S>::cache c;
    auto lay = std::shared_ptr<const arena_layout>(layout);
    std::vector<std::int32_t> ids{1, 4, 10, 0, 3, 3};
    auto init = [&](arena<float>& p) {
      counter_rng rng(5);
      rng.fill_normal(p.all(), 1, 0.0f, 0.7f);
      if constexpr (S::is_sparse) {
        emb.up().init_glorot(p, rng);  // draws the pattern
        rng.fill_normal(p[emb.up().weight().index], 77, 0.0f, 0.7f);
      }
    };
    arena<float> params(lay), grads(lay);
    init(params);
    std::vector<float> y(B * T * H);
    scratch tmp;
    auto s = ctx_of(params, grads, tmp, B, T);
    emb.forward(s, ids, matrix_view<float>(y.data(), B * T, H), c);

    // naive reference
    std::vector<float> W(E * H);
    if constexpr (S::is_sparse)
      emb.up().to_dense(params, W);
    else
      std::copy(params[emb.up().weight().index].begin(), params[emb.up().weight().index].end(), W.begin());
    const auto lut = params.at("embedding.lut");
    double worst = 0;
    for (std::size_t n = 0; n < B * T; ++n) {
      std::vector<double> e(E), pe(E);
      for (std::size_t j = 0; j < E; ++j) e[j] = lut[std::size_t(ids[n]) * E + j], pe[j] = pe_ref(n % T, j, E);
      auto a = ln_ref(e, params.at("embedding.ln_token.weight"), params.at("embedding.ln_token.bias"), 1e-5);
      auto p = ln_ref(pe, params.at("embedding.ln_position.weight"), params.at("embedding.ln_position.bias"), 1e-5);
      for (std::size_t j = 0; j < E; ++j) a[j] += p[j];
      auto cc = ln_ref(a, params.at("embedding.ln_input.weight"), params.at("embedding.ln_input.bias"), 1e-5);
      for (std::size_t k = 0; k < H; ++k) {
        double h = params.at("embedding.up.bias")[k];
        for (std::size_t j = 0; j < E; ++j) h += cc[j] * W[j * H + k];
        if (gelu) h = 0.5 * h * (1 + std::tanh(std::sqrt(2 / M_PI) * (h + 0.044715 * h * h * h)));
        worst = std::max(worst, std::fabs(double(y[n * H + k]) - h));
      }
    }
    CHECK(worst < 1e-4);

    // finite differences over every parameter (the input x of the harness is a dummy column)
    layer_case lc{layout, B * T, 1, H, B, T};
    lc.init = init;
    lc.forward = [&](auto& st, auto, auto yo) { emb.forward(st, ids, yo, c); };
    lc.backward = [&](auto& st, auto dy, auto dx) {
      std::vector<float> d(dy.data, dy.data + dy.rows * dy.cols);
      emb.backward(st, ids, matrix_view<float>(d.data(), dy.rows, dy.cols), c);
      std::fill(dx.data, dx.data + dx.rows * dx.cols, 0.0f);
    };
    lc.options.max_checks = 400;
    auto r = check_layer(lc);
    CHECK_MESSAGE(r.ok, r.message);
  }
}

TEST_CASE("factorised_embedding: bad sizes and shapes are errors naming the layer") {
  arena_layout layout;
  factorised_embedding_options o{11, 5, 8, 12};
  CHECK_THROWS_WITH_AS((factorised_embedding<float, dense>(layout, "e0", {0, 5, 8, 12})),
                       doctest::Contains("factorised_embedding 'e0': zero size"), error);
  CHECK_THROWS_WITH_AS((factorised_embedding<float, dense>(layout, "e1", {11, 5, 7, 12})),
                       doctest::Contains("width 7 must be even"), error);
  CHECK_THROWS_WITH_AS((factorised_embedding<float, block_sparse<4>>(layout, "e2", o)),
                       doctest::Contains("needs a sparse_plan"), error);
  auto lay = std::make_shared<arena_layout>();
  factorised_embedding<float, dense> emb(*lay, "e", o);
  auto clay = std::shared_ptr<const arena_layout>(lay);
  arena<float> p(clay), g(clay);
  scratch tmp;
  decltype(emb)::cache c;
  std::vector<std::int32_t> ids{1, 2, 3, 4};
  std::vector<float> y(4 * 12);
  auto s = ctx_of(p, g, tmp, 2, 2);
  CHECK_THROWS_WITH_AS(emb.forward(s, ids, matrix_view<float>(y.data(), 4, 11), c),
                       doctest::Contains("factorised_embedding: 4 ids and y (4x11)"), error);
  ids[1] = 11;
  CHECK_THROWS_AS(emb.forward(s, ids, matrix_view<float>(y.data(), 4, 12), c), error);
}

}  // namespace SPARSELM_UNITY_ID
