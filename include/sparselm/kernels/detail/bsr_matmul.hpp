#pragma once
// Block-sparse products C (M x N) = beta*C + A (M x K) · S [+ bias], where S is block-sparse and
// walked one output block column at a time: output block column j gets the blocks
// slots[ptr[j] .. ptr[j+1]); slot s multiplies rows kblk[s]*B .. +B of A's columns.
//   bsr_matmul:   lists by block column of W, kblk = row, S_s = W_s
//   bsr_matmul_t: lists by block row of W,    kblk = col, S_s = W_sᵀ
//
// Per call the blocks are copied in walking order (K index first), and per M panel of MR rows
// A is packed k-major (K x MR, zero-padded), so the micro-kernels read both sequentially. Two
// micro-kernels, chosen by B against the SIMD width W:
//  * lanes along N (B % W == 0, e.g. B = 16 on AVX-512): an MR x B tile of C lives in registers
//    across all blocks of the column; per k one row of the block is loaded and MR values of the
//    panel are broadcast;
//  * lanes along M (B < W, e.g. B = 1/4/8 on AVX-512): a tile of MR rows x B columns, per k NV
//    vectors of the panel times one broadcast block value per column; chunks of C come out
//    column-major and are transposed back with beta and bias fused.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "sparselm/kernels/detail/bsr_util.hpp"

namespace sparselm::kernels::detail {

// The block lists a product walks.
struct bsr_lists {
  const std::uint32_t* ptr;    // n_out_blocks + 1
  const std::uint32_t* slots;  // arena slots, ordered per output block
  const std::uint32_t* kblk;   // per arena slot: the block index along K
  std::size_t n_out_blocks;
};

template <std::size_t B, class Arch>
struct bsr_tiling {
  static constexpr std::size_t W = simd_width<float, Arch>;
  static constexpr bool lanes_n = B % W == 0;
  static constexpr std::size_t NB = lanes_n ? B / W : 1;                                     // vectors per block row
  static constexpr std::size_t MR_N = std::min<std::size_t>(24, (vec_regs<Arch> - 4) / NB);  // lanes-N tile rows
  // lanes-M vectors: B = 1 reads one panel vector per FMA, so a smaller panel (L2) beats more chains.
  // With 16 registers B = 4 takes 3 vectors (12 accumulators, 3 panel vectors, 1 broadcast).
  static constexpr std::size_t NV =
      B == 1 ? 4 : std::clamp<std::size_t>((vec_regs<Arch> - (arch_is_avx512<Arch> ? 6 : 4)) / B, 1, 8);
  static constexpr std::size_t MR = lanes_n ? MR_N : NV * W;
  // Lanes-N tiles without AVX-512 read the activation in row blocks of MC rows kept in L2 and walk
  // every output block column over all MR-row panels of the block, so a column's blocks are reused
  // from L1; the panels hold each block row of A as MR x B (row-major), which needs no transpose.
  static constexpr bool row_blocks = lanes_n && !arch_is_avx512<Arch>;
  // Lanes-N panels on AVX-512 up to this depth hold each block row of A as MR x B (row-major, a
  // plain copy), deeper ones k-major (K x MR, transposed while packed). Measured on a Zen 5
  // (docs/design/kernels.md): row-major 3-10 % faster at K = 768-2304; at 3072 1-4 % slower while the
  // packing read A block row by block row, 2-3 % faster on one thread (equal on two) since it reads
  // row by row; equal at 6400.
  static constexpr std::size_t row_major_max_depth = 3072;
};

// Rows of A per row block of the blocked driver: MC x K floats take about 160 KiB (L2), 1 to 16
// panels of MR rows.
template <std::size_t MR>
inline std::size_t bsr_block_rows(std::size_t K) noexcept {
  const std::size_t mc = (160u * 1024u) / (sizeof(float) * std::max<std::size_t>(K, 1));
  return std::clamp<std::size_t>(mc / MR, 1, 16) * MR;
}

// dst[kb*MR*B + r*B + c] = src[r*lds + kb*B + c] for r < rows, 0 for rows <= r < MR: the panel of
// MR rows in block rows of MR x B. Row by row: one sequential read stream (the panel's rows are
// usually contiguous in A), writes MR*B floats apart into the panel, which is in cache. Reading
// block row by block row instead (MR read streams, sequential writes) measured 3-6 % slower for the
// whole K = 768 forward on the Zen 5 host, AVX-512 and AVX2 builds alike (docs/design/kernels.md).
template <std::size_t B, std::size_t MR>
inline void pack_row_panel(const float* src, std::size_t lds, std::size_t rows, std::size_t K, float* dst) {
  const std::size_t nb = K / B;
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t kb = 0; kb < nb; ++kb)
      std::memcpy(dst + kb * MR * B + r * B, src + r * lds + kb * B, B * sizeof(float));
  if (rows < MR)
    for (std::size_t kb = 0; kb < nb; ++kb)
      std::memset(dst + kb * MR * B + rows * B, 0, (MR - rows) * B * sizeof(float));
}

// ---- lanes along N -------------------------------------------------------------------------------

// C rows [0, MR) x B columns (at C) = beta*C + P-panel · (sum over n blocks) [+ bias]; rows >= mvalid
// are computed but not stored. P is the packed panel: K x MR k-major (KMajor), or MR x B row-major
// per block row (pack_row_panel); block t of the column is V + t*B*B (K index first) and
// multiplies the panel's block row kb[t] (B*MR floats at P + kb[t]*pstride in both layouts; the
// packed panels have pstride = B*MR, the weight gradient's strips a longer one, bsr_backward.hpp).
template <std::size_t B, std::size_t MR, class Arch, bool KMajor = true>
inline void tile_lanes_n(const float* P, std::size_t n, const std::uint32_t* kb, const float* V, float* C,
                         std::size_t ldc, std::size_t mvalid, float beta, const float* bias,
                         std::size_t pstride = B * MR) {
  using vec = xsimd::batch<float, Arch>;
  constexpr std::size_t W = vec::size, NB = B / W;
  vec acc[MR][NB];
#pragma GCC unroll 32
  for (std::size_t r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (std::size_t v = 0; v < NB; ++v) acc[r][v] = vec(0.0f);
  for (std::size_t t = 0; t < n; ++t) {
    const float* a = P + std::size_t(kb[t]) * pstride;
    const float* w = V + t * B * B;
    // The next block's panel rows are elsewhere in the panel: fetch them while this one computes.
    const float* an = P + std::size_t(kb[t + 1 < n ? t + 1 : t]) * pstride;
    for (std::size_t k = 0; k < B; ++k) {
      // The next block row of the panel is B*MR contiguous floats in both layouts: one prefetch per
      // cache line, spread over the k steps (the row-major panel's lanes-N tiles already issue
      // about one load per FMA: 13 per 12 for B = 8 on AVX2).
      if constexpr (KMajor)
        prefetch_span<MR>(an + k * MR);
      else if (k * 16 < MR * B)
        __builtin_prefetch(an + k * 16, 0, 3);
      vec wv[NB];
#pragma GCC unroll 4
      for (std::size_t v = 0; v < NB; ++v) wv[v] = vec::load_unaligned(w + k * B + v * W);
#pragma GCC unroll 32
      for (std::size_t r = 0; r < MR; ++r) {
        const vec x(a[KMajor ? k * MR + r : r * B + k]);
#pragma GCC unroll 4
        for (std::size_t v = 0; v < NB; ++v) acc[r][v] = xsimd::fma(x, wv[v], acc[r][v]);
      }
    }
  }
  const vec vbeta(beta);
#pragma GCC unroll 32
  for (std::size_t r = 0; r < MR; ++r) {
    if (r >= mvalid) break;
    float* c = C + r * ldc;
#pragma GCC unroll 4
    for (std::size_t v = 0; v < NB; ++v) {
      vec o = acc[r][v];
      if (bias) o += vec::load_unaligned(bias + v * W);
      if (beta != 0.0f) o = xsimd::fma(vbeta, vec::load_unaligned(c + v * W), o);
      o.store_unaligned(c + v * W);
    }
  }
}

// ---- lanes along M -------------------------------------------------------------------------------

// Tile of MR = NV*W rows x B columns from the packed panel P (K x MR, k-major); the result goes to
// Ct (B x MR, column-major). Blocks as in tile_lanes_n.
template <std::size_t B, std::size_t NV, class Arch>
inline void tile_lanes_m(const float* P, std::size_t n, const std::uint32_t* kb, const float* V, float* Ct) {
  using vec = xsimd::batch<float, Arch>;
  constexpr std::size_t W = vec::size, MR = NV * W;
  vec acc[B][NV];
#pragma GCC unroll 16
  for (std::size_t c = 0; c < B; ++c)
#pragma GCC unroll 8
    for (std::size_t v = 0; v < NV; ++v) acc[c][v] = vec(0.0f);
  for (std::size_t t = 0; t < n; ++t) {
    const float* p = P + std::size_t(kb[t]) * B * MR;
    const float* w = V + t * B * B;
    const float* pn = P + std::size_t(kb[t + 1 < n ? t + 1 : t]) * B * MR;
#pragma GCC unroll 2
    for (std::size_t k = 0; k < B; ++k) {
      // The next block's panel rows (not with B = 1: as many prefetches as FMAs). For B = 4 on
      // AVX-512 (96-row panels, 24 FMAs per k) measured on the Zen 5 host: forward and data
      // gradient 3-12 % faster with it (docs/design/kernels.md).
      if constexpr (B >= 4) prefetch_span<MR>(pn + k * MR);
      vec x[NV];
#pragma GCC unroll 8
      for (std::size_t v = 0; v < NV; ++v) {
        x[v] = vec::load_aligned(p + k * MR + v * W);
        // Kept in a register when the B columns share it (B = 1 uses it once: pinned, the B = 1
        // forward measured 2x slower on the Zen 5 host).
        if constexpr (B > 1) pin_register(x[v]);
      }
#pragma GCC unroll 16
      for (std::size_t c = 0; c < B; ++c) {
        const vec wb(w[k * B + c]);
#pragma GCC unroll 8
        for (std::size_t v = 0; v < NV; ++v) acc[c][v] = xsimd::fma(x[v], wb, acc[c][v]);
      }
    }
  }
#pragma GCC unroll 16
  for (std::size_t c = 0; c < B; ++c)
#pragma GCC unroll 8
    for (std::size_t v = 0; v < NV; ++v) acc[c][v].store_aligned(Ct + c * MR + v * W);
}

// ---- driver --------------------------------------------------------------------------------------

// Block lists in walking order, with the blocks copied contiguously (K index first) so that the
// micro-kernels stream them; rebuilt per call (nnz*B*B floats, small beside the product).
struct packed_blocks {
  const float* values;
  const std::uint32_t* kb;
};

// TransV: block element (k, c) of S_s is V[s*B*B + c*B + k] (S_s = W_sᵀ) instead of V[s*B*B + k*B + c].
// Into the calling thread's scratch slot `which` and kb (pack_blocks: slot 3; the fused
// feed-forward keeps several block sets alive at once in slots of its own).
template <std::size_t B, bool TransV, class Arch>
packed_blocks pack_blocks_into(const bsr_lists& L, const float* V, int which, std::vector<std::uint32_t>& kb) {
  const std::size_t nnz = L.ptr[L.n_out_blocks];
  float* vp = bsr_scratch(nnz * B * B, which);
  kb.resize(std::max(kb.size(), nnz));
  std::uint32_t* kbp = kb.data();
  parallel_for(
      0, nnz,
      [&](std::size_t t) {
        const std::uint32_t s = L.slots[t];
        kbp[t] = L.kblk[s];
        if constexpr (TransV)
          pack_transpose<Arch>(V + std::size_t(s) * B * B, B, B, B, B, vp + t * B * B, B);
        else
          std::memcpy(vp + t * B * B, V + std::size_t(s) * B * B, B * B * sizeof(float));
      },
      256);
  return {vp, kbp};
}

template <std::size_t B, bool TransV, class Arch>
packed_blocks pack_blocks(const bsr_lists& L, const float* V) {
  thread_local std::vector<std::uint32_t> kb;
  return pack_blocks_into<B, TransV, Arch>(L, V, 3, kb);
}

// Splits the output block columns into `ngrp` groups of about equal work (B k steps per block plus
// one for the column's write-out): group g is [starts[g], starts[g+1]).
inline void balanced_column_groups(const bsr_lists& L, std::size_t B, std::size_t ngrp, std::size_t* starts) {
  const std::size_t n = L.n_out_blocks;
  const auto cost = [&](std::size_t j) { return std::size_t(L.ptr[j]) * B + j; };  // work before column j
  const std::size_t total = cost(n);
  starts[0] = 0;
  for (std::size_t g = 1; g < ngrp; ++g) {
    const std::size_t target = total * g / ngrp;
    std::size_t lo = starts[g - 1], hi = n;  // first j >= lo with cost(j) >= target
    while (lo < hi) {
      const std::size_t mid = (lo + hi) / 2;
      if (cost(mid) < target)
        lo = mid + 1;
      else
        hi = mid;
    }
    starts[g] = lo;
  }
  starts[ngrp] = n;
}

// Output block columns per chunk of the lanes-M product: about 128 output columns, whose
// column-major chunk of C stays in cache until it is transposed back.
template <std::size_t B>
inline constexpr std::size_t lanes_m_chunk = std::max<std::size_t>(1, 128 / B);

// The lanes-M product of one panel of mv <= MR rows: C (mv rows at C, output block columns
// [j0, j1)) = beta*C + A's rows · S [+ bias]. The rows are packed k-major (K x MR, zero-padded)
// into P; the tiles write through Ct (lanes_m_chunk<B> * B * MR floats), transposed back per chunk.
template <std::size_t B, class Arch>
void product_panel_lanes_m(const float* A, std::size_t lda, std::size_t mv, std::size_t K, std::size_t j0,
                           std::size_t j1, const bsr_lists& L, const packed_blocks& pb, float beta, float* C,
                           std::size_t ldc, const float* bias, float* P, float* Ct) {
  using T = bsr_tiling<B, Arch>;
  static_assert(!T::lanes_n);
  constexpr std::size_t MR = T::MR, JC = lanes_m_chunk<B>;
  pack_transpose<Arch>(A, lda, mv, MR, K, P, MR);
  for (std::size_t jc = j0; jc < j1; jc += JC) {
    const std::size_t je = std::min(j1, jc + JC);
    for (std::size_t j = jc; j < je; ++j) {
      const std::size_t t0 = L.ptr[j];
      tile_lanes_m<B, T::NV, Arch>(P, L.ptr[j + 1] - t0, pb.kb + t0, pb.values + t0 * B * B, Ct + (j - jc) * B * MR);
    }
    unpack_transpose<Arch>(Ct, MR, mv, (je - jc) * B, C + jc * B, ldc, beta, bias ? bias + jc * B : nullptr);
  }
}

// The lanes-N product in row blocks (bsr_tiling::row_blocks): threads take (row block, column
// group) items; a row block's panels are packed once per item, then every block column of the group
// runs over all of them.
template <std::size_t B, class Arch>
void bsr_product_row_blocks(const float* A, std::size_t lda, std::size_t M, std::size_t K, const bsr_lists& L,
                            const packed_blocks& pb, float beta, float* C, std::size_t ldc, const float* bias, int nt) {
  constexpr std::size_t MR = bsr_tiling<B, Arch>::MR;
  const std::size_t MC = bsr_block_rows<MR>(K);
  const std::size_t nblk = (M + MC - 1) / MC;
  // Column groups when there are few row blocks for the threads, balanced by blocks per column.
  const std::size_t ngrp =
      nblk >= 4 * std::size_t(nt) ? 1 : std::min(L.n_out_blocks, (4 * std::size_t(nt) + nblk - 1) / nblk);
  thread_local std::vector<std::size_t> starts;
  starts.resize(std::max(starts.size(), ngrp + 1));
  std::size_t* gs = starts.data();
  balanced_column_groups(L, B, ngrp, gs);
  parallel_for(0, nblk * ngrp, [&](std::size_t item) {
    const std::size_t b = item / ngrp, g = item % ngrp;
    const std::size_t j0 = gs[g], j1 = gs[g + 1];
    if (j0 == j1) return;
    const std::size_t m0 = b * MC, mv = std::min(MC, M - m0), np = (mv + MR - 1) / MR;
    float* P = bsr_scratch(np * K * MR, 0);
    for (std::size_t q = 0; q < np; ++q)
      pack_row_panel<B, MR>(A + (m0 + q * MR) * lda, lda, std::min(MR, mv - q * MR), K, P + q * K * MR);
    for (std::size_t j = j0; j < j1; ++j) {
      const std::size_t t0 = L.ptr[j], n = L.ptr[j + 1] - t0;
      for (std::size_t q = 0; q < np; ++q)
        tile_lanes_n<B, MR, Arch, false>(P + q * K * MR, n, pb.kb + t0, pb.values + t0 * B * B,
                                         C + (m0 + q * MR) * ldc + j * B, ldc, std::min(MR, mv - q * MR), beta,
                                         bias ? bias + j * B : nullptr);
    }
  });
}

// C (M x N, N = n_out_blocks*B) = beta*C + A (M x K) · S [+ bias], S from the lists and V (TransV as
// in pack_blocks).
template <std::size_t B, bool TransV, class Arch>
void bsr_product(const float* A, std::size_t lda, std::size_t M, std::size_t K, const bsr_lists& L, const float* V,
                 float beta, float* C, std::size_t ldc, const float* bias) {
  using T = bsr_tiling<B, Arch>;
  constexpr std::size_t MR = T::MR;
  const std::size_t N = L.n_out_blocks * B;
  if (M == 0 || N == 0) return;
  const packed_blocks pb = pack_blocks<B, TransV, Arch>(L, V);
  const int nt = team_size();
  if constexpr (T::row_blocks) {
    bsr_product_row_blocks<B, Arch>(A, lda, M, K, L, pb, beta, C, ldc, bias, nt);
    return;
  }
  const std::size_t npan = (M + MR - 1) / MR;
  // Split the output columns too when there are few row panels for the threads.
  const std::size_t ngrp =
      npan >= 4 * std::size_t(nt) ? 1 : std::min(L.n_out_blocks, (4 * std::size_t(nt) + npan - 1) / npan);
  parallel_for(0, npan * ngrp, [&](std::size_t item) {
    const std::size_t p = item / ngrp, g = item % ngrp;
    const std::size_t m0 = p * MR, mv = std::min(MR, M - m0);
    const std::size_t j0 = g * L.n_out_blocks / ngrp, j1 = (g + 1) * L.n_out_blocks / ngrp;
    if (j0 == j1) return;
    float* Cp = C + m0 * ldc;
    float* P = bsr_scratch(K * MR, 0);
    if constexpr (T::lanes_n) {
      // The panel of A zero-padded to MR rows, row-major or k-major by depth (T::row_major_max_depth).
      auto columns = [&]<bool KMajor>() {
        for (std::size_t j = j0; j < j1; ++j) {
          const std::size_t t0 = L.ptr[j], n = L.ptr[j + 1] - t0;
          tile_lanes_n<B, MR, Arch, KMajor>(P, n, pb.kb + t0, pb.values + t0 * B * B, Cp + j * B, ldc, mv, beta,
                                            bias ? bias + j * B : nullptr);
        }
      };
      if (K <= T::row_major_max_depth) {
        pack_row_panel<B, MR>(A + m0 * lda, lda, mv, K, P);
        columns.template operator()<false>();
      } else {
        pack_transpose<Arch>(A + m0 * lda, lda, mv, MR, K, P, MR);
        columns.template operator()<true>();
      }
    } else {
      product_panel_lanes_m<B, Arch>(A + m0 * lda, lda, mv, K, j0, j1, L, pb, beta, Cp, ldc, bias, P,
                                     bsr_scratch(lanes_m_chunk<B> * B * MR, 1));
    }
  });
}

}  // namespace sparselm::kernels::detail
