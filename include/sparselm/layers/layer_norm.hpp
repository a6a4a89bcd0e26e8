#pragma once
// Layer normalisation over the last dimension: y = (x − mean)/sqrt(var + eps) · gamma + beta.
//
// Legend: N rows, C channels. x, y (N,C); gamma, beta (C); saved mean, rstd (N).

#include <algorithm>
#include <string>
#include <vector>

#include "sparselm/core/arena.hpp"
#include "sparselm/kernels/layer_norm.hpp"
#include "sparselm/layers/context.hpp"

namespace sparselm {

// How a model makes its layer norms: epsilon and the initial gamma.
struct norm_options {
  float eps = 1e-5f;
  float gamma = 1.0f;
};

class layer_norm {
 public:
  struct cache {
    const_matrix_view<float> x;  // (N,C) forward input, kept alive by the caller
    buffer mean, rstd;           // (N)
  };

  layer_norm() = default;
  layer_norm(arena_layout& layout, const std::string& prefix, std::size_t channels, float eps = 1e-5f,
             float gamma_init = 1.0f)
      : c_(channels), eps_(eps), gamma_init_(gamma_init) {
    SPARSELM_CHECK(channels > 0, "layer_norm '", prefix, "': zero channels");
    g_ = {prefix + ".weight", layout.add(prefix + ".weight", {channels}, param_no_decay | param_no_trust)};
    b_ = {prefix + ".bias", layout.add(prefix + ".bias", {channels}, param_no_decay | param_no_trust)};
  }

  layer_norm(arena_layout& layout, const std::string& prefix, std::size_t channels, const norm_options& o)
      : layer_norm(layout, prefix, channels, o.eps, o.gamma) {}

  std::size_t channels() const noexcept { return c_; }
  float eps() const noexcept { return eps_; }
  std::vector<param_ref> parameters() const { return {g_, b_}; }

  void init(arena<float>& params) const {
    std::fill(params[g_.index].begin(), params[g_.index].end(), gamma_init_);
    std::fill(params[b_.index].begin(), params[b_.index].end(), 0.0f);
  }

  void forward(const step_context& s, const_matrix_view<float> x, matrix_view<float> y, cache& c) const {
    c.x = x;
    kernels::layer_norm_forward(x, s.p(g_.index), s.p(b_.index), y, c.mean.get(x.rows), c.rstd.get(x.rows), eps_);
  }

  // dx is assigned, or accumulated when accumulate_dx (residual streams use that).
  void backward(const step_context& s, const_matrix_view<float> dy, matrix_view<float> dx, cache& c,
                bool accumulate_dx = false) const {
    kernels::layer_norm_backward(dy, c.x, s.p(g_.index), c.mean.get(c.x.rows), c.rstd.get(c.x.rows), dx, s.g(g_.index),
                                 s.g(b_.index), accumulate_dx);
  }

 private:
  std::size_t c_ = 0;
  float eps_ = 1e-5f, gamma_init_ = 1.0f;
  param_ref g_, b_;
};

}  // namespace sparselm
