#pragma once
// Token + learned position embedding: x(n) = wte[ids(n)] + wpe[pos_offset + n mod T], then dropout.
//
// Legend: B batch, T sequence, N = B·T rows, V vocab, C channels, P max positions.
//   wte (V,C), wpe (P,C), ids (N), x (N,C)

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "sparselm/core/arena.hpp"
#include "sparselm/kernels/dropout.hpp"
#include "sparselm/kernels/embedding.hpp"
#include "sparselm/layers/context.hpp"
#include "sparselm/layers/visit.hpp"

namespace sparselm {

class token_position_embedding {
 public:
  struct cache {};  // nothing is kept: backward needs only the ids

  token_position_embedding() = default;
  token_position_embedding(arena_layout& layout, std::size_t vocab, std::size_t positions, std::size_t channels,
                           float dropout = 0.0f, std::uint64_t site = 0)
      : v_(vocab), p_(positions), c_(channels), drop_(dropout), site_(site) {
    wte_ = {"wte.weight", layout.add("wte.weight", {vocab, channels})};
    wpe_ = {"wpe.weight", layout.add("wpe.weight", {positions, channels})};
  }

  template <class F>
  void visit(F&& f) const {
    f(wte_);
    f(wpe_);
  }
  const param_ref& wte() const noexcept { return wte_; }
  const param_ref& wpe() const noexcept { return wpe_; }
  std::size_t vocab() const noexcept { return v_; }
  std::size_t positions() const noexcept { return p_; }

  void init(arena<float>& params, const counter_rng& rng, float std) const {
    rng.fill_normal(params[wte_.index], wte_.index, 0.0f, std);
    rng.fill_normal(params[wpe_.index], wpe_.index, 0.0f, std);
  }

  // x (N,C) from ids (N = s.batch·s.seq); positions start at pos_offset (generation with a KV cache).
  void forward(const step_context& s, std::span<const std::int32_t> ids, matrix_view<float> x, cache&,
               std::size_t pos_offset = 0) const {
    SPARSELM_CHECK(s.seq + pos_offset <= p_, "embedding: positions up to ", s.seq + pos_offset,
                   " exceed the model's context of ", p_);
    kernels::embedding_forward(ids, s.pm(wte_.index), s.pm(wpe_.index), s.seq, x, pos_offset);
    if (s.training && drop_ > 0) {
      std::span<float> xs(x.data, x.rows * x.cols);
      kernels::dropout_forward(xs, xs, drop_, s.rng, s.stream(site_));
    }
  }

  // Accumulates dwte, dwpe from dx (N,C); dx is overwritten when dropout is active.
  void backward(const step_context& s, std::span<const std::int32_t> ids, matrix_view<float> dx, cache&,
                std::size_t pos_offset = 0) const {
    if (s.training && drop_ > 0) {
      std::span<float> d(dx.data, dx.rows * dx.cols);
      kernels::dropout_backward(d, d, drop_, s.rng, s.stream(site_));
    }
    kernels::embedding_backward(ids, dx, s.seq, s.gm(wte_.index), s.gm(wpe_.index), pos_offset);
  }

 private:
  std::size_t v_ = 0, p_ = 0, c_ = 0;
  float drop_ = 0.0f;
  std::uint64_t site_ = 0;
  param_ref wte_, wpe_;
};

// Token embedding without positions (models whose attention encodes positions, e.g. rotary):
// x(n) = wte[ids(n)]. One tensor, named by the model ("model.embed_tokens.weight" style).
//   wte (V,C), ids (N), x (N,C)
class token_embedding {
 public:
  struct cache {};

  token_embedding() = default;
  token_embedding(arena_layout& layout, const std::string& name, std::size_t vocab, std::size_t channels)
      : v_(vocab), c_(channels) {
    wte_ = {name, layout.add(name, {vocab, channels})};
  }

  template <class F>
  void visit(F&& f) const {
    f(wte_);
  }
  const param_ref& wte() const noexcept { return wte_; }
  std::size_t vocab() const noexcept { return v_; }

  // pos_offset is accepted (the decoder passes it) and unused: there are no position rows.
  void forward(const step_context& s, std::span<const std::int32_t> ids, matrix_view<float> x, cache&,
               std::size_t = 0) const {
    kernels::embedding_forward(ids, s.pm(wte_.index), const_matrix_view<float>{}, s.seq, x);
  }
  void backward(const step_context& s, std::span<const std::int32_t> ids, matrix_view<float> dx, cache&,
                std::size_t = 0) const {
    kernels::embedding_backward(ids, dx, s.seq, s.gm(wte_.index), matrix_view<float>{});
  }

 private:
  std::size_t v_ = 0, c_ = 0;
  param_ref wte_;
};

}  // namespace sparselm
