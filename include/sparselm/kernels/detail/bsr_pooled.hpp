#pragma once
// Dense gradient G = Xᵀ·dY (in x out), pooled per B x B block, without materialising G: threads take
// tiles of G (TI x TJ); a tile accumulates in a cache-resident buffer over M in chunks (register
// tiles of RA rows x NB vectors, lanes along the output columns, X broadcast from its rows), then is
// pooled into the (in/B x out/B) result. Every tile is summed in the same order whatever the
// number of threads.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>

#include "sparselm/kernels/detail/bsr_util.hpp"

namespace sparselm::kernels {

// How a B x B block of the dense gradient is reduced to one score: sum, mean or max of |g|.
enum class block_pooling { sum, avg, max };

}  // namespace sparselm::kernels

namespace sparselm::kernels::detail {

// Rows [0, ti) x columns [0, tj) of G restricted to rows/columns starting at X, dY; Gt (ti x tj, ld tj).
template <class Arch>
void pooled_accumulate(const float* X, std::size_t ldx, const float* dY, std::size_t ldd, std::size_t m0,
                       std::size_t m1, std::size_t ti, std::size_t tj, float* Gt) {
  using vec = xsimd::batch<float, Arch>;
  constexpr std::size_t W = vec::size;
  constexpr bool big = arch_is_avx512<Arch>;
  constexpr std::size_t RA = big ? 8 : 4, NB = big ? 3 : 2;
  std::size_t a = 0;
  auto columns = [&]<std::size_t R>(std::size_t a0) {
    std::size_t c = 0;
    for (; c + NB * W <= tj; c += NB * W) xty_tile<R, NB, Arch>(X + a0, ldx, dY + c, ldd, m0, m1, Gt + a0 * tj + c, tj);
    for (; c + W <= tj; c += W) xty_tile<R, 1, Arch>(X + a0, ldx, dY + c, ldd, m0, m1, Gt + a0 * tj + c, tj);
    for (; c < tj; ++c)
      for (std::size_t r = 0; r < R; ++r) {
        float s = Gt[(a0 + r) * tj + c];
        for (std::size_t m = m0; m < m1; ++m) s += X[m * ldx + a0 + r] * dY[m * ldd + c];
        Gt[(a0 + r) * tj + c] = s;
      }
  };
  for (; a + RA <= ti; a += RA) columns.template operator()<RA>(a);
  for (; a < ti; ++a) columns.template operator()<1>(a);
}

template <std::size_t B, class Arch>
void dense_grad_pooled(const float* X, std::size_t ldx, const float* dY, std::size_t ldd, std::size_t M,
                       std::size_t in, std::size_t out, block_pooling pool, float* res, std::size_t ldr) {
  constexpr std::size_t TI = 256, TJ = 384, MC = 128;  // multiples of every B
  const std::size_t nti = (in + TI - 1) / TI, ntj = (out + TJ - 1) / TJ;
  parallel_for(0, nti * ntj, [&](std::size_t item) {
    const std::size_t r0 = item / ntj * TI, c0 = item % ntj * TJ;
    const std::size_t ti = std::min(TI, in - r0), tj = std::min(TJ, out - c0);
    float* Gt = bsr_scratch(TI * TJ, 0);
    std::memset(Gt, 0, ti * tj * sizeof(float));
    for (std::size_t m0 = 0; m0 < M; m0 += MC)
      pooled_accumulate<Arch>(X + r0, ldx, dY + c0, ldd, m0, std::min(M, m0 + MC), ti, tj, Gt);
    for (std::size_t bi = 0; bi < ti / B; ++bi)
      for (std::size_t bj = 0; bj < tj / B; ++bj) {
        float s = 0.0f, mx = 0.0f;
        for (std::size_t a = 0; a < B; ++a)
          for (std::size_t b = 0; b < B; ++b) {
            const float g = std::fabs(Gt[(bi * B + a) * tj + bj * B + b]);
            s += g;
            mx = std::max(mx, g);
          }
        res[(r0 / B + bi) * ldr + c0 / B + bj] =
            pool == block_pooling::max ? mx : pool == block_pooling::avg ? s / float(B * B) : s;
      }
  });
}

}  // namespace sparselm::kernels::detail
