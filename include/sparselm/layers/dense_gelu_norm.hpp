#pragma once
// Dense → GELU → LayerNorm: y = LN(gelu(x·W + b)). BERT's MLM transform (C → C) and the S1 head's
// bottleneck (C → E) are this layer.
//
// Legend: N rows, I input width, O output width.
//   h (N,O) = x (N,I) · W (I,O) + b     a = gelu(h)     y (N,O) = LN(a)
// Tensors: "<dense>.weight", "<dense>.bias", "<norm>.weight", "<norm>.bias".

#include <span>
#include <string>

#include "sparselm/kernels/gelu.hpp"
#include "sparselm/layers/context.hpp"
#include "sparselm/layers/layer_norm.hpp"
#include "sparselm/layers/linear.hpp"

namespace sparselm {

template <class T = float, sparsity_type Sparsity = dense, kernels::gelu_kind Act = kernels::gelu_kind::tanh>
class dense_gelu_norm {
 public:
  using linear_type = linear<T, Sparsity>;
  struct cache {
    buffer h, a, da;  // (N,O) pre-activation, activation (the norm's input), and its gradient
    typename linear_type::cache dense_c;
    layer_norm::cache norm_c;
  };

  dense_gelu_norm() = default;
  dense_gelu_norm(arena_layout& layout, const std::string& dense_name, const std::string& norm_name, std::size_t in,
                  std::size_t out, const norm_options& norm = {}, const sparse_plan* plan = nullptr)
      : dense_(layout, dense_name, in, out, true, plan), norm_(layout, norm_name, out, norm) {}

  const linear_type& dense_layer() const noexcept { return dense_; }
  const layer_norm& norm() const noexcept { return norm_; }
  template <class F>
  void visit(F&& f) const {
    f(dense_);
    f(norm_);
  }

  void forward(const step_context& s, const_matrix_view<float> x, matrix_view<float> y, cache& c) const {
    const std::size_t N = x.rows, O = dense_.out();
    auto h = c.h.matrix(N, O), a = c.a.matrix(N, O);
    dense_.forward(s, x, h, c.dense_c);
    kernels::gelu_forward<Act>(std::span<const float>(h.data, N * O), std::span<float>(a.data, N * O));
    norm_.forward(s, a, y, c.norm_c);
  }

  // dx assigned (accumulated when accumulate_dx); parameter gradients accumulate.
  void backward(const step_context& s, const_matrix_view<float> dy, matrix_view<float> dx, cache& c,
                bool accumulate_dx = false) const {
    const std::size_t N = dy.rows, O = dense_.out();
    auto da = c.da.matrix(N, O);
    norm_.backward(s, dy, da, c.norm_c);
    std::span<float> d(da.data, N * O);
    kernels::gelu_backward<Act>(std::span<const float>(c.h.get(N * O).data(), N * O), d, d);
    dense_.backward(s, da, dx, c.dense_c, accumulate_dx);
  }

 private:
  linear_type dense_;
  layer_norm norm_;
};

}  // namespace sparselm
