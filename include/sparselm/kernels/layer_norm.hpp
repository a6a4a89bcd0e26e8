#pragma once
// Layer normalisation over the last dimension, forward and backward.
//
// Legend: N rows (B·T tokens), C channels.
//   x, y, dy, dx (N,C)      row-major views (ld >= C)
//   gamma, beta, dgamma, dbeta (C)
//   mean, rstd (N)          saved by forward for backward
//
//   forward:  mean = Σx/C, var = Σ(x − mean)²/C (two-pass), rstd = 1/sqrt(var + eps)
//             y = (x − mean)·rstd·gamma + beta
//   backward: x̂ = (x − mean)·rstd, g = dy·gamma
//             dx = rstd·(g − mean(g) − x̂·mean(g·x̂))          (assigned, or += with accumulate_dx)
//             dgamma += Σ_rows dy·x̂, dbeta += Σ_rows dy
//
// Parallel over rows. The parameter gradients are reduced deterministically and independently of
// the thread count: rows are cut into a fixed number of blocks that depends on N only, each block
// sums its rows in order into its own partial, and the partials are added in block order.
// y may alias x; dx may alias dy or x.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <span>

#include "sparselm/core/error.hpp"
#include "sparselm/core/simd.hpp"
#include "sparselm/core/threads.hpp"
#include "sparselm/core/view.hpp"
#include "sparselm/kernels/detail/simd_math.hpp"
#include "sparselm/kernels/detail/workspace.hpp"

namespace sparselm::kernels {

namespace detail {
inline constexpr std::size_t ln_min_rows = 8;  // rows per thread before splitting

inline void check_layer_norm_params(const char* fn, const const_matrix_view<float>& x, std::size_t gamma,
                                    std::size_t beta_or_dy, const char* second, std::size_t mean, std::size_t rstd) {
  SPARSELM_CHECK(gamma == x.cols, fn, ": gamma has ", gamma, " entries for x ", shape_string(x));
  SPARSELM_CHECK(beta_or_dy == x.cols, fn, ": ", second, " has ", beta_or_dy, " entries for x ", shape_string(x));
  SPARSELM_CHECK(mean == x.rows, fn, ": mean has ", mean, " entries for x ", shape_string(x));
  SPARSELM_CHECK(rstd == x.rows, fn, ": rstd has ", rstd, " entries for x ", shape_string(x));
}
}  // namespace detail

// y = layer_norm(x); saves mean and rstd. x, y (N,C); gamma, beta (C); mean, rstd (N).
template <class Arch = native_arch>
void layer_norm_forward(const_matrix_view<float> x, std::span<const float> gamma, std::span<const float> beta,
                        matrix_view<float> y, std::span<float> mean, std::span<float> rstd, float eps) {
  check_view(x, "layer_norm_forward: x");
  check_view(const_matrix_view<float>(y), "layer_norm_forward: y");
  SPARSELM_CHECK(y.rows == x.rows && y.cols == x.cols, "layer_norm_forward: y ", shape_string(y), " does not match x ",
                 shape_string(x));
  detail::check_layer_norm_params("layer_norm_forward", x, gamma.size(), beta.size(), "beta", mean.size(), rstd.size());
  SPARSELM_CHECK(eps >= 0.0f, "layer_norm_forward: eps must be >= 0, got ", eps);
  using F = detail::fvec<Arch>;
  const std::size_t C = x.cols;
  if (C == 0) return;
  const float inv_c = 1.0f / float(C);
  parallel_chunks(x.rows, [&](int, std::size_t r0, std::size_t r1) {
    for (std::size_t r = r0; r < r1; ++r) {
      const float* xr = x.row(r);
      float* yr = y.row(r);
      F s(0.0f);
      detail::for_each_batch<Arch>(0, C, [&](std::size_t j, std::size_t n) { s += detail::loadn<Arch>(xr + j, n); });
      const float m = detail::hsum<Arch>(s) * inv_c;
      const F mv(m);
      F q(0.0f);
      detail::for_each_batch<Arch>(0, C, [&](std::size_t j, std::size_t n) {
        F d = detail::loadn<Arch>(xr + j, n, m) - mv;  // padding lanes load m: contribute 0
        q = xsimd::fma(d, d, q);
      });
      const float rs = 1.0f / std::sqrt(detail::hsum<Arch>(q) * inv_c + eps);
      mean[r] = m;
      rstd[r] = rs;
      const F rv(rs);
      detail::for_each_batch<Arch>(0, C, [&](std::size_t j, std::size_t n) {
        F xh = (detail::loadn<Arch>(xr + j, n) - mv) * rv;
        F v = xsimd::fma(xh, detail::loadn<Arch>(gamma.data() + j, n), detail::loadn<Arch>(beta.data() + j, n));
        detail::storen<Arch>(v, yr + j, n);
      });
    }
  }, detail::ln_min_rows);
}

// Backward of layer_norm_forward. dy, x, dx (N,C); gamma, dgamma, dbeta (C); mean, rstd (N).
// dx is assigned (or accumulated with accumulate_dx); dgamma and dbeta always accumulate.
template <class Arch = native_arch>
void layer_norm_backward(const_matrix_view<float> dy, const_matrix_view<float> x, std::span<const float> gamma,
                         std::span<const float> mean, std::span<const float> rstd, matrix_view<float> dx,
                         std::span<float> dgamma, std::span<float> dbeta, bool accumulate_dx = false) {
  check_view(dy, "layer_norm_backward: dy");
  check_view(x, "layer_norm_backward: x");
  check_view(const_matrix_view<float>(dx), "layer_norm_backward: dx");
  SPARSELM_CHECK(dy.rows == x.rows && dy.cols == x.cols, "layer_norm_backward: dy ", shape_string(dy),
                 " does not match x ", shape_string(x));
  SPARSELM_CHECK(dx.rows == x.rows && dx.cols == x.cols, "layer_norm_backward: dx ", shape_string(dx),
                 " does not match x ", shape_string(x));
  detail::check_layer_norm_params("layer_norm_backward", x, gamma.size(), dgamma.size(), "dgamma", mean.size(),
                                  rstd.size());
  SPARSELM_CHECK(dbeta.size() == x.cols, "layer_norm_backward: dbeta has ", dbeta.size(), " entries for x ",
                 shape_string(x));
  using F = detail::fvec<Arch>;
  constexpr std::size_t W = F::size;
  const std::size_t N = x.rows, C = x.cols;
  if (N == 0 || C == 0) return;
  const float inv_c = 1.0f / float(C);
  // Fixed row blocks (a function of N only) -> thread-count independent parameter gradients.
  const std::size_t block_rows = std::max<std::size_t>(16, (N + 63) / 64);
  const std::size_t nb = (N + block_rows - 1) / block_rows;
  const std::size_t Cp = detail::round_up(C, W);
  detail::aligned_buffer partial(nb * 2 * Cp);  // per block: dgamma (Cp), dbeta (Cp)
  parallel_for(0, nb, [&](std::size_t blk) {
    float* pg = partial.data() + blk * 2 * Cp;
    float* pb = pg + Cp;
    std::fill(pg, pg + 2 * Cp, 0.0f);
    const std::size_t r1 = std::min(N, (blk + 1) * block_rows);
    for (std::size_t r = blk * block_rows; r < r1; ++r) {
      const float* xr = x.row(r);
      const float* gr = dy.row(r);
      float* dr = dx.row(r);
      const F mv(mean[r]), rv(rstd[r]);
      F sa(0.0f), sb(0.0f);
      detail::for_each_batch<Arch>(0, C, [&](std::size_t j, std::size_t n) {
        F xh = (detail::loadn<Arch>(xr + j, n) - mv) * rv;
        F d = detail::loadn<Arch>(gr + j, n);
        F g = d * detail::loadn<Arch>(gamma.data() + j, n);
        sa += g;
        sb = xsimd::fma(g, xh, sb);
        // partials are Cp long and zero-padded, so full-width updates are safe
        xsimd::fma(d, xh, F::load_aligned(pg + j)).store_aligned(pg + j);
        (F::load_aligned(pb + j) + d).store_aligned(pb + j);
      });
      const F a(detail::hsum<Arch>(sa) * inv_c), b(detail::hsum<Arch>(sb) * inv_c);
      detail::for_each_batch<Arch>(0, C, [&](std::size_t j, std::size_t n) {
        F xh = (detail::loadn<Arch>(xr + j, n) - mv) * rv;
        F g = detail::loadn<Arch>(gr + j, n) * detail::loadn<Arch>(gamma.data() + j, n);
        F v = rv * xsimd::fnma(xh, b, g - a);
        if (accumulate_dx) v += detail::loadn<Arch>(dr + j, n);
        detail::storen<Arch>(v, dr + j, n);
      });
    }
  }, 1);
  // Partials in block order; threads own disjoint column batches.
  const std::size_t ncb = Cp / W;
  parallel_for(0, ncb, [&](std::size_t cb) {
    const std::size_t j = cb * W, n = std::min(W, C - j);
    F g(0.0f), b(0.0f);
    for (std::size_t blk = 0; blk < nb; ++blk) {
      g += F::load_aligned(partial.data() + blk * 2 * Cp + j);
      b += F::load_aligned(partial.data() + blk * 2 * Cp + Cp + j);
    }
    detail::storen<Arch>(detail::loadn<Arch>(dgamma.data() + j, n) + g, dgamma.data() + j, n);
    detail::storen<Arch>(detail::loadn<Arch>(dbeta.data() + j, n) + b, dbeta.data() + j, n);
  }, 16);
}

}  // namespace sparselm::kernels

// Layer norm for the compiled ISA.
// Precompiled instances (docs/design/architecture.md, "Precompiled kernels"): defined once in sparselm::kernels
// (src/kernels_pointwise.cpp), declared extern where that library is linked.
#if defined(SPARSELM_INSTANTIATE_POINTWISE) || defined(SPARSELM_PRECOMPILED_KERNELS)
#ifdef SPARSELM_INSTANTIATE_POINTWISE
#define SPARSELM_INSTANCE template
#else
#define SPARSELM_INSTANCE extern template
#endif
namespace sparselm::kernels {
SPARSELM_INSTANCE decltype(layer_norm_forward<native_arch>) layer_norm_forward<native_arch>;
SPARSELM_INSTANCE decltype(layer_norm_backward<native_arch>) layer_norm_backward<native_arch>;
}  // namespace sparselm::kernels
#undef SPARSELM_INSTANCE
#endif
