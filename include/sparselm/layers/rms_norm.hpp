#pragma once
// Root-mean-square normalisation (LLaMA's norm): y = x / sqrt(mean(x²) + eps) · gamma, no mean, no bias.
//
// Legend: N rows, C channels. x, y (N,C); gamma (C); saved rstd (N).
//   forward:  r = 1/sqrt(Σ_j x_j²/C + eps);  x̂ = x·r;  y = x̂ ∘ gamma
//   backward: g = dy ∘ gamma;  dx = r·(g − x̂·(Σ_j g_j x̂_j)/C);  dgamma += Σ_rows dy ∘ x̂
// Sums run in double per row. Tensor: "<prefix>.weight" (HF LlamaRMSNorm's name).

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "sparselm/core/arena.hpp"
#include "sparselm/core/threads.hpp"
#include "sparselm/layers/context.hpp"
#include "sparselm/layers/layer_norm.hpp"

namespace sparselm {

class rms_norm {
 public:
  struct cache {
    const_matrix_view<float> x;  // (N,C) forward input, kept alive by the caller
    buffer rstd;                 // (N)
  };

  rms_norm() = default;
  rms_norm(arena_layout& layout, const std::string& prefix, std::size_t channels, const norm_options& o = {})
      : c_(channels), eps_(o.eps), gamma_init_(o.gamma) {
    SPARSELM_CHECK(channels > 0, "rms_norm '", prefix, "': zero channels");
    SPARSELM_CHECK(o.eps > 0 && std::isfinite(o.eps), "rms_norm '", prefix, "': field 'eps' must be > 0, got ", o.eps);
    g_ = {prefix + ".weight", layout.add(prefix + ".weight", {channels}, param_no_decay | param_no_trust)};
  }

  std::size_t channels() const noexcept { return c_; }
  float eps() const noexcept { return eps_; }
  const param_ref& weight() const noexcept { return g_; }
  std::vector<param_ref> parameters() const { return {g_}; }

  void init(arena<float>& params) const { std::fill(params[g_.index].begin(), params[g_.index].end(), gamma_init_); }

  void forward(const step_context& s, const_matrix_view<float> x, matrix_view<float> y, cache& c) const {
    check(x, y, "forward");
    c.x = x;
    auto rstd = c.rstd.get(x.rows);
    const float* g = s.p(g_.index).data();
    parallel_for(0, x.rows, [&](std::size_t i) {
      const float* xi = x.row(i);
      double ss = 0;
      for (std::size_t j = 0; j < c_; ++j) ss += double(xi[j]) * xi[j];
      const float r = float(1.0 / std::sqrt(ss / double(c_) + double(eps_)));
      rstd[i] = r;
      float* yi = y.row(i);
      for (std::size_t j = 0; j < c_; ++j) yi[j] = (xi[j] * r) * g[j];
    }, 16);
  }

  // dx is assigned, or accumulated when accumulate_dx (residual streams use that). dx may alias dy.
  void backward(const step_context& s, const_matrix_view<float> dy, matrix_view<float> dx, cache& c,
                bool accumulate_dx = false) const {
    const auto x = c.x;
    check(x, dy, "backward");
    SPARSELM_CHECK(dx.rows == x.rows && dx.cols == c_, "rms_norm: dx ", shape_string(dx), " should be ",
                   shape_string(x));
    const float* g = s.p(g_.index).data();
    auto rstd = c.rstd.get(x.rows);
    // dgamma first (dx may alias dy): columns split over threads, rows summed in order (deterministic).
    auto dg = s.g(g_.index);
    parallel_for(0, c_, [&](std::size_t j) {
      double acc = 0;
      for (std::size_t i = 0; i < x.rows; ++i) acc += double(dy.row(i)[j]) * (x.row(i)[j] * rstd[i]);
      dg[j] += float(acc);
    }, 64);
    parallel_for(0, x.rows, [&](std::size_t i) {
      const float* xi = x.row(i);
      const float* dyi = dy.row(i);
      const double r = rstd[i];
      double dot = 0;
      for (std::size_t j = 0; j < c_; ++j) dot += double(dyi[j]) * g[j] * (xi[j] * r);
      const double m = dot / double(c_);
      float* dxi = dx.row(i);
      for (std::size_t j = 0; j < c_; ++j) {
        const float v = float(r * (double(dyi[j]) * g[j] - xi[j] * r * m));
        dxi[j] = accumulate_dx ? dxi[j] + v : v;
      }
    }, 16);
  }

 private:
  void check(const_matrix_view<float> x, const_matrix_view<float> y, const char* fn) const {
    SPARSELM_CHECK(x.cols == c_ && y.cols == c_ && x.rows == y.rows, "rms_norm ", fn, ": ", shape_string(x), " and ",
                   shape_string(y), " do not fit ", c_, " channels");
  }

  std::size_t c_ = 0;
  float eps_ = 1e-6f, gamma_init_ = 1.0f;
  param_ref g_;
};

}  // namespace sparselm
