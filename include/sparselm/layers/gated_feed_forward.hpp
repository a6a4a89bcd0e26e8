#pragma once
// Gated feed-forward (GLU family): y = (act(x·Wg) ∘ (x·Wu))·Wd — SwiGLU (act = SiLU, LLaMA) or
// GeGLU (act = GELU, tanh or erf form).
//
// Legend: N rows, C channels, F hidden (LLaMA's intermediate_size).
//   g (N,F) = x·Wg [+ b]   u (N,F) = x·Wu [+ b]   a (N,F) = act(g) ∘ u   y (N,C) = a·Wd [+ b]
// backward: da = dy·Wdᵀ;  dg = da ∘ u ∘ act'(g);  du = da ∘ act(g);  dx = dg·Wgᵀ + du·Wuᵀ
// Tensors "<prefix>.{gate,up,down}_proj.weight" (HF LLaMA names), bias-free unless asked.
// g, u and a live in the layer's cache, the backward's da (then dg) in its workspace, one for every
// instance of a model (scratch::get).
// Tensor parallelism (parallel/tensor_parallel.hpp): each rank of the group holds F/P hidden units,
// its columns of Wg and Wu and its rows of Wd; forward sums y over the group (then Wd's bias, once),
// backward sums dx.

#include <cmath>
#include <string>
#include <vector>

#include "sparselm/core/threads.hpp"
#include "sparselm/layers/block_options.hpp"
#include "sparselm/layers/context.hpp"
#include "sparselm/layers/linear.hpp"
#include "sparselm/layers/tensor_parallel.hpp"
#include "sparselm/layers/visit.hpp"

namespace sparselm {

enum class gate_activation { silu, gelu_tanh, gelu_erf };

namespace detail {
// act(x) and act'(x) in double (the pointwise part is a small share of the layer's time).
template <gate_activation A>
inline void gate_value_grad(double x, double& f, double& df) noexcept {
  if constexpr (A == gate_activation::silu) {
    const double sg = 1.0 / (1.0 + std::exp(-x));
    f = x * sg;
    df = sg * (1.0 + x * (1.0 - sg));
  } else if constexpr (A == gate_activation::gelu_tanh) {
    const double k = 0.7978845608028654, a = 0.044715;
    const double t = std::tanh(k * (x + a * x * x * x));
    f = 0.5 * x * (1.0 + t);
    df = 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3.0 * a * x * x);
  } else {
    const double cdf = 0.5 * (1.0 + std::erf(x * 0.7071067811865476));
    f = x * cdf;
    df = cdf + x * 0.3989422804014327 * std::exp(-0.5 * x * x);
  }
}
}  // namespace detail

// gated_feed_forward's temporary (every instance shares one): da, then dg in place (N,F).
struct gated_feed_forward_workspace {
  buffer da;
  std::size_t bytes() const noexcept { return da.bytes(); }
};

template <class T = float, sparsity_type Sparsity = dense, gate_activation A = gate_activation::silu>
class gated_feed_forward {
 public:
  using workspace = gated_feed_forward_workspace;
  using linear_type = linear<T, Sparsity>;
  static constexpr gate_activation activation = A;
  // Splits over a tensor-parallel group (block_options::tensor; layers/branch.hpp).
  static constexpr bool tensor_parallel = true;
  struct cache {
    typename linear_type::cache gate_c, up_c, down_c;
    buffer g, u, a;  // (N,F) each; backward: u's buffer takes du
    buffer tp_dx;    // this rank's part of dx, when a tensor-parallel backward accumulates
  };

  gated_feed_forward() = default;
  // tp: split the hidden units over a tensor-parallel group: this rank holds hidden/tp.size of them.
  gated_feed_forward(arena_layout& layout, const std::string& prefix, std::size_t channels, std::size_t hidden,
                     bool bias = false, const sparse_plan* plan = nullptr, parallel::tensor_split tp = {})
      : f_(tp.share(hidden, "feed-forward '" + prefix + "': hidden units")),
        gate_(layout, prefix + ".gate_proj", channels, f_, bias, plan),
        up_(layout, prefix + ".up_proj", channels, f_, bias, plan),
        down_(layout, prefix + ".down_proj", f_, channels, bias, plan, linear_role::residual_output) {
    gate_.set_split({parallel::split_kind::columns, 1, tp});
    up_.set_split({parallel::split_kind::columns, 1, tp});
    down_.set_split({parallel::split_kind::rows, 1, tp});
  }
  // As a block's part (layers/block.hpp).
  gated_feed_forward(arena_layout& layout, const std::string& prefix, const block_options& o)
      : gated_feed_forward(layout, prefix, o.channels, o.hidden, o.ffn_bias, o.plan, o.tensor) {}

  std::size_t hidden() const noexcept { return f_; }  // this rank's hidden units under tensor parallelism
  const linear_type& gate_proj() const noexcept { return gate_; }
  const linear_type& up_proj() const noexcept { return up_; }
  const linear_type& down_proj() const noexcept { return down_; }
  template <class F>
  void visit(F&& f) const {
    f(gate_);
    f(up_);
    f(down_);
  }

  void forward(const step_context& s, const_matrix_view<float> x, matrix_view<float> y, cache& c) const {
    forward_local(s, x, y, c);
    detail::reduce_output(s, down_, y);
  }

  // dx assigned (or accumulated when accumulate_dx).
  void backward(const step_context& s, const_matrix_view<float> dy, matrix_view<float> dx, cache& c,
                bool accumulate_dx = false) const {
    detail::reduce_input_grad(s, gate_, dx, accumulate_dx, c.tp_dx,
                              [&](matrix_view<float> d, bool acc) { backward_local(s, dy, d, c, acc); });
  }

 private:
  // This rank's part of forward and backward (the whole layer without tensor parallelism).
  void forward_local(const step_context& s, const_matrix_view<float> x, matrix_view<float> y, cache& c) const {
    const std::size_t N = x.rows;
    auto g = c.g.matrix(N, f_), u = c.u.matrix(N, f_), a = c.a.matrix(N, f_);
    gate_.forward(s, x, g, c.gate_c);
    up_.forward(s, x, u, c.up_c);
    parallel_for(0, N, [&](std::size_t r) {
      const float *gr = g.row(r), *ur = u.row(r);
      float* ar = a.row(r);
      for (std::size_t j = 0; j < f_; ++j) {
        double f, df;
        detail::gate_value_grad<A>(gr[j], f, df);
        ar[j] = float(f * ur[j]);
      }
    }, 16);
    down_.forward(s, a, y, c.down_c);
  }

  void backward_local(const step_context& s, const_matrix_view<float> dy, matrix_view<float> dx, cache& c,
                      bool accumulate_dx) const {
    const std::size_t N = dy.rows;
    auto da = s.tmp->get<workspace>().da.matrix(N, f_);
    down_.backward(s, dy, da, c.down_c);
    auto g = c.g.matrix(N, f_), u = c.u.matrix(N, f_);
    parallel_for(0, N, [&](std::size_t r) {
      const float* gr = g.row(r);
      float *dr = da.row(r), *ur = u.row(r);
      for (std::size_t j = 0; j < f_; ++j) {
        double f, df;
        detail::gate_value_grad<A>(gr[j], f, df);
        const double d = dr[j];
        dr[j] = float(d * ur[j] * df);  // dg
        ur[j] = float(d * f);           // du (u is not needed again)
      }
    }, 16);
    gate_.backward(s, da, dx, c.gate_c, accumulate_dx);
    up_.backward(s, u, dx, c.up_c, true);
  }

  std::size_t f_ = 0;
  linear_type gate_, up_, down_;
};

// LLaMA's feed-forward and the GELU-gated variant.
template <class T = float, sparsity_type Sparsity = dense>
using swiglu_feed_forward = gated_feed_forward<T, Sparsity, gate_activation::silu>;
template <class T = float, sparsity_type Sparsity = dense>
using geglu_feed_forward = gated_feed_forward<T, Sparsity, gate_activation::gelu_tanh>;

}  // namespace sparselm
