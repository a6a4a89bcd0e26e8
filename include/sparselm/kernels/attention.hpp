#pragma once
// Multi-head scaled-dot-product attention (interim straightforward implementation; the tiled
// kernel replaces it). One query row at a time per (batch, head); scores never exceed one row.
//
// Legend: B batch, T sequence, H heads, D head width, N = B·T.
//   qkv (N, 3HD): [Q | K | V], head h at columns h·D..h·D+D of each block
//   out (N, HD), lse (B·H·T): log-sum-exp of the scaled, masked scores of each query row

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "sparselm/core/error.hpp"
#include "sparselm/core/rng.hpp"
#include "sparselm/core/threads.hpp"
#include "sparselm/core/view.hpp"

namespace sparselm::kernels {

enum class attention_mask { causal, padding };
struct attention_shape {
  std::size_t batch = 0, seq = 0, heads = 0, head_dim = 0;
};
struct attention_dropout {
  float p = 0.0f;
  counter_rng rng{};
  std::uint64_t stream = 0;
};

namespace detail {
inline void check_attention(const char* fn, const attention_shape& s, const const_matrix_view<float>& qkv,
                            std::size_t out_rows, std::size_t out_cols, std::size_t lse,
                            std::span<const std::int32_t> lengths) {
  const std::size_t N = s.batch * s.seq, HD = s.heads * s.head_dim;
  SPARSELM_CHECK(qkv.data && qkv.rows == N && qkv.cols == 3 * HD, fn, ": qkv ", shape_string(qkv), " should be (", N,
                 "x", 3 * HD, ") for B=", s.batch, " T=", s.seq, " H=", s.heads, " D=", s.head_dim);
  SPARSELM_CHECK(out_rows == N && out_cols == HD, fn, ": output (", out_rows, "x", out_cols, ") should be (", N, "x",
                 HD, ")");
  SPARSELM_CHECK(lse == s.batch * s.heads * s.seq, fn, ": lse has ", lse, " entries, expected B·H·T = ",
                 s.batch * s.heads * s.seq);
  SPARSELM_CHECK(lengths.empty() || lengths.size() == s.batch, fn, ": ", lengths.size(), " lengths for batch ",
                 s.batch);
  for (std::size_t b = 0; b < lengths.size(); ++b)
    SPARSELM_CHECK(lengths[b] >= 0 && std::size_t(lengths[b]) <= s.seq, fn, ": length ", lengths[b], " of sequence ",
                   b, " outside [0, ", s.seq, "]");
}
// Keys [0, hi) are visible to query i.
inline std::size_t visible_keys(attention_mask m, std::size_t i, std::size_t len) {
  return m == attention_mask::causal ? std::min(i + 1, len) : len;
}
inline float keep_factor(const attention_dropout& d, std::uint64_t row, std::size_t T, std::size_t j) {
  if (d.p <= 0) return 1.0f;
  return d.rng.uniform(d.stream, row * T + j) >= d.p ? 1.0f / (1.0f - d.p) : 0.0f;
}
}  // namespace detail

inline void attention_forward(const_matrix_view<float> qkv, matrix_view<float> out, std::span<float> lse,
                              const attention_shape& s, attention_mask mask, float scale,
                              std::span<const std::int32_t> lengths, const attention_dropout& drop) {
  detail::check_attention("attention_forward", s, qkv, out.rows, out.cols, lse.size(), lengths);
  const std::size_t T = s.seq, H = s.heads, D = s.head_dim, HD = H * D;
  parallel_for(0, s.batch * H, [&](std::size_t bh) {
    const std::size_t b = bh / H, h = bh % H;
    const std::size_t len = lengths.empty() ? T : std::size_t(lengths[b]);
    std::vector<float> p(T);
    for (std::size_t i = 0; i < T; ++i) {
      float* o = out.row(b * T + i) + h * D;
      const std::uint64_t row = bh * T + i;
      const std::size_t hi = i < len ? detail::visible_keys(mask, i, len) : 0;
      std::fill(o, o + D, 0.0f);
      if (hi == 0) {
        lse[row] = -std::numeric_limits<float>::infinity();
        continue;
      }
      const float* q = qkv.row(b * T + i) + h * D;
      float m = -std::numeric_limits<float>::infinity();
      for (std::size_t j = 0; j < hi; ++j) {
        const float* k = qkv.row(b * T + j) + HD + h * D;
        float acc = 0;
        for (std::size_t d = 0; d < D; ++d) acc += q[d] * k[d];
        p[j] = acc * scale;
        m = std::max(m, p[j]);
      }
      double l = 0;
      for (std::size_t j = 0; j < hi; ++j) l += std::exp(double(p[j] - m));
      const float L = m + float(std::log(l));
      lse[row] = L;
      for (std::size_t j = 0; j < hi; ++j) {
        const float w = std::exp(p[j] - L) * detail::keep_factor(drop, row, T, j);
        const float* v = qkv.row(b * T + j) + 2 * HD + h * D;
        for (std::size_t d = 0; d < D; ++d) o[d] += w * v[d];
      }
    }
  });
}

inline void attention_backward(const_matrix_view<float> dout, const_matrix_view<float> qkv,
                               const_matrix_view<float> out, std::span<const float> lse, matrix_view<float> dqkv,
                               const attention_shape& s, attention_mask mask, float scale,
                               std::span<const std::int32_t> lengths, const attention_dropout& drop) {
  detail::check_attention("attention_backward", s, qkv, out.rows, out.cols, lse.size(), lengths);
  SPARSELM_CHECK(dout.rows == out.rows && dout.cols == out.cols, "attention_backward: dout ", shape_string(dout),
                 " does not match out ", shape_string(out));
  SPARSELM_CHECK(dqkv.rows == qkv.rows && dqkv.cols == qkv.cols, "attention_backward: dqkv ", shape_string(dqkv),
                 " does not match qkv ", shape_string(qkv));
  const std::size_t T = s.seq, H = s.heads, D = s.head_dim, HD = H * D;
  parallel_for(0, s.batch * H, [&](std::size_t bh) {
    const std::size_t b = bh / H, h = bh % H;
    const std::size_t len = lengths.empty() ? T : std::size_t(lengths[b]);
    for (std::size_t t = 0; t < T; ++t)
      for (std::size_t part = 0; part < 3; ++part) std::fill_n(dqkv.row(b * T + t) + part * HD + h * D, D, 0.0f);
    std::vector<float> p(T), dp(T);
    for (std::size_t i = 0; i < T; ++i) {
      const std::uint64_t row = bh * T + i;
      const std::size_t hi = i < len ? detail::visible_keys(mask, i, len) : 0;
      if (hi == 0) continue;
      const float* q = qkv.row(b * T + i) + h * D;
      const float* go = dout.row(b * T + i) + h * D;
      const float* o = out.row(b * T + i) + h * D;
      float* dq = dqkv.row(b * T + i) + h * D;
      float delta = 0;  // Σ_j p_j dp_j = dout · out
      for (std::size_t d = 0; d < D; ++d) delta += go[d] * o[d];
      for (std::size_t j = 0; j < hi; ++j) {
        const float* k = qkv.row(b * T + j) + HD + h * D;
        const float* v = qkv.row(b * T + j) + 2 * HD + h * D;
        float acc = 0, gv = 0;
        for (std::size_t d = 0; d < D; ++d) {
          acc += q[d] * k[d];
          gv += go[d] * v[d];
        }
        p[j] = std::exp(acc * scale - lse[row]);
        const float keep = detail::keep_factor(drop, row, T, j);
        dp[j] = gv * keep;
        float* dv = dqkv.row(b * T + j) + 2 * HD + h * D;
        const float w = p[j] * keep;
        for (std::size_t d = 0; d < D; ++d) dv[d] += w * go[d];
      }
      for (std::size_t j = 0; j < hi; ++j) {
        const float ds = p[j] * (dp[j] - delta) * scale;
        const float* k = qkv.row(b * T + j) + HD + h * D;
        float* dk = dqkv.row(b * T + j) + HD + h * D;
        for (std::size_t d = 0; d < D; ++d) {
          dq[d] += ds * k[d];
          dk[d] += ds * q[d];
        }
      }
    }
  });
}

}  // namespace sparselm::kernels
