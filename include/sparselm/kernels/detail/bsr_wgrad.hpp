#pragma once
// dvalues += Xᵀ·dY restricted to the active blocks: slot s = (i, j) gets
// X[:, iB..iB+B)ᵀ · dY[:, jB..jB+B), a reduction over the M rows.
//
// Threads split M: each walks its rows in chunks of `mc` rows for all slots, accumulating into its
// own partial gradient; the partials are added to dvalues afterwards in thread order
// (deterministic for a given thread count).
// Each chunk is first copied into "strips": for every block column of X (and of dY) its mc x B
// sub-matrix, contiguous, so a slot reads two sequential strips with every cache line fully used.
// Micro-kernels:
//  * B % W == 0 (B = 16 on AVX-512): the B x B block accumulates in registers, lanes along the
//    block columns: per m one row of the dY strip is loaded and B values of X broadcast;
//  * AVX-512, B = 8: a vector holds R = 2 rows of a block (lanes (r, b)); per m the X strip row is
//    permuted once into "each value repeated B times" and shared by U slots of the same block row,
//    whose dY strip rows are broadcast R times: one load per FMA, no horizontal work;
//  * AVX-512, B = 4: a vector holds 4 rows of M x 4 columns of a dY strip (one full load, shared by
//    4 FMAs); the X strip's 4 x 4 piece, shuffled in-lane, supplies each block row's values; the
//    4 row lanes are summed once per chunk;
//  * other 4 <= B < W (e.g. B = 4 on AVX2): G = W/B slots of one block row share a vector, the dY
//    operand assembled from G pieces;
//  * B == 1: X and dY chunks are transposed (lanes along M) and each slot is a dot product. The
//    slots are walked in L1-sized tiles of the larger side and, within a tile, in runs that share
//    their smaller-side row, which is loaded into registers once per run: one load per FMA. W dot
//    vectors at a time are reduced with a horizontal-add transpose.

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "sparselm/kernels/detail/bsr_runs.hpp"
#include "sparselm/kernels/detail/bsr_util.hpp"
#include "sparselm/sparse/block_pattern.hpp"

#if defined(__GNUC__) && !defined(__clang__)  // see bsr_util.hpp
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

namespace sparselm::kernels::detail {

// Rows of M per chunk: about 384 KiB of X and dY, clamped to [lo, hi], a multiple of `mult`.
inline std::size_t wgrad_chunk(std::size_t in, std::size_t out, std::size_t lo, std::size_t hi, std::size_t mult) {
  std::size_t mc = (384u * 1024u) / (sizeof(float) * std::max<std::size_t>(in + out, 1));
  mc = std::clamp(mc, lo, hi);
  return std::max(mult, mc / mult * mult);
}

// Strip stride for `rows` rows of B floats: one spare cache line, so that strips that are read
// side by side do not fall on the same cache sets.
template <std::size_t B>
inline std::size_t strip_stride(std::size_t rows) noexcept {
  return rows * B + 16;
}

#if defined(__AVX512F__)
// B = 4 or 8: 8 rows x 16 columns (16/B block columns) in registers, each strip's 8-row piece (8*B
// floats, contiguous) rearranged with 128-bit lane shuffles: 8 full loads and 8 full stores where
// the copy per row and strip makes 8*16/B loads and stores of B floats.
template <std::size_t B>
inline void strips_rows8_avx512(const float* src, std::size_t lds, float* dst, std::size_t ss) {
  static_assert(B == 4 || B == 8);
  __m512 v[8];
#pragma GCC unroll 8
  for (std::size_t r = 0; r < 8; ++r) v[r] = _mm512_loadu_ps(src + r * lds);
  if constexpr (B == 4) {
    // Rows 4h..4h+3: lane k of row r is its block k; strip k gets [row 0's, ..., row 3's].
#pragma GCC unroll 2
    for (std::size_t h = 0; h < 2; ++h) {
      const __m512* a = v + 4 * h;
      const __m512 t0 = _mm512_shuffle_f32x4(a[0], a[1], 0x44), t1 = _mm512_shuffle_f32x4(a[0], a[1], 0xEE);
      const __m512 t2 = _mm512_shuffle_f32x4(a[2], a[3], 0x44), t3 = _mm512_shuffle_f32x4(a[2], a[3], 0xEE);
      float* d = dst + 16 * h;
      _mm512_storeu_ps(d, _mm512_shuffle_f32x4(t0, t2, 0x88));
      _mm512_storeu_ps(d + ss, _mm512_shuffle_f32x4(t0, t2, 0xDD));
      _mm512_storeu_ps(d + 2 * ss, _mm512_shuffle_f32x4(t1, t3, 0x88));
      _mm512_storeu_ps(d + 3 * ss, _mm512_shuffle_f32x4(t1, t3, 0xDD));
    }
  } else {
    // Rows 2j, 2j+1: the low half of a row is its block 0, the high half its block 1.
#pragma GCC unroll 4
    for (std::size_t j = 0; j < 4; ++j) {
      _mm512_storeu_ps(dst + 16 * j, _mm512_shuffle_f32x4(v[2 * j], v[2 * j + 1], 0x44));
      _mm512_storeu_ps(dst + ss + 16 * j, _mm512_shuffle_f32x4(v[2 * j], v[2 * j + 1], 0xEE));
    }
  }
}
#endif

// dst[(c/B)*strip_stride + r*B + c%B] = src[r*lds + c]: the strips of B columns, each rows x B
// contiguous. Groups of 8 rows: 8 sequential read streams, and 8 rows written contiguously per
// strip. (Walking each strip down all rows touches a new page at almost every row when rows are
// several KiB apart, which the hardware prefetchers do not follow: measured a third of the weight
// gradient's time on the Zen 3 host, with the chunk coming from memory.) B = 4 and 8 on AVX-512
// take whole groups of 8 rows x 16 columns in registers (strips_rows8_avx512).
// Rows from `rows` up to `padded` (>= rows) are zero; the stride is strip_stride<B>(padded).
template <std::size_t B>
inline void pack_strips(const float* src, std::size_t lds, std::size_t rows, std::size_t cols, float* dst,
                        std::size_t padded) {
  constexpr std::size_t RG = 8;
  const std::size_t nb = cols / B, ss = strip_stride<B>(padded);
  for (std::size_t r0 = 0; r0 < rows; r0 += RG) {
    const std::size_t r1 = std::min(rows, r0 + RG);
    std::size_t b0 = 0;  // block columns before b0 are done
#if defined(__AVX512F__)
    if constexpr (B == 4 || B == 8) {
      if (r1 - r0 == RG)
        for (; (b0 + 16 / B) * B <= cols; b0 += 16 / B)
          strips_rows8_avx512<B>(src + r0 * lds + b0 * B, lds, dst + b0 * ss + r0 * B, ss);
    }
#endif
    for (std::size_t b = b0; b < nb; ++b)
      for (std::size_t r = r0; r < r1; ++r) std::memcpy(dst + b * ss + r * B, src + r * lds + b * B, B * sizeof(float));
  }
  if (padded > rows)
    for (std::size_t b = 0; b < nb; ++b) std::memset(dst + b * ss + rows * B, 0, (padded - rows) * B * sizeof(float));
}

// ---- B % W == 0 ----------------------------------------------------------------------------------

// dv (B x B) += strip(X)ᵀ · strip(dY) over `rows` rows.
template <std::size_t B, class Arch>
inline void wgrad_block_n(const float* xs, const float* ds, std::size_t rows, float* dv) {
  constexpr std::size_t NB = B / simd_width<float, Arch>;
  constexpr std::size_t RA = std::min<std::size_t>(B, std::bit_floor((vec_regs<Arch> - 4) / NB));
  if constexpr (vec_regs<Arch> == 16 && NB == 2 && B == 16) {
    // 16 registers, two vectors a row: passes of 6, 6 and 4 block rows (12, 12 and 8 accumulators)
    // instead of four of 4, so that most passes have more than the 8 FMA chains that hide latency.
    xty_tile<6, 2, Arch>(xs, B, ds, B, 0, rows, dv, B);
    xty_tile<6, 2, Arch>(xs + 6, B, ds, B, 0, rows, dv + 6 * B, B);
    xty_tile<4, 2, Arch>(xs + 12, B, ds, B, 0, rows, dv + 12 * B, B);
  } else {
    for (std::size_t a0 = 0; a0 < B; a0 += RA) xty_tile<RA, NB, Arch>(xs + a0, B, ds, B, 0, rows, dv + a0 * B, B);
  }
}

// ---- AVX-512, B = 8 (and 4): block lanes ------------------------------------------------------------

#if defined(__AVX512F__)
// U slots of one block row: X strip xs, dY strips ds + off[u], outputs dvs[u] (B x B, += ).
template <std::size_t B, std::size_t U>
inline void wgrad_block_lanes(const float* xs, const float* ds, const std::size_t* off, std::size_t rows,
                              float* const* dvs) {
  static_assert(B == 4 || B == 8);
  constexpr std::size_t R = 16 / B, Q = B / R;  // block rows per vector, vectors per block
  __m512i idx[Q];
  for (std::size_t q = 0; q < Q; ++q) {
    alignas(64) std::int32_t l[16];
    for (std::size_t e = 0; e < 16; ++e) l[e] = std::int32_t(q * R + e / B);
    idx[q] = _mm512_load_si512(l);
  }
  __m512 acc[U][Q];
#pragma GCC unroll 16
  for (std::size_t u = 0; u < U; ++u)
#pragma GCC unroll 4
    for (std::size_t q = 0; q < Q; ++q) acc[u][q] = _mm512_loadu_ps(dvs[u] + q * 16);
  for (std::size_t m = 0; m < rows; ++m, xs += B, ds += B) {
    __m512 xrow;
    if constexpr (B == 4)
      xrow = _mm512_castps128_ps512(_mm_loadu_ps(xs));
    else
      xrow = _mm512_castps256_ps512(_mm256_loadu_ps(xs));
    __m512 xq[Q];
#pragma GCC unroll 4
    for (std::size_t q = 0; q < Q; ++q) xq[q] = _mm512_permutexvar_ps(idx[q], xrow);
#pragma GCC unroll 16
    for (std::size_t u = 0; u < U; ++u) {
      __m512 d;
      if constexpr (B == 4)
        d = _mm512_broadcast_f32x4(_mm_loadu_ps(ds + off[u]));
      else
        d = _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_castps_pd(_mm256_loadu_ps(ds + off[u]))));
#pragma GCC unroll 4
      for (std::size_t q = 0; q < Q; ++q) acc[u][q] = _mm512_fmadd_ps(xq[q], d, acc[u][q]);
    }
  }
#pragma GCC unroll 16
  for (std::size_t u = 0; u < U; ++u)
#pragma GCC unroll 4
    for (std::size_t q = 0; q < Q; ++q) _mm512_storeu_ps(dvs[u] + q * 16, acc[u][q]);
}

// dv (4 x 4, += ): the 4 row lanes (128 bits each) of acc[a] summed into lane a of one vector, which
// is then the block (row a = 4 floats): two rounds of lane shuffles and adds.
inline void sum_row_lanes_b4(const __m512 (&acc)[4], float* dv) {
  const __m512 s01 =
      _mm512_add_ps(_mm512_shuffle_f32x4(acc[0], acc[1], 0x44), _mm512_shuffle_f32x4(acc[0], acc[1], 0xEE));
  const __m512 s23 =
      _mm512_add_ps(_mm512_shuffle_f32x4(acc[2], acc[3], 0x44), _mm512_shuffle_f32x4(acc[2], acc[3], 0xEE));
  const __m512 sum = _mm512_add_ps(_mm512_shuffle_f32x4(s01, s23, 0x88), _mm512_shuffle_f32x4(s01, s23, 0xDD));
  _mm512_storeu_ps(dv, _mm512_add_ps(_mm512_loadu_ps(dv), sum));
}

// B = 4, U <= 6 slots of one block row, 4 rows per step (rows % 4 == 0, strips zero-padded): one
// full load of a dY strip holds 4 rows x 4 columns (lanes (r, b)); the X strip's 4 x 4 piece of
// the same rows gives, by one in-lane shuffle per block row a, the vector of x[r][a] repeated over
// b. Per 4 rows: U loads and 4U FMAs into 4U accumulators, whose 4 row lanes are summed at the end.
// (With the strips in L1 / L2 this form ran at 1.26-1.31x the GFLOP/s of the row-at-a-time form
// above, one broadcast load per FMA, on the Zen 5 host: benchmarks/experiments/bsr_wgrad_kernels.cpp.)
template <std::size_t U>
inline void wgrad_b4_rows4(const float* xs, const float* ds, const std::size_t* off, std::size_t rows,
                           float* const* dvs) {
  static_assert(U >= 1 && U <= 6);  // 4U accumulators, 4 shuffled X vectors, the X and dY loads
  __m512 acc[U][4];
#pragma GCC unroll 8
  for (std::size_t u = 0; u < U; ++u)
#pragma GCC unroll 4
    for (std::size_t a = 0; a < 4; ++a) acc[u][a] = _mm512_setzero_ps();
  for (std::size_t m = 0; m < rows; m += 4, xs += 16, ds += 16) {
    __m512 x4 = _mm512_loadu_ps(xs);
    pin_register(x4);
    const __m512 xa[4] = {_mm512_permute_ps(x4, 0x00), _mm512_permute_ps(x4, 0x55), _mm512_permute_ps(x4, 0xAA),
                          _mm512_permute_ps(x4, 0xFF)};
#pragma GCC unroll 8
    for (std::size_t u = 0; u < U; ++u) {
      __m512 d = _mm512_loadu_ps(ds + off[u]);
      pin_register(d);
#pragma GCC unroll 4
      for (std::size_t a = 0; a < 4; ++a) acc[u][a] = _mm512_fmadd_ps(xa[a], d, acc[u][a]);
    }
  }
#pragma GCC unroll 8
  for (std::size_t u = 0; u < U; ++u) sum_row_lanes_b4(acc[u], dvs[u]);
}
#endif

// ---- other 4 <= B < W: G slots of one block row per vector ----------------------------------------

// One vector from G pieces of B floats at base + off[q].
template <std::size_t B, class Arch>
inline xsimd::batch<float, Arch> load_pieces(const float* base, const std::size_t* off) {
  using vec = xsimd::batch<float, Arch>;
  constexpr std::size_t W = vec::size, G = W / B;
#if defined(__AVX__)
  if constexpr (arch_is_avx<Arch> && W == 8 && B == 4) {
    return _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_loadu_ps(base + off[0])), _mm_loadu_ps(base + off[1]), 1);
  } else
#endif
  {
    alignas(64) float buf[W];
    for (std::size_t q = 0; q < G; ++q) std::memcpy(buf + q * B, base + off[q], B * sizeof(float));
    return vec::load_aligned(buf);
  }
}

// NG groups of G slots of one block row: X strip xs, dY strips ds + off[g*G+q], outputs dvs[g*G+q].
template <std::size_t B, std::size_t NG, class Arch>
inline void wgrad_group(const float* xs, const float* ds, const std::size_t* off, std::size_t rows, float* const* dvs) {
  using vec = xsimd::batch<float, Arch>;
  constexpr std::size_t W = vec::size, G = W / B;
  vec acc[NG][B];
#pragma GCC unroll 4
  for (std::size_t g = 0; g < NG; ++g)
#pragma GCC unroll 16
    for (std::size_t a = 0; a < B; ++a) acc[g][a] = vec(0.0f);
  for (std::size_t m = 0; m < rows; ++m, xs += B, ds += B) {
    vec dy[NG];
#pragma GCC unroll 4
    for (std::size_t g = 0; g < NG; ++g) dy[g] = load_pieces<B, Arch>(ds, off + g * G);
#pragma GCC unroll 16
    for (std::size_t a = 0; a < B; ++a) {
      const vec xb(xs[a]);
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

// Dot products of length L = NV*W rows of one chunk (transposed, lanes along M) for runs of slots
// that share their stream-side row: the run's stream row is loaded into NV registers once, and each
// slot then loads only its tile-side row, which sits in L1 (runs come tile by tile). Per slot: NV
// loads and NV FMAs. The dot vectors are staged W at a time and reduced with one horizontal-add
// transpose into sums[pos]; positions are consecutive in run order and start at a multiple of W.
template <class Arch, std::size_t NV>
inline void wgrad_runs(const float* St, const float* Tt, const std::uint32_t* run_row, const std::uint32_t* run_ptr,
                       std::size_t nruns, const std::uint32_t* trow, float* sums) {
  using vec = xsimd::batch<float, Arch>;
  constexpr std::size_t W = vec::size, L = NV * W;
  static_assert(NV % 2 == 0);
  alignas(64) vec part[W];
  alignas(64) float red[W];
  // Reduces the staged dot vectors and adds them to the W sums starting at o.
  auto flush = [&](float* o) {
    hsum_rows<Arch>(part, red);
    (vec::load_unaligned(o) + vec::load_aligned(red)).store_unaligned(o);
  };
  std::size_t k = 0;
  for (std::size_t r = 0; r < nruns; ++r) {
    const float* sr = St + std::size_t(run_row[r]) * L;
    vec x[NV];
#pragma GCC unroll 16
    for (std::size_t v = 0; v < NV; ++v) x[v] = vec::load_aligned(sr + v * W);
    for (std::size_t q = run_ptr[r]; q < run_ptr[r + 1]; ++q) {
      const float* t = Tt + std::size_t(trow[q]) * L;
      vec a0 = x[0] * vec::load_aligned(t), a1 = x[1] * vec::load_aligned(t + W);
#pragma GCC unroll 16
      for (std::size_t v = 2; v < NV; v += 2) {
        a0 = xsimd::fma(x[v], vec::load_aligned(t + v * W), a0);
        a1 = xsimd::fma(x[v + 1], vec::load_aligned(t + (v + 1) * W), a1);
      }
      part[k++] = a0 + a1;
      if (k == W) {
        flush(sums + (q + 1 - W));
        k = 0;
      }
    }
  }
  if (k != 0) {  // the last, partial group: its unused lanes add zeros to the padding of sums
    for (std::size_t u = k; u < W; ++u) part[u] = vec(0.0f);
    flush(sums + (run_ptr[nruns] - k));
  }
}

// ---- driver --------------------------------------------------------------------------------------

// Calls f(i, first, count) for this thread's positions [pb, pe) of row_slots in runs of at most U
// slots of one block row.
template <std::size_t U, class F>
void for_row_groups(const sparse::block_pattern& p, std::size_t pb, std::size_t pe, F&& f) {
  std::size_t q = pb;
  while (q < pe) {
    const std::size_t i = p.row[p.row_slots[q]];
    const std::size_t re = std::min<std::size_t>(pe, p.row_ptr[i + 1]);
    for (std::size_t g = q; g < re; g += U) f(i, g, std::min(U, re - g));
    q = re;
  }
}

// The rows a chunk of the strips must be a multiple of (zero rows pad it): B = 4's AVX-512 kernel
// takes four at a time.
template <std::size_t B, class Arch>
inline constexpr std::size_t wgrad_rows_step = (arch_is_avx512<Arch> && B == 4) ? 4 : 1;

// One chunk of the weight gradient for B > 1: dv (slot q of row_slots at dv + q*B*B) += the
// products of every active block over the chunk's strips Xs and dYs of `mv` rows (strip_stride<B>(mv)
// apart; for B = 4 on AVX-512 mv is a multiple of 4).
template <std::size_t B, class Arch>
void wgrad_chunk_slots(const sparse::block_pattern& p, const float* Xs, const float* dYs, std::size_t mv, float* dv) {
  static_assert(B > 1);
  constexpr std::size_t W = simd_width<float, Arch>;
  constexpr bool lanes = arch_is_avx512<Arch>;  // block lanes (B = 8), four rows (B = 4)
  const std::size_t strip = strip_stride<B>(mv);
  if constexpr (B % W == 0) {
    for (std::size_t q = 0; q < p.nnz(); ++q) {
      const std::uint32_t s = p.row_slots[q];
      wgrad_block_n<B, Arch>(Xs + p.row[s] * strip, dYs + p.col[s] * strip, mv, dv + q * B * B);
    }
  } else {
    // Runs of U slots of one block row; without AVX-512 a short run is padded with a
    // repeated column whose result goes to a dummy block.
    // Groups without AVX-512: 2 (3 with 16 registers and B = 4) vectors of W / B slots.
    // AVX-512: groups of 6 slots, 24 accumulators (a shorter group, the end of a block row,
    // its own kernel of 1 to 5 slots): B = 4 four rows at a time (wgrad_b4_rows4), B = 8 in
    // block lanes (wgrad_block_lanes; 6 slots 0-13 % faster than 4 on the Zen 5 host on
    // three of four shapes, docs/design/kernels.md).
    constexpr std::size_t NG = B == 4 && vec_regs<Arch> == 16 && W == 8 ? 3 : 2;
    constexpr std::size_t U = lanes ? 6 : NG * (W / B);
    float* dummy = bsr_scratch(U * B * B, 2);
    std::memset(dummy, 0, U * B * B * sizeof(float));
    for_row_groups<U>(p, 0, p.nnz(), [&](std::size_t i, std::size_t q, std::size_t n) {
      std::size_t off[U];
      float* dvs[U];
      for (std::size_t u = 0; u < U; ++u) {
        const std::uint32_t s = p.row_slots[q + std::min(u, n - 1)];
        off[u] = std::size_t(p.col[s]) * strip;
        dvs[u] = u < n ? dv + (q + u) * B * B : dummy + u * B * B;
      }
#if defined(__AVX512F__)
      if constexpr (lanes) {
        const float* xs = Xs + i * strip;
        // The kernel of exactly n (<= U) slots.
        const auto run = [&]<std::size_t N>() {
          if constexpr (B == 4)
            wgrad_b4_rows4<N>(xs, dYs, off, mv, dvs);
          else
            wgrad_block_lanes<B, N>(xs, dYs, off, mv, dvs);
          return true;
        };
        [&]<std::size_t... I>(std::index_sequence<I...>) {
          (void)((n == I + 1 && run.template operator()<I + 1>()) || ...);
        }
        (std::make_index_sequence<U>{});
      } else
#endif
        wgrad_group<B, NG, Arch>(Xs + i * strip, dYs, off, mv, dvs);
    });
  }
}

template <std::size_t B, class Arch>
void bsr_wgrad(const float* X, std::size_t ldx, const float* dY, std::size_t ldd, std::size_t M,
               const sparse::block_pattern& p, float* dvalues) {
  using vec = xsimd::batch<float, Arch>;
  constexpr std::size_t W = vec::size;
  const std::size_t nnz = p.nnz(), in = p.in(), out = p.out();
  if (M == 0 || nnz == 0) return;
  const int nt = int(std::min<std::size_t>(std::size_t(team_size()), std::max<std::size_t>(1, M / 64)));
  // B == 1: dot products over chunks of L = NV*W rows, the slots walked in the order of
  // bsr_runs.hpp (kept with the pattern until it changes). Tried and not kept: transposing each
  // tile of the larger side just before use (an L1 buffer instead of the whole chunk) with software
  // prefetch of the next tile and chunk (no faster, the tile prefetch slower); chunks of 64 or 256
  // rows (NV = 4 / 16); 16 KiB tiles.
  constexpr std::size_t NV = 8, L = NV * W;
  [[maybe_unused]] std::shared_ptr<const wgrad_runs_order> runs;
  [[maybe_unused]] float* sums1 = nullptr;
  if constexpr (B == 1) {
    runs = wgrad_runs_order_for(p, L);
    sums1 = bsr_scratch(std::size_t(nt) * (nnz + W), 3);
  }
  // B > 1: every thread accumulates its rows into its own partial gradient, in row_slots order so
  // that consecutive slots are adjacent in memory; they are summed into dvalues at the end.
  float* const partial = B == 1 ? nullptr : bsr_scratch(std::size_t(nt) * nnz * B * B, 3);
  run_team(nt, [&](int t, int T) {
    auto share = [&](std::size_t n) {
      return std::pair{n * std::size_t(t) / std::size_t(T), n * std::size_t(t + 1) / std::size_t(T)};
    };
    // This thread's rows [mb, me), for all slots.
    const std::size_t mb = M * std::size_t(t) / std::size_t(T), me = M * std::size_t(t + 1) / std::size_t(T);
    [[maybe_unused]] float* const dv = B == 1 ? nullptr : partial + std::size_t(t) * nnz * B * B;
    if constexpr (B != 1) std::memset(dv, 0, nnz * B * B * sizeof(float));
    if constexpr (B == 1) {
      float* const mysums = sums1 + std::size_t(t) * (nnz + W);
      std::memset(mysums, 0, (nnz + W) * sizeof(float));
      float* Xt = bsr_scratch(in * L, 0);
      float* dYt = bsr_scratch(out * L, 1);
      const wgrad_runs_order& R = *runs;
      for (std::size_t m0 = mb; m0 < me; m0 += L) {
        const std::size_t mv = std::min(L, me - m0);  // a short last chunk is zero-padded to L rows
        pack_transpose<Arch>(X + m0 * ldx, ldx, mv, L, in, Xt, L);
        pack_transpose<Arch>(dY + m0 * ldd, ldd, mv, L, out, dYt, L);
        wgrad_runs<Arch, NV>(R.stream_rows ? Xt : dYt, R.stream_rows ? dYt : Xt, R.run_row.data(), R.run_ptr.data(),
                             R.runs(), R.order.data() + nnz, mysums);
      }
      team_barrier(T);
      const auto [qb, qe] = share(nnz);
      for (std::size_t q = qb; q < qe; ++q) {
        float g = 0.0f;
        for (int u = 0; u < T; ++u) g += sums1[std::size_t(u) * (nnz + W) + q];
        dvalues[R.order[q]] += g;
      }
      return;
    } else {
      // B = 4 on AVX-512 takes 4 rows per step: chunks padded with zero rows to a multiple of 4.
      constexpr std::size_t rows_step = wgrad_rows_step<B, Arch>;
      // At least 64 rows per chunk (the accumulators are loaded and stored once per chunk and slot,
      // and B = 4 sums its row lanes then): with 32, the floor that products as wide as 768 x 3072
      // hit, the B = 4 weight gradient measured 8-18 % slower, B = 8 and 16 1-5 %.
      const std::size_t mc = wgrad_chunk(in, out, 64, 256, 16);
      float* Xs = bsr_scratch(strip_stride<B>(mc) * (in / B), 0);
      float* dYs = bsr_scratch(strip_stride<B>(mc) * (out / B), 1);
      for (std::size_t m0 = mb; m0 < me; m0 += mc) {
        const std::size_t rows = std::min(mc, me - m0), mv = (rows + rows_step - 1) / rows_step * rows_step;
        pack_strips<B>(X + m0 * ldx, ldx, rows, in, Xs, mv);
        pack_strips<B>(dY + m0 * ldd, ldd, rows, out, dYs, mv);
        wgrad_chunk_slots<B, Arch>(p, Xs, dYs, mv, dv);
      }
    }
    if constexpr (B != 1) {
      team_barrier(T);
      add_thread_partials(partial, nnz, B * B, p.row_slots.data(), dvalues, t, T);
    }
  });
}

}  // namespace sparselm::kernels::detail

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
