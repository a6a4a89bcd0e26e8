#pragma once
// Rotary position embedding (RoPE) in HuggingFace LLaMA's "rotate half" layout.
//
// Legend: D head width (even), h = D/2, p position, θ base (rope_theta).
//   inv_freq_i = 1/θ^(2i/D) (i < h);  a_i = p · inv_freq_i  (both rounded to float, as HF computes them)
//   y_i     = x_i · cos a_i − x_{i+h} · sin a_i
//   y_{i+h} = x_{i+h} · cos a_i + x_i · sin a_i
// i.e. y = x·cos + rotate_half(x)·sin with rotate_half(x) = (−x_{h..D}, x_{0..h}) and the angles
// repeated over both halves. The map is a rotation, so its transpose (backward) rotates by −a.
// Applied per head to the query and key columns of a (N, heads·D) matrix whose row b·n + t is
// position past + t of sequence b.

#include <cmath>
#include <cstddef>
#include <span>

#include "sparselm/core/error.hpp"
#include "sparselm/core/threads.hpp"
#include "sparselm/core/view.hpp"
#include "sparselm/layers/context.hpp"

namespace sparselm {

class rotary_embedding {
 public:
  rotary_embedding() = default;
  rotary_embedding(std::size_t head_dim, float theta, const std::string& context) : d_(head_dim), theta_(theta) {
    SPARSELM_CHECK(head_dim > 0 && head_dim % 2 == 0, context, ": field 'head_dim' (", head_dim,
                   ") must be even for rotary position embedding");
    SPARSELM_CHECK(std::isfinite(theta) && theta > 1.0f, context, ": field 'rope_theta' must be > 1, got ", theta);
  }

  std::size_t head_dim() const noexcept { return d_; }
  float theta() const noexcept { return theta_; }

  // cos | sin of positions [past, past + n): table (n, D) with row t = cos a (h values), sin a (h values).
  void fill(std::size_t past, std::size_t n, matrix_view<float> table) const {
    const std::size_t h = d_ / 2;
    SPARSELM_CHECK(table.rows == n && table.cols == d_, "rotary: table ", shape_string(table), " for ", n, " positions");
    for (std::size_t t = 0; t < n; ++t) {
      float* row = table.row(t);
      for (std::size_t i = 0; i < h; ++i) {
        const float inv = float(1.0 / std::pow(double(theta_), double(2 * i) / double(d_)));
        const float a = float(past + t) * inv;
        row[i] = float(std::cos(double(a)));
        row[h + i] = float(std::sin(double(a)));
      }
    }
  }

  // Rotates every head of m (rows b·n + t, `heads` heads of D columns from column `col`) by the
  // angles of table row t (inverse: by −a, the backward).
  void apply(matrix_view<float> m, std::size_t col, std::size_t heads, std::size_t n, const_matrix_view<float> table,
             bool inverse = false) const {
    const std::size_t h = d_ / 2;
    SPARSELM_CHECK(n > 0 && m.rows % n == 0 && col + heads * d_ <= m.cols && table.rows == n && table.cols == d_,
                   "rotary: ", shape_string(m), " with ", heads, " heads of ", d_, " at column ", col, " and ", n,
                   " positions per sequence");
    const float sign = inverse ? -1.0f : 1.0f;
    parallel_for(0, m.rows, [&](std::size_t r) {
      const float* cs = table.row(r % n);
      float* row = m.row(r) + col;
      for (std::size_t k = 0; k < heads; ++k) {
        float* x = row + k * d_;
        for (std::size_t i = 0; i < h; ++i) {
          const float c = cs[i], s = sign * cs[h + i];
          const float a = x[i], b = x[i + h];
          x[i] = a * c - b * s;
          x[i + h] = b * c + a * s;
        }
      }
    }, 64);
  }

 private:
  std::size_t d_ = 0;
  float theta_ = 10000.0f;
};

}  // namespace sparselm
