#pragma once
// Block-sparse products C (M x N) = beta*C + A (M x K) · S [+ bias], where S is block-sparse and
// walked one output block column at a time: output block column j gets the blocks
// slots[ptr[j] .. ptr[j+1]); slot s multiplies rows kblk[s]*B .. +B of A's columns.
//   bsr_matmul:   lists by block column of W, kblk = row, S_s = W_s
//   bsr_matmul_t: lists by block row of W,    kblk = col, S_s = W_sᵀ
//
// Two micro-kernels, chosen by B against the SIMD width W:
//  * lanes along N (B % W == 0, e.g. B = 16 on AVX-512): an MR x B tile of C lives in registers
//    across all blocks of the column; per k one row of the block is loaded and MR values of A are
//    broadcast. A is read in place (rows of the M panel); no packing.
//  * lanes along M (B < W, e.g. B = 1/4/8 on AVX-512): the A panel (MR rows) is packed k-major,
//    a tile of MR rows x B columns accumulates with one broadcast block value per (k, column), and
//    the finished panel of C (column-major) is transposed back with beta and bias fused.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

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
  static constexpr std::size_t NB = lanes_n ? B / W : 1;                                  // vectors per block row
  static constexpr std::size_t MR_N = std::min<std::size_t>(24, (vec_regs<Arch> - 4) / NB);  // lanes-N tile rows
  static constexpr std::size_t NV = std::clamp<std::size_t>((vec_regs<Arch> - 6) / B, 1, 8);  // lanes-M vectors
  static constexpr std::size_t MR = lanes_n ? MR_N : NV * W;
};

// ---- lanes along N -------------------------------------------------------------------------------

// C rows [0, MR) x B columns (at C) = beta*C + A-panel · (sum over the list) [+ bias]; rows >= mvalid
// are computed but not stored. V holds blocks row-major with the K index first.
template <std::size_t B, std::size_t MR, class Arch>
inline void tile_lanes_n(const float* A, std::size_t lda, const std::uint32_t* list, std::size_t n,
                         const std::uint32_t* kblk, const float* V, float* C, std::size_t ldc, std::size_t mvalid,
                         float beta, const float* bias) {
  using vec = xsimd::batch<float, Arch>;
  constexpr std::size_t W = vec::size, NB = B / W;
  vec acc[MR][NB];
#pragma GCC unroll 32
  for (std::size_t r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (std::size_t v = 0; v < NB; ++v) acc[r][v] = vec(0.0f);
  for (std::size_t t = 0; t < n; ++t) {
    const std::uint32_t s = list[t];
    const float* a = A + std::size_t(kblk[s]) * B;
    const float* w = V + std::size_t(s) * B * B;
    for (std::size_t k = 0; k < B; ++k) {
      vec wv[NB];
#pragma GCC unroll 4
      for (std::size_t v = 0; v < NB; ++v) wv[v] = vec::load_unaligned(w + k * B + v * W);
#pragma GCC unroll 32
      for (std::size_t r = 0; r < MR; ++r) {
        const vec x(a[r * lda + k]);
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
// Ct (B x MR, column-major). TransV: block element (k, c) is at V[s*B*B + c*B + k] instead of k*B + c.
template <std::size_t B, std::size_t NV, bool TransV, class Arch>
inline void tile_lanes_m(const float* P, const std::uint32_t* list, std::size_t n, const std::uint32_t* kblk,
                         const float* V, float* Ct) {
  using vec = xsimd::batch<float, Arch>;
  constexpr std::size_t W = vec::size, MR = NV * W;
  vec acc[B][NV];
#pragma GCC unroll 16
  for (std::size_t c = 0; c < B; ++c)
#pragma GCC unroll 8
    for (std::size_t v = 0; v < NV; ++v) acc[c][v] = vec(0.0f);
  for (std::size_t t = 0; t < n; ++t) {
    const std::uint32_t s = list[t];
    const float* p = P + std::size_t(kblk[s]) * B * MR;
    const float* w = V + std::size_t(s) * B * B;
#pragma GCC unroll 2
    for (std::size_t k = 0; k < B; ++k) {
      vec x[NV];
#pragma GCC unroll 8
      for (std::size_t v = 0; v < NV; ++v) x[v] = vec::load_aligned(p + k * MR + v * W);
#pragma GCC unroll 16
      for (std::size_t c = 0; c < B; ++c) {
        const vec wb(TransV ? w[c * B + k] : w[k * B + c]);
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

// C (M x N, N = n_out_blocks*B) = beta*C + A (M x K) · S [+ bias]. TransV as in tile_lanes_m; the
// lanes-N kernel needs V with the K index first, so the caller passes pre-transposed blocks there.
template <std::size_t B, bool TransV, class Arch>
void bsr_product(const float* A, std::size_t lda, std::size_t M, std::size_t K, const bsr_lists& L, const float* V,
                 float beta, float* C, std::size_t ldc, const float* bias) {
  using T = bsr_tiling<B, Arch>;
  constexpr std::size_t MR = T::MR;
  const std::size_t N = L.n_out_blocks * B;
  if (M == 0 || N == 0) return;
  const std::size_t npan = (M + MR - 1) / MR;
  const int nt = team_size();
  // Split the output columns too when there are few row panels for the threads.
  const std::size_t ngrp =
      npan >= 4 * std::size_t(nt) ? 1 : std::min(L.n_out_blocks, (4 * std::size_t(nt) + npan - 1) / npan);
  parallel_for(0, npan * ngrp, [&](std::size_t item) {
    const std::size_t p = item / ngrp, g = item % ngrp;
    const std::size_t m0 = p * MR, mv = std::min(MR, M - m0);
    const std::size_t j0 = g * L.n_out_blocks / ngrp, j1 = (g + 1) * L.n_out_blocks / ngrp;
    if (j0 == j1) return;
    float* Cp = C + m0 * ldc;
    if constexpr (T::lanes_n) {
      const float* Ap = A + m0 * lda;
      std::size_t ldp = lda;
      if (mv < MR) {  // last panel: zero-padded copy so the kernel always reads MR rows
        float* buf = scratch(MR * K, 0);
        for (std::size_t r = 0; r < MR; ++r) {
          if (r < mv)
            std::memcpy(buf + r * K, A + (m0 + r) * lda, K * sizeof(float));
          else
            std::memset(buf + r * K, 0, K * sizeof(float));
        }
        Ap = buf;
        ldp = K;
      }
      for (std::size_t j = j0; j < j1; ++j)
        tile_lanes_n<B, MR, Arch>(Ap, ldp, L.slots + L.ptr[j], L.ptr[j + 1] - L.ptr[j], L.kblk, V, Cp + j * B, ldc, mv,
                                  beta, bias ? bias + j * B : nullptr);
    } else {
      float* P = scratch(K * MR, 0);
      pack_transpose<Arch>(A + m0 * lda, lda, mv, MR, K, P, MR);
      float* Ct = scratch((j1 - j0) * B * MR, 1);
      for (std::size_t j = j0; j < j1; ++j)
        tile_lanes_m<B, T::NV, TransV, Arch>(P, L.slots + L.ptr[j], L.ptr[j + 1] - L.ptr[j], L.kblk, V,
                                             Ct + (j - j0) * B * MR);
      unpack_transpose<Arch>(Ct, MR, mv, (j1 - j0) * B, Cp + j0 * B, ldc, beta, bias ? bias + j0 * B : nullptr);
    }
  });
}

}  // namespace sparselm::kernels::detail
