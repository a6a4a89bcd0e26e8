#pragma once
// Fused block-sparse feed-forward: y = gelu(x·W1 + b1)·W2 + b2 with W1 (C, F) and W2 (F, C)
// block-sparse (B x B blocks, sparse/block_pattern.hpp), computed tile of rows by tile of rows so
// that the tile's intermediate (F = 4C wide in GPT-2) never leaves the cache:
//
//   bsr_ffn_forward   Y (M, C)  = gelu(X·W1 + b1)·W2 + b2
//   bsr_ffn_backward  dX (M, C) = beta*dX + ((dY·W2ᵀ) ∘ gelu'(H))·W1ᵀ,   H = X·W1 + b1 recomputed per tile
//                     dW1 += Xᵀ·dH, db1 += Σ dH, dW2 += gelu(H)ᵀ·dY on the active blocks only
//                     (db2 = Σ dY is the caller's: it needs only dY)
//
// Unfused, a feed-forward writes H and gelu(H) (M x F each) to memory in forward and reads them
// back twice in backward, and its backward writes and reads dH: at GPT-2 small shapes those are
// the largest activations of the step. Here a thread takes a tile of G rows (a multiple of the
// lanes-N tile's MR rows), packs X's rows into strips (bsr_wgrad.hpp: per block column its G x B
// rows, contiguous), and the first product's tiles write H straight into the same strip layout
// (ldc = B), which is the row-major panel layout the second product's tiles read in place (the
// strip stride as the panel stride, as bsr_backward does with dY). GELU runs on the strips in
// cache. Backward either reads H back as forward stored it (`hidden`: the tiles' strips as they
// were, M x F floats plus the strips' padding, written once in forward and read once in backward;
// bsr_ffn_hidden_size) or recomputes it per tile (hidden null: one more product, a quarter more
// backward FLOPs, nothing kept); gelu(H), dA and dH never leave the cache. The weight gradients run
// on the tile's strips (wgrad_chunk_slots) into per-thread partials summed in thread order at the end.
//
// Only for lanes-N tiles (B a multiple of the SIMD width: B = 16 on AVX-512, 8 and 16 on AVX2, 4, 8,
// 16 on SSE2; bsr_ffn_fuses<B, Arch>); a feed-forward with other B runs the unfused products.
// fp32; Y and dX come from the tiles of bsr_matmul / bsr_matmul_t + gelu_forward / gelu_backward in
// the same summation order (tests/layers/test_fused_ffn.cpp holds them to 1e-6 of the unfused
// layer); the gradients are deterministic for a thread count and equal the unfused ones to
// rounding (the rows are cut into other chunks). No allocation in the
// steady state (thread-local buffers, bsr_scratch slots 0, 1, 5, 6 per thread and 7-12 on the
// calling thread).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "sparselm/kernels/bsr.hpp"
#include "sparselm/kernels/gelu.hpp"

namespace sparselm::kernels {

// Whether the fused feed-forward serves block size B on Arch (lanes-N tiles).
template <std::size_t B, class Arch = native_arch>
inline constexpr bool bsr_ffn_fuses = detail::bsr_tiling<B, Arch>::lanes_n;

namespace detail {

// Rows per tile: about 48 (two 24-row panels on AVX-512, eight 6-row ones on AVX2), where the
// tile's H and dH (48 x F floats each, 590 KiB at F = 3072) stay in L2 or nearby L3, and each
// per-thread weight-gradient partial (nnz·B² floats) is read and written once per 48 rows, as the
// unfused bsr_backward's chunks do. Measured on the Zen 5 host (bench_bsr --ffn, M = 1024, B = 16,
// s = 0.9, two threads; benchmarks/results/2026-12-06-zen5-fused-ffn.md): 48 rows beat 24 and 96
// at C x F = 768 x 3072 and 1600 x 6400.
template <std::size_t B, class Arch>
inline std::size_t ffn_tile_rows(std::size_t rows) {
  constexpr std::size_t MR = bsr_tiling<B, Arch>::MR;
  if (rows != 0) return std::max<std::size_t>(MR, rows / MR * MR);
  return std::max<std::size_t>(1, 48 / MR) * MR;
}

// C (np panels of MR rows) = beta*C + S (strips, stride ss, np*MR rows) · the blocks of L [+ bias]:
// out(q, j) is where panel q's rows of output block column j go (ldc apart), mvalid(q) how many
// of its rows are stored. AVX-512 walks panel by panel over all block columns, the blocked
// (row_blocks) order column by column over the panels.
template <std::size_t B, class Arch, class Out, class Valid>
inline void strip_product(const float* S, std::size_t ss, std::size_t np, const bsr_lists& L, const packed_blocks& pb,
                          float beta, const float* bias, Out&& out, std::size_t ldc, Valid&& mvalid) {
  constexpr std::size_t MR = bsr_tiling<B, Arch>::MR;
  const auto tile = [&](std::size_t q, std::size_t j) {
    const std::size_t t0 = L.ptr[j], n = L.ptr[j + 1] - t0;
    tile_lanes_n<B, MR, Arch, false>(S + q * MR * B, n, pb.kb + t0, pb.values + t0 * B * B, out(q, j), ldc, mvalid(q),
                                     beta, bias ? bias + j * B : nullptr, ss);
  };
  if constexpr (bsr_tiling<B, Arch>::row_blocks) {
    for (std::size_t j = 0; j < L.n_out_blocks; ++j)
      for (std::size_t q = 0; q < np; ++q) tile(q, j);
  } else {
    for (std::size_t q = 0; q < np; ++q)
      for (std::size_t j = 0; j < L.n_out_blocks; ++j) tile(q, j);
  }
}

inline bsr_lists forward_lists(const sparse::block_pattern& p) {
  return {p.col_ptr.data(), p.col_slots.data(), p.row.data(), p.cols_b};
}

template <std::size_t B, class Arch>
void check_ffn(const char* k, const_matrix_view<float> X, const sparse::block_pattern& p1, const float* V1,
               const sparse::block_pattern& p2, const float* V2, std::size_t yrows, std::size_t ycols) {
  check_view(X, k);
  check_pattern<B>(k, p1, V1);
  check_pattern<B>(k, p2, V2);
  SPARSELM_CHECK(X.cols == p1.in() && p1.out() == p2.in() && p2.out() == X.cols && yrows == X.rows && ycols == X.cols, k,
                 ": shapes do not match: X ", shape_string(X), ", W1 ", pattern_string(p1), ", W2 ", pattern_string(p2),
                 ", output (", yrows, "x", ycols, ")");
}

}  // namespace detail

// Floats of the `hidden` buffer for M rows: every tile's H strips (F/B strips of strip_stride rows).
template <std::size_t B, class Arch = native_arch>
std::size_t bsr_ffn_hidden_size(std::size_t M, std::size_t F, std::size_t rows_per_tile = 0) {
  const std::size_t G = detail::ffn_tile_rows<B, Arch>(rows_per_tile);
  return (M + G - 1) / G * (F / B) * detail::strip_stride<B>(G);
}

// Y (M, C) = gelu(X (M, C) · W1 + b1) · W2 + b2. Biases may be null. rows_per_tile: 0 for the
// default (detail::ffn_tile_rows), else rounded down to a multiple of the tile's MR rows. hidden
// (null, or bsr_ffn_hidden_size floats): where H is kept for bsr_ffn_backward, with the same
// rows_per_tile.
template <std::size_t B, gelu_kind Act, class Arch = native_arch>
void bsr_ffn_forward(const_matrix_view<float> X, const sparse::block_pattern& p1, const float* V1, const float* b1,
                     const sparse::block_pattern& p2, const float* V2, const float* b2, matrix_view<float> Y,
                     float* hidden = nullptr, std::size_t rows_per_tile = 0) {
  static_assert(bsr_ffn_fuses<B, Arch>, "bsr_ffn_forward: B must be a multiple of the SIMD width (lanes-N tiles)");
  using namespace detail;
  constexpr const char* k = "bsr_ffn_forward";
  check_view(const_matrix_view<float>(Y), "bsr_ffn_forward: Y");
  check_ffn<B, Arch>(k, X, p1, V1, p2, V2, Y.rows, Y.cols);
  using F = xsimd::batch<float, Arch>;
  constexpr std::size_t MR = bsr_tiling<B, Arch>::MR, W = F::size;
  const std::size_t M = X.rows, C = p1.in(), Fh = p1.out();
  if (M == 0) return;
  const bsr_lists L1 = forward_lists(p1), L2 = forward_lists(p2);
  thread_local std::vector<std::uint32_t> kb1, kb2;
  const packed_blocks pb1 = pack_blocks_into<B, false, Arch>(L1, V1, 7, kb1);
  const packed_blocks pb2 = pack_blocks_into<B, false, Arch>(L2, V2, 8, kb2);
  const std::size_t G = ffn_tile_rows<B, Arch>(rows_per_tile), ntile = (M + G - 1) / G;
  parallel_for(0, ntile, [&](std::size_t g) {
    const std::size_t m0 = g * G, rows = std::min(G, M - m0), mv = (rows + MR - 1) / MR * MR, np = mv / MR;
    const std::size_t ss = strip_stride<B>(mv);
    float* Xs = bsr_scratch(strip_stride<B>(G) * (C / B), 0);
    float* Hs = bsr_scratch(strip_stride<B>(G) * (Fh / B), 1);
    // H straight into the kept tile (then gelu(H) into the scratch strips), or into the scratch.
    float* Hk = hidden ? hidden + g * (Fh / B) * strip_stride<B>(G) : Hs;
    pack_strips<B>(X.data + m0 * X.ld, X.ld, rows, C, Xs, mv);
    // H = X·W1 + b1 into strips (every row of the padded panels: the padding rows stay finite).
    strip_product<B, Arch>(Xs, ss, np, L1, pb1, 0.0f, b1, [&](std::size_t q, std::size_t j) { return Hk + j * ss + q * MR * B; },
                           B, [](std::size_t) { return bsr_tiling<B, Arch>::MR; });
    for (std::size_t j = 0; j < Fh / B; ++j) {
      const float* h = Hk + j * ss;
      float* a = Hs + j * ss;
      for (std::size_t i = 0; i < mv * B; i += W) gelu_value<Act, Arch>(F::load_unaligned(h + i)).store_unaligned(a + i);
    }
    strip_product<B, Arch>(Hs, ss, np, L2, pb2, 0.0f, b2,
                           [&](std::size_t q, std::size_t j) { return Y.data + (m0 + q * MR) * Y.ld + j * B; }, Y.ld,
                           [&](std::size_t q) { return std::min(MR, rows - q * MR); });
  });
}

// dX (M, C) = beta*dX + dY·(the feed-forward's Jacobian), dV1 += Xᵀ·dH and dV2 += gelu(H)ᵀ·dY on
// the active blocks (slot order), db1 (F) += column sums of dH (db1 may be null: no bias), with
// H = X·W1 + b1 read from `hidden` (as bsr_ffn_forward kept it, same X, weights and rows_per_tile)
// or, hidden null, recomputed per tile. dX may be null (then beta is ignored and only the
// parameter gradients are computed).
template <std::size_t B, gelu_kind Act, class Arch = native_arch>
void bsr_ffn_backward(const_matrix_view<float> X, const_matrix_view<float> dY, const sparse::block_pattern& p1,
                      const float* V1, const float* b1, const sparse::block_pattern& p2, const float* V2, float beta,
                      matrix_view<float> dX, float* dV1, float* db1, float* dV2, const float* hidden = nullptr,
                      std::size_t rows_per_tile = 0) {
  static_assert(bsr_ffn_fuses<B, Arch>, "bsr_ffn_backward: B must be a multiple of the SIMD width (lanes-N tiles)");
  using namespace detail;
  constexpr const char* k = "bsr_ffn_backward";
  check_view(dY, "bsr_ffn_backward: dY");
  check_ffn<B, Arch>(k, X, p1, V1, p2, V2, dY.rows, dY.cols);
  const bool need_dx = dX.data != nullptr;
  if (need_dx) {
    check_view(const_matrix_view<float>(dX), "bsr_ffn_backward: dX");
    SPARSELM_CHECK(dX.rows == X.rows && dX.cols == X.cols, k, ": dX ", shape_string(dX), " does not match X ",
                   shape_string(X));
  }
  SPARSELM_CHECK((p1.nnz() == 0 || dV1 != nullptr) && (p2.nnz() == 0 || dV2 != nullptr), k,
                 ": null weight gradients");
  using F = xsimd::batch<float, Arch>;
  constexpr std::size_t MR = bsr_tiling<B, Arch>::MR, W = F::size, BB = B * B;
  const std::size_t M = X.rows, C = p1.in(), Fh = p1.out(), nnz1 = p1.nnz(), nnz2 = p2.nnz();
  if (M == 0) return;
  const bsr_lists L1 = forward_lists(p1), L2t = data_gradient_lists(p2), L1t = data_gradient_lists(p1);
  thread_local std::vector<std::uint32_t> kb1, kb2, kb3;
  const packed_blocks pb1 = hidden ? packed_blocks{} : pack_blocks_into<B, false, Arch>(L1, V1, 7, kb1);
  const packed_blocks pb2t = pack_blocks_into<B, true, Arch>(L2t, V2, 8, kb2);
  const packed_blocks pb1t = need_dx ? pack_blocks_into<B, true, Arch>(L1t, V1, 9, kb3) : packed_blocks{};
  const std::size_t G = ffn_tile_rows<B, Arch>(rows_per_tile);
  const int nt = backward_threads(M);
  float* const part1 = bsr_scratch(std::size_t(nt) * std::max<std::size_t>(nnz1, 1) * BB, 10);
  float* const part2 = bsr_scratch(std::size_t(nt) * std::max<std::size_t>(nnz2, 1) * BB, 11);
  float* const partb = bsr_scratch(std::size_t(nt) * Fh, 12);
  run_team(nt, [&](int t, int T) {
    const auto [mb, me] = panel_rows(M, G, t, T);
    float* const dv1 = part1 + std::size_t(t) * nnz1 * BB;
    float* const dv2 = part2 + std::size_t(t) * nnz2 * BB;
    float* const dbs = partb + std::size_t(t) * Fh;
    std::memset(dv1, 0, nnz1 * BB * sizeof(float));
    std::memset(dv2, 0, nnz2 * BB * sizeof(float));
    std::memset(dbs, 0, Fh * sizeof(float));
    float* Xs = bsr_scratch(strip_stride<B>(G) * (C / B), 0);
    float* Hs = bsr_scratch(strip_stride<B>(G) * (Fh / B), 1);
    float* dYs = bsr_scratch(strip_stride<B>(G) * (C / B), 5);
    float* dHs = bsr_scratch(strip_stride<B>(G) * (Fh / B), 6);
    for (std::size_t m0 = mb; m0 < me; m0 += G) {
      const std::size_t rows = std::min(G, me - m0), mv = (rows + MR - 1) / MR * MR, np = mv / MR;
      const std::size_t ss = strip_stride<B>(mv);
      const auto all_rows = [](std::size_t) { return bsr_tiling<B, Arch>::MR; };
      pack_strips<B>(X.data + m0 * X.ld, X.ld, rows, C, Xs, mv);
      pack_strips<B>(dY.data + m0 * dY.ld, dY.ld, rows, C, dYs, mv);  // zero padding rows: they add nothing
      const float* Hk = hidden ? hidden + m0 / G * (Fh / B) * strip_stride<B>(G) : Hs;
      if (!hidden)
        strip_product<B, Arch>(Xs, ss, np, L1, pb1, 0.0f, b1,
                               [&](std::size_t q, std::size_t j) { return Hs + j * ss + q * MR * B; }, B, all_rows);
      strip_product<B, Arch>(dYs, ss, np, L2t, pb2t, 0.0f, nullptr,
                             [&](std::size_t q, std::size_t j) { return dHs + j * ss + q * MR * B; }, B, all_rows);
      // A = gelu(H) over H, dH = gelu'(H)·dA over dA; db1 += column sums of dH.
      for (std::size_t j = 0; j < Fh / B; ++j) {
        const float* h = Hk + j * ss;
        float* a = Hs + j * ss;
        float* d = dHs + j * ss;
        F cs[B / W];
        for (std::size_t v = 0; v < B / W; ++v) cs[v] = F(0.0f);
        for (std::size_t r = 0; r < mv; ++r)
          for (std::size_t v = 0; v < B / W; ++v) {
            const std::size_t i = r * B + v * W;
            const F hv = F::load_unaligned(h + i);
            const F dv = gelu_grad<Act, Arch>(hv) * F::load_unaligned(d + i);
            dv.store_unaligned(d + i);
            gelu_value<Act, Arch>(hv).store_unaligned(a + i);
            cs[v] += dv;
          }
        for (std::size_t v = 0; v < B / W; ++v) (F::load_unaligned(dbs + j * B + v * W) + cs[v]).store_unaligned(dbs + j * B + v * W);
      }
      wgrad_chunk_slots<B, Arch>(p2, Hs, dYs, mv, dv2);
      wgrad_chunk_slots<B, Arch>(p1, Xs, dHs, mv, dv1);
      if (need_dx)
        strip_product<B, Arch>(dHs, ss, np, L1t, pb1t, beta, nullptr,
                               [&](std::size_t q, std::size_t j) { return dX.data + (m0 + q * MR) * dX.ld + j * B; },
                               dX.ld, [&](std::size_t q) { return std::min(MR, rows - q * MR); });
    }
    team_barrier(T);
    add_thread_partials(part1, nnz1, BB, p1.row_slots.data(), dV1, t, T);
    add_thread_partials(part2, nnz2, BB, p2.row_slots.data(), dV2, t, T);
    if (db1) {
      const std::size_t fb = Fh * std::size_t(t) / std::size_t(T), fe = Fh * std::size_t(t + 1) / std::size_t(T);
      for (std::size_t f = fb; f < fe; ++f) {
        float g = partb[f];
        for (int u = 1; u < T; ++u) g += partb[std::size_t(u) * Fh + f];
        db1[f] += g;
      }
    }
  });
}

}  // namespace sparselm::kernels

// The fused feed-forward for the block sizes it serves on the compiled ISA (B a multiple of the
// SIMD width: 16 with AVX-512, 8 and 16 with AVX2), both activations.
// Precompiled instances (docs/design/architecture.md, "Precompiled kernels"): defined once in sparselm::kernels
// (src/kernels_bsr.cpp), declared extern where that library is linked.
#if defined(SPARSELM_INSTANTIATE_BSR) || defined(SPARSELM_PRECOMPILED_KERNELS)
#ifdef SPARSELM_INSTANTIATE_BSR
#define SPARSELM_INSTANCE template
#else
#define SPARSELM_INSTANCE extern template
#endif
#if XSIMD_WITH_AVX512F
#define SPARSELM_FOR_EACH_FFN_BLOCK_SIZE(X) X(16)
#elif XSIMD_WITH_AVX
#define SPARSELM_FOR_EACH_FFN_BLOCK_SIZE(X) X(8) X(16)
#else
#define SPARSELM_FOR_EACH_FFN_BLOCK_SIZE(X) X(4) X(8) X(16)
#endif
namespace sparselm::kernels {
// the list above is the block sizes bsr_ffn_fuses names for native_arch, no more and no fewer
#define SPARSELM_FFN_COUNT(B) +1
static_assert(int(bsr_ffn_fuses<4>) + int(bsr_ffn_fuses<8>) + int(bsr_ffn_fuses<16>) ==
              0 SPARSELM_FOR_EACH_FFN_BLOCK_SIZE(SPARSELM_FFN_COUNT));
#undef SPARSELM_FFN_COUNT
#define SPARSELM_FFN_INSTANCES_ACT(B, A)                                                                   \
  static_assert(bsr_ffn_fuses<B>);                                                                         \
  SPARSELM_INSTANCE decltype(bsr_ffn_forward<B, A, native_arch>) bsr_ffn_forward<B, A, native_arch>;       \
  SPARSELM_INSTANCE decltype(bsr_ffn_backward<B, A, native_arch>) bsr_ffn_backward<B, A, native_arch>;
#define SPARSELM_FFN_INSTANCES(B) \
  SPARSELM_FFN_INSTANCES_ACT(B, gelu_kind::tanh) SPARSELM_FFN_INSTANCES_ACT(B, gelu_kind::erf)
SPARSELM_FOR_EACH_FFN_BLOCK_SIZE(SPARSELM_FFN_INSTANCES)
#undef SPARSELM_FFN_INSTANCES
#undef SPARSELM_FFN_INSTANCES_ACT
}  // namespace sparselm::kernels
#undef SPARSELM_FOR_EACH_FFN_BLOCK_SIZE
#undef SPARSELM_INSTANCE
#endif
