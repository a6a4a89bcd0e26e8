#pragma once
// Transformer block: self-attention and feed-forward branches on a residual stream, made of parts:
// the norm, attention and feed-forward layers and the norm placement are template parameters
// (residual_block<Placement, Norm, Attention, FFN>; what a part must offer: layers/branch.hpp).
//
//   pre_ln  (GPT-2):  x1 = x + drop(attn(ln1(x)))      y = x1 + drop(ffn(ln2(x1)))
//   post_ln (BERT):   x1 = ln1(x + drop(attn(x)))      y = ln2(x1 + drop(ffn(x1)))
//
// Legend: N = B·T rows, C channels. x, y, x1 (N,C).
// GPT-2's, BERT's and the S1 LM's block is transformer_block<T, Sparsity, Placement, Mask, Act>
// (layer norms, self_attention, feed_forward); LLaMA's is llama_block (models/llama.hpp).
// backward works in place on the residual gradient (dx may alias dy); forward_cached runs new
// positions against a kv_cache (incremental decoding, causal only).
// Under bf16 compute a pre-LN block does not keep its norms' outputs when the branch keeps its
// input itself (its compact_input: the first projection keeps it in bf16, input_keeper::layer), and
// the fp32 output is a temporary. The block's own temporaries are its workspace (residual_block_workspace),
// which the pass's scratch pool holds once for every block of the model (scratch::get).

#include <concepts>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "sparselm/kernels/dropout.hpp"
#include "sparselm/kernels/reduce.hpp"
#include "sparselm/layers/attention.hpp"
#include "sparselm/layers/block_options.hpp"
#include "sparselm/layers/branch.hpp"
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

// The block's temporaries (N,C) each, one for every block of a model (scratch::get):
//   branch  a branch's output, or its gradient through the residual dropout
//   dnorm   pre_ln: the gradient w.r.t. a norm's output; forward under bf16: the norm's output,
//           which the branch keeps itself in bf16
//   dsum    post_ln: the gradient w.r.t. a norm's input
struct residual_block_workspace {
  buffer branch, dnorm, dsum;
  std::size_t bytes() const noexcept { return buffers_bytes(branch, dnorm, dsum); }
};

// A block of parts: Norm (both norms), Attention and FFN are layers that meet the branch contract
// (layers/branch.hpp); Placement puts the norms before (pre_ln) or after (post_ln) the residual add.
template <norm_placement Placement, class Norm, class Attention, class FFN>
class residual_block {
  static_assert(check_part<Norm>() && check_part<Attention>() && check_part<FFN>());

 public:
  using norm_type = Placement;
  using norm_layer_type = Norm;
  using attention_type = Attention;
  using ffn_type = FFN;
  using workspace = residual_block_workspace;
  static constexpr bool is_pre_ln = std::same_as<Placement, pre_ln>;
  struct cache {
    typename Norm::cache ln1_c, ln2_c;
    typename Attention::cache attn_c;
    typename FFN::cache ffn_c;
    // pre_ln: t1 = ln1(x), x1, t2 = ln2(x1).  post_ln: t1 = x + attn, x1 = ln1(t1), t2 = x1 + ffn.
    // (Decoding uses t1 for both sub-layers.)
    buffer t1, x1, t2;  // (N,C) each
    buffer acc;         // (N,C) for parts whose backward cannot add into dx
  };

  residual_block() = default;
  // prefix e.g. "h.3": tensors "h.3.<names.norm1>.*", "h.3.<names.attn>.*", ... (o.names; GPT-2's
  // "ln_1", "attn", "ln_2", "mlp" by default). site: a small unique number per block for dropout streams.
  residual_block(arena_layout& layout, const std::string& prefix, block_options o, std::uint64_t site)
      : c_(o.channels), drop_(o.resid_dropout), site_(site),
        ln1_(make_part<Norm>(layout, prefix + "." + o.names.norm1, with_site(o, site))),
        attn_(make_part<Attention>(layout, prefix + "." + o.names.attn, with_site(o, site))),
        ln2_(make_part<Norm>(layout, prefix + "." + o.names.norm2, with_site(o, site))),
        ffn_(make_part<FFN>(layout, prefix + "." + o.names.ffn, with_site(o, site))) {}
  // From parts already built on a layout (channels: the residual width).
  residual_block(std::size_t channels, Norm ln1, Attention attn, Norm ln2, FFN ffn, float resid_dropout = 0.0f,
                 std::uint64_t site = 0)
      : c_(channels), drop_(resid_dropout), site_(site), ln1_(std::move(ln1)), attn_(std::move(attn)),
        ln2_(std::move(ln2)), ffn_(std::move(ffn)) {}

  std::size_t channels() const noexcept { return c_; }
  const Norm& ln1() const noexcept { return ln1_; }
  const Norm& ln2() const noexcept { return ln2_; }
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
    residual_forward(s, x, x1, ln1_, c.ln1_c, c.t1, 2, branch_compact_input(attn_, s),
                     [&](auto in, auto out, input_keeper k) { branch_forward(attn_, s, in, out, c.attn_c, k); });
    residual_forward(s, x1, y, ln2_, c.ln2_c, c.t2, 3, branch_compact_input(ffn_, s),
                     [&](auto in, auto out, input_keeper k) { branch_forward(ffn_, s, in, out, c.ffn_c, k); });
  }

  // dx = (dL/dx), dy = (dL/dy); dx may alias dy.
  void backward(const step_context& s, const_matrix_view<float> dy, matrix_view<float> dx, cache& c) const {
    residual_backward(s, dy, dx, ln2_, c.ln2_c, c.acc, 3,
                      [&](auto g, auto d, bool acc) { branch_backward(ffn_, s, g, d, c.ffn_c, acc, c.acc); });
    residual_backward(s, dx, dx, ln1_, c.ln1_c, c.acc, 2,
                      [&](auto g, auto d, bool acc) { branch_backward(attn_, s, g, d, c.attn_c, acc, c.acc); });
  }

  // Incremental decoding: x (B·n, C) holds n = s.seq new positions per sequence at positions
  // [past, past + n) and is replaced by the block's output; layer `layer` of kv receives their keys
  // and values.
  void forward_cached(const step_context& s, matrix_view<float> x, cache& c, kv_cache& kv, std::size_t layer,
                      std::size_t past) const {
    static_assert(requires(const Attention& a, const step_context& s2, const_matrix_view<float> in, matrix_view<float> out,
                           typename Attention::cache& ac, kv_cache& kv2, std::size_t i) {
      a.forward_cached(s2, in, out, ac, kv2, i, i);
    }, "residual_block::forward_cached: the attention part needs 'forward_cached(s, x, y, cache, kv_cache&, layer, past) const'");
    residual_forward(s, x, x, ln1_, c.ln1_c, c.t1, 2, false, [&](auto in, auto out, input_keeper) {
      attn_.forward_cached(s, in, out, c.attn_c, kv, layer, past);
    });
    residual_forward(s, x, x, ln2_, c.ln2_c, c.t1, 3, false, [&](auto in, auto out, input_keeper) {
      branch_forward_cached(ffn_, s, in, out, c.ffn_c, kv, layer, past);
    });
  }

 private:
  // One residual sub-layer f with its norm and dropout k, from in to out (out may alias in):
  //   pre_ln: out = in + drop(f(norm(in))), t = norm(in);  post_ln: out = norm(in + drop(f(in))), t = the sum.
  // branch_keeps: the branch keeps its own (bf16) copy of t (pre_ln), so t is scratch.
  template <class F>
  void residual_forward(const step_context& s, const_matrix_view<float> in, matrix_view<float> out,
                        const Norm& norm, typename Norm::cache& nc, buffer& t_buf, std::uint64_t k,
                        bool branch_keeps, F&& f) const {
    const std::size_t N = in.rows;
    auto& w = s.tmp->get<workspace>();
    auto branch = w.branch.matrix(N, c_);
    if constexpr (is_pre_ln) {
      auto t = branch_keeps ? w.dnorm.matrix(N, c_) : t_buf.matrix(N, c_);
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
                         const Norm& norm, typename Norm::cache& nc, buffer& acc, std::uint64_t k, F&& f) const {
    const std::size_t N = dout.rows;
    if constexpr (is_pre_ln) {
      // The residual gradient flows through unchanged; the branch adds its part via the norm.
      auto dnorm = s.tmp->get<workspace>().dnorm.matrix(N, c_);
      if (din.data != dout.data) kernels::copy(dout, din);
      f(branch_grad(s, din, k), dnorm, false);
      branch_backward(norm, s, dnorm, din, nc, /*accumulate=*/true, acc);
    } else {
      auto g = s.tmp->get<workspace>().dsum.matrix(N, c_);
      branch_backward(norm, s, dout, g, nc, false, acc);  // g = dL/d(in + branch)
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
    auto g = s.tmp->get<workspace>().branch.matrix(dres.rows, c_);
    kernels::dropout_backward(std::span<const float>(dres.data, dres.rows * c_), std::span<float>(g.data, g.rows * c_),
                              drop_, s.rng, s.stream(mix_stream(site_, k)));
    return g;
  }

  std::size_t c_ = 0;
  float drop_ = 0.0f;
  std::uint64_t site_ = 0;
  Norm ln1_;
  Attention attn_;
  Norm ln2_;
  FFN ffn_;

  static block_options with_site(block_options o, std::uint64_t site) {
    o.site = site;
    return o;
  }
};

// The classic block: layer norms, fused-QKV self-attention with its mask, GELU feed-forward.
template <class T = float, sparsity_type Sparsity = dense, norm_placement Norm = pre_ln,
          kernels::attention_mask Mask = kernels::attention_mask::causal,
          kernels::gelu_kind Act = kernels::gelu_kind::tanh>
using transformer_block = residual_block<Norm, layer_norm, self_attention<T, Sparsity, Mask>, feed_forward<T, Sparsity, Act>>;

// GPT-2's decoder block and BERT's encoder block.
template <class T = float, sparsity_type Sparsity = dense, kernels::gelu_kind Act = kernels::gelu_kind::tanh>
using pre_ln_block = transformer_block<T, Sparsity, pre_ln, kernels::attention_mask::causal, Act>;
template <class T = float, sparsity_type Sparsity = dense, kernels::gelu_kind Act = kernels::gelu_kind::erf>
using post_ln_block = transformer_block<T, Sparsity, post_ln, kernels::attention_mask::padding, Act>;

}  // namespace sparselm
