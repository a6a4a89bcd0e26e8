#pragma once
// BERT's input embedding: word + learned position + token type (segment), then LayerNorm, then
// dropout.
//
// Legend: B batch, T sequence, N = B·T rows, V vocab, P max positions, S token types, C channels.
//   e (N,C) = word[ids(n)] + position[n mod T] + type[types(n)]     (types empty: all 0)
//   x (N,C) = dropout(LN(e))
// Tensors: "embeddings.word_embeddings.weight" (V,C), "embeddings.position_embeddings.weight"
// (P,C), "embeddings.token_type_embeddings.weight" (S,C), "embeddings.LayerNorm.{weight,bias}"
// (HF BERT's names).

#include <cstdint>
#include <span>
#include <string>

#include "sparselm/core/arena.hpp"
#include "sparselm/kernels/dropout.hpp"
#include "sparselm/kernels/embedding.hpp"
#include "sparselm/layers/context.hpp"
#include "sparselm/layers/layer_norm.hpp"

namespace sparselm {

struct bert_embedding_options {
  std::size_t vocab = 0, positions = 0, types = 2, channels = 0;
  norm_options norm{.eps = 1e-12f};
  float dropout = 0.0f;
  std::uint64_t site = 0;  // dropout stream site
};

class bert_embedding {
 public:
  // The temporary of backward (scratch::get): the gradient w.r.t. the norm's input (N,C).
  struct workspace {
    buffer de;
    std::size_t bytes() const noexcept { return de.bytes(); }
  };
  struct cache {
    buffer e;  // (N,C) the sum before the norm (the norm's input)
    layer_norm::cache norm_c;
  };

  bert_embedding() = default;
  bert_embedding(arena_layout& layout, const bert_embedding_options& o) : o_(o) {
    SPARSELM_CHECK(o.vocab > 0 && o.positions > 0 && o.types > 0 && o.channels > 0,
                   "bert embedding: zero size (vocab ", o.vocab, ", positions ", o.positions, ", types ", o.types,
                   ", channels ", o.channels, ")");
    word_ = {"embeddings.word_embeddings.weight", layout.add("embeddings.word_embeddings.weight", {o.vocab, o.channels})};
    pos_ = {"embeddings.position_embeddings.weight",
            layout.add("embeddings.position_embeddings.weight", {o.positions, o.channels})};
    type_ = {"embeddings.token_type_embeddings.weight",
             layout.add("embeddings.token_type_embeddings.weight", {o.types, o.channels})};
    norm_ = layer_norm(layout, "embeddings.LayerNorm", o.channels, o.norm);
  }

  template <class F>
  void visit(F&& f) const {
    f(word_);
    f(pos_);
    f(type_);
    f(norm_);
  }
  const param_ref& word() const noexcept { return word_; }
  std::size_t vocab() const noexcept { return o_.vocab; }
  std::size_t positions() const noexcept { return o_.positions; }

  // x (N,C) from ids (N) and token types (N, or empty for all 0).
  void forward(const step_context& s, std::span<const std::int32_t> ids, std::span<const std::int32_t> types,
               matrix_view<float> x, cache& c) const {
    SPARSELM_CHECK(s.seq <= o_.positions, "bert embedding: sequence length ", s.seq, " exceeds the model's ",
                   o_.positions, " positions");
    check_types(ids, types);
    auto e = c.e.matrix(ids.size(), o_.channels);
    kernels::embedding_forward(ids, s.pm(word_.index), s.pm(pos_.index), s.seq, e);
    if (!types.empty()) {
      const auto table = s.pm(type_.index);
      parallel_for(0, ids.size(), [&](std::size_t n) {
        kernels::detail::add_row<native_arch>(e.row(n), table.row(std::size_t(types[n])), o_.channels);
      }, 16);
    } else {
      const float* t0 = s.pm(type_.index).row(0);
      parallel_for(0, ids.size(), [&](std::size_t n) { kernels::detail::add_row<native_arch>(e.row(n), t0, o_.channels); }, 16);
    }
    norm_.forward(s, e, x, c.norm_c);
    if (s.training && o_.dropout > 0) {
      std::span<float> xs(x.data, x.rows * x.cols);
      kernels::dropout_forward(xs, xs, o_.dropout, s.rng, s.stream(o_.site));
    }
  }

  // Accumulates the tables' and the norm's gradients from dx (N,C); dx is overwritten.
  void backward(const step_context& s, std::span<const std::int32_t> ids, std::span<const std::int32_t> types,
                matrix_view<float> dx, cache& c) const {
    if (s.training && o_.dropout > 0) {
      std::span<float> d(dx.data, dx.rows * dx.cols);
      kernels::dropout_backward(d, d, o_.dropout, s.rng, s.stream(o_.site));
    }
    auto de = s.tmp->get<workspace>().de.matrix(ids.size(), o_.channels);
    norm_.backward(s, dx, de, c.norm_c);
    kernels::embedding_backward(ids, de, s.seq, s.gm(word_.index), s.gm(pos_.index));
    if (!types.empty()) {
      kernels::embedding_backward(types, de, s.seq, s.gm(type_.index), matrix_view<float>{});
    } else {
      auto d0 = s.g(type_.index).subspan(0, o_.channels);
      for (std::size_t n = 0; n < ids.size(); ++n) kernels::detail::add_row<native_arch>(d0.data(), de.row(n), o_.channels);
    }
  }

 private:
  void check_types(std::span<const std::int32_t> ids, std::span<const std::int32_t> types) const {
    SPARSELM_CHECK(types.empty() || types.size() == ids.size(), "bert embedding: ", types.size(),
                   " token types for ", ids.size(), " token ids");
    for (std::size_t n = 0; n < types.size(); ++n)
      SPARSELM_CHECK(types[n] >= 0 && std::size_t(types[n]) < o_.types, "bert embedding: token type ", types[n],
                     " at position ", n, " is outside [0, ", o_.types, ")");
  }

  bert_embedding_options o_;
  param_ref word_, pos_, type_;
  layer_norm norm_;
};

}  // namespace sparselm
