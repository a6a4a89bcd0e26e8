#pragma once
// bf16 block-sparse weight gradient (native path, AVX512-BF16), and the backward's two products in
// one pass over the rows. See detail/bsr_bf16.hpp for the packed layouts of the products.
//
// Weight gradient (native): dvalues += Xᵀ·dY on the active blocks with X and dY paired along M
// (rows 2q and 2q+1 of a chunk; an odd chunk gets a zero row). The driver is bsr_wgrad's (threads
// split M into partial gradients summed in thread order; chunks of rows copied into per-block-column
// strips, here of words: strip word (q, a) = (X(2q, a), X(2q+1, a))), with vdpbf16ps micro-kernels:
// B = 16 keeps the 16 x 16 block in 16 registers (lanes along the block columns, one dY strip row
// loaded and 16 X words broadcast per pair); B = 8 and 4 use the block lanes of wgrad_block_lanes
// (16/B block rows per vector, the X words permuted once per pair and shared by U slots of a block
// row, whose dY words are broadcast).
//
// One pass (bsr_backward_bf16): threads take panel-aligned row ranges, walked in chunks of whole
// panels; per chunk the weight gradient packs its strips of X and dY and runs, then the data
// gradient multiplies each panel of the chunk's dY rows as bsr_product_bf16 does. dY is read from
// memory and rounded once: its two packed forms differ (pairs along M for the weight gradient,
// along K for the data gradient), and the data gradient's panels are rearranged from the strips'
// bf16 words (panel_from_strips16, panel_from_strips_small). dX is bitwise the data gradient's of
// bsr_product_bf16 (the same panels and tiles); dvalues agrees with bsr_wgrad_bf16's to rounding
// (other chunks).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>

#include "sparselm/core/threads.hpp"
#include "sparselm/kernels/detail/bsr_backward.hpp"
#include "sparselm/kernels/detail/bsr_bf16.hpp"
#include "sparselm/kernels/detail/bsr_util.hpp"
#include "sparselm/kernels/detail/bsr_wgrad.hpp"
#include "sparselm/sparse/block_pattern.hpp"

namespace sparselm::kernels::detail {

#if SPARSELM_GEMM_BF16_NATIVE

// ---- native path: weight gradient ---------------------------------------------------------------

// Strips of `rows` rows of src (cols columns, a multiple of B): for every block column b, the
// words dst[b*ss + q*B + a] = (src(2q, bB+a), src(2q+1, bB+a)), q < ceil(rows/2) (a missing odd
// row reads as zero); ss = strip_stride<B>(ceil(rows/2)).
// Pairs from ceil(rows/2) up to `padded` are zero (padded >= ceil(rows/2); the stride is then
// strip_stride<B>(padded)).
template <std::size_t B, class S>
inline void pack_strips_bf16(const S* src, std::size_t lds, std::size_t rows, std::size_t cols, std::uint32_t* dst,
                             std::size_t padded) {
  // Groups of QG pairs: 2*QG sequential read streams, and QG*B words written contiguously per
  // strip (as pack_strips; one pair at a time measured slower, its loads waiting on memory).
  constexpr std::size_t QG = 4;
  constexpr std::size_t PF = 1024 / sizeof(S);  // software prefetch distance along the rows: 1 KiB
  const std::size_t np = (rows + 1) / 2, ss = strip_stride<B>(padded);
  for (std::size_t q0 = 0; q0 < np; q0 += QG) {
    const std::size_t q1 = std::min(np, q0 + QG);
    for (std::size_t c = 0; c < cols; c += 16) {
      const std::size_t n = std::min<std::size_t>(16, cols - c);
      for (std::size_t q = q0; q < q1; ++q) {
        const S* r0 = src + 2 * q * lds + c;
        __builtin_prefetch(r0 + PF, 0, 3);
        if (2 * q + 1 < rows) __builtin_prefetch(r0 + lds + PF, 0, 3);
        const __m512i w = gemm_bf16_pairs(gemm_bf16_load16(r0, n),
                                          2 * q + 1 < rows ? gemm_bf16_load16(r0 + lds, n) : _mm256_setzero_si256());
        // Words [g*B, g*B + B) belong to block column c/B + g.
        for (std::size_t g = 0; g * B < n; ++g) store_words<B>(dst + (c / B + g) * ss + q * B, w, g);
      }
    }
  }
  if (padded > np)
    for (std::size_t b = 0; b < cols / B; ++b) std::memset(dst + b * ss + np * B, 0, (padded - np) * B * 4);
}

// The data gradient's panel (pack_panel_bf16's layout: P[p*MR + r] = (dY(2q0 + r, 2p),
// dY(2q0 + r, 2p+1)), K/2 pairs, zero rows from 2*nq on) from the B = 16 strips of the same rows
// (strip word (q, a) = (dY(2q, a), dY(2q+1, a)), strip stride ss), without reading or rounding dY
// again: the bf16 values are the same, so the panel is too. Per strip vector of a pair of rows q,
// one vpermw turns its 16 words into 8 qwords (row 2q's pair word, row 2q+1's) for the block's 8
// k-pairs; groups of 8 such vectors are transposed as 8 x 8 qwords into the panel rows. P needs 16
// words of slack after K/2 x MR (a part group's full-vector store runs over).
template <std::size_t MR>
inline void panel_from_strips16(const std::uint32_t* strips, std::size_t ss, std::size_t q0, std::size_t nq,
                                std::size_t K, std::uint32_t* P) {
  static_assert(MR % 2 == 0 && MR <= 32);
  constexpr std::size_t QR = MR / 2, NG = (QR + 7) / 8;  // pairs of rows, groups of 8 of them
  alignas(64) static constexpr std::int16_t perm[32] = {0,  2,  1,  3,  4,  6,  5,  7,  8,  10, 9,  11, 12, 14, 13, 15,
                                                        16, 18, 17, 19, 20, 22, 21, 23, 24, 26, 25, 27, 28, 30, 29, 31};
  const __m512i idx = _mm512_load_si512(perm);
  for (std::size_t b = 0; b < K / 16; ++b) {
    const std::uint32_t* sb = strips + b * ss;
    // The last group first: its stores run over into the next panel row's first group, which is
    // stored after it (that of row 8b + 8 with block column b + 1).
    for (std::size_t g = NG; g-- > 0;) {
      __m512i t[8];
      for (std::size_t j = 0; j < 8; ++j) {
        const std::size_t q = q0 + g * 8 + j;
        t[j] = g * 8 + j < QR && q < nq ? _mm512_permutexvar_epi16(idx, _mm512_loadu_si512(sb + q * 16))
                                        : _mm512_setzero_si512();
      }
      __m512i a[8], c[8];
      for (std::size_t j = 0; j < 8; j += 2) {
        a[j] = _mm512_unpacklo_epi64(t[j], t[j + 1]);
        a[j + 1] = _mm512_unpackhi_epi64(t[j], t[j + 1]);
      }
      // c[0..3] from qword pairs (0,1), (2,3); c[4..7] from (4,5), (6,7): 128-bit lanes regrouped.
      for (std::size_t h = 0; h < 2; ++h) {
        c[4 * h + 0] = _mm512_shuffle_i64x2(a[4 * h], a[4 * h + 2], 0x88);
        c[4 * h + 1] = _mm512_shuffle_i64x2(a[4 * h], a[4 * h + 2], 0xDD);
        c[4 * h + 2] = _mm512_shuffle_i64x2(a[4 * h + 1], a[4 * h + 3], 0x88);
        c[4 * h + 3] = _mm512_shuffle_i64x2(a[4 * h + 1], a[4 * h + 3], 0xDD);
      }
      // Pair i of the block: qword i of every t, from c[(i%2)*2 + (i/2)%2] (lo or hi half).
      static constexpr std::size_t src[8] = {0, 2, 1, 3, 0, 2, 1, 3};
      for (std::size_t i = 0; i < 8; ++i) {
        const __m512i u = i < 4 ? _mm512_shuffle_i64x2(c[src[i]], c[4 + src[i]], 0x88)
                                : _mm512_shuffle_i64x2(c[src[i]], c[4 + src[i]], 0xDD);
        _mm512_storeu_si512(P + (8 * b + i) * MR + g * 16, u);
      }
    }
  }
}

// The same for B = 8 and 4 (strip word (q, a), a < B): one strip vector holds the B words of 16/B
// pairs of rows, and one vpermt2w picks, from two such vectors, the pair words of panel rows 2q and
// 2q+1 for 32/B pairs of rows: for B = 4 all 8 of a group for one k-pair, for B = 8 4 of them for
// two k-pairs, whose halves a vshufi64x2 joins. MR is a multiple of 16 (whole groups of 8 pairs of
// rows); pairs of rows from nq on are zero.
template <std::size_t B, std::size_t MR>
inline void panel_from_strips_small(const std::uint32_t* strips, std::size_t ss, std::size_t q0, std::size_t nq,
                                    std::size_t K, std::uint32_t* P) {
  static_assert((B == 4 || B == 8) && MR % 16 == 0);
  constexpr std::size_t QV = 16 / B, NV = 8 / QV, KPB = B / 2;  // pairs per vector, vectors per group, k-pairs
  // Word tables, per k-pair e of a vpermt2w's output: its qword j holds pair of rows j of the two
  // vectors (j < 2*QV; B = 8: qwords 4..7 are the next k-pair's), as (row 2q's pair word, row
  // 2q+1's); word h of dword a of a pair of rows q is row 2q+h's value of column a.
  struct tables {
    alignas(64) std::int16_t w[2][32];
  };
  static constexpr tables tab = [] {
    tables t{};
    for (std::size_t e = 0; e < 2; ++e)
      for (std::size_t k = 0; k < 8; ++k) {
        const std::size_t q = B == 4 ? k : k % 4, pair = B == 4 ? e : 2 * e + k / 4;
        const std::size_t base = (q / QV) * 32 + (q % QV) * B * 2 + pair * 4;  // word of (q, column 2*pair)
        const std::size_t words[4] = {base, base + 2, base + 1, base + 3};
        for (std::size_t h = 0; h < 4; ++h) t.w[e][4 * k + h] = std::int16_t(words[h]);
      }
    return t;
  }();
  const __m512i i0 = _mm512_load_si512(tab.w[0]), i1 = _mm512_load_si512(tab.w[1]);
  constexpr std::size_t NG = MR / 16;
  for (std::size_t b = 0; b < K / B; ++b) {
    const std::uint32_t* sb = strips + b * ss;
    std::uint32_t* pb = P + b * KPB * MR;
    for (std::size_t g = 0; g < NG; ++g) {
      __m512i v[NV];
      for (std::size_t j = 0; j < NV; ++j) {
        const std::size_t q = q0 + g * 8 + j * QV, have = nq > q ? std::min(QV, nq - q) : 0;
        v[j] = have == QV ? _mm512_loadu_si512(sb + q * B)
               : have > 0 ? _mm512_maskz_loadu_epi32(__mmask16((1u << (have * B)) - 1), sb + q * B)
                          : _mm512_setzero_si512();
      }
      if constexpr (B == 4) {
        _mm512_storeu_si512(pb + g * 16, _mm512_permutex2var_epi16(v[0], i0, v[1]));
        _mm512_storeu_si512(pb + MR + g * 16, _mm512_permutex2var_epi16(v[0], i1, v[1]));
      } else {
        // Pairs of rows 0-3 (v0, v1) and 4-7 (v2, v3), k-pairs (0, 1) and (2, 3).
        const __m512i a0 = _mm512_permutex2var_epi16(v[0], i0, v[1]), a1 = _mm512_permutex2var_epi16(v[0], i1, v[1]);
        const __m512i c0 = _mm512_permutex2var_epi16(v[2], i0, v[3]), c1 = _mm512_permutex2var_epi16(v[2], i1, v[3]);
        _mm512_storeu_si512(pb + g * 16, _mm512_shuffle_i64x2(a0, c0, 0x44));
        _mm512_storeu_si512(pb + MR + g * 16, _mm512_shuffle_i64x2(a0, c0, 0xEE));
        _mm512_storeu_si512(pb + 2 * MR + g * 16, _mm512_shuffle_i64x2(a1, c1, 0x44));
        _mm512_storeu_si512(pb + 3 * MR + g * 16, _mm512_shuffle_i64x2(a1, c1, 0xEE));
      }
    }
  }
}

// dv (16 x 16, += ) = strip(X)ᵀ · strip(dY) over np pairs of rows.
inline void wgrad_bf16_block16(const std::uint32_t* xs, const std::uint32_t* ds, std::size_t np, float* dv) {
  __m512 acc[16];
#pragma GCC unroll 16
  for (std::size_t a = 0; a < 16; ++a) acc[a] = _mm512_loadu_ps(dv + a * 16);
  for (std::size_t q = 0; q < np; ++q, xs += 16, ds += 16) {
    const __m512bh d = (__m512bh)_mm512_loadu_si512(ds);
#pragma GCC unroll 16
    for (std::size_t a = 0; a < 16; ++a) acc[a] = dpbf16_bcst(acc[a], d, xs + a);
  }
#pragma GCC unroll 16
  for (std::size_t a = 0; a < 16; ++a) _mm512_storeu_ps(dv + a * 16, acc[a]);
}

// U slots of one block row (B = 4 or 8): X strip xs, dY strips ds + off[u], outputs dvs[u]
// (B x B, += ), over np pairs of rows. Vector q of a block holds block rows qR .. qR+R-1 (R = 16/B),
// lane (r, c) at r*B + c.
template <std::size_t B, std::size_t U>
inline void wgrad_bf16_lanes(const std::uint32_t* xs, const std::uint32_t* ds, const std::size_t* off, std::size_t np,
                             float* const* dvs) {
  static_assert(B == 4 || B == 8);
  constexpr std::size_t R = 16 / B, Q = B / R;
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
  for (std::size_t m = 0; m < np; ++m, xs += B, ds += B) {
    __m512i xrow;
    if constexpr (B == 4)
      xrow = _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xs)));
    else
      xrow = _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xs)));
    __m512bh xq[Q];
#pragma GCC unroll 4
    for (std::size_t q = 0; q < Q; ++q) xq[q] = (__m512bh)_mm512_permutexvar_epi32(idx[q], xrow);
#pragma GCC unroll 16
    for (std::size_t u = 0; u < U; ++u) {
      __m512i d;
      if constexpr (B == 4)
        d = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(ds + off[u])));
      else
        d = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(ds + off[u])));
#pragma GCC unroll 4
      for (std::size_t q = 0; q < Q; ++q) acc[u][q] = _mm512_dpbf16_ps(acc[u][q], xq[q], (__m512bh)d);
    }
  }
#pragma GCC unroll 16
  for (std::size_t u = 0; u < U; ++u)
#pragma GCC unroll 4
    for (std::size_t q = 0; q < Q; ++q) _mm512_storeu_ps(dvs[u] + q * 16, acc[u][q]);
}

// B = 4, U <= 6 slots of one block row, 4 pairs of rows per step (np % 4 == 0, strips zero-padded):
// the fp32 wgrad_b4_rows4 with pairs of rows in place of rows — one full load of a dY strip holds 4
// pairs x 4 columns, the X strip's piece shuffled in-lane per block row a, one vdpbf16ps per (slot,
// a) for 4 pairs (the form above broadcasts a dY pair row per vdpbf16ps).
template <std::size_t U>
inline void wgrad_bf16_b4_rows4(const std::uint32_t* xs, const std::uint32_t* ds, const std::size_t* off,
                                std::size_t np, float* const* dvs) {
  static_assert(U >= 1 && U <= 6);
  __m512 acc[U][4];
#pragma GCC unroll 8
  for (std::size_t u = 0; u < U; ++u)
#pragma GCC unroll 4
    for (std::size_t a = 0; a < 4; ++a) acc[u][a] = _mm512_setzero_ps();
  for (std::size_t q = 0; q < np; q += 4, xs += 16, ds += 16) {
    __m512 x4 = _mm512_castsi512_ps(_mm512_loadu_si512(xs));
    pin_register(x4);
    const __m512bh xa[4] = {(__m512bh)_mm512_permute_ps(x4, 0x00), (__m512bh)_mm512_permute_ps(x4, 0x55),
                            (__m512bh)_mm512_permute_ps(x4, 0xAA), (__m512bh)_mm512_permute_ps(x4, 0xFF)};
#pragma GCC unroll 8
    for (std::size_t u = 0; u < U; ++u) {
      __m512i d = _mm512_loadu_si512(ds + off[u]);
      pin_register(d);
#pragma GCC unroll 4
      for (std::size_t a = 0; a < 4; ++a) acc[u][a] = _mm512_dpbf16_ps(acc[u][a], xa[a], (__m512bh)d);
    }
  }
#pragma GCC unroll 8
  for (std::size_t u = 0; u < U; ++u) sum_row_lanes_b4(acc[u], dvs[u]);
}

// Weight-gradient slots per group (B = 4, 8) and pairs of rows per step (B = 4: 4, strips zero-padded).
template <std::size_t B>
inline constexpr std::size_t wgrad_bf16_group = B == 4 ? 6 : 4;
template <std::size_t B>
inline constexpr std::size_t wgrad_bf16_pairs_step = B == 4 ? 4 : 1;

// One chunk's weight gradient: dv (slot q of p.row_slots at dv + q*B*B, += ) from the strips of X
// and dY (np pairs of rows each, strip stride `strip`); dummy: U*B*B floats of scratch (B = 4, 8).
template <std::size_t B, std::size_t U>
void wgrad_bf16_chunk(const std::uint32_t* Xs, const std::uint32_t* dYs, std::size_t np, std::size_t strip,
                      const sparse::block_pattern& p, float* dv, float* dummy) {
  const std::size_t nnz = p.nnz();
  if constexpr (B == 16) {
    for (std::size_t q = 0; q < nnz; ++q) {
      const std::uint32_t s = p.row_slots[q];
      wgrad_bf16_block16(Xs + p.row[s] * strip, dYs + p.col[s] * strip, np, dv + q * B * B);
    }
  } else {
    for_row_groups<U>(p, 0, nnz, [&](std::size_t i, std::size_t q, std::size_t n) {
      std::size_t off[U];
      float* dvs[U];
      for (std::size_t u = 0; u < U; ++u) {
        off[u] = std::size_t(p.col[p.row_slots[q + std::min(u, n - 1)]]) * strip;
        dvs[u] = u < n ? dv + (q + u) * B * B : dummy + u * B * B;
      }
      if constexpr (B == 4) {
        // The kernel of exactly n (<= U) slots.
        [&]<std::size_t... I>(std::index_sequence<I...>) {
          (void)((n == I + 1 && (wgrad_bf16_b4_rows4<I + 1>(Xs + i * strip, dYs, off, np, dvs), true)) || ...);
        }
        (std::make_index_sequence<U>{});
      } else {
        wgrad_bf16_lanes<B, U>(Xs + i * strip, dYs, off, np, dvs);
      }
    });
  }
}

// dvalues (slot order) += bf16(X)ᵀ · bf16(dY) on the active blocks, B = 4, 8 or 16; X is float
// (rounded while packed) or bf16.
template <std::size_t B, class Arch, class SX = float>
void bsr_wgrad_bf16(const SX* X, std::size_t ldx, const float* dY, std::size_t ldd, std::size_t M,
                    const sparse::block_pattern& p, float* dvalues) {
  static_assert(B == 4 || B == 8 || B == 16);
  const std::size_t nnz = p.nnz(), in = p.in(), out = p.out();
  if (M == 0 || nnz == 0) return;
  const int nt = int(std::min<std::size_t>(std::size_t(team_size()), std::max<std::size_t>(1, M / 64)));
  float* const partial = bsr_scratch(std::size_t(nt) * nnz * B * B, 3);
  // Rows per chunk: the fp32 kernel's bytes of strips (a word holds two rows).
  const std::size_t mc = 2 * wgrad_chunk(in, out, 64, 256, 16);
  constexpr std::size_t U = wgrad_bf16_group<B>, pairs_step = wgrad_bf16_pairs_step<B>;
  run_team(nt, [&](int t, int T) {
    const std::size_t mb = M * std::size_t(t) / std::size_t(T), me = M * std::size_t(t + 1) / std::size_t(T);
    float* const dv = partial + std::size_t(t) * nnz * B * B;
    std::memset(dv, 0, nnz * B * B * sizeof(float));
    // B = 4 and 8: runs of U slots of one block row; for B = 8 a short run repeats its last column
    // into a dummy block (B = 4 has a kernel for every run length).
    float* const dummy = B == 16 ? nullptr : bsr_scratch(U * B * B, 2);
    if constexpr (B != 16) std::memset(dummy, 0, U * B * B * sizeof(float));
    auto* Xs = reinterpret_cast<std::uint32_t*>(bsr_scratch(strip_stride<B>(mc / 2) * (in / B), 0));
    auto* dYs = reinterpret_cast<std::uint32_t*>(bsr_scratch(strip_stride<B>(mc / 2) * (out / B), 1));
    for (std::size_t m0 = mb; m0 < me; m0 += mc) {
      const std::size_t mv = std::min(mc, me - m0);
      const std::size_t np = ((mv + 1) / 2 + pairs_step - 1) / pairs_step * pairs_step, strip = strip_stride<B>(np);
      pack_strips_bf16<B>(X + m0 * ldx, ldx, mv, in, Xs, np);
      pack_strips_bf16<B>(dY + m0 * ldd, ldd, mv, out, dYs, np);
      wgrad_bf16_chunk<B, U>(Xs, dYs, np, strip, p, dv, dummy);
    }
    team_barrier(T);
    add_thread_partials(partial, nnz, B * B, p.row_slots.data(), dvalues, t, T);
  });
}

// dX (M, in) = beta*dX + bf16(dY) · bf16(W)ᵀ and dvalues += bf16(X)ᵀ · bf16(dY) in one pass; X
// float (rounded while packed) or bf16.
template <std::size_t B, class Arch, class SX = float>
void bsr_backward_bf16(const SX* X, std::size_t ldx, const float* dY, std::size_t ldd, std::size_t M,
                       const sparse::block_pattern& p, const float* V, float beta, float* dX, std::size_t lddx,
                       float* dvalues) {
  static_assert(arch_is_avx512<Arch> && (B == 4 || B == 8 || B == 16));
  constexpr std::size_t MR = bf16_panel_rows<B, Arch>, U = wgrad_bf16_group<B>, PS = wgrad_bf16_pairs_step<B>;
  const std::size_t nnz = p.nnz(), in = p.in(), out = p.out();
  if (M == 0) return;
  // The data gradient's blocks (Wᵀ), converted on the calling thread.
  const bsr_lists L = data_gradient_lists(p);
  const packed_blocks_bf16 pb = pack_blocks_bf16<B, true, Arch>(L, V);
  const int nt = backward_threads(M);
  // Rows per chunk: bsr_wgrad_bf16's, rounded down to whole panels (MR is even: whole pairs).
  const std::size_t mc = std::max(MR, 2 * wgrad_chunk(in, out, 64, 256, 16) / MR * MR);
  float* const partial = bsr_scratch(std::size_t(nt) * std::max<std::size_t>(nnz, 1) * B * B, 4);
  run_team(nt, [&](int t, int T) {
    const auto [mb, me] = panel_rows(M, MR, t, T);
    float* const dv = partial + std::size_t(t) * nnz * B * B;
    std::memset(dv, 0, nnz * B * B * sizeof(float));
    float* const dummy = B == 16 ? nullptr : bsr_scratch(U * B * B, 2);
    if constexpr (B != 16) std::memset(dummy, 0, U * B * B * sizeof(float));
    const std::size_t npmax = (mc / 2 + PS - 1) / PS * PS;
    auto* Xs = reinterpret_cast<std::uint32_t*>(bsr_scratch(strip_stride<B>(npmax) * (in / B), 0));
    auto* dYs = reinterpret_cast<std::uint32_t*>(bsr_scratch(strip_stride<B>(npmax) * (out / B), 1));
    // The data gradient's panel and (lanes-M tiles) output chunk: buffers apart from the strips'.
    auto* P = reinterpret_cast<std::uint32_t*>(bsr_scratch(out / 2 * MR + 16, 5));
    float* Ct = bsr_tiling<B, Arch>::lanes_n ? nullptr : bsr_scratch(128 * MR, 6);
    for (std::size_t m0 = mb; m0 < me; m0 += mc) {
      const std::size_t rows = std::min(mc, me - m0);
      const std::size_t np = ((rows + 1) / 2 + PS - 1) / PS * PS, strip = strip_stride<B>(np);
      pack_strips_bf16<B>(X + m0 * ldx, ldx, rows, in, Xs, np);
      pack_strips_bf16<B>(dY + m0 * ldd, ldd, rows, out, dYs, np);
      wgrad_bf16_chunk<B, U>(Xs, dYs, np, strip, p, dv, dummy);
      for (std::size_t r0 = 0; r0 < rows; r0 += MR) {
        const std::size_t mv = std::min(MR, rows - r0);
        if constexpr (B == 16)
          panel_from_strips16<MR>(dYs, strip, r0 / 2, (rows + 1) / 2, out, P);
        else
          panel_from_strips_small<B, MR>(dYs, strip, r0 / 2, (rows + 1) / 2, out, P);
        product_bf16_packed<B, Arch>(P, mv, 0, p.rows_b, L, pb, beta, dX + (m0 + r0) * lddx, lddx, nullptr, Ct);
      }
    }
    team_barrier(T);
    add_thread_partials(partial, nnz, B * B, p.row_slots.data(), dvalues, t, T);
  });
}

#endif  // SPARSELM_GEMM_BF16_NATIVE

}  // namespace sparselm::kernels::detail
