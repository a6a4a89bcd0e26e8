#pragma once
// Pre-LN transformer block (GPT-2): x1 = x + drop(attn(ln1(x))), y = x1 + drop(ffn(ln2(x1))).
//
// Legend: N = B·T rows, C channels. x, y, x1 (N,C).
// backward works in place on the residual gradient: dx may alias dy, and the two branches add
// their contributions into it through the norms' accumulating backward.

#include <cstdint>
#include <string>
#include <vector>

#include "sparselm/kernels/dropout.hpp"
#include "sparselm/kernels/reduce.hpp"
#include "sparselm/layers/attention.hpp"
#include "sparselm/layers/context.hpp"
#include "sparselm/layers/feed_forward.hpp"
#include "sparselm/layers/layer_norm.hpp"

namespace sparselm {

struct block_options {
  std::size_t channels = 0, heads = 0, head_dim = 0, hidden = 0;
  float ln_eps = 1e-5f;
  float ln_gamma = 1.0f;  // initial gamma of both norms (the S1 sparse LM uses 0.1)
  float attn_dropout = 0.0f, resid_dropout = 0.0f;
  bool qkv_bias = true, proj_bias = true;
  const sparse_plan* plan = nullptr;  // block-sparse projections: how many blocks each gets
};

template <class T = float, sparsity_type Sparsity = dense, kernels::gelu_kind Act = kernels::gelu_kind::tanh>
class pre_ln_block {
 public:
  using attention_type = self_attention<T, Sparsity, kernels::attention_mask::causal>;
  using ffn_type = feed_forward<T, Sparsity, Act>;
  struct cache {
    layer_norm::cache ln1_c, ln2_c;
    typename attention_type::cache attn_c;
    typename ffn_type::cache ffn_c;
    buffer ln1_out, x1, ln2_out;  // (N,C) each
  };

  pre_ln_block() = default;
  // prefix e.g. "h.3"; site: a small unique number per block for dropout streams.
  pre_ln_block(arena_layout& layout, const std::string& prefix, const block_options& o, std::uint64_t site)
      : c_(o.channels), drop_(o.resid_dropout), site_(site),
        ln1_(layout, prefix + ".ln_1", o.channels, o.ln_eps, o.ln_gamma),
        attn_(layout, prefix + ".attn", o.channels, o.heads, o.head_dim, o.qkv_bias, o.proj_bias, o.attn_dropout,
              mix_stream(site, 1), o.plan),
        ln2_(layout, prefix + ".ln_2", o.channels, o.ln_eps, o.ln_gamma),
        ffn_(layout, prefix + ".mlp", o.channels, o.hidden, o.plan) {}

  const layer_norm& ln1() const noexcept { return ln1_; }
  const layer_norm& ln2() const noexcept { return ln2_; }
  const attention_type& attn() const noexcept { return attn_; }
  const ffn_type& ffn() const noexcept { return ffn_; }
  std::vector<param_ref> parameters() const {
    std::vector<param_ref> r;
    for (auto& v : {ln1_.parameters(), attn_.parameters(), ln2_.parameters(), ffn_.parameters()})
      r.insert(r.end(), v.begin(), v.end());
    return r;
  }

  // y must not alias x.
  void forward(const step_context& s, const_matrix_view<float> x, matrix_view<float> y, cache& c) const {
    const std::size_t N = x.rows;
    auto ln1_out = c.ln1_out.matrix(N, c_);
    ln1_.forward(s, x, ln1_out, c.ln1_c);
    auto branch = s.tmp->matrix(slot_block_a, N, c_);
    attn_.forward(s, ln1_out, branch, c.attn_c);
    resid_dropout(s, branch, 2);
    auto x1 = c.x1.matrix(N, c_);
    kernels::add(x, branch, x1);
    auto ln2_out = c.ln2_out.matrix(N, c_);
    ln2_.forward(s, x1, ln2_out, c.ln2_c);
    ffn_.forward(s, ln2_out, branch, c.ffn_c);
    resid_dropout(s, branch, 3);
    kernels::add(x1, branch, y);
  }

  // dx = dy + (branch contributions); dx may alias dy.
  void backward(const step_context& s, const_matrix_view<float> dy, matrix_view<float> dx, cache& c) const {
    const std::size_t N = dy.rows;
    if (dx.data != dy.data) kernels::copy(dy, dx);
    auto dnorm = s.tmp->matrix(slot_block_b, N, c_);
    // feed-forward branch
    ffn_.backward(s, branch_grad(s, dx, 3), dnorm, c.ffn_c);
    ln2_.backward(s, dnorm, dx, c.ln2_c, /*accumulate_dx=*/true);
    // attention branch
    attn_.backward(s, branch_grad(s, dx, 2), dnorm, c.attn_c);
    ln1_.backward(s, dnorm, dx, c.ln1_c, /*accumulate_dx=*/true);
  }

 private:
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

}  // namespace sparselm
