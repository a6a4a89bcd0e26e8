#pragma once
// Row softmax with optional causal / padding masks, forward and backward.
//
// Legend: N rows, C columns (e.g. N = B·H·T query rows, C = T keys).
//   x, y, dy, dx (N,C)     row-major views (ld >= C)
//
// Row r sees columns [0, L(r)):
//   L(r) = min(C, valid_cols)                              softmax_mask::none / padding
//   L(r) = min(C, valid_cols, r + causal_offset + 1)       softmax_mask::causal
// (valid_cols, default "all", limits every mode, so causal + padding combine.) Masked columns get
// y = 0; a fully masked row (L = 0) is all zeros, never NaN.
//
//   forward:  y_j = exp(x_j − max) / Σ_{k<L} exp(x_k − max)  for j < L, else 0
//   backward: dx = y ∘ (dy − Σ_j y_j·dy_j)                    (masked columns have y = 0 → dx = 0)
//
// Parallel over rows; y may alias x and dx may alias dy or y.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>

#include "sparselm/core/error.hpp"
#include "sparselm/core/simd.hpp"
#include "sparselm/core/threads.hpp"
#include "sparselm/core/view.hpp"
#include "sparselm/kernels/detail/simd_math.hpp"

namespace sparselm::kernels {

enum class softmax_mask { none, causal, padding };

namespace detail {
inline std::size_t softmax_min_rows(std::size_t cols) { return std::max<std::size_t>(1, 8192 / std::max<std::size_t>(cols, 1)); }

// The three passes of a row softmax over y[0, L) (L > 0): plain loops over whole batches plus one
// masked tail batch (no per-batch lambdas: short rows made the call overhead dominate).
template <class Arch>
inline float softmax_row_max(const float* x, std::size_t L) {
  using F = fvec<Arch>;
  constexpr std::size_t W = F::size;
  constexpr float ninf = -std::numeric_limits<float>::infinity();
  const std::size_t Lf = L / W * W;
  F mv(ninf);
  for (std::size_t j = 0; j < Lf; j += W) mv = xsimd::max(mv, F::load_unaligned(x + j));
  if (L > Lf) mv = xsimd::max(mv, load_partial<Arch>(x + Lf, L - Lf, ninf));
  return hmax<Arch>(mv);
}
// y = exp(x − m) on [0, L); returns the sum.
template <class Arch>
inline float softmax_row_exp(const float* x, float* y, std::size_t L, float mx) {
  using F = fvec<Arch>;
  constexpr std::size_t W = F::size;
  const std::size_t Lf = L / W * W;
  const F m(mx);
  F s(0.0f);
  for (std::size_t j = 0; j < Lf; j += W) {
    const F e = detail::exp<Arch>(F::load_unaligned(x + j) - m);
    s += e;
    e.store_unaligned(y + j);
  }
  if (L > Lf) {
    const F e = detail::exp<Arch>(load_partial<Arch>(x + Lf, L - Lf, -std::numeric_limits<float>::infinity()) - m);
    s += e;  // padding lanes: exp(-inf) = 0
    store_partial<Arch>(e, y + Lf, L - Lf);
  }
  return hsum<Arch>(s);
}
// y[0, L) *= inv, y[L, C) = 0.
template <class Arch>
inline void softmax_row_scale(float* y, std::size_t L, std::size_t C, float inv_sum) {
  using F = fvec<Arch>;
  constexpr std::size_t W = F::size;
  const std::size_t Lf = L / W * W;
  const F inv(inv_sum);
  for (std::size_t j = 0; j < Lf; j += W) (F::load_unaligned(y + j) * inv).store_unaligned(y + j);
  if (L > Lf) store_partial<Arch>(load_partial<Arch>(y + Lf, L - Lf, 0.0f) * inv, y + Lf, L - Lf);
  std::fill(y + L, y + C, 0.0f);
}

// In-place-safe softmax of one row: y[0, L) = softmax(x[0, L)), y[L, C) = 0.
template <class Arch>
inline void softmax_row(const float* x, float* y, std::size_t L, std::size_t C) {
  if (L == 0) return std::fill(y, y + C, 0.0f);
  const float m = softmax_row_max<Arch>(x, L);
  softmax_row_scale<Arch>(y, L, C, 1.0f / softmax_row_exp<Arch>(x, y, L, m));
}

// Rows [r0, r1) (at most softmax_group of them), pass by pass: the rows of one pass are independent,
// so their reductions (max, sum, divide) overlap instead of forming one serial chain per row.
inline constexpr std::size_t softmax_group = 8;
template <class Arch, class LenFn>
inline void softmax_rows(const_matrix_view<float> x, matrix_view<float> y, std::size_t r0, std::size_t r1,
                         LenFn&& len) {
  float m[softmax_group], inv[softmax_group];
  for (std::size_t r = r0; r < r1; ++r) {
    const std::size_t L = len(r);
    m[r - r0] = L ? softmax_row_max<Arch>(x.row(r), L) : 0.0f;
  }
  for (std::size_t r = r0; r < r1; ++r) {
    const std::size_t L = len(r);
    inv[r - r0] = L ? 1.0f / softmax_row_exp<Arch>(x.row(r), y.row(r), L, m[r - r0]) : 0.0f;
  }
  for (std::size_t r = r0; r < r1; ++r) softmax_row_scale<Arch>(y.row(r), len(r), y.cols, inv[r - r0]);
}
}  // namespace detail

// y = masked row softmax of x. x, y (N,C).
template <class Arch = native_arch>
void softmax_forward(const_matrix_view<float> x, matrix_view<float> y, softmax_mask m, std::size_t causal_offset = 0,
                     std::size_t valid_cols = SIZE_MAX) {
  check_view(x, "softmax_forward: x");
  check_view(const_matrix_view<float>(y), "softmax_forward: y");
  SPARSELM_CHECK(y.rows == x.rows && y.cols == x.cols, "softmax_forward: y ", shape_string(y), " does not match x ",
                 shape_string(x));
  SPARSELM_CHECK(m == softmax_mask::none || m == softmax_mask::causal || m == softmax_mask::padding,
                 "softmax_forward: unknown mask code ", int(m));
  const std::size_t C = x.cols, limit = std::min(C, valid_cols);
  parallel_chunks(x.rows, [&](int, std::size_t r0, std::size_t r1) {
    const auto len = [&](std::size_t r) {
      std::size_t L = limit;
      if (m == softmax_mask::causal && causal_offset < C) L = std::min(L, r + causal_offset + 1);
      return L;
    };
    for (std::size_t g = r0; g < r1; g += detail::softmax_group)
      detail::softmax_rows<Arch>(x, y, g, std::min(r1, g + detail::softmax_group), len);
  }, detail::softmax_min_rows(C));
}

// dx = y ∘ (dy − rowsum(y ∘ dy)). y, dy, dx (N,C); dx is assigned.
template <class Arch = native_arch>
void softmax_backward(const_matrix_view<float> y, const_matrix_view<float> dy, matrix_view<float> dx) {
  check_view(y, "softmax_backward: y");
  check_view(dy, "softmax_backward: dy");
  check_view(const_matrix_view<float>(dx), "softmax_backward: dx");
  SPARSELM_CHECK(dy.rows == y.rows && dy.cols == y.cols && dx.rows == y.rows && dx.cols == y.cols,
                 "softmax_backward: shapes differ: y ", shape_string(y), ", dy ", shape_string(dy), ", dx ",
                 shape_string(dx));
  using F = detail::fvec<Arch>;
  const std::size_t C = y.cols;
  parallel_chunks(y.rows, [&](int, std::size_t r0, std::size_t r1) {
    for (std::size_t r = r0; r < r1; ++r) {
      const float* yr = y.row(r);
      const float* gr = dy.row(r);
      float* dr = dx.row(r);
      F s(0.0f);
      detail::for_each_batch<Arch>(0, C, [&](std::size_t j, std::size_t n) {
        s = xsimd::fma(detail::loadn<Arch>(yr + j, n), detail::loadn<Arch>(gr + j, n), s);
      });
      const F sv(detail::hsum<Arch>(s));
      detail::for_each_batch<Arch>(0, C, [&](std::size_t j, std::size_t n) {
        detail::storen<Arch>(detail::loadn<Arch>(yr + j, n) * (detail::loadn<Arch>(gr + j, n) - sv), dr + j, n);
      });
    }
  }, detail::softmax_min_rows(C));
}

}  // namespace sparselm::kernels
