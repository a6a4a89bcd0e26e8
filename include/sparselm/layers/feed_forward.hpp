#pragma once
// Position-wise feed-forward: y = act(x·W1 + b1)·W2 + b2 with a GELU activation.
//
// Legend: N rows, C channels, F hidden (4C in GPT-2).
//   h (N,F) = x (N,C) · W1 (C,F) + b1 ;  a (N,F) = gelu(h) ;  y (N,C) = a · W2 (F,C) + b2
// Under bf16 compute (dense projections, or block-sparse ones running the bf16 products: the
// projections' compact_input), h and a are kept in bf16 (h for gelu', a for the weight gradient of
// W2, which rounds it to bf16 anyway); their fp32 forms are scratch.

#include <string>
#include <vector>

#include "sparselm/kernels/gelu.hpp"
#include "sparselm/layers/block_options.hpp"
#include "sparselm/layers/context.hpp"
#include "sparselm/layers/linear.hpp"
#include "sparselm/layers/visit.hpp"

namespace sparselm {

template <class T = float, sparsity_type Sparsity = dense, kernels::gelu_kind Act = kernels::gelu_kind::tanh>
class feed_forward {
 public:
  using linear_type = linear<T, Sparsity>;
  struct cache {
    typename linear_type::cache fc_c, proj_c;
    buffer h;  // (N,F) pre-activation
    buffer a;  // (N,F) activation
    buffer_bf16 h16, a16;  // the same in bf16 (compact_input)
    bool in_bf16 = false;  // forward kept h and a in bf16
  };

  feed_forward() = default;
  // prefix e.g. "h.0.mlp" gives "h.0.mlp.c_fc.weight" and "h.0.mlp.c_proj.weight" (HF GPT-2 names).
  feed_forward(arena_layout& layout, const std::string& prefix, std::size_t channels, std::size_t hidden,
               const sparse_plan* plan = nullptr, bool bias = true)
      : f_(hidden), fc_(layout, prefix + ".c_fc", channels, hidden, bias, plan),
        proj_(layout, prefix + ".c_proj", hidden, channels, bias, plan, linear_role::residual_output) {}
  // As a block's part (layers/block.hpp).
  feed_forward(arena_layout& layout, const std::string& prefix, const block_options& o)
      : feed_forward(layout, prefix, o.channels, o.hidden, o.plan, o.ffn_bias) {}

  const linear_type& fc() const noexcept { return fc_; }
  const linear_type& proj() const noexcept { return proj_; }
  template <class F>
  void visit(F&& f) const {
    f(fc_);
    f(proj_);
  }

  // True when the activations are kept in bf16 and input_keeper::layer keeps x in bf16.
  static bool compact_input(const step_context& s) { return linear_type::compact_input(s); }

  // keeper: who keeps x for backward (input_keeper::layer: the first projection keeps a copy).
  void forward(const step_context& s, const_matrix_view<float> x, matrix_view<float> y, cache& c,
               input_keeper keeper = input_keeper::caller) const {
    const std::size_t N = x.rows;
    if (compact_input(s)) {
      auto h = s.tmp->matrix(slot_ffn_hidden, N, f_);
      auto h16 = c.h16.get(N * f_), a16 = c.a16.get(N * f_);
      fc_.forward(s, x, h, c.fc_c, keeper);
      kernels::gelu_forward<Act>(std::span<const float>(h.data, N * f_), a16, h16);
      proj_.forward(s, const_matrix_view<bf16>(a16.data(), N, f_), y, c.proj_c);
      c.in_bf16 = true;
      return;
    }
    c.in_bf16 = false;
    auto h = c.h.matrix(N, f_);
    auto a = c.a.matrix(N, f_);
    fc_.forward(s, x, h, c.fc_c, keeper);
    kernels::gelu_forward<Act>(std::span<const float>(h.data, N * f_), std::span<float>(a.data, N * f_));
    proj_.forward(s, a, y, c.proj_c);
  }

  void backward(const step_context& s, const_matrix_view<float> dy, matrix_view<float> dx, cache& c,
                bool accumulate_dx = false) const {
    const std::size_t N = dy.rows;
    auto da = s.tmp->matrix(slot_ffn_hidden, N, f_);
    proj_.backward(s, dy, da, c.proj_c);
    std::span<float> das(da.data, N * f_);
    if (c.in_bf16)
      kernels::gelu_backward<Act>(std::span<const bf16>(c.h16.get(N * f_).data(), N * f_), das, das);
    else
      kernels::gelu_backward<Act>(std::span<const float>(c.h.get(N * f_).data(), N * f_), das, das);
    fc_.backward(s, da, dx, c.fc_c, accumulate_dx);
  }

 private:
  std::size_t f_ = 0;
  linear_type fc_, proj_;
};

}  // namespace sparselm
