#pragma once
// Normalised sinusoidal positions added to a sequence of embeddings (the S1 sparse LM):
// y = x + norm(PE), where PE is the fixed sinusoidal table of "Attention is all you need" and norm
// a layer norm with its own (trainable) gamma and beta.
//
// Legend: B batch, T sequence, N = B·T rows (row n is position n mod T), E channels.
//   PE (T,E):  PE[p, 2i] = sin(p·ω_i), PE[p, 2i+1] = cos(p·ω_i), ω_i = exp(−ln(10000)·2i/E)   (E even)
//   forward:   P (T,E) = norm(PE);  y (N,E) = x (N,E) + P[n mod T]
//   backward:  dx = dy;  dP (T,E) = Σ_b dy[b·T + p];  dgamma, dbeta += norm backward of dP

#include <cmath>
#include <string>
#include <vector>

#include "sparselm/core/arena.hpp"
#include "sparselm/kernels/reduce.hpp"
#include "sparselm/layers/context.hpp"
#include "sparselm/layers/layer_norm.hpp"
#include "sparselm/layers/visit.hpp"

namespace sparselm {

// The sinusoidal table (T,E) in double precision math, rounded to float. E must be even.
inline void sinusoidal_table(matrix_view<float> pe) {
  SPARSELM_CHECK(pe.cols % 2 == 0 && pe.cols > 0, "sinusoidal_table: width ", pe.cols, " must be even and > 0");
  const double E = double(pe.cols);
  for (std::size_t p = 0; p < pe.rows; ++p)
    for (std::size_t i = 0; i < pe.cols; i += 2) {
      const double w = std::exp(-std::log(10000.0) * double(i) / E);
      pe(p, i) = float(std::sin(double(p) * w));
      pe(p, i + 1) = float(std::cos(double(p) * w));
    }
}

class sinusoidal_positions {
 public:
  struct cache {
    layer_norm::cache norm_c;
    buffer normed;  // (T,E) norm(PE)
    buffer dsum;    // (T,E) Σ over the batch of dy
    buffer dpe;     // (T,E) gradient w.r.t. PE (not used: the table is constant)
  };

  sinusoidal_positions() = default;
  // prefix e.g. "embedding.ln_position" names the norm's tensors; max_positions bounds T.
  sinusoidal_positions(arena_layout& layout, const std::string& prefix, std::size_t max_positions,
                       std::size_t channels, const norm_options& norm = {})
      : p_(max_positions), c_(channels), norm_(layout, prefix, channels, norm) {
    SPARSELM_CHECK(channels > 0 && channels % 2 == 0, "sinusoidal_positions '", prefix, "': width ", channels,
                   " must be even and > 0");
    SPARSELM_CHECK(max_positions > 0, "sinusoidal_positions '", prefix, "': zero positions");
    table_.resize(max_positions * channels);
    sinusoidal_table(matrix_view<float>(table_.data(), max_positions, channels));
  }

  const layer_norm& norm() const noexcept { return norm_; }
  template <class F>
  void visit(F&& f) const {
    f(norm_);
  }
  // Rows [offset, offset + T) of the table (T,E).
  const_matrix_view<float> table(std::size_t T, std::size_t offset = 0) const {
    SPARSELM_CHECK(offset + T <= p_, "sinusoidal_positions: positions up to ", offset + T, " exceed the ", p_,
                   " positions");
    return {table_.data() + offset * c_, T, c_};
  }

  // y = x + norm(PE)[pos_offset + row mod T]; y may alias x. pos_offset: the position of the first
  // row of each sequence (incremental decoding).
  void forward(const step_context& s, const_matrix_view<float> x, matrix_view<float> y, cache& c,
               std::size_t pos_offset = 0) const {
    const std::size_t T = s.seq, N = x.rows;
    SPARSELM_CHECK(x.cols == c_ && y.cols == c_ && y.rows == N && N == s.batch * T, "sinusoidal_positions: x ",
                   shape_string(x), ", y ", shape_string(y), " for a ", s.batch, " x ", T, " batch of width ", c_);
    auto P = c.normed.matrix(T, c_);
    norm_.forward(s, table(T, pos_offset), P, c.norm_c);
    for (std::size_t n = 0; n < N; ++n) {
      const float* xr = x.row(n);
      const float* pr = P.row(n % T);
      float* yr = y.row(n);
      for (std::size_t j = 0; j < c_; ++j) yr[j] = xr[j] + pr[j];
    }
  }

  // dx = dy (skipped when dx aliases dy or is empty); accumulates the norm's parameter gradients.
  void backward(const step_context& s, const_matrix_view<float> dy, matrix_view<float> dx, cache& c) const {
    const std::size_t T = s.seq, N = dy.rows;
    SPARSELM_CHECK(dy.cols == c_ && N == s.batch * T, "sinusoidal_positions: dy ", shape_string(dy), " for a ",
                   s.batch, " x ", T, " batch");
    auto dP = c.dsum.matrix(T, c_);
    std::fill(dP.data, dP.data + T * c_, 0.0f);
    for (std::size_t n = 0; n < N; ++n) {
      const float* d = dy.row(n);
      float* o = dP.row(n % T);
      for (std::size_t j = 0; j < c_; ++j) o[j] += d[j];
    }
    norm_.backward(s, dP, c.dpe.matrix(T, c_), c.norm_c);
    if (dx.rows && dx.data != dy.data) kernels::copy(dy, dx);
  }

 private:
  std::size_t p_ = 0, c_ = 0;
  layer_norm norm_;
  std::vector<float> table_;  // (P,E)
};

}  // namespace sparselm
