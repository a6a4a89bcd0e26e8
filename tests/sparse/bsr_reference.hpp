#pragma once
// Naive references for the block-sparse kernels: densify W and loop, in double precision; test patterns.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include "sparselm/kernels/bsr.hpp"
#include "sparselm/sparse/block_pattern.hpp"

namespace sparselm::test {

// Test patterns: random, or with block column / row 0 left empty (when there is another).
enum class layout { random, skip_first_col, skip_first_row };

// A finalized pattern of `n` distinct blocks on a rows_b x cols_b grid, in shuffled slot order.
inline sparse::block_pattern make_pattern(std::size_t B, std::size_t rows_b, std::size_t cols_b, std::size_t n,
                                          std::uint32_t seed, layout lay = layout::random) {
  std::vector<std::uint32_t> cells;
  for (std::uint32_t i = 0; i < rows_b; ++i)
    for (std::uint32_t j = 0; j < cols_b; ++j) {
      if (lay == layout::skip_first_col && j == 0 && cols_b > 1) continue;
      if (lay == layout::skip_first_row && i == 0 && rows_b > 1) continue;
      cells.push_back(i * std::uint32_t(cols_b) + j);
    }
  std::mt19937 rng(seed);
  std::shuffle(cells.begin(), cells.end(), rng);
  cells.resize(std::min(n, cells.size()));
  sparse::block_pattern p;
  p.block = B;
  p.rows_b = rows_b;
  p.cols_b = cols_b;
  for (auto c : cells) {
    p.row.push_back(c / std::uint32_t(cols_b));
    p.col.push_back(c % std::uint32_t(cols_b));
  }
  p.finalize("test pattern");
  return p;
}

// n uniform values in [-1, 1).
inline std::vector<float> random_vec(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

// Dense (in x out) row-major copy of a block-sparse weight.
inline std::vector<float> densify(const sparse::block_pattern& p, const float* values) {
  const std::size_t B = p.block, out = p.out();
  std::vector<float> w(p.in() * out, 0.0f);
  for (std::size_t s = 0; s < p.nnz(); ++s)
    for (std::size_t a = 0; a < B; ++a)
      for (std::size_t b = 0; b < B; ++b) w[(p.row[s] * B + a) * out + p.col[s] * B + b] = values[s * B * B + a * B + b];
  return w;
}

// Y = beta*Y + X·W (+ bias); X (M x in, ld ldx), Y (M x out, ld ldy).
inline void ref_matmul(const float* X, std::size_t ldx, std::size_t M, const sparse::block_pattern& p,
                       const float* values, float beta, float* Y, std::size_t ldy, const float* bias) {
  const auto w = densify(p, values);
  const std::size_t in = p.in(), out = p.out();
  for (std::size_t m = 0; m < M; ++m)
    for (std::size_t c = 0; c < out; ++c) {
      double s = 0;
      for (std::size_t k = 0; k < in; ++k) s += double(X[m * ldx + k]) * w[k * out + c];
      if (bias) s += bias[c];
      if (beta != 0.0f) s += double(beta) * Y[m * ldy + c];
      Y[m * ldy + c] = float(s);
    }
}

// dX = beta*dX + dY·Wᵀ.
inline void ref_matmul_t(const float* dY, std::size_t ldd, std::size_t M, const sparse::block_pattern& p,
                         const float* values, float beta, float* dX, std::size_t ldx) {
  const auto w = densify(p, values);
  const std::size_t in = p.in(), out = p.out();
  for (std::size_t m = 0; m < M; ++m)
    for (std::size_t k = 0; k < in; ++k) {
      double s = 0;
      for (std::size_t c = 0; c < out; ++c) s += double(dY[m * ldd + c]) * w[k * out + c];
      if (beta != 0.0f) s += double(beta) * dX[m * ldx + k];
      dX[m * ldx + k] = float(s);
    }
}

// Dense G = Xᵀ·dY (in x out), in double.
inline std::vector<double> ref_dense_grad(const float* X, std::size_t ldx, const float* dY, std::size_t ldd,
                                          std::size_t M, std::size_t in, std::size_t out) {
  std::vector<double> g(in * out, 0.0);
  for (std::size_t m = 0; m < M; ++m)
    for (std::size_t k = 0; k < in; ++k)
      for (std::size_t c = 0; c < out; ++c) g[k * out + c] += double(X[m * ldx + k]) * dY[m * ldd + c];
  return g;
}

// dvalues += Xᵀ·dY on the active blocks.
inline void ref_weight_grad(const float* X, std::size_t ldx, const float* dY, std::size_t ldd, std::size_t M,
                            const sparse::block_pattern& p, float* dvalues) {
  const std::size_t B = p.block, out = p.out();
  const auto g = ref_dense_grad(X, ldx, dY, ldd, M, p.in(), out);
  for (std::size_t s = 0; s < p.nnz(); ++s)
    for (std::size_t a = 0; a < B; ++a)
      for (std::size_t b = 0; b < B; ++b)
        dvalues[s * B * B + a * B + b] += float(g[(p.row[s] * B + a) * out + p.col[s] * B + b]);
}

// Pooled |Xᵀ·dY| per block, (in/B x out/B) row-major.
inline std::vector<float> ref_pooled(const float* X, std::size_t ldx, const float* dY, std::size_t ldd, std::size_t M,
                                     std::size_t in, std::size_t out, std::size_t B, kernels::block_pooling pool) {
  const auto g = ref_dense_grad(X, ldx, dY, ldd, M, in, out);
  std::vector<float> r((in / B) * (out / B));
  for (std::size_t i = 0; i < in / B; ++i)
    for (std::size_t j = 0; j < out / B; ++j) {
      double s = 0, mx = 0;
      for (std::size_t a = 0; a < B; ++a)
        for (std::size_t b = 0; b < B; ++b) {
          const double v = std::fabs(g[(i * B + a) * out + j * B + b]);
          s += v;
          mx = std::max(mx, v);
        }
      r[i * (out / B) + j] = float(pool == kernels::block_pooling::max ? mx
                                   : pool == kernels::block_pooling::avg ? s / double(B * B)
                                                                          : s);
    }
  return r;
}

}  // namespace sparselm::test
