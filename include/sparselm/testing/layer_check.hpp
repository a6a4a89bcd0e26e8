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
// forward; the layer's optional paths (accumulating backward, kept input, bf16 compute) are
// compared with its plain one. A model is checked on its loss: forward_backward's parameter gradients against finite
// differences of evaluate() over a random subset of parameters.

#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <cmath>
#include <memory>
#include <span>
#include <vector>

#include "sparselm/core/arena.hpp"
#include "sparselm/core/rng.hpp"
#include "sparselm/layers/context.hpp"
#include "sparselm/layers/linear.hpp"
#include "sparselm/layers/visit.hpp"
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

namespace detail {
// The step context of a layer check: these arenas, scratch and shapes, dropout off.
inline step_context layer_step(const arena<float>& params, arena<float>& grads, scratch& tmp, std::size_t batch,
                               std::size_t seq, std::span<const std::int32_t> lengths) {
  return step_context{.params = &params, .grads = &grads, .tmp = &tmp, .batch = batch, .seq = seq, .lengths = lengths};
}
}  // namespace detail

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
    step_context s = detail::layer_step(p, grads, tmp, lc.batch, lc.seq, lc.lengths);
    s.training = lc.training;
    s.rng = counter_rng(lc.dropout_seed);
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
  // default: N(0, 0.5), and every block-sparse linear found by visiting the layer initialised on
  // a random pattern (its own init)
  std::function<void(arena<float>&)> init;
  gradcheck_options tolerance{};
  // Also check the layer's optional paths against its plain forward/backward (paths below).
  bool paths = true;
  double bf16_rtol = 5e-2;  // bf16 compute: |a − b| <= rtol · max|b| per tensor
};

namespace detail {
// The default initialisation of check_layer (layer_check_options::init).
template <class L>
void default_layer_init(const L& l, arena<float>& p, std::uint64_t seed) {
  counter_rng(seed).fill_normal(p.all(), 1, 0.0f, 0.5f);
  visit_tree(l, [&](const auto& n) {
    using N = std::decay_t<decltype(n)>;
    if constexpr (is_linear_v<N>) {
      if constexpr (N::sparsity::is_sparse) n.init(p, counter_rng(seed + 1), 0.5f);
    }
  });
}

// max |a − b| / max |b| (0 when b is all zero and a equals it).
inline double max_rel(std::span<const float> a, std::span<const float> b) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    num = std::max(num, double(std::fabs(a[i] - b[i])));
    den = std::max(den, double(std::fabs(b[i])));
  }
  return den > 0 ? num / den : num;
}

// The optional paths of a layer against its plain forward/backward, on the same parameters and
// data: backward accumulating into dx (when it takes accumulate_dx), forward with
// input_keeper::layer while the caller's x is overwritten before backward (when it takes a keeper),
// and bf16 compute (within rtol). Failures are appended to r.
template <class L>
void check_layer_paths(const L& l, const std::shared_ptr<const arena_layout>& layout, const layer_check_options& o,
                       const arena<float>& params, std::uint64_t seed, gradcheck_result& r) {
  const std::size_t N = o.batch * o.seq;
  std::vector<float> x(N * o.in), dy(N * o.out);
  counter_rng(seed).fill_normal(x, 21, 0.0f, 1.0f);
  counter_rng(seed).fill_normal(dy, 22, 0.0f, 1.0f);
  arena<float> grads(layout);
  scratch tmp;
  struct pass {
    std::vector<float> y, dx, g;
  };
  auto run = [&](dtype compute, bool accumulate, bool keep) {
    step_context s = layer_step(params, grads, tmp, o.batch, o.seq, o.lengths);
    s.compute = compute;
    grads.zero();
    typename L::cache c;
    std::vector<float> xin = x;
    pass p{std::vector<float>(N * o.out), std::vector<float>(N * o.in, accumulate ? 0.25f : 0.0f), {}};
    const const_matrix_view<float> xv(xin.data(), N, o.in);
    const matrix_view<float> yv(p.y.data(), N, o.out), dxv(p.dx.data(), N, o.in);
    if constexpr (requires { l.forward(s, xv, yv, c, input_keeper::layer); }) {
      if (keep) {
        l.forward(s, xv, yv, c, input_keeper::layer);
        std::fill(xin.begin(), xin.end(), std::numeric_limits<float>::quiet_NaN());
      } else {
        l.forward(s, xv, yv, c);
      }
    } else {
      l.forward(s, xv, yv, c);
    }
    if constexpr (requires { l.backward(s, const_matrix_view<float>(dy.data(), N, o.out), dxv, c, true); })
      l.backward(s, const_matrix_view<float>(dy.data(), N, o.out), dxv, c, accumulate);
    else
      l.backward(s, const_matrix_view<float>(dy.data(), N, o.out), dxv, c);
    if (accumulate)
      for (auto& v : p.dx) v -= 0.25f;
    p.g.assign(grads.all().begin(), grads.all().end());
    return p;
  };
  auto compare = [&](const char* path, const pass& a, const pass& b, double rtol) {
    const double e = std::max({max_rel(a.y, b.y), max_rel(a.dx, b.dx), max_rel(a.g, b.g)});
    if (e <= rtol) return;
    r.ok = false;
    r.message += std::string(r.message.empty() ? "" : "; ") + "check_layer: the " + path +
                 " path differs from the plain one (max relative error " + std::to_string(e) + ")";
  };
  const pass ref = run(dtype::f32, false, false);
  if constexpr (requires(typename L::cache& c, const step_context& s, matrix_view<float> d) {
                  l.backward(s, const_matrix_view<float>(d), d, c, true);
                })
    compare("accumulating backward", run(dtype::f32, true, false), ref, 1e-5);
  if constexpr (requires(typename L::cache& c, const step_context& s, matrix_view<float> d) {
                  l.forward(s, const_matrix_view<float>(d), d, c, input_keeper::layer);
                })
    compare("kept-input (input_keeper::layer)", run(dtype::f32, false, true), ref, 1e-5);
  compare("bf16 compute", run(dtype::bf16, false, false), ref, o.bf16_rtol);
}
}  // namespace detail

// Any layer (forward(s, x, y, cache), backward(s, dy, dx, cache), parameters()) whose tensors live
// on `layout`: its gradients by finite differences and, with o.paths, its optional paths
// (detail::check_layer_paths).
template <class L>
gradcheck_result check_layer(const L& l, std::shared_ptr<arena_layout> layout, const layer_check_options& o,
                             std::uint64_t seed = 7) {
  static_assert(check_layer_members<L>(), "check_layer: L is not a layer (core/layer.hpp)");
  if constexpr (!layer<L>) return {};  // only the static_assert above is reported
  else {
    auto c = std::make_shared<typename L::cache>();
    layer_case lc{layout, o.batch * o.seq, o.in, o.out, o.batch, o.seq};
    lc.forward = [&l, c](const step_context& s, auto x, auto y) { l.forward(s, x, y, *c); };
    lc.backward = [&l, c](const step_context& s, auto dy, auto dx) { l.backward(s, dy, dx, *c); };
    lc.init = o.init ? o.init : std::function<void(arena<float>&)>([&l, seed](arena<float>& p) {
      detail::default_layer_init(l, p, seed);
    });
    lc.options = o.tolerance;
    lc.training = o.training;
    lc.dropout_seed = o.dropout_seed;
    lc.lengths = o.lengths;
    gradcheck_result r = check_layer(lc, seed);
    if (o.paths && !o.training) {
      std::shared_ptr<const arena_layout> cl = layout;
      arena<float> params(cl);
      lc.init(params);
      detail::check_layer_paths(l, cl, o, params, seed, r);
    }
    return r;
  }
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
