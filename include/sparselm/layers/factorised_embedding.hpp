#pragma once
// Factorised (ALBERT-style) token embedding of the S1 sparse LM: a narrow look-up table
// of width E, normalised, plus normalised sinusoidal positions, dropout, a norm, and a (sparse)
// up-projection to the model width H. The table is also the tied output projection of the LM head.
//
// Legend: B batch, T sequence, N = B·T rows, V vocab, E embedding width, H hidden width.
//   lut (V,E), ids (N)
//   e (N,E) = lut[ids]
//   a (N,E) = ln_token(e)
//   b (N,E) = a + ln_position(PE)[n mod T]                      (layers/sinusoidal_positions.hpp)
//   b       = dropout(b)
//   c (N,E) = ln_input(b)
//   y (N,H) = c · W_up (E,H) + b_up   [then GELU when up_gelu]   linear<T, Sparsity>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "sparselm/core/arena.hpp"
#include "sparselm/kernels/dropout.hpp"
#include "sparselm/kernels/embedding.hpp"
#include "sparselm/kernels/gelu.hpp"
#include "sparselm/layers/context.hpp"
#include "sparselm/layers/layer_norm.hpp"
#include "sparselm/layers/linear.hpp"
#include "sparselm/layers/sinusoidal_positions.hpp"
#include "sparselm/layers/visit.hpp"

namespace sparselm {

struct factorised_embedding_options {
  std::size_t vocab = 0, positions = 0, width = 0, hidden = 0;  // V, max T, E, H
  norm_options norm{};
  float dropout = 0.0f;
  bool up_gelu = false;               // GELU after the up-projection
  const sparse_plan* plan = nullptr;  // block-sparse up-projection: how many blocks
};

// factorised_embedding's temporaries (every instance shares them, scratch::get): two (N,E) gradients.
struct factorised_embedding_workspace {
  buffer g1, g2;
  std::size_t bytes() const noexcept { return buffers_bytes(g1, g2); }
};

template <class T = float, sparsity_type Sparsity = dense, kernels::gelu_kind Act = kernels::gelu_kind::tanh>
class factorised_embedding {
 public:
  using workspace = factorised_embedding_workspace;
  using linear_type = linear<T, Sparsity>;
  struct cache {
    layer_norm::cache tok_c, in_c;
    sinusoidal_positions::cache pos_c;
    typename linear_type::cache up_c;
    buffer e, a, b, c;  // (N,E) each
    buffer h;           // (N,H) pre-activation when up_gelu
  };

  factorised_embedding() = default;
  // prefix e.g. "embedding": tensors "embedding.lut", "embedding.ln_token.*", "embedding.ln_position.*",
  // "embedding.ln_input.*", "embedding.up.*". site: dropout stream of this layer.
  factorised_embedding(arena_layout& layout, const std::string& prefix, const factorised_embedding_options& o,
                       std::uint64_t site = 0)
      : o_(o), site_(site) {
    SPARSELM_CHECK(o.vocab > 0 && o.width > 0 && o.hidden > 0 && o.positions > 0, "factorised_embedding '", prefix,
                   "': zero size (vocab ", o.vocab, ", positions ", o.positions, ", width ", o.width, ", hidden ",
                   o.hidden, ")");
    lut_ = {prefix + ".lut", layout.add(prefix + ".lut", {o.vocab, o.width})};
    ln_tok_ = layer_norm(layout, prefix + ".ln_token", o.width, o.norm);
    pos_ = sinusoidal_positions(layout, prefix + ".ln_position", o.positions, o.width, o.norm);
    ln_in_ = layer_norm(layout, prefix + ".ln_input", o.width, o.norm);
    up_ = linear_type(layout, prefix + ".up", o.width, o.hidden, true, o.plan);
    o_.plan = nullptr;
  }

  const param_ref& lut() const noexcept { return lut_; }
  const layer_norm& ln_token() const noexcept { return ln_tok_; }
  const sinusoidal_positions& positions() const noexcept { return pos_; }
  const layer_norm& ln_input() const noexcept { return ln_in_; }
  const linear_type& up() const noexcept { return up_; }
  std::size_t vocab() const noexcept { return o_.vocab; }
  std::size_t width() const noexcept { return o_.width; }
  std::size_t hidden() const noexcept { return o_.hidden; }
  template <class F>
  void visit(F&& f) const {
    f(lut_);
    f(ln_tok_);
    f(pos_);
    f(ln_in_);
    f(up_);
  }

  // y (N,H) from ids (N = s.batch·s.seq); pos_offset: position of each sequence's first id.
  void forward(const step_context& s, std::span<const std::int32_t> ids, matrix_view<float> y, cache& c,
               std::size_t pos_offset = 0) const {
    const std::size_t N = ids.size(), E = o_.width;
    SPARSELM_CHECK(N == s.batch * s.seq && y.rows == N && y.cols == o_.hidden, "factorised_embedding: ", N,
                   " ids and y ", shape_string(y), " for a ", s.batch, " x ", s.seq, " batch of width ", o_.hidden);
    auto e = c.e.matrix(N, E), a = c.a.matrix(N, E), b = c.b.matrix(N, E), cc = c.c.matrix(N, E);
    kernels::embedding_forward(ids, s.pm(lut_.index), {}, s.seq, e);
    ln_tok_.forward(s, e, a, c.tok_c);
    pos_.forward(s, a, b, c.pos_c, pos_offset);
    if (s.training && o_.dropout > 0) {
      std::span<float> v(b.data, N * E);
      kernels::dropout_forward(v, v, o_.dropout, s.rng, s.stream(site_));
    }
    ln_in_.forward(s, b, cc, c.in_c);
    if (o_.up_gelu) {
      auto h = c.h.matrix(N, o_.hidden);
      up_.forward(s, cc, h, c.up_c);
      kernels::gelu_forward<Act>(std::span<const float>(h.data, N * o_.hidden), std::span<float>(y.data, N * o_.hidden));
    } else {
      up_.forward(s, cc, y, c.up_c);
    }
  }

  // Accumulates every parameter gradient (the table's rows by scatter-add) from dy (N,H); dy is
  // overwritten when up_gelu. Its temporaries are the workspace's.
  void backward(const step_context& s, std::span<const std::int32_t> ids, matrix_view<float> dy, cache& c) const {
    const std::size_t N = ids.size(), E = o_.width;
    SPARSELM_CHECK(dy.rows == N && dy.cols == o_.hidden, "factorised_embedding: dy ", shape_string(dy), " for ", N,
                   " ids and width ", o_.hidden);
    if (o_.up_gelu) {
      std::span<float> d(dy.data, N * o_.hidden);
      kernels::gelu_backward<Act>(std::span<const float>(c.h.get(N * o_.hidden).data(), N * o_.hidden), d, d);
    }
    auto& w = s.tmp->get<workspace>();
    auto g1 = w.g1.matrix(N, E);  // dc, later de
    auto g2 = w.g2.matrix(N, E);  // db
    up_.backward(s, dy, g1, c.up_c);
    ln_in_.backward(s, g1, g2, c.in_c);
    if (s.training && o_.dropout > 0) {
      std::span<float> v(g2.data, N * E);
      kernels::dropout_backward(v, v, o_.dropout, s.rng, s.stream(site_));
    }
    pos_.backward(s, g2, g2, c.pos_c);
    ln_tok_.backward(s, g2, g1, c.tok_c);  // de into g1 (dc is consumed)
    kernels::embedding_backward(ids, g1, s.seq, s.gm(lut_.index), {});
  }

 private:
  factorised_embedding_options o_;
  std::uint64_t site_ = 0;
  param_ref lut_;
  layer_norm ln_tok_;
  sinusoidal_positions pos_;
  layer_norm ln_in_;
  linear_type up_;
};

}  // namespace sparselm
