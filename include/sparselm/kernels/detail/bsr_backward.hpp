#pragma once
// The backward of a block-sparse product in one pass over the rows, for B > 1:
//   dX (M, in) = beta*dX + dY (M, out) · Wᵀ     and     dvalues += Xᵀ·dY on the active blocks.
//
// Run separately, the data gradient (bsr_matmul_t) and the weight gradient (bsr_wgrad) each read
// dY and copy it into their own layout. Here threads split M into panel-aligned row ranges and walk
// them in chunks of mc rows (a multiple of the tile's MR rows); per chunk the weight gradient's
// strips of X and dY are packed once (bsr_wgrad.hpp: per block column its mc x B rows, contiguous)
// and the weight gradient runs on them. Then the data gradient:
//  * lanes-N tiles (B a multiple of the SIMD width: B = 16 on AVX-512, 8 and 16 on AVX2): a dY
//    strip's MR rows from a panel boundary are exactly the row-major panel block the tile reads
//    (MR x B), only further apart (the strip stride), so the tiles run on the dY strips in place;
//  * lanes-M tiles (B = 4 and 8 on AVX-512, 4 on AVX2): each panel is packed k-major from the
//    chunk's rows of dY, which the strips' packing has just brought into cache.
// Either way dY is read from memory once instead of twice. B = 1 runs the two products in turn
// (its weight gradient transposes whole chunks instead of packing strips).
//
// dX is bitwise bsr_matmul_t's (the same tiles, summing in the same order); dvalues sums per
// thread, then the partials in thread order (deterministic for a thread count, equal to
// bsr_weight_grad's to rounding).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>

#include "sparselm/kernels/detail/bsr_matmul.hpp"
#include "sparselm/kernels/detail/bsr_util.hpp"
#include "sparselm/kernels/detail/bsr_wgrad.hpp"
#include "sparselm/sparse/block_pattern.hpp"

namespace sparselm::kernels::detail {

// Whether bsr_backward_fused serves block size B on Arch (B = 1's weight gradient transposes its
// chunks instead of packing strips).
template <std::size_t B, class Arch>
inline constexpr bool bsr_backward_fuses = B > 1;

// Rows per chunk: the weight gradient's chunk (about 384 KiB of X and dY strips) rounded down to a
// multiple of MR, at least one panel.
template <std::size_t MR>
inline std::size_t fused_chunk_rows(std::size_t in, std::size_t out) {
  return std::max<std::size_t>(MR, wgrad_chunk(in, out, 64, 256, 1) / MR * MR);
}

// What the one-pass backwards share (this one and bsr_backward_bf16): W's blocks walked by block
// row (the data gradient's lists), the team (at least 64 rows a thread), and thread t's rows:
// whole panels of MR rows (the last one may be partial).
inline bsr_lists data_gradient_lists(const sparse::block_pattern& p) {
  return {p.row_ptr.data(), p.row_slots.data(), p.col.data(), p.rows_b};
}
inline int backward_threads(std::size_t M) {
  return int(std::min<std::size_t>(std::size_t(team_size()), std::max<std::size_t>(1, M / 64)));
}
inline std::pair<std::size_t, std::size_t> panel_rows(std::size_t M, std::size_t MR, int t, int T) {
  const std::size_t npan = (M + MR - 1) / MR;
  const std::size_t q0 = npan * std::size_t(t) / std::size_t(T), q1 = npan * std::size_t(t + 1) / std::size_t(T);
  return {q0 * MR, std::min(M, q1 * MR)};
}

template <std::size_t B, class Arch>
void bsr_backward_fused(const float* X, std::size_t ldx, const float* dY, std::size_t ldd, std::size_t M,
                        const sparse::block_pattern& p, const float* V, float beta, float* dX, std::size_t lddx,
                        float* dvalues) {
  static_assert(bsr_backward_fuses<B, Arch>);
  constexpr bool lanes_n = bsr_tiling<B, Arch>::lanes_n;
  constexpr std::size_t MR = bsr_tiling<B, Arch>::MR;
  static_assert(MR % wgrad_rows_step<B, Arch> == 0);
  const std::size_t nnz = p.nnz(), in = p.in(), out = p.out();
  if (M == 0) return;
  // The data gradient's blocks (Wᵀ), copied on the calling thread.
  const bsr_lists L = data_gradient_lists(p);
  const packed_blocks pb = pack_blocks<B, true, Arch>(L, V);
  const int nt = backward_threads(M);
  const std::size_t mc = fused_chunk_rows<MR>(in, out);
  float* const partial = bsr_scratch(std::size_t(nt) * std::max<std::size_t>(nnz, 1) * B * B, 4);
  run_team(nt, [&](int t, int T) {
    const auto [mb, me] = panel_rows(M, MR, t, T);
    float* const dv = partial + std::size_t(t) * nnz * B * B;
    std::memset(dv, 0, nnz * B * B * sizeof(float));
    float* Xs = bsr_scratch(strip_stride<B>(mc) * (in / B), 0);
    float* dYs = bsr_scratch(strip_stride<B>(mc) * (out / B), 1);
    // Lanes-M tiles: the data gradient's k-major panel and column-major output chunk.
    float* P = lanes_n ? nullptr : bsr_scratch(out * MR, 5);
    float* Ct = lanes_n ? nullptr : bsr_scratch(lanes_m_chunk<B> * B * MR, 6);
    for (std::size_t m0 = mb; m0 < me; m0 += mc) {
      const std::size_t rows = std::min(mc, me - m0), mv = (rows + MR - 1) / MR * MR;
      const std::size_t ss = strip_stride<B>(mv);
      pack_strips<B>(X + m0 * ldx, ldx, rows, in, Xs, mv);
      pack_strips<B>(dY + m0 * ldd, ldd, rows, out, dYs, mv);
      // Weight gradient on the same strips (the zero rows past `rows` add nothing).
      wgrad_chunk_slots<B, Arch>(p, Xs, dYs, mv, dv);
      if constexpr (!lanes_n) {
        // Lanes-M tiles: bsr_matmul_t's panel product on the chunk's rows of dY.
        for (std::size_t r0 = 0; r0 < rows; r0 += MR)
          product_panel_lanes_m<B, Arch>(dY + (m0 + r0) * ldd, ldd, std::min(MR, rows - r0), out, 0, p.rows_b, L, pb,
                                         beta, dX + (m0 + r0) * lddx, lddx, nullptr, P, Ct);
      } else {
        // Lanes-N tiles: on the dY strips in place. AVX-512: panel by panel, every output block
        // column (a block row of W); AVX2 (bsr_tiling::row_blocks): column by column over the
        // chunk's panels, so a column's blocks are reused from L1, as bsr_matmul_t's row-block
        // driver does.
        const auto tile = [&](std::size_t r0, std::size_t i) {
          const std::size_t t0 = L.ptr[i], n = L.ptr[i + 1] - t0;
          tile_lanes_n<B, MR, Arch, false>(dYs + r0 * B, n, pb.kb + t0, pb.values + t0 * B * B,
                                           dX + (m0 + r0) * lddx + i * B, lddx, std::min(MR, rows - r0), beta, nullptr,
                                           ss);
        };
        if constexpr (bsr_tiling<B, Arch>::row_blocks) {
          for (std::size_t i = 0; i < p.rows_b; ++i)
            for (std::size_t r0 = 0; r0 < rows; r0 += MR) tile(r0, i);
        } else {
          for (std::size_t r0 = 0; r0 < rows; r0 += MR)
            for (std::size_t i = 0; i < p.rows_b; ++i) tile(r0, i);
        }
      }
    }
    team_barrier(T);
    add_thread_partials(partial, nnz, B * B, p.row_slots.data(), dvalues, t, T);
  });
}

}  // namespace sparselm::kernels::detail
