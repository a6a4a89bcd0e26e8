#pragma once
// Finite-difference checks of a layer's or a model's backward, for this library's tests and for
// downstream projects that write their own layers and models (no test framework needed: the
// results say ok and carry a message).
//
//   my_layer l(*layout, "mine", 8, 8);                        // any type satisfying sparselm::layer
//   auto r = sparselm::testing::check_layer(l, layout, {.batch = 2, .seq = 3, .in = 8, .out = 8});
//   CHECK_MESSAGE(r.ok, r.message);                          // doctest, gtest, ... or plain if
//
//   auto m = sparselm::testing::check_model(model, batch, {.max_checks = 200});
//
// A layer is checked on the scalar L = Σ y ∘ R (R fixed random): its backward with dy = R must give
// dL/dx and dL/dθ for every input and parameter, which are compared with finite differences of its
// forward. A model is checked on its loss: forward_backward's parameter gradients against finite
// differences of evaluate() over a random subset of parameters.

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "sparselm/core/arena.hpp"
#include "sparselm/core/rng.hpp"
#include "sparselm/layers/context.hpp"
#include "sparselm/testing/gradcheck.hpp"

namespace sparselm::testing {

// A layer given as two functions (for compositions and layers with extra arguments).
struct layer_case {
  std::shared_ptr<arena_layout> layout;
  std::size_t rows = 0, in = 0, out = 0;
  std::size_t batch = 1, seq = 1;
  // forward(ctx, x, y) and backward(ctx, dy, dx); backward accumulates parameter gradients into ctx.grads.
  std::function<void(const step_context&, const_matrix_view<float>, matrix_view<float>)> forward;
  std::function<void(const step_context&, const_matrix_view<float>, matrix_view<float>)> backward;
  std::function<void(arena<float>&)> init;  // optional; default N(0, 0.5)
  gradcheck_options options{};
  bool training = false;                    // dropout on (its masks are fixed by dropout_seed)
  std::uint64_t dropout_seed = 99;
  std::vector<std::int32_t> lengths;        // padding masks: valid length per sequence
};

inline gradcheck_result check_layer(const layer_case& lc, std::uint64_t seed = 7) {
  auto layout = std::shared_ptr<const arena_layout>(lc.layout);
  arena<float> params(layout), grads(layout);
  counter_rng rng(seed);
  if (lc.init)
    lc.init(params);
  else
    rng.fill_normal(params.all(), 1, 0.0f, 0.5f);
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
    s.training = lc.training;
    s.rng = counter_rng(lc.dropout_seed);
    s.lengths = lc.lengths;
    return s;
  };
  grads.zero();  // analytic
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

struct layer_check_options {
  std::size_t batch = 2, seq = 3;  // rows = batch · seq
  std::size_t in = 0, out = 0;     // widths of x and y
  bool training = false;
  std::uint64_t dropout_seed = 99;
  std::vector<std::int32_t> lengths;
  std::function<void(arena<float>&)> init;  // default N(0, 0.5)
  gradcheck_options tolerance{};
};

// Any layer (forward(s, x, y, cache), backward(s, dy, dx, cache), parameters()) whose tensors live
// on `layout`.
template <layer L>
gradcheck_result check_layer(const L& l, std::shared_ptr<arena_layout> layout, const layer_check_options& o,
                             std::uint64_t seed = 7) {
  auto c = std::make_shared<typename L::cache>();
  layer_case lc{layout, o.batch * o.seq, o.in, o.out, o.batch, o.seq};
  lc.forward = [&l, c](const step_context& s, auto x, auto y) { l.forward(s, x, y, *c); };
  lc.backward = [&l, c](const step_context& s, auto dy, auto dx) { l.backward(s, dy, dx, *c); };
  lc.init = o.init;
  lc.options = o.tolerance;
  lc.training = o.training;
  lc.dropout_seed = o.dropout_seed;
  lc.lengths = o.lengths;
  return check_layer(lc, seed);
}

struct model_check_options {
  std::size_t max_checks = 200;  // parameters compared (a seeded random subset)
  gradcheck_options tolerance{.step = 1e-2, .rtol = 2e-2, .atol = 1e-4};
};

// A model's parameter gradients (forward_backward with gradient scale 1, gradient of Σ w·CE) against
// finite differences of evaluate()'s Σ w·CE, dropout off. The model's parameters are restored.
template <class Model>
gradcheck_result check_model(Model& model, const typename Model::batch_type& b, const model_check_options& o = {}) {
  auto& params = model.params();
  std::vector<float> x0(params.all().begin(), params.all().end());
  model.grads().zero();
  model.forward_backward(step_context{}, b, 1.0f);
  std::vector<float> g(model.grads().all().begin(), model.grads().all().end());
  auto f = [&](std::span<const float> v) {
    std::copy(v.begin(), v.end(), params.all().begin());
    return model.evaluate(b).loss_sum;
  };
  gradcheck_options t = o.tolerance;
  t.max_checks = o.max_checks;
  auto r = gradcheck(f, x0, g, t);
  std::copy(x0.begin(), x0.end(), params.all().begin());
  return r;
}

}  // namespace sparselm::testing
