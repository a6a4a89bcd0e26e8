#pragma once
// Finite-difference harness for layers: the scalar L = Σ y ∘ R (R fixed random) is differentiated
// with respect to every parameter and every input at once, and compared with the layer's backward.

#include <doctest/doctest.h>

#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "../kernels/gradcheck.hpp"
#include "sparselm/core/arena.hpp"
#include "sparselm/core/rng.hpp"
#include "sparselm/layers/context.hpp"

namespace sparselm::test {

struct layer_case {
  std::shared_ptr<arena_layout> layout;
  std::size_t rows = 0, in = 0, out = 0;
  std::size_t batch = 1, seq = 1;
  // forward(ctx, x, y) and backward(ctx, dy, dx); backward accumulates parameter gradients into ctx.grads.
  std::function<void(const step_context&, const_matrix_view<float>, matrix_view<float>)> forward;
  std::function<void(const step_context&, const_matrix_view<float>, matrix_view<float>)> backward;
  std::function<void(arena<float>&)> init;  // optional; default N(0, 0.5)
  gradcheck_options options{};
};

inline gradcheck_result check_layer(const layer_case& lc, std::uint64_t seed = 7) {
  auto layout = std::shared_ptr<const arena_layout>(lc.layout);
  arena<float> params(layout), grads(layout);
  counter_rng rng(seed);
  if (lc.init) {
    lc.init(params);
  } else {
    rng.fill_normal(params.all(), 1, 0.0f, 0.5f);
  }
  std::vector<float> x(lc.rows * lc.in), r(lc.rows * lc.out), y(lc.rows * lc.out), dx(lc.rows * lc.in);
  rng.fill_normal(x, 2, 0.0f, 1.0f);
  rng.fill_normal(r, 3, 0.0f, 1.0f);
  scratch tmp;
  auto ctx_for = [&](const arena<float>& p) {
    step_context s;
    s.params = &p;
    s.grads = &grads;
    s.tmp = &tmp;
    s.batch = lc.batch;
    s.seq = lc.seq;
    return s;
  };
  // analytic
  grads.zero();
  {
    auto s = ctx_for(params);
    lc.forward(s, const_matrix_view<float>(x.data(), lc.rows, lc.in), matrix_view<float>(y.data(), lc.rows, lc.out));
    std::vector<float> dy = r;
    lc.backward(s, const_matrix_view<float>(dy.data(), lc.rows, lc.out), matrix_view<float>(dx.data(), lc.rows, lc.in));
  }
  const std::size_t P = layout->total();
  std::vector<float> packed(params.all().begin(), params.all().end());
  packed.insert(packed.end(), x.begin(), x.end());
  std::vector<float> analytic(grads.all().begin(), grads.all().end());
  analytic.insert(analytic.end(), dx.begin(), dx.end());
  arena<float> probe(layout);
  std::vector<float> xp(x.size()), yp(y.size());
  auto f = [&](std::span<const float> v) {
    std::copy(v.begin(), v.begin() + std::ptrdiff_t(P), probe.all().begin());
    std::copy(v.begin() + std::ptrdiff_t(P), v.end(), xp.begin());
    auto s = ctx_for(probe);
    lc.forward(s, const_matrix_view<float>(xp.data(), lc.rows, lc.in), matrix_view<float>(yp.data(), lc.rows, lc.out));
    double acc = 0;
    for (std::size_t i = 0; i < yp.size(); ++i) acc += double(yp[i]) * double(r[i]);
    return acc;
  };
  return gradcheck(f, packed, analytic, lc.options);
}

}  // namespace sparselm::test
