#pragma once
// The head of a causal language model: final norm (layer norm, or the Norm parameter: RMSNorm for
// LLaMA), an optional bottleneck, and the output projection tied to the token embedding (or to
// the head's own table: options.untied_name), fused with the LM loss (models/lm_loss.hpp).
//
// Legend: N rows, C model width, E bottleneck width (the S1 embedding width), V vocab.
//   xf (N,C) = ln_f(x)
//   GPT:  z = xf                                                   (bottleneck 0)
//   S1:   z (N,E) = ln_head(gelu(xf · W_down (C,E) + b_down))      W_down dense or block-sparse
//   logits (N,V) = z · Eᵀ [+ bias]   E: the tied (V, C or E) embedding table
// Tensors, in registration order: "ln_f.*", then with a bottleneck "head.down.*", "head.ln.*",
// then with a logit bias "head.bias" (initialised by the model).

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "sparselm/kernels/gelu.hpp"
#include "sparselm/layers/context.hpp"
#include "sparselm/layers/dense_gelu_norm.hpp"
#include "sparselm/layers/layer_norm.hpp"
#include "sparselm/layers/linear.hpp"
#include "sparselm/layers/lm_head.hpp"
#include "sparselm/layers/visit.hpp"
#include "sparselm/models/lm_loss.hpp"

namespace sparselm {

struct causal_lm_head_options {
  std::size_t channels = 0, vocab = 0;
  std::size_t bottleneck = 0;  // E; 0: the tied projection reads ln_f's output directly
  norm_options norm{};
  bool logit_bias = false;
  lm_loss_options loss{};
  const sparse_plan* plan = nullptr;  // a block-sparse bottleneck projection: how many blocks
  std::string norm_name = "ln_f";     // the final norm's tensor prefix
  std::string untied_name;            // non-empty: the head's own (V, width) table under this name, not the embedding's
};

// causal_lm_head's temporary (every instance shares one, scratch::get): without a bottleneck, the
// gradient w.r.t. the final norm's output (N,C).
struct causal_lm_head_workspace {
  buffer dz;
  std::size_t bytes() const noexcept { return dz.bytes(); }
};

template <class T = float, sparsity_type Sparsity = dense, kernels::gelu_kind Act = kernels::gelu_kind::tanh,
          class Norm = layer_norm>
class causal_lm_head {
 public:
  using workspace = causal_lm_head_workspace;
  using bottleneck_type = dense_gelu_norm<T, Sparsity, Act>;
  struct cache {
    lm_loss_targets targets;  // the scored targets and weights of the batch
    buffer xf, dxf, z, dz;    // (N,C) xf, dxf; (N,E) the bottleneck's output and its gradient
    typename Norm::cache lnf_c;
    typename bottleneck_type::cache bottleneck_c;
  };

  causal_lm_head() = default;
  // tied: the (V, width) table the logits project onto (width = bottleneck, or channels without one);
  // with o.untied_name the head registers its own table (after the norm) and ignores `tied`.
  causal_lm_head(arena_layout& layout, param_ref tied, const causal_lm_head_options& o) : o_(o) {
    o_.plan = nullptr;
    ln_f_ = Norm(layout, o.norm_name, o.channels, o.norm);
    if (o.bottleneck) bottleneck_ = bottleneck_type(layout, "head.down", "head.ln", o.channels, o.bottleneck, o.norm, o.plan);
    if (o.logit_bias) bias_ = param_ref{"head.bias", layout.add("head.bias", {o.vocab}, param_no_decay | param_no_trust)};
    if (!o.untied_name.empty()) {
      own_ = param_ref{o.untied_name, layout.add(o.untied_name, {o.vocab, width()})};
      tied = *own_;
    }
    tied_ = tied_lm_head(std::move(tied), o.vocab, width(), bias_);
  }

  const lm_loss_options& loss_options() const noexcept { return o_.loss; }
  std::size_t width() const noexcept { return o_.bottleneck ? o_.bottleneck : o_.channels; }
  const Norm& final_norm() const noexcept { return ln_f_; }
  // The head's own output table (untied_name), or none (tied to the embedding).
  const std::optional<param_ref>& own_table() const noexcept { return own_; }
  const bottleneck_type& bottleneck() const noexcept { return bottleneck_; }
  const std::optional<param_ref>& bias() const noexcept { return bias_; }
  tied_lm_head& projection() noexcept { return tied_; }
  const tied_lm_head& projection() const noexcept { return tied_; }
  template <class F>
  void visit(F&& f) const {
    f(ln_f_);
    if (own_) f(*own_);
    if (o_.bottleneck) f(bottleneck_);
    if (bias_) f(*bias_);
  }

  // Denominator of the batch's mean loss under the loss options (the trainer scales by its inverse).
  double loss_normaliser(const token_batch& b) const { return lm_loss_normaliser(o_.loss, b); }

  // Loss over x (N,C); when dx has rows, also dx (assigned) and the parameter gradients of
  // grad_scale · Σ w·CE. ce (optional, N) receives each row's unweighted cross-entropy.
  loss_stats forward_backward(const step_context& s, const_matrix_view<float> x, const token_batch& b,
                              float grad_scale, matrix_view<float> dx, cache& c, std::span<float> ce = {}) const {
    const std::size_t N = x.rows, E = width();
    auto z = features(s, x, c);
    const token_batch& lb = c.targets.apply(o_.loss, b);
    const bool grad = dx.rows > 0;
    auto dz = grad ? (o_.bottleneck ? c.dz.matrix(N, E) : s.tmp->get<workspace>().dz.matrix(N, E)) : matrix_view<float>{};
    loss_stats st = tied_.forward_backward(s, z, lb.targets, lb.weights, grad_scale, dz, ce);
    c.targets.finish(st);
    if (!grad) return st;
    if (o_.bottleneck) {
      auto dxf = c.dxf.matrix(N, o_.channels);
      bottleneck_.backward(s, dz, dxf, c.bottleneck_c);
      ln_f_.backward(s, dxf, dx, c.lnf_c);
    } else {
      ln_f_.backward(s, dz, dx, c.lnf_c);
    }
    return st;
  }

  // Logits (M,V) of x (M,C), no loss.
  void logits(const step_context& s, const_matrix_view<float> x, matrix_view<float> out, cache& c) const {
    tied_.logits(s, features(s, x, c), out);
  }

 private:
  // z: the rows the tied projection reads.
  const_matrix_view<float> features(const step_context& s, const_matrix_view<float> x, cache& c) const {
    const std::size_t N = x.rows;
    auto xf = c.xf.matrix(N, o_.channels);
    ln_f_.forward(s, x, xf, c.lnf_c);
    if (!o_.bottleneck) return xf;
    auto z = c.z.matrix(N, o_.bottleneck);
    bottleneck_.forward(s, xf, z, c.bottleneck_c);
    return z;
  }

  causal_lm_head_options o_;
  Norm ln_f_;
  std::optional<param_ref> own_;
  bottleneck_type bottleneck_;
  std::optional<param_ref> bias_;
  tied_lm_head tied_;
};

}  // namespace sparselm
