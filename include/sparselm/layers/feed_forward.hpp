#pragma once
// Position-wise feed-forward: y = act(x·W1 + b1)·W2 + b2 with a GELU activation.
//
// Legend: N rows, C channels, F hidden (4C in GPT-2).
//   h (N,F) = x (N,C) · W1 (C,F) + b1 ;  a (N,F) = gelu(h) ;  y (N,C) = a · W2 (F,C) + b2
// Under bf16 compute (dense projections, or block-sparse ones running the bf16 products: the
// projections' compact_input), h and a are kept in bf16 (h for gelu', a for the weight gradient of
// W2, which rounds it to bf16 anyway); their fp32 forms are scratch.
//
// Block-sparse, fp32 (or fp16) compute, on a step that does not pool dense gradients, and where the
// kernel serves the block size (kernels::bsr_ffn_fuses: B a multiple of the SIMD width), the layer
// runs the fused kernel of kernels/bsr_ffn.hpp: tile by tile of rows, a = gelu(h) and the backward's
// da and dh stay in cache; the layer keeps x (the caller's, or its own copy under
// input_keeper::layer) and h in the kernel's tile layout (ffn_fusion_mode::keep), or only x, backward
// recomputing h per tile (ffn_fusion_mode::recompute). Its outputs are those of the unfused
// products; ffn_fusion() sets the mode process-wide (off: unfused; tests and benchmarks compare).

#include <atomic>
#include <string>
#include <vector>

#include "sparselm/kernels/bsr_ffn.hpp"
#include "sparselm/kernels/gelu.hpp"
#include "sparselm/layers/block_options.hpp"
#include "sparselm/layers/context.hpp"
#include "sparselm/layers/linear.hpp"
#include "sparselm/layers/tensor_parallel.hpp"
#include "sparselm/layers/visit.hpp"

namespace sparselm {

// How a block-sparse feed-forward runs where the fused kernel serves it (process-wide; keep unless set).
enum class ffn_fusion_mode { off, keep, recompute };
inline std::atomic<ffn_fusion_mode>& ffn_fusion() {
  static std::atomic<ffn_fusion_mode> mode{ffn_fusion_mode::keep};
  return mode;
}

// feed_forward's temporary (every instance shares one, scratch::get): the hidden gradient (N,F);
// under bf16 activations the forward's fp32 pre-activation first.
struct feed_forward_workspace {
  buffer hidden;
  std::size_t bytes() const noexcept { return hidden.bytes(); }
};

template <class T = float, sparsity_type Sparsity = dense, kernels::gelu_kind Act = kernels::gelu_kind::tanh>
class feed_forward {
 public:
  using workspace = feed_forward_workspace;
  using linear_type = linear<T, Sparsity>;
  // Splits over a tensor-parallel group (block_options::tensor; layers/branch.hpp).
  static constexpr bool tensor_parallel = true;
  struct cache {
    typename linear_type::cache fc_c, proj_c;
    buffer h;  // (N,F) pre-activation
    buffer a;  // (N,F) activation
    buffer_bf16 h16, a16;  // the same in bf16 (compact_input)
    bool in_bf16 = false;  // forward kept h and a in bf16
    bool fused = false;    // forward ran the fused kernel: it kept x (or own, its copy) and h's tiles
    bool kept_h = false;   // in h (ffn_fusion_mode::keep)
    const_matrix_view<float> x;
    buffer own;
    buffer tp_dx;  // this rank's part of dx, when a tensor-parallel backward accumulates
  };

  // Whether this layer's products can run fused (block size and SIMD width), and whether they do on
  // step s.
  bool fusable() const {
    if constexpr (Sparsity::is_sparse)
      return with_block_of<Sparsity>(fc_.block_size(), []<std::size_t B>() { return kernels::bsr_ffn_fuses<B>; });
    return false;
  }
  bool fused(const step_context& s) const {
    return fusable() && ffn_fusion().load(std::memory_order_relaxed) != ffn_fusion_mode::off && s.compute != dtype::bf16 && !s.need_dense_grad;
  }

  feed_forward() = default;
  // prefix e.g. "h.0.mlp" gives "h.0.mlp.c_fc.weight" and "h.0.mlp.c_proj.weight" (HF GPT-2 names).
  // tp: split the hidden units over a tensor-parallel group (parallel/tensor_parallel.hpp): this
  // rank holds hidden/tp.size of them, its columns of the first projection and rows of the second.
  feed_forward(arena_layout& layout, const std::string& prefix, std::size_t channels, std::size_t hidden,
               const sparse_plan* plan = nullptr, bool bias = true, parallel::tensor_split tp = {})
      : f_(tp.share(hidden, "feed-forward '" + prefix + "': hidden units")),
        fc_(layout, prefix + ".c_fc", channels, f_, bias, plan),
        proj_(layout, prefix + ".c_proj", f_, channels, bias, plan, linear_role::residual_output) {
    fc_.set_split({parallel::split_kind::columns, 1, tp});
    proj_.set_split({parallel::split_kind::rows, 1, tp});
  }
  // As a block's part (layers/block.hpp).
  feed_forward(arena_layout& layout, const std::string& prefix, const block_options& o)
      : feed_forward(layout, prefix, o.channels, o.hidden, o.plan, o.ffn_bias, o.tensor) {}

  const linear_type& fc() const noexcept { return fc_; }
  const linear_type& proj() const noexcept { return proj_; }
  template <class F>
  void visit(F&& f) const {
    f(fc_);
    f(proj_);
  }

  // True when the activations are kept in bf16 and input_keeper::layer keeps x in bf16.
  bool compact_input(const step_context& s) const { return fc_.compact_input(s); }

  // keeper: who keeps x for backward (input_keeper::layer: the first projection keeps a copy).
  void forward(const step_context& s, const_matrix_view<float> x, matrix_view<float> y, cache& c,
               input_keeper keeper = input_keeper::caller) const {
    forward_local(s, x, y, c, keeper);
    detail::reduce_output(s, proj_, y);
  }

  void backward(const step_context& s, const_matrix_view<float> dy, matrix_view<float> dx, cache& c,
                bool accumulate_dx = false) const {
    detail::reduce_input_grad(s, fc_, dx, accumulate_dx, c.tp_dx,
                              [&](matrix_view<float> d, bool acc) { backward_local(s, dy, d, c, acc); });
  }

 private:
  // This rank's part of forward and backward (the whole layer without tensor parallelism).
  void forward_local(const step_context& s, const_matrix_view<float> x, matrix_view<float> y, cache& c,
                     input_keeper keeper) const {
    const std::size_t N = x.rows;
    c.fused = false;
    if constexpr (Sparsity::is_sparse) {
      if (fused(s)) return forward_fused(s, x, y, c, keeper);
    }
    if (compact_input(s)) {
      auto h = s.tmp->get<workspace>().hidden.matrix(N, f_);
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

  void backward_local(const step_context& s, const_matrix_view<float> dy, matrix_view<float> dx, cache& c,
                      bool accumulate_dx) const {
    if constexpr (Sparsity::is_sparse) {
      if (c.fused) return backward_fused(s, dy, dx, c, accumulate_dx);
    }
    const std::size_t N = dy.rows;
    auto da = s.tmp->get<workspace>().hidden.matrix(N, f_);
    proj_.backward(s, dy, da, c.proj_c);
    std::span<float> das(da.data, N * f_);
    if (c.in_bf16)
      kernels::gelu_backward<Act>(std::span<const bf16>(c.h16.get(N * f_).data(), N * f_), das, das);
    else
      kernels::gelu_backward<Act>(std::span<const float>(c.h.get(N * f_).data(), N * f_), das, das);
    fc_.backward(s, da, dx, c.fc_c, accumulate_dx);
  }

  void forward_fused(const step_context& s, const_matrix_view<float> x, matrix_view<float> y, cache& c,
                     input_keeper keeper) const {
    SPARSELM_CHECK(x.cols == fc_.in() && y.cols == fc_.in() && y.rows == x.rows, "feed_forward '", fc_.weight().name,
                   "': x ", shape_string(x), " and y ", shape_string(y), " do not fit ", fc_.in(), " channels");
    c.x = x;
    if (keeper == input_keeper::layer) {
      auto copy = c.own.matrix(x.rows, x.cols);
      std::copy_n(x.data, x.rows * x.cols, copy.data);
      c.x = copy;
    }
    c.kept_h = ffn_fusion().load(std::memory_order_relaxed) == ffn_fusion_mode::keep;
    with_block_of<Sparsity>(fc_.block_size(), [&]<std::size_t B>() {
      if constexpr (kernels::bsr_ffn_fuses<B>) {
        float* h = c.kept_h ? c.h.get(kernels::bsr_ffn_hidden_size<B>(x.rows, f_)).data() : nullptr;
        kernels::bsr_ffn_forward<B, Act>(c.x, fc_.state().pattern, s.p(fc_.weight().index).data(), fc_.bias_data(s),
                                         proj_.state().pattern, s.p(proj_.weight().index).data(), proj_.bias_data(s), y,
                                         h);
      }
    });
    c.fused = true;
  }

  void backward_fused(const step_context& s, const_matrix_view<float> dy, matrix_view<float> dx, cache& c,
                      bool accumulate_dx) const {
    SPARSELM_CHECK(!s.need_dense_grad && s.compute != dtype::bf16, "feed_forward '", fc_.weight().name,
                   "': forward ran fused, but backward pools dense gradients or computes in bf16");
    SPARSELM_CHECK(dy.rows == c.x.rows && dy.cols == fc_.in(), "feed_forward '", fc_.weight().name, "': dy ",
                   shape_string(dy), " does not match the forward's x ", shape_string(c.x));
    with_block_of<Sparsity>(fc_.block_size(), [&]<std::size_t B>() {
      if constexpr (kernels::bsr_ffn_fuses<B>)
        kernels::bsr_ffn_backward<B, Act>(
            c.x, dy, fc_.state().pattern, s.p(fc_.weight().index).data(), fc_.bias_data(s), proj_.state().pattern,
            s.p(proj_.weight().index).data(), accumulate_dx ? 1.0f : 0.0f, dx, s.g(fc_.weight().index).data(),
            fc_.has_bias() ? s.g(fc_.bias().index).data() : nullptr, s.g(proj_.weight().index).data(),
            c.kept_h ? c.h.get(kernels::bsr_ffn_hidden_size<B>(dy.rows, f_)).data() : nullptr);
    });
    if (proj_.has_bias()) kernels::add_column_sums(dy, s.g(proj_.bias().index));
  }

  std::size_t f_ = 0;
  linear_type fc_, proj_;
};

}  // namespace sparselm
