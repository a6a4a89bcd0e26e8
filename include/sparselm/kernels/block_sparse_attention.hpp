#pragma once
// Static block-sparse causal attention: the T×T score matrix is cut into Bk×Bk blocks (Bk = 16 by
// default) and only the blocks of a fixed block-causal pattern are computed, forward and backward,
// so the work grows with the kept blocks instead of with T².
//
// Legend as kernels/attention.hpp: B batch, T sequence, H heads, D head width, N = B·T, s = scale;
// I, J block rows / columns (query block I holds positions [I·Bk, min(T, I·Bk + Bk))).
//
// Pattern (block_causal_pattern, built once from (block, density, seed); a pure function of them,
// so it is never stored in a checkpoint):
//   - every diagonal block (I, I) is kept; its entries above the diagonal are masked (causal);
//   - the block just below the diagonal (I, I−1) is kept (a local band: every query sees at least
//     the Bk positions before its own block);
//   - of the other strictly-lower blocks of row I (J < I−1, there are I−1 of them) the
//     round(density·(I−1)) with the smallest keys u(seed; stream I, index J) of counter_rng are kept.
//   Row I does not depend on T, so the pattern of a shorter sequence is the top-left corner of a
//   longer one's (a pattern built for the model's maximum length serves every T up to it), and
//   density 1 keeps every block: ordinary causal attention.
//
// Query i of sequence b (length len_b, T without lengths; i < len_b) sees key j iff j <= i and
// block (i/Bk, j/Bk) is kept. Queries i >= len_b: out row 0, lse −inf, no gradient (as attention).
// Dropout on the probabilities is the dense kernel's: keep(row, j) = rng.uniform(stream, row·T + j) >= p
// with j the key position, so density 1 gives the same masks as attention_forward.
//
// Algorithm. Parallel over (b, h); per query block I with kept columns J_0 < ... < J_{n−1} = I:
//   gather   Kg, Vg = the kept key / value blocks of the head, stacked (kv rows; the diagonal block
//            is last and has the query block's m rows); when the kept blocks are one run of keys
//            (density 1, the first rows) the products read qkv and write dqkv in place instead
//   forward  S = s·Q_I·Kgᵀ (gemm NT) → row softmax over the visible kv − m + r + 1 columns, lse, dropout
//            O_I = P·Vg (gemm NN)
//   backward S, G = dO_I·Vgᵀ; Pd, dS as attention_backward (shared row code, kernels/attention.hpp)
//            dQ_I = dS·Kg (NN),  dKg = dSᵀ·Q_I,  dVg = Pdᵀ·dO_I (TN), added back into the kept blocks
// Scratch per thread: two Bk×T score tiles, four T×D gathered tiles, T mask words.
// Compute type and storage as attention_forward: bf16 products under bf16, where qkv and out may be
// held in bf16 (the gathered K and V tiles are then bf16 too); softmax, lse and dqkv stay fp32.
// block_sparse_decode_attention: the KV-cache decoding step under the same pattern.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <numeric>
#include <span>
#include <utility>
#include <vector>

#include "sparselm/core/error.hpp"
#include "sparselm/core/rng.hpp"
#include "sparselm/core/threads.hpp"
#include "sparselm/core/view.hpp"
#include "sparselm/kernels/attention.hpp"
#include "sparselm/kernels/decode_attention.hpp"
#include "sparselm/kernels/gemm.hpp"

namespace sparselm::kernels {

struct block_causal_options {
  std::size_t block = 16;  // Bk
  double density = 1.0;    // fraction of the strictly-lower blocks below the band that is kept
  std::uint64_t seed = 0;
  bool operator==(const block_causal_options&) const = default;
};

class block_causal_pattern {
 public:
  block_causal_pattern() = default;
  // The pattern for sequences of up to max_seq positions.
  block_causal_pattern(const block_causal_options& o, std::size_t max_seq) : o_(o) {
    SPARSELM_CHECK(o.block >= 1, "block_causal_pattern: block must be >= 1, got ", o.block);
    SPARSELM_CHECK(o.density >= 0.0 && o.density <= 1.0, "block_causal_pattern: density must be in [0, 1], got ",
                   o.density);
    SPARSELM_CHECK(max_seq >= 1, "block_causal_pattern: max_seq must be >= 1");
    const std::size_t rows = (max_seq + o.block - 1) / o.block;
    SPARSELM_CHECK(rows <= (std::size_t(1) << 20), "block_causal_pattern: ", rows, " block rows (max_seq ", max_seq,
                   ", block ", o.block, ") is too many");
    const counter_rng rng(o.seed);
    offsets_.reserve(rows + 1);
    offsets_.push_back(0);
    std::vector<std::pair<float, std::uint32_t>> keys;
    for (std::size_t I = 0; I < rows; ++I) {
      const std::size_t far = I >= 1 ? I - 1 : 0;  // candidates J < I − 1
      const auto k = std::size_t(std::floor(o.density * double(far) + 0.5));
      keys.clear();
      for (std::size_t J = 0; J < far; ++J) keys.emplace_back(rng.uniform(I, J), std::uint32_t(J));
      std::partial_sort(keys.begin(), keys.begin() + std::ptrdiff_t(k), keys.end());
      const std::size_t first = cols_.size();
      for (std::size_t n = 0; n < k; ++n) cols_.push_back(keys[n].second);
      std::sort(cols_.begin() + std::ptrdiff_t(first), cols_.end());
      if (I >= 1) cols_.push_back(std::uint32_t(I - 1));
      cols_.push_back(std::uint32_t(I));
      offsets_.push_back(cols_.size());
    }
  }

  const block_causal_options& options() const noexcept { return o_; }
  std::size_t block() const noexcept { return o_.block; }
  std::size_t block_rows() const noexcept { return offsets_.empty() ? 0 : offsets_.size() - 1; }
  // Kept block columns of block row I, ascending; the last is I.
  std::span<const std::uint32_t> row(std::size_t I) const noexcept {
    return {cols_.data() + offsets_[I], offsets_[I + 1] - offsets_[I]};
  }
  bool kept(std::size_t I, std::size_t J) const noexcept {
    auto r = row(I);
    return std::binary_search(r.begin(), r.end(), std::uint32_t(J));
  }
  // Kept blocks of a sequence of T positions (T <= the max_seq it was built for).
  std::size_t kept_blocks(std::size_t T) const noexcept {
    const std::size_t n = std::min(block_rows(), (T + o_.block - 1) / o_.block);
    return n ? offsets_[n] : 0;
  }

 private:
  block_causal_options o_{};
  std::vector<std::size_t> offsets_;
  std::vector<std::uint32_t> cols_;
};

namespace detail {
inline void check_block_pattern(const char* fn, const block_causal_pattern& p, std::size_t T) {
  SPARSELM_CHECK(p.block_rows() * p.block() >= T, fn, ": the block pattern covers ", p.block_rows() * p.block(),
                 " positions (", p.block_rows(), " block rows of ", p.block(), "), the sequence has ", T);
}

// Per-thread tiles (grow-only): the gathered K, V (in the storage type S) and their gradients (float).
template <class S = float>
inline S* bsa_tile(std::size_t n, std::size_t which) {
  thread_local std::vector<S> t[4];
  if (t[which].size() < n) t[which].resize(n);
  return t[which].data();
}

// One kept key block in the gathered tiles: its first key position, its rows, and its first row
// in the tiles.
struct bsa_segment {
  std::size_t j0, w, at;
};

// Query block I of head (b, h) in a sequence of len positions: its queries and the segments of its
// kept key blocks (the diagonal last, cut to the m queries).
template <class S>
struct bsa_tile_views {
  const_matrix_view<S> Q;
  std::size_t i0, m, kv;
  std::span<const bsa_segment> seg;
  bool contiguous;  // the kept blocks are one run of keys [seg[0].j0, seg[0].j0 + kv): no gather needed
};
template <class S>
inline bsa_tile_views<S> bsa_tile_of(const const_matrix_view<S>& qkv, const attention_shape& s,
                                     const block_causal_pattern& p, std::size_t b, std::size_t h, std::size_t I,
                                     std::size_t len) {
  thread_local std::vector<bsa_segment> seg;
  const std::size_t Bk = p.block(), i0 = I * Bk, m = std::min(len, i0 + Bk) - i0;
  seg.clear();
  std::size_t kv = 0;
  for (std::uint32_t J : p.row(I)) {
    const std::size_t w = J == I ? m : Bk;
    seg.push_back({J * Bk, w, kv});
    kv += w;
  }
  const bool contiguous = seg.back().j0 - seg.front().j0 == (seg.size() - 1) * Bk;
  return {{qkv.row(b * s.seq + i0) + h * s.head_dim, m, s.head_dim, qkv.ld}, i0, m, kv, seg, contiguous};
}

// Copies the columns [col, col + D) of the segments' rows of sequence b into a (kv × D) tile.
template <class S>
inline void bsa_gather(const const_matrix_view<S>& x, std::size_t row0, std::size_t col, std::size_t D,
                       std::span<const bsa_segment> seg, S* tile) {
  for (const auto& g : seg)
    for (std::size_t r = 0; r < g.w; ++r) std::copy_n(x.row(row0 + g.j0 + r) + col, D, tile + (g.at + r) * D);
}
// Adds a (kv × D) tile back into the columns [col, col + D) of the segments' rows.
inline void bsa_scatter_add(const float* tile, std::span<const bsa_segment> seg, std::size_t D, matrix_view<float> x,
                            std::size_t row0, std::size_t col) {
  for (const auto& g : seg)
    for (std::size_t r = 0; r < g.w; ++r) {
      float* d = x.row(row0 + g.j0 + r) + col;
      const float* t = tile + (g.at + r) * D;
      for (std::size_t c = 0; c < D; ++c) d[c] += t[c];
    }
}
// The dropout mask words of query row `row` over the gathered columns (each segment from its keys).
template <class Arch>
inline void bsa_mask_bits(const attention_dropout& drop, std::uint64_t row, std::size_t T,
                          std::span<const bsa_segment> seg, std::uint32_t* bits) {
  for (const auto& g : seg) philox_bits<Arch>(drop.rng, drop.stream, row * T + g.j0, g.w, bits + g.at);
}

// Sizes and the dropout rule of a call (after checking that the pattern covers the sequence).
struct bsa_sizes {
  std::size_t T, D, HD, Bk, ld, words;  // ld: score tile row stride; words: mask words per row
  bool dropping;
  attn_keep_rule keep;
};
template <class Arch>
inline bsa_sizes bsa_sizes_of(const char* fn, const attention_shape& s, const block_causal_pattern& p,
                              const attention_dropout& drop) {
  check_block_pattern(fn, p, s.seq);
  const std::size_t ld = attn_ld(s.seq);
  return {s.seq, s.head_dim, s.heads * s.head_dim, p.block(), ld, ld + fvec<Arch>::size, drop.p > 0.0f, keep_rule(drop)};
}

// The loop both kernels share: parallel over (b, h); head(b, h, bh, len) first, then for every
// query block below len block(b, h, bh, tile, K, V) with the kept key and value blocks gathered.
template <class S, class Head, class Block>
void bsa_for_each_block(const const_matrix_view<S>& qkv, const attention_shape& s, const block_causal_pattern& p,
                        std::span<const std::int32_t> lengths, Head&& head, Block&& block) {
  const std::size_t T = s.seq, H = s.heads, D = s.head_dim, HD = H * D;
  parallel_for(0, s.batch * H, [&](std::size_t bh) {
    const std::size_t b = bh / H, h = bh % H;
    const std::size_t len = lengths.empty() ? T : std::size_t(lengths[b]);
    head(b, h, bh, len);
    S* Kg = bsa_tile<S>(T * D, 0);
    S* Vg = bsa_tile<S>(T * D, 1);
    for (std::size_t I = 0; I * p.block() < len; ++I) {
      const auto tile = bsa_tile_of(qkv, s, p, b, h, I, len);
      if (tile.contiguous) {  // views into qkv
        const S* k0 = qkv.row(b * T + tile.seg[0].j0);
        block(b, h, bh, tile, const_matrix_view<S>(k0 + HD + h * D, tile.kv, D, qkv.ld),
              const_matrix_view<S>(k0 + 2 * HD + h * D, tile.kv, D, qkv.ld));
        continue;
      }
      bsa_gather(qkv, b * T, HD + h * D, D, tile.seg, Kg);
      bsa_gather(qkv, b * T, 2 * HD + h * D, D, tile.seg, Vg);
      block(b, h, bh, tile, const_matrix_view<S>(Kg, tile.kv, D, D), const_matrix_view<S>(Vg, tile.kv, D, D));
    }
  });
}
}  // namespace detail

namespace detail {
template <class Arch, class SQ>
void block_sparse_attention_forward_t(const_matrix_view<SQ> qkv, matrix_view<float> out, std::span<float> lse,
                                      const attention_shape& s, const block_causal_pattern& pattern, float scale,
                                      std::span<const std::int32_t> lengths, const attention_dropout& drop,
                                      dtype compute) {
  constexpr const char* fn = "block_sparse_attention_forward";
  detail::check_attention(fn, s, qkv, out.rows, out.cols, lse.size(), lengths);
  detail::check_attention_storage<SQ>(fn, compute);
  check_view(const_matrix_view<float>(out), "block_sparse_attention_forward: out");
  // Plain variables, not a structured binding: clang before 16 cannot capture those in lambdas.
  const detail::bsa_sizes z = detail::bsa_sizes_of<Arch>(fn, s, pattern, drop);
  const std::size_t T = z.T, D = z.D, Bk = z.Bk, ld = z.ld, words = z.words;
  const bool dropping = z.dropping;
  const auto keep = z.keep;
  if (s.batch * s.heads * T == 0) return;
  detail::bsa_for_each_block(
      qkv, s, pattern, lengths,
      [&](std::size_t b, std::size_t h, std::size_t bh, std::size_t len) {
        for (std::size_t i = len; i < T; ++i) {  // fully masked queries
          std::fill_n(out.row(b * T + i) + h * D, D, 0.0f);
          lse[bh * T + i] = -std::numeric_limits<float>::infinity();
        }
      },
      [&](std::size_t b, std::size_t h, std::size_t bh, const detail::bsa_tile_views<SQ>& t,
          const const_matrix_view<SQ>& K, const const_matrix_view<SQ>& V) {
        float* S = detail::scratch(Bk * ld, detail::attn_slot_s);
        std::uint32_t* bits = detail::attn_mask_words(words);
        detail::attn_gemm<Arch>(compute, trans::n, trans::t, scale, t.Q, K, 0.0f, matrix_view<float>(S, t.m, t.kv, ld));
        for (std::size_t r = 0; r < t.m; ++r) {
          const std::uint64_t row = bh * T + t.i0 + r;
          if (dropping) detail::bsa_mask_bits<Arch>(drop, row, T, t.seg, bits);
          lse[row] = detail::attn_softmax_row<Arch>(S + r * ld, t.kv - t.m + r + 1, t.kv, dropping ? bits : nullptr, keep);
        }
        detail::attn_gemm<Arch>(compute, trans::n, trans::n, 1.0f, const_matrix_view<float>(S, t.m, t.kv, ld), V, 0.0f,
                                matrix_view<float>(out.row(b * T + t.i0) + h * D, t.m, D, out.ld));
      });
}

template <class Arch, class SQ>
void block_sparse_attention_backward_t(const_matrix_view<float> dout, const_matrix_view<SQ> qkv,
                                       const_matrix_view<SQ> out, std::span<const float> lse, matrix_view<float> dqkv,
                                       const attention_shape& s, const block_causal_pattern& pattern, float scale,
                                       std::span<const std::int32_t> lengths, const attention_dropout& drop,
                                       dtype compute) {
  constexpr const char* fn = "block_sparse_attention_backward";
  detail::check_attention_backward(fn, s, dout, qkv, out, lse, dqkv, lengths);
  detail::check_attention_storage<SQ>(fn, compute);
  // Plain variables, not a structured binding: clang before 16 cannot capture those in lambdas.
  const detail::bsa_sizes z = detail::bsa_sizes_of<Arch>(fn, s, pattern, drop);
  const std::size_t T = z.T, D = z.D, HD = z.HD, Bk = z.Bk, ld = z.ld, words = z.words;
  const bool dropping = z.dropping;
  const auto keep = z.keep;
  if (s.batch * s.heads * T == 0) return;
  detail::bsa_for_each_block(
      qkv, s, pattern, lengths,
      [&](std::size_t b, std::size_t h, std::size_t, std::size_t) {
        for (std::size_t t = 0; t < T; ++t)
          for (std::size_t part = 0; part < 3; ++part) std::fill_n(dqkv.row(b * T + t) + part * HD + h * D, D, 0.0f);
      },
      [&](std::size_t b, std::size_t h, std::size_t bh, const detail::bsa_tile_views<SQ>& t,
          const const_matrix_view<SQ>& K, const const_matrix_view<SQ>& V) {
        float* S = detail::scratch(Bk * ld, detail::attn_slot_s);
        float* G = detail::scratch(Bk * ld, detail::attn_slot_g);
        float* dKg = detail::bsa_tile(T * D, 2);
        float* dVg = detail::bsa_tile(T * D, 3);
        std::uint32_t* bits = detail::attn_mask_words(words);
        const std::size_t m = t.m, kv = t.kv;
        const_matrix_view<float> dO(dout.row(b * T + t.i0) + h * D, m, D, dout.ld);
        detail::attn_gemm<Arch>(compute, trans::n, trans::t, scale, t.Q, K, 0.0f, matrix_view<float>(S, m, kv, ld));
        detail::attn_gemm<Arch>(compute, trans::n, trans::t, 1.0f, dO, V, 0.0f, matrix_view<float>(G, m, kv, ld));
        for (std::size_t r = 0; r < m; ++r) {
          const std::uint64_t row = bh * T + t.i0 + r;
          if (dropping) detail::bsa_mask_bits<Arch>(drop, row, T, t.seg, bits);
          detail::attn_grad_row<Arch>(S + r * ld, G + r * ld, dO.row(r),
                                      detail::attn_row_f32(out.row(b * T + t.i0 + r) + h * D, D), D, lse[row],
                                      kv - m + r + 1, kv, dropping ? bits : nullptr, keep, scale);
        }
        const_matrix_view<float> Pd(S, m, kv, ld), dS(G, m, kv, ld);
        detail::attn_gemm<Arch>(compute, trans::n, trans::n, 1.0f, dS, K, 0.0f,
                                matrix_view<float>(dqkv.row(b * T + t.i0) + h * D, m, D, dqkv.ld));
        if (t.contiguous) {  // accumulate straight into dqkv
          float* g0 = dqkv.row(b * T + t.seg[0].j0);
          detail::attn_gemm<Arch>(compute, trans::t, trans::n, 1.0f, Pd, dO, 1.0f,
                                  matrix_view<float>(g0 + 2 * HD + h * D, kv, D, dqkv.ld));
          detail::attn_gemm<Arch>(compute, trans::t, trans::n, 1.0f, dS, t.Q, 1.0f,
                                  matrix_view<float>(g0 + HD + h * D, kv, D, dqkv.ld));
          return;
        }
        detail::attn_gemm<Arch>(compute, trans::t, trans::n, 1.0f, Pd, dO, 0.0f, matrix_view<float>(dVg, kv, D, D));
        detail::attn_gemm<Arch>(compute, trans::t, trans::n, 1.0f, dS, t.Q, 0.0f, matrix_view<float>(dKg, kv, D, D));
        detail::bsa_scatter_add(dKg, t.seg, D, dqkv, b * T, HD + h * D);
        detail::bsa_scatter_add(dVg, t.seg, D, dqkv, b * T, 2 * HD + h * D);
      });
}
}  // namespace detail

// qkv in fp32, or held in bf16 under bf16 compute (as attention_forward).
template <class Arch = native_arch>
void block_sparse_attention_forward(const_matrix_view<float> qkv, matrix_view<float> out, std::span<float> lse,
                                    const attention_shape& s, const block_causal_pattern& pattern, float scale,
                                    std::span<const std::int32_t> lengths, const attention_dropout& drop,
                                    dtype compute = dtype::f32) {
  detail::block_sparse_attention_forward_t<Arch>(qkv, out, lse, s, pattern, scale, lengths, drop, compute);
}
template <class Arch = native_arch>
void block_sparse_attention_forward(const_matrix_view<bf16> qkv, matrix_view<float> out, std::span<float> lse,
                                    const attention_shape& s, const block_causal_pattern& pattern, float scale,
                                    std::span<const std::int32_t> lengths, const attention_dropout& drop,
                                    dtype compute) {
  detail::block_sparse_attention_forward_t<Arch>(qkv, out, lse, s, pattern, scale, lengths, drop, compute);
}

// dqkv assigned (all of it, masked rows and unkept keys included).
template <class Arch = native_arch>
void block_sparse_attention_backward(const_matrix_view<float> dout, const_matrix_view<float> qkv,
                                     const_matrix_view<float> out, std::span<const float> lse, matrix_view<float> dqkv,
                                     const attention_shape& s, const block_causal_pattern& pattern, float scale,
                                     std::span<const std::int32_t> lengths, const attention_dropout& drop,
                                     dtype compute = dtype::f32) {
  detail::block_sparse_attention_backward_t<Arch>(dout, qkv, out, lse, dqkv, s, pattern, scale, lengths, drop, compute);
}
template <class Arch = native_arch>
void block_sparse_attention_backward(const_matrix_view<float> dout, const_matrix_view<bf16> qkv,
                                     const_matrix_view<bf16> out, std::span<const float> lse, matrix_view<float> dqkv,
                                     const attention_shape& s, const block_causal_pattern& pattern, float scale,
                                     std::span<const std::int32_t> lengths, const attention_dropout& drop,
                                     dtype compute) {
  detail::block_sparse_attention_backward_t<Arch>(dout, qkv, out, lse, dqkv, s, pattern, scale, lengths, drop, compute);
}

// Incremental decoding (kernels/decode_attention.hpp) under the pattern: the query at position p
// sees the keys j <= p of the kept blocks of its block row. The pattern must cover the capacity.
inline void block_sparse_decode_attention(const_matrix_view<float> qkv, const float* keys, const float* values,
                                          const decode_shape& sh, const block_causal_pattern& pattern,
                                          matrix_view<float> att, std::span<float> scores) {
  detail::check_block_pattern("block_sparse_decode_attention", pattern, sh.past + sh.new_rows);
  const std::size_t Bk = pattern.block();
  detail::decode_attention_over(qkv, keys, values, sh, att, scores, [&](std::size_t p, auto&& f) {
    for (std::uint32_t J : pattern.row(p / Bk)) f(J * Bk, std::min<std::size_t>((J + 1) * Bk, p + 1));
  });
}

}  // namespace sparselm::kernels

// Block-sparse attention, qkv in fp32 or bf16, for the compiled ISA.
// Precompiled instances (docs/design/architecture.md, "Precompiled kernels"): defined once in sparselm::kernels
// (src/kernels_attention.cpp), declared extern where that library is linked.
#if defined(SPARSELM_INSTANTIATE_ATTENTION) || defined(SPARSELM_PRECOMPILED_KERNELS)
#ifdef SPARSELM_INSTANTIATE_ATTENTION
#define SPARSELM_INSTANCE template
#else
#define SPARSELM_INSTANCE extern template
#endif
namespace sparselm::kernels {
SPARSELM_INSTANCE decltype(detail::block_sparse_attention_forward_t<native_arch, float>)
    detail::block_sparse_attention_forward_t<native_arch, float>;
SPARSELM_INSTANCE decltype(detail::block_sparse_attention_forward_t<native_arch, bf16>)
    detail::block_sparse_attention_forward_t<native_arch, bf16>;
SPARSELM_INSTANCE decltype(detail::block_sparse_attention_backward_t<native_arch, float>)
    detail::block_sparse_attention_backward_t<native_arch, float>;
SPARSELM_INSTANCE decltype(detail::block_sparse_attention_backward_t<native_arch, bf16>)
    detail::block_sparse_attention_backward_t<native_arch, bf16>;
}  // namespace sparselm::kernels
#undef SPARSELM_INSTANCE
#endif
