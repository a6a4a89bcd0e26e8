#pragma once
// bf16 block-sparse products (kernels/bsr_bf16.hpp): the fp32 products of bsr_matmul.hpp with the
// operands rounded to bf16 (nearest even, NaN kept) and fp32 accumulation.
//
// Native path (AVX512-BF16): vdpbf16ps adds the two products of a bf16 pair into one fp32 lane, so
// both operands are packed as 32-bit words of two bf16 values adjacent in K (low half: the even k).
// B is even, so a k-pair never straddles two blocks. Per call:
//  * the blocks, in walking order, become B/2 x B words: word (p, c) = (S(2p, c), S(2p+1, c)),
//    S the block as multiplied (K index first; W_sᵀ for the data gradient). The same layout serves
//    both micro-kernels: a row of B words to load (lanes along N) or one word to broadcast (lanes
//    along M). Converted once per call (nnz*B*B values, small beside the product) instead of
//    keeping a packed copy with the caller: the weights change every step, and a second copy
//    would have to be kept in sync by the optimizer.
//  * per M panel of MR rows the activation is rounded and packed k-pair-major (K/2 x MR words,
//    zero rows up to MR): rows converted to their pairs, the words transposed in registers.
//    The rows are prefetched 1 KiB ahead (the conversions otherwise wait on memory).
// The micro-kernels and the driver follow the fp32 ones (tiling from bsr_tiling): B = 16 keeps an
// MR x 16 tile (MR = 28) in registers (one block row pair loaded, MR words broadcast per k-pair);
// B = 8 and 4 run lanes along M (NV panel vectors times one broadcast block word per column) into
// a column-major chunk that unpack_transpose writes back with beta and bias.
//
// Weight gradient (native), and both backward products in one pass: detail/bsr_bf16_wgrad.hpp.
//
// Portable path: the operands are rounded to bf16 values held in float (gemm_copy with
// gemm_round::bf16) and the fp32 kernels multiply them.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "sparselm/core/threads.hpp"
#include "sparselm/kernels/detail/bsr_matmul.hpp"
#include "sparselm/kernels/detail/bsr_util.hpp"
#include "sparselm/kernels/detail/bsr_wgrad.hpp"
#include "sparselm/kernels/detail/gemm_bf16_kernel.hpp"
#include "sparselm/kernels/detail/gemm_pack.hpp"
#include "sparselm/sparse/block_pattern.hpp"

namespace sparselm::kernels::detail {

// ---- portable path -------------------------------------------------------------------------------

// rows x cols of src (leading dimension ld) rounded to bf16 values, held in float, contiguous
// (leading dimension cols), in thread-local buffer `which` (grow-only).
template <class Arch>
const float* bf16_rounded(const float* src, std::size_t ld, std::size_t rows, std::size_t cols, int which) {
  thread_local std::vector<float> bufs[2];
  std::vector<float>& b = bufs[which];
  if (b.size() < rows * cols) b.resize(rows * cols);
  float* d = b.data();
  parallel_for(
      0, rows, [&](std::size_t r) { gemm_copy<Arch, float, gemm_round::bf16>(d + r * cols, src + r * ld, cols); }, 16);
  return d;
}

template <std::size_t B, bool TransV, class Arch>
void bsr_product_bf16_portable(const float* A, std::size_t lda, std::size_t M, std::size_t K, const bsr_lists& L,
                               const float* V, float beta, float* C, std::size_t ldc, const float* bias) {
  if (M == 0 || L.n_out_blocks == 0) return;
  const float* Ar = bf16_rounded<Arch>(A, lda, M, K, 0);
  const float* Vr = bf16_rounded<Arch>(V, B * B, L.ptr[L.n_out_blocks], B * B, 1);
  bsr_product<B, TransV, Arch>(Ar, K, M, K, L, Vr, beta, C, ldc, bias);
}

template <std::size_t B, class Arch>
void bsr_wgrad_bf16_portable(const float* X, std::size_t ldx, const float* dY, std::size_t ldd, std::size_t M,
                             const sparse::block_pattern& p, float* dvalues) {
  if (M == 0 || p.nnz() == 0) return;
  const float* Xr = bf16_rounded<Arch>(X, ldx, M, p.in(), 0);
  const float* dYr = bf16_rounded<Arch>(dY, ldd, M, p.out(), 1);
  bsr_wgrad<B, Arch>(Xr, p.in(), dYr, p.out(), M, p, dvalues);
}

#if SPARSELM_GEMM_BF16_NATIVE

// ---- native path: packing ------------------------------------------------------------------------

// Stores words [g*B, g*B + B) of w at dst (B = 4, 8 or 16, g < 16/B) with a plain store: masked
// stores are much slower than plain ones on AMD cores.
template <std::size_t B>
inline void store_words(std::uint32_t* dst, __m512i w, std::size_t g) noexcept {
  if constexpr (B == 16) {
    _mm512_storeu_si512(dst, w);
  } else if constexpr (B == 8) {
    const __m256i h = g == 0 ? _mm512_castsi512_si256(w) : _mm512_extracti64x4_epi64(w, 1);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), h);
  } else {
    static_assert(B == 4);
    __m128i q;
    switch (g) {
      case 0:
        q = _mm512_castsi512_si128(w);
        break;
      case 1:
        q = _mm512_extracti32x4_epi32(w, 1);
        break;
      case 2:
        q = _mm512_extracti32x4_epi32(w, 2);
        break;
      default:
        q = _mm512_extracti32x4_epi32(w, 3);
        break;
    }
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), q);
  }
}

// One block as B/2 x B words: dst[p*B + c] = (S(2p, c), S(2p+1, c)), S(k, c) = V[k*B + c], or
// V[c*B + k] with TransV.
template <std::size_t B, bool TransV, class Arch>
inline void pack_block_bf16(const float* V, std::uint32_t* dst) {
  alignas(64) float t[B * B];
  const float* s = V;
  if constexpr (TransV) {
    pack_transpose<Arch>(V, B, B, B, B, t, B);
    s = t;
  }
  for (std::size_t p = 0; p < B / 2; ++p)
    store_words<B>(dst + p * B,
                   gemm_bf16_pairs(gemm_bf16_load16(s + 2 * p * B, B), gemm_bf16_load16(s + (2 * p + 1) * B, B)), 0);
}

struct packed_blocks_bf16 {
  const std::uint32_t* words;  // B*B/2 per block, in walking order
  const std::uint32_t* kb;
};

template <std::size_t B, bool TransV, class Arch>
packed_blocks_bf16 pack_blocks_bf16(const bsr_lists& L, const float* V) {
  const std::size_t nnz = L.ptr[L.n_out_blocks];
  auto* wp = reinterpret_cast<std::uint32_t*>(bsr_scratch(nnz * B * B / 2, 3));
  thread_local std::vector<std::uint32_t> kb;
  kb.resize(std::max(kb.size(), nnz));
  std::uint32_t* kbp = kb.data();
  parallel_for(
      0, nnz,
      [&](std::size_t t) {
        const std::uint32_t s = L.slots[t];
        kbp[t] = L.kblk[s];
        pack_block_bf16<B, TransV, Arch>(V + std::size_t(s) * B * B, wp + t * B * B / 2);
      },
      256);
  return {wp, kbp};
}

// The panel of `rows` rows of A (K even) as K/2 x MR words, k-pair-major: P[p*MR + r] =
// (A(r, 2p), A(r, 2p+1)), zero for rows <= r < MR. 16 rows x 32 columns at a time: each row
// converted is its 16 pairs, and a 16 x 16 transpose of the words (as floats: unchanged bits)
// gives 16 pairs of the 16 rows.
template <std::size_t MR, class S>
inline void pack_panel_bf16(const S* A, std::size_t lda, std::size_t rows, std::size_t K, std::uint32_t* P) {
  constexpr std::size_t PF = 1024 / sizeof(S);  // software prefetch distance along the rows: 1 KiB
  for (std::size_t r0 = 0; r0 < MR; r0 += 16) {
    const std::size_t nr = rows > r0 ? std::min<std::size_t>(16, rows - r0) : 0;
    const std::size_t ns = std::min<std::size_t>(16, MR - r0);
    for (std::size_t k = 0; k < K; k += 32) {
      __m512 v[16];
      for (std::size_t i = 0; i < 16; ++i) {
        if (i >= nr) {
          v[i] = _mm512_setzero_ps();
          continue;
        }
        const S* a = A + (r0 + i) * lda + k;
        __builtin_prefetch(a + PF, 0, 3);
        if constexpr (sizeof(S) == 4) __builtin_prefetch(a + PF + 16, 0, 3);
        v[i] = _mm512_castsi512_ps(gemm_bf16_row32(a, K - k));
      }
      transpose16(v);
      const std::size_t np = std::min<std::size_t>(16, (K - k) / 2);
      float* d = reinterpret_cast<float*>(P + (k / 2) * MR + r0);
      for (std::size_t i = 0; i < np; ++i) {
        if (ns == 16)
          _mm512_storeu_ps(d + i * MR, v[i]);
        else
          _mm512_mask_storeu_ps(d + i * MR, lanes_mask(ns), v[i]);
      }
    }
  }
}

// ---- native path: micro-kernels -------------------------------------------------------------------

// C rows [0, MR) x 16 columns (at C) = beta*C + panel · (sum over the n blocks) [+ bias]; rows >=
// mvalid are computed but not stored. Block t (words V + t*128) multiplies the panel's pairs
// kb[t]*8 .. +8 (8*MR words at P + kb[t]*8*MR). Lanes-N tiles are B = 16's only (a block row is one
// vector), so the tile is written for it.
template <std::size_t B, std::size_t MR>
inline void tile_bf16_n(const std::uint32_t* P, std::size_t n, const std::uint32_t* kb, const std::uint32_t* V,
                        float* C, std::size_t ldc, std::size_t mvalid, float beta, const float* bias) {
  static_assert(B == 16, "bf16 lanes-N tiles hold one block row per vector");
  constexpr std::size_t KP = B / 2;
  __m512 acc[MR];
#pragma GCC unroll 32
  for (std::size_t r = 0; r < MR; ++r) acc[r] = _mm512_setzero_ps();
  for (std::size_t t = 0; t < n; ++t) {
    const std::uint32_t* a = P + std::size_t(kb[t]) * KP * MR;
    const std::uint32_t* w = V + t * KP * B;
    const std::uint32_t* an = P + std::size_t(kb[t + 1 < n ? t + 1 : t]) * KP * MR;
    for (std::size_t p = 0; p < KP; ++p) {
      prefetch_span<MR>(reinterpret_cast<const float*>(an + p * MR));
      const __m512bh wv = (__m512bh)_mm512_loadu_si512(w + p * B);
#pragma GCC unroll 32
      for (std::size_t r = 0; r < MR; ++r) acc[r] = dpbf16_bcst(acc[r], wv, a + p * MR + r);
    }
  }
  const __m512 vbeta = _mm512_set1_ps(beta);
#pragma GCC unroll 32
  for (std::size_t r = 0; r < MR; ++r) {
    if (r >= mvalid) break;
    float* c = C + r * ldc;
    __m512 o = acc[r];
    if (bias) o = _mm512_add_ps(o, _mm512_loadu_ps(bias));
    if (beta != 0.0f) o = _mm512_fmadd_ps(vbeta, _mm512_loadu_ps(c), o);
    _mm512_storeu_ps(c, o);
  }
}

// Tile of MR = NV*16 rows x B columns from the packed panel; the result goes to Ct (B x MR floats,
// column-major). Blocks as in tile_bf16_n.
template <std::size_t B, std::size_t NV>
inline void tile_bf16_m(const std::uint32_t* P, std::size_t n, const std::uint32_t* kb, const std::uint32_t* V,
                        float* Ct) {
  constexpr std::size_t KP = B / 2, MR = NV * 16;
  __m512 acc[B][NV];
#pragma GCC unroll 16
  for (std::size_t c = 0; c < B; ++c)
#pragma GCC unroll 8
    for (std::size_t v = 0; v < NV; ++v) acc[c][v] = _mm512_setzero_ps();
  for (std::size_t t = 0; t < n; ++t) {
    const std::uint32_t* p = P + std::size_t(kb[t]) * KP * MR;
    const std::uint32_t* w = V + t * KP * B;
    const std::uint32_t* pn = P + std::size_t(kb[t + 1 < n ? t + 1 : t]) * KP * MR;
#pragma GCC unroll 2
    for (std::size_t q = 0; q < KP; ++q) {
      prefetch_span<MR>(reinterpret_cast<const float*>(pn + q * MR));
      __m512bh x[NV];
#pragma GCC unroll 8
      for (std::size_t v = 0; v < NV; ++v) x[v] = (__m512bh)_mm512_load_si512(p + q * MR + v * 16);
#pragma GCC unroll 16
      for (std::size_t c = 0; c < B; ++c) {
        const __m512bh wb = (__m512bh)_mm512_set1_epi32(int(w[q * B + c]));
#pragma GCC unroll 8
        for (std::size_t v = 0; v < NV; ++v) acc[c][v] = _mm512_dpbf16_ps(acc[c][v], x[v], wb);
      }
    }
  }
#pragma GCC unroll 16
  for (std::size_t c = 0; c < B; ++c)
#pragma GCC unroll 8
    for (std::size_t v = 0; v < NV; ++v) _mm512_store_ps(Ct + c * MR + v * 16, acc[c][v]);
}

// ---- native path: driver --------------------------------------------------------------------------

// Rows of the panels of the bf16 products: lanes-N tiles of 28 rows (28 of the 32 registers;
// measured a little faster than the fp32 kernel's 24), else the fp32 lanes-M tiles' rows.
template <std::size_t B, class Arch>
inline constexpr std::size_t bf16_panel_rows = bsr_tiling<B, Arch>::lanes_n ? 28 : bsr_tiling<B, Arch>::MR;

// One panel of a bf16 product with its panel P already packed (K/2 x MR words, pack_panel_bf16's
// layout): rows [0, mv) of C (at C) x output block columns [j0, j1) = beta*C + P · S [+ bias]; Ct
// (lanes-M tiles only): 128 x MR floats of scratch.
template <std::size_t B, class Arch>
void product_bf16_packed(const std::uint32_t* P, std::size_t mv, std::size_t j0, std::size_t j1, const bsr_lists& L,
                         const packed_blocks_bf16& pb, float beta, float* C, std::size_t ldc, const float* bias,
                         float* Ct) {
  using T = bsr_tiling<B, Arch>;
  constexpr std::size_t MR = bf16_panel_rows<B, Arch>;
  if constexpr (T::lanes_n) {
    for (std::size_t j = j0; j < j1; ++j) {
      const std::size_t t0 = L.ptr[j];
      tile_bf16_n<B, MR>(P, L.ptr[j + 1] - t0, pb.kb + t0, pb.words + t0 * B * B / 2, C + j * B, ldc, mv, beta,
                         bias ? bias + j * B : nullptr);
    }
  } else {
    constexpr std::size_t JC = std::max<std::size_t>(1, 128 / B);
    for (std::size_t jc = j0; jc < j1; jc += JC) {
      const std::size_t je = std::min(j1, jc + JC);
      for (std::size_t j = jc; j < je; ++j) {
        const std::size_t t0 = L.ptr[j];
        tile_bf16_m<B, T::NV>(P, L.ptr[j + 1] - t0, pb.kb + t0, pb.words + t0 * B * B / 2, Ct + (j - jc) * B * MR);
      }
      unpack_transpose<Arch>(Ct, MR, mv, (je - jc) * B, C + jc * B, ldc, beta, bias ? bias + jc * B : nullptr);
    }
  }
}

// One panel of a bf16 product: rows [0, mv) of C (at C) x output block columns [j0, j1) = beta*C +
// bf16(A rows [0, mv)) · S [+ bias]. P: K/2 x MR words of scratch; Ct (lanes-M tiles only): 128 x MR
// floats of scratch.
template <std::size_t B, class Arch, class SA>
void product_bf16_panel(const SA* A, std::size_t lda, std::size_t mv, std::size_t K, std::size_t j0, std::size_t j1,
                        const bsr_lists& L, const packed_blocks_bf16& pb, float beta, float* C, std::size_t ldc,
                        const float* bias, std::uint32_t* P, float* Ct) {
  pack_panel_bf16<bf16_panel_rows<B, Arch>>(A, lda, mv, K, P);
  product_bf16_packed<B, Arch>(P, mv, j0, j1, L, pb, beta, C, ldc, bias, Ct);
}

// C (M x N, N = n_out_blocks*B) = beta*C + bf16(A) (M x K) · bf16(S) [+ bias], S from the lists and
// V (TransV as in pack_blocks). Work split as in bsr_product: M panels, and output block column
// groups when there are few panels for the threads. A is float (rounded while packed) or bf16.
template <std::size_t B, bool TransV, class Arch, class SA = float>
void bsr_product_bf16(const SA* A, std::size_t lda, std::size_t M, std::size_t K, const bsr_lists& L, const float* V,
                      float beta, float* C, std::size_t ldc, const float* bias) {
  static_assert(arch_is_avx512<Arch> && B % 2 == 0);
  using T = bsr_tiling<B, Arch>;
  constexpr std::size_t MR = bf16_panel_rows<B, Arch>;
  const std::size_t KP = K / 2;
  if (M == 0 || L.n_out_blocks == 0) return;
  const packed_blocks_bf16 pb = pack_blocks_bf16<B, TransV, Arch>(L, V);
  const auto item = [&](std::size_t m0, std::size_t mv, std::size_t j0, std::size_t j1) {
    product_bf16_panel<B, Arch>(A + m0 * lda, lda, mv, K, j0, j1, L, pb, beta, C + m0 * ldc, ldc, bias,
                                reinterpret_cast<std::uint32_t*>(bsr_scratch(KP * MR, 0)),
                                T::lanes_n ? nullptr : bsr_scratch(128 * MR, 1));
  };
  for_panel_items(M, MR, L.n_out_blocks, team_size(), item);
}

#endif  // SPARSELM_GEMM_BF16_NATIVE

}  // namespace sparselm::kernels::detail
