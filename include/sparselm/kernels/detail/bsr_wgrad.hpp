#pragma once
// dvalues += Xᵀ·dY restricted to the active blocks: slot s = (i, j) gets
// X[:, iB..iB+B)ᵀ · dY[:, jB..jB+B), a reduction over the M rows.
//
// Threads split the slots (in row order); every thread walks all of M in chunks of `mc` rows that
// stay in cache, so there is no cross-thread reduction and the result does not depend on the number
// of threads. Three micro-kernels:
//  * B % W == 0 (B = 16 on AVX-512): the B x B block accumulates in registers (lanes along the block
//    columns), one row of dY loaded and B values of X broadcast per m;
//  * 4 <= B < W: the G = W/B slots of one block row share a vector: the dY operand is assembled from
//    G pieces of B floats and the X broadcasts are shared by the group;
//  * B == 1: X and dY chunks are transposed (lanes along M), each slot is a dot product, and W slots
//    are reduced at once with a horizontal-add transpose.

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "sparselm/kernels/detail/bsr_util.hpp"
#include "sparselm/sparse/block_pattern.hpp"

#if defined(__GNUC__) && !defined(__clang__)  // see bsr_util.hpp
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

namespace sparselm::kernels::detail {

// Rows of M per cache chunk: the chunk of X and dY should fit in about half of L2.
inline std::size_t wgrad_chunk(std::size_t in, std::size_t out, std::size_t lo, std::size_t hi, std::size_t mult) {
  std::size_t mc = (512u * 1024u) / (sizeof(float) * std::max<std::size_t>(in + out, 1));
  mc = std::clamp(mc, lo, hi);
  return std::max(mult, mc / mult * mult);
}

// ---- B % W == 0 ----------------------------------------------------------------------------------

template <std::size_t B, class Arch>
inline void wgrad_block_n(const float* X, std::size_t ldx, const float* dY, std::size_t ldd, std::size_t m0,
                          std::size_t m1, std::size_t i, std::size_t j, float* dv) {
  constexpr std::size_t NB = B / simd_width<float, Arch>;
  constexpr std::size_t RA = std::min<std::size_t>(B, std::bit_floor((vec_regs<Arch> - 4) / NB));
  for (std::size_t a0 = 0; a0 < B; a0 += RA)
    xty_tile<RA, NB, Arch>(X + i * B + a0, ldx, dY + j * B, ldd, m0, m1, dv + a0 * B, B);
}

// ---- 4 <= B < W: G slots of one block row per vector ----------------------------------------------

// One vector from G pieces of B floats at base + off[q].
template <std::size_t B, class Arch>
inline xsimd::batch<float, Arch> load_pieces(const float* base, const std::size_t* off) {
  using vec = xsimd::batch<float, Arch>;
  constexpr std::size_t W = vec::size, G = W / B;
#if defined(__AVX512F__)
  if constexpr (arch_is_avx512<Arch> && B == 8) {
    __m256 lo = _mm256_loadu_ps(base + off[0]), hi = _mm256_loadu_ps(base + off[1]);
    return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(lo)), _mm256_castps_pd(hi), 1));
  } else if constexpr (arch_is_avx512<Arch> && B == 4) {
    __m512 v = _mm512_castps128_ps512(_mm_loadu_ps(base + off[0]));
    v = _mm512_insertf32x4(v, _mm_loadu_ps(base + off[1]), 1);
    v = _mm512_insertf32x4(v, _mm_loadu_ps(base + off[2]), 2);
    return _mm512_insertf32x4(v, _mm_loadu_ps(base + off[3]), 3);
  } else
#endif
#if defined(__AVX__)
  if constexpr (arch_is_avx<Arch> && !arch_is_avx512<Arch> && W == 8 && B == 4) {
    return _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_loadu_ps(base + off[0])), _mm_loadu_ps(base + off[1]), 1);
  } else
#endif
  {
    alignas(64) float buf[W];
    for (std::size_t q = 0; q < G; ++q) std::memcpy(buf + q * B, base + off[q], B * sizeof(float));
    return vec::load_aligned(buf);
  }
}

// NG groups of G slots, all in block row i; slot (g, q) has output dvs[g*G+q] (B x B) and dY column
// offset off[g*G+q].
template <std::size_t B, std::size_t NG, class Arch>
inline void wgrad_group(const float* X, std::size_t ldx, const float* dY, std::size_t ldd, std::size_t m0,
                        std::size_t m1, std::size_t i, const std::size_t* off, float* const* dvs) {
  using vec = xsimd::batch<float, Arch>;
  constexpr std::size_t W = vec::size, G = W / B;
  vec acc[NG][B];
#pragma GCC unroll 4
  for (std::size_t g = 0; g < NG; ++g)
#pragma GCC unroll 16
    for (std::size_t a = 0; a < B; ++a) acc[g][a] = vec(0.0f);
  const float* x = X + m0 * ldx + i * B;
  const float* d = dY + m0 * ldd;
  for (std::size_t m = m0; m < m1; ++m, x += ldx, d += ldd) {
    vec dy[NG];
#pragma GCC unroll 4
    for (std::size_t g = 0; g < NG; ++g) dy[g] = load_pieces<B, Arch>(d, off + g * G);
#pragma GCC unroll 16
    for (std::size_t a = 0; a < B; ++a) {
      const vec xb(x[a]);
#pragma GCC unroll 4
      for (std::size_t g = 0; g < NG; ++g) acc[g][a] = xsimd::fma(xb, dy[g], acc[g][a]);
    }
  }
  alignas(64) float tmp[NG][B][W];
#pragma GCC unroll 4
  for (std::size_t g = 0; g < NG; ++g)
#pragma GCC unroll 16
    for (std::size_t a = 0; a < B; ++a) acc[g][a].store_aligned(tmp[g][a]);
  for (std::size_t g = 0; g < NG; ++g)
    for (std::size_t q = 0; q < G; ++q) {
      float* o = dvs[g * G + q];
      for (std::size_t a = 0; a < B; ++a)
        for (std::size_t b = 0; b < B; ++b) o[a * B + b] += tmp[g][a][q * B + b];
    }
}

// ---- B == 1: lanes along M -----------------------------------------------------------------------

// Up to W dot products of length mc (multiple of 4W) between rows of Xt and dYt; dv[s] += result.
template <class Arch>
inline void wgrad_dots(const float* Xt, const float* dYt, std::size_t mc, const std::uint32_t* pos_slots,
                       std::size_t n, const std::uint32_t* row, const std::uint32_t* col, float* dvalues) {
  using vec = xsimd::batch<float, Arch>;
  constexpr std::size_t W = vec::size;
  alignas(64) vec acc[W];
  for (std::size_t q = 0; q < W; ++q) {
    if (q >= n) {
      acc[q] = vec(0.0f);
      continue;
    }
    const std::uint32_t s = pos_slots[q];
    const float* x = Xt + std::size_t(row[s]) * mc;
    const float* d = dYt + std::size_t(col[s]) * mc;
    vec a0(0.0f), a1(0.0f), a2(0.0f), a3(0.0f);
    for (std::size_t m = 0; m < mc; m += 4 * W) {
      a0 = xsimd::fma(vec::load_aligned(x + m), vec::load_aligned(d + m), a0);
      a1 = xsimd::fma(vec::load_aligned(x + m + W), vec::load_aligned(d + m + W), a1);
      a2 = xsimd::fma(vec::load_aligned(x + m + 2 * W), vec::load_aligned(d + m + 2 * W), a2);
      a3 = xsimd::fma(vec::load_aligned(x + m + 3 * W), vec::load_aligned(d + m + 3 * W), a3);
    }
    acc[q] = (a0 + a1) + (a2 + a3);
  }
  alignas(64) float sums[W];
  hsum_rows<Arch>(acc, sums);
  for (std::size_t q = 0; q < std::min(n, W); ++q) dvalues[pos_slots[q]] += sums[q];
}

// ---- driver --------------------------------------------------------------------------------------

template <std::size_t B, class Arch>
void bsr_wgrad(const float* X, std::size_t ldx, const float* dY, std::size_t ldd, std::size_t M,
               const sparse::block_pattern& p, float* dvalues) {
  using vec = xsimd::batch<float, Arch>;
  constexpr std::size_t W = vec::size;
  const std::size_t nnz = p.nnz(), in = p.in(), out = p.out();
  if (M == 0 || nnz == 0) return;
  const int nt = int(std::min<std::size_t>(std::size_t(team_size()), std::max<std::size_t>(1, nnz / 4)));
  run_team(nt, [&](int t, int T) {
    // This thread's slots: positions [pb, pe) of row_slots.
    const std::size_t pb = nnz * std::size_t(t) / std::size_t(T), pe = nnz * std::size_t(t + 1) / std::size_t(T);
    if (pb == pe) return;
    if constexpr (B % W == 0) {
      const std::size_t mc = wgrad_chunk(in, out, 16, 256, 1);
      const std::size_t lxc = padded_ld(in), ldc = padded_ld(out);
      float* Xc = scratch(mc * lxc, 0);
      float* dYc = scratch(mc * ldc, 1);
      for (std::size_t m0 = 0; m0 < M; m0 += mc) {
        const std::size_t mv = std::min(mc, M - m0);
        copy_rows(X + m0 * ldx, ldx, mv, mv, in, Xc, lxc);
        copy_rows(dY + m0 * ldd, ldd, mv, mv, out, dYc, ldc);
        for (std::size_t q = pb; q < pe; ++q) {
          const std::uint32_t s = p.row_slots[q];
          wgrad_block_n<B, Arch>(Xc, lxc, dYc, ldc, 0, mv, p.row[s], p.col[s], dvalues + std::size_t(s) * B * B);
        }
      }
    } else if constexpr (B >= 4) {
      constexpr std::size_t G = W / B, NG = 2, U = NG * G;  // slots per call
      const std::size_t mc = wgrad_chunk(in, out, 16, 256, 1);
      float* dummy = scratch(B * B, 2);
      std::size_t off[U];
      float* dvs[U];
      const std::size_t lxc = padded_ld(in), ldc = padded_ld(out);
      float* Xc = scratch(mc * lxc, 0);
      float* dYc = scratch(mc * ldc, 1);
      for (std::size_t m0 = 0; m0 < M; m0 += mc) {
        const std::size_t mv = std::min(mc, M - m0);
        copy_rows(X + m0 * ldx, ldx, mv, mv, in, Xc, lxc);
        copy_rows(dY + m0 * ldd, ldd, mv, mv, out, dYc, ldc);
        // Walk this thread's positions row by row, U slots of one row at a time.
        std::size_t q = pb;
        while (q < pe) {
          const std::size_t i = p.row[p.row_slots[q]];
          const std::size_t re = std::min<std::size_t>(pe, p.row_ptr[i + 1]);
          for (; q < re; q += U) {
            for (std::size_t u = 0; u < U; ++u) {
              if (q + u < re) {
                const std::uint32_t s = p.row_slots[q + u];
                off[u] = std::size_t(p.col[s]) * B;
                dvs[u] = dvalues + std::size_t(s) * B * B;
              } else {  // padding: any valid column, result discarded
                off[u] = off[0];
                dvs[u] = dummy;
              }
            }
            wgrad_group<B, NG, Arch>(Xc, lxc, dYc, ldc, 0, mv, i, off, dvs);
          }
          q = re;
        }
      }
    } else {
      static_assert(B == 1);
      const std::size_t mc = wgrad_chunk(in, out, 256, 1024, 4 * W);
      float* Xt = scratch(in * mc, 2);
      float* dYt = scratch(out * mc, 3);
      for (std::size_t m0 = 0; m0 < M; m0 += mc) {
        const std::size_t mv = std::min(mc, M - m0);
        const std::size_t mp = (mv + 4 * W - 1) / (4 * W) * (4 * W);
        pack_transpose<Arch>(X + m0 * ldx, ldx, mv, mp, in, Xt, mp);
        pack_transpose<Arch>(dY + m0 * ldd, ldd, mv, mp, out, dYt, mp);
        for (std::size_t q = pb; q < pe; q += W)
          wgrad_dots<Arch>(Xt, dYt, mp, p.row_slots.data() + q, pe - q, p.row.data(), p.col.data(), dvalues);
      }
    }
  });
}

}  // namespace sparselm::kernels::detail

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
