#pragma once
// Transformer block: self-attention and feed-forward branches on a residual stream, with the
// norm placement a type.
//
//   pre_ln  (GPT-2):  x1 = x + drop(attn(ln1(x)))      y = x1 + drop(ffn(ln2(x1)))
//   post_ln (BERT):   x1 = ln1(x + drop(attn(x)))      y = ln2(x1 + drop(ffn(x1)))
//
// Legend: N = B·T rows, C channels. x, y, x1 (N,C).
// The attention mask (causal or padding), the sparsity of the projections and the GELU form are
// template parameters as well. backward works in place on the residual gradient (dx may alias dy);
// forward_cached runs new positions against a kv_cache (incremental decoding, causal only).
// Under bf16 compute a pre-LN block does not keep its norms' outputs: the branch's first projection
// keeps them in bf16 (input_keeper::layer), and the fp32 output is scratch.

#include <concepts>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "sparselm/kernels/dropout.hpp"
#include "sparselm/kernels/reduce.hpp"
#include "sparselm/layers/attention.hpp"
#include "sparselm/layers/context.hpp"
#include "sparselm/layers/feed_forward.hpp"
#include "sparselm/layers/kv_cache.hpp"
#include "sparselm/layers/layer_norm.hpp"
#include "sparselm/layers/visit.hpp"

namespace sparselm {

// Norm placement tags.
struct pre_ln {
  static constexpr const char* name = "pre_ln";
};
struct post_ln {
  static constexpr const char* name = "post_ln";
};
template <class P>
concept norm_placement = std::same_as<P, pre_ln> || std::same_as<P, post_ln>;

struct block_options {
  std::size_t channels = 0, heads = 0, head_dim = 0, hidden = 0;
  norm_options norm{};  // both norms (the S1 sparse LM starts gamma at 0.1, BERT uses eps 1e-12)
  float attn_dropout = 0.0f, resid_dropout = 0.0f;
  bool qkv_bias = true, proj_bias = true;
  const sparse_plan* plan = nullptr;  // block-sparse projections: how many blocks each gets
  std::shared_ptr<const kernels::block_causal_pattern> attn_pattern;  // static block-sparse attention, or null
};

template <class T = float, sparsity_type Sparsity = dense, norm_placement Norm = pre_ln,
          kernels::attention_mask Mask = kernels::attention_mask::causal,
          kernels::gelu_kind Act = kernels::gelu_kind::tanh>
class transformer_block {
 public:
  using norm_type = Norm;
  using attention_type = self_attention<T, Sparsity, Mask>;
  using ffn_type = feed_forward<T, Sparsity, Act>;
  static constexpr bool is_pre_ln = std::same_as<Norm, pre_ln>;
  static_assert(layer<attention_type> && layer<ffn_type>, "transformer_block: its branches must be layers");
  struct cache {
    layer_norm::cache ln1_c, ln2_c;
    typename attention_type::cache attn_c;
    typename ffn_type::cache ffn_c;
    // pre_ln: t1 = ln1(x), x1, t2 = ln2(x1).  post_ln: t1 = x + attn, x1 = ln1(t1), t2 = x1 + ffn.
    // (Decoding uses t1 for both sub-layers.)
    buffer t1, x1, t2;  // (N,C) each
  };

  transformer_block() = default;
  // prefix e.g. "h.3": tensors "h.3.ln_1.*", "h.3.attn.*", "h.3.ln_2.*", "h.3.mlp.*".
  // site: a small unique number per block for dropout streams.
  transformer_block(arena_layout& layout, const std::string& prefix, const block_options& o, std::uint64_t site)
      : c_(o.channels), drop_(o.resid_dropout), site_(site),
        ln1_(layout, prefix + ".ln_1", o.channels, o.norm),
        attn_(layout, prefix + ".attn", o.channels, o.heads, o.head_dim, o.qkv_bias, o.proj_bias, o.attn_dropout,
              mix_stream(site, 1), o.plan, o.attn_pattern),
        ln2_(layout, prefix + ".ln_2", o.channels, o.norm),
        ffn_(layout, prefix + ".mlp", o.channels, o.hidden, o.plan) {}

  std::size_t channels() const noexcept { return c_; }
  const layer_norm& ln1() const noexcept { return ln1_; }
  const layer_norm& ln2() const noexcept { return ln2_; }
  const attention_type& attn() const noexcept { return attn_; }
  const ffn_type& ffn() const noexcept { return ffn_; }
  template <class F>
  void visit(F&& f) const {
    f(ln1_);
    f(attn_);
    f(ln2_);
    f(ffn_);
  }

  // y must not alias x.
  void forward(const step_context& s, const_matrix_view<float> x, matrix_view<float> y, cache& c) const {
    const std::size_t N = x.rows;
    auto x1 = c.x1.matrix(N, c_);
    residual_forward(s, x, x1, ln1_, c.ln1_c, c.t1, 2, attention_type::compact_input(s),
                     [&](auto in, auto out, input_keeper k) { attn_.forward(s, in, out, c.attn_c, k); });
    residual_forward(s, x1, y, ln2_, c.ln2_c, c.t2, 3, ffn_type::compact_input(s),
                     [&](auto in, auto out, input_keeper k) { ffn_.forward(s, in, out, c.ffn_c, k); });
  }

  // dx = (dL/dx), dy = (dL/dy); dx may alias dy.
  void backward(const step_context& s, const_matrix_view<float> dy, matrix_view<float> dx, cache& c) const {
    residual_backward(s, dy, dx, ln2_, c.ln2_c, 3, [&](auto g, auto d, bool acc) { ffn_.backward(s, g, d, c.ffn_c, acc); });
    residual_backward(s, dx, dx, ln1_, c.ln1_c, 2, [&](auto g, auto d, bool acc) { attn_.backward(s, g, d, c.attn_c, acc); });
  }

  // Incremental decoding: x (B·n, C) holds n = s.seq new positions per sequence at positions
  // [past, past + n) and is replaced by the block's output; layer `layer` of kv receives their keys
  // and values.
  void forward_cached(const step_context& s, matrix_view<float> x, cache& c, kv_cache& kv, std::size_t layer,
                      std::size_t past) const {
    residual_forward(s, x, x, ln1_, c.ln1_c, c.t1, 2, false, [&](auto in, auto out, input_keeper) {
      attn_.forward_cached(s, in, out, c.attn_c, kv, layer, past);
    });
    residual_forward(s, x, x, ln2_, c.ln2_c, c.t1, 3, false,
                     [&](auto in, auto out, input_keeper k) { ffn_.forward(s, in, out, c.ffn_c, k); });
  }

 private:
  // One residual sub-layer f with its norm and dropout k, from in to out (out may alias in):
  //   pre_ln: out = in + drop(f(norm(in))), t = norm(in);  post_ln: out = norm(in + drop(f(in))), t = the sum.
  // branch_keeps: the branch keeps its own (bf16) copy of t (pre_ln), so t is scratch.
  template <class F>
  void residual_forward(const step_context& s, const_matrix_view<float> in, matrix_view<float> out,
                        const layer_norm& norm, layer_norm::cache& nc, buffer& t_buf, std::uint64_t k,
                        bool branch_keeps, F&& f) const {
    const std::size_t N = in.rows;
    auto branch = s.tmp->matrix(slot_block_a, N, c_);
    if constexpr (is_pre_ln) {
      auto t = branch_keeps ? s.tmp->matrix(slot_block_b, N, c_) : t_buf.matrix(N, c_);
      norm.forward(s, in, t, nc);
      f(const_matrix_view<float>(t), branch, branch_keeps ? input_keeper::layer : input_keeper::caller);
      resid_dropout(s, branch, k);
      kernels::add(in, branch, out);
    } else {
      auto t = t_buf.matrix(N, c_);
      f(in, branch, input_keeper::caller);
      resid_dropout(s, branch, k);
      kernels::add(in, branch, t);
      norm.forward(s, t, out, nc);
    }
  }
  // Its backward from dout to din (din may alias dout); f(g, d, accumulate) is the sub-layer's
  // backward from the branch gradient g into d.
  template <class F>
  void residual_backward(const step_context& s, const_matrix_view<float> dout, matrix_view<float> din,
                         const layer_norm& norm, layer_norm::cache& nc, std::uint64_t k, F&& f) const {
    const std::size_t N = dout.rows;
    if constexpr (is_pre_ln) {
      // The residual gradient flows through unchanged; the branch adds its part via the norm.
      auto dnorm = s.tmp->matrix(slot_block_b, N, c_);
      if (din.data != dout.data) kernels::copy(dout, din);
      f(branch_grad(s, din, k), dnorm, false);
      norm.backward(s, dnorm, din, nc, /*accumulate_dx=*/true);
    } else {
      auto g = s.tmp->matrix(slot_block_c, N, c_);
      norm.backward(s, dout, g, nc);  // g = dL/d(in + branch)
      kernels::copy(g, din);          // the residual part, then the branch's
      f(branch_grad(s, g, k), din, true);
    }
  }

  void resid_dropout(const step_context& s, matrix_view<float> m, std::uint64_t k) const {
    if (!s.training || drop_ <= 0) return;
    std::span<float> v(m.data, m.rows * m.cols);
    kernels::dropout_forward(v, v, drop_, s.rng, s.stream(mix_stream(site_, k)));
  }
  // Gradient w.r.t. a branch output: the residual gradient through that branch's dropout.
  const_matrix_view<float> branch_grad(const step_context& s, const_matrix_view<float> dres, std::uint64_t k) const {
    if (!s.training || drop_ <= 0) return dres;
    auto g = s.tmp->matrix(slot_block_a, dres.rows, c_);
    kernels::dropout_backward(std::span<const float>(dres.data, dres.rows * c_), std::span<float>(g.data, g.rows * c_),
                              drop_, s.rng, s.stream(mix_stream(site_, k)));
    return g;
  }

  std::size_t c_ = 0;
  float drop_ = 0.0f;
  std::uint64_t site_ = 0;
  layer_norm ln1_;
  attention_type attn_;
  layer_norm ln2_;
  ffn_type ffn_;
};

// GPT-2's decoder block and BERT's encoder block.
template <class T = float, sparsity_type Sparsity = dense, kernels::gelu_kind Act = kernels::gelu_kind::tanh>
using pre_ln_block = transformer_block<T, Sparsity, pre_ln, kernels::attention_mask::causal, Act>;
template <class T = float, sparsity_type Sparsity = dense, kernels::gelu_kind Act = kernels::gelu_kind::erf>
using post_ln_block = transformer_block<T, Sparsity, post_ln, kernels::attention_mask::padding, Act>;

}  // namespace sparselm
