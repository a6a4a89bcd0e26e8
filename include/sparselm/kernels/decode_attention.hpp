#pragma once
// Causal attention of a few new query positions over a key/value cache (incremental decoding).
//
// Legend: B sequences, n new positions per sequence, N = B·n rows, P positions already cached,
// Tmax the cache capacity, H heads, D head width, HD = H·D.
//   qkv (N, 3HD)        the new rows' Q | K | V (head h at columns h·D..h·D+D of each block)
//   keys, values        (B, Tmax, HD) each, contiguous: row t of sequence b is position t; rows
//                       [P, P+n) must already hold the new rows' K and V
//   att (N, HD)         assigned: row i of sequence b attends to positions [0, P + i]
//   scores             B·H·Tmax floats of workspace
// Parallel over (b, h); each (b, h) is computed by one thread in a fixed order, so the result does
// not depend on the thread count.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <span>

#include "sparselm/core/error.hpp"
#include "sparselm/core/simd.hpp"
#include "sparselm/core/threads.hpp"
#include "sparselm/core/view.hpp"
#include "sparselm/kernels/reduce.hpp"
#include "sparselm/kernels/softmax.hpp"

namespace sparselm::kernels {


struct decode_shape {
  std::size_t batch = 0, new_rows = 0, past = 0, capacity = 0, heads = 0, head_dim = 0;
};

namespace detail {
// decode_attention over the keys visible(p, f) lists for the query at position p, as calls
// f(j0, j1) for the ranges [j0, j1) in ascending order (all within [0, p]).
template <class Visible>
void decode_attention_over(const_matrix_view<float> qkv, const float* keys, const float* values, const decode_shape& sh,
                           matrix_view<float> att, std::span<float> scores, Visible&& visible) {
  const std::size_t B = sh.batch, n = sh.new_rows, P = sh.past, T = sh.capacity, H = sh.heads, D = sh.head_dim;
  const std::size_t HD = H * D;
  SPARSELM_CHECK(qkv.rows == B * n && qkv.cols == 3 * HD && att.rows == B * n && att.cols == HD && P + n <= T &&
                     scores.size() >= B * H * T,
                 "decode_attention: qkv ", shape_string(qkv), ", att ", shape_string(att), " do not fit B=", B,
                 " n=", n, " H=", H, " D=", D, " past=", P, " capacity=", T);
  const float scale = 1.0f / std::sqrt(float(D));
  // About 4·n·(P + n)·D flops per (b, h): run short decode steps on fewer threads, where a
  // fork/join would cost more than the work.
  const std::size_t work = std::max<std::size_t>(1, 4 * n * (P + n) * D);
  const std::size_t min_tasks = std::max<std::size_t>(1, (std::size_t(1) << 15) / work);
  parallel_for(0, B * H, [&](std::size_t bh) {
    const std::size_t b = bh / H, h = bh % H;
    const float* K = keys + b * T * HD;
    const float* V = values + b * T * HD;
    float* s = scores.data() + bh * T;
    for (std::size_t i = 0; i < n; ++i) {
      const float* q = qkv.row(b * n + i) + h * D;
      std::size_t count = 0;
      visible(P + i, [&](std::size_t j0, std::size_t j1) {
        for (std::size_t j = j0; j < j1; ++j) s[count++] = dot(q, K + j * HD + h * D, D) * scale;
      });
      softmax_row<native_arch>(s, s, count, count);
      float* o = att.row(b * n + i) + h * D;
      std::fill(o, o + D, 0.0f);
      count = 0;
      visible(P + i, [&](std::size_t j0, std::size_t j1) {
        for (std::size_t j = j0; j < j1; ++j) axpy(s[count++], V + j * HD + h * D, o, D);
      });
    }
  }, min_tasks);
}
}  // namespace detail

// Causal: the query at position p sees [0, p].
inline void decode_attention(const_matrix_view<float> qkv, const float* keys, const float* values, const decode_shape& sh,
                             matrix_view<float> att, std::span<float> scores) {
  detail::decode_attention_over(qkv, keys, values, sh, att, scores,
                                [](std::size_t p, auto&& f) { f(std::size_t(0), p + 1); });
}

// Grouped-query decoding: q (N, H·D) the new rows' queries (already position-encoded), keys and
// values (B, Tmax, G·D) each for G = kv_heads key/value heads; query head h reads key/value head
// h / (H/G) (HF's repeat_kv order). Causal: the query at position p sees [0, p]. att (N, H·D).
inline void grouped_decode_attention(const_matrix_view<float> q, const float* keys, const float* values,
                                     const decode_shape& sh, std::size_t kv_heads, matrix_view<float> att,
                                     std::span<float> scores) {
  const std::size_t B = sh.batch, n = sh.new_rows, P = sh.past, T = sh.capacity, H = sh.heads, D = sh.head_dim;
  const std::size_t G = kv_heads, HD = H * D;
  SPARSELM_CHECK(G > 0 && H % G == 0 && q.rows == B * n && q.cols == HD && att.rows == B * n && att.cols == HD &&
                     P + n <= T && scores.size() >= B * H * T,
                 "grouped_decode_attention: q ", shape_string(q), ", att ", shape_string(att), " do not fit B=", B,
                 " n=", n, " H=", H, " kv_heads=", G, " D=", D, " past=", P, " capacity=", T);
  const std::size_t GD = G * D, rep = H / G;
  const float scale = 1.0f / std::sqrt(float(D));
  const std::size_t work = std::max<std::size_t>(1, 4 * n * (P + n) * D);
  const std::size_t min_tasks = std::max<std::size_t>(1, (std::size_t(1) << 15) / work);
  parallel_for(0, B * H, [&](std::size_t bh) {
    const std::size_t b = bh / H, h = bh % H, g = h / rep;
    const float* K = keys + b * T * GD + g * D;
    const float* V = values + b * T * GD + g * D;
    float* s = scores.data() + bh * T;
    for (std::size_t i = 0; i < n; ++i) {
      const float* qi = q.row(b * n + i) + h * D;
      const std::size_t count = P + i + 1;
      for (std::size_t j = 0; j < count; ++j) s[j] = detail::dot(qi, K + j * GD, D) * scale;
      detail::softmax_row<native_arch>(s, s, count, count);
      float* o = att.row(b * n + i) + h * D;
      std::fill(o, o + D, 0.0f);
      for (std::size_t j = 0; j < count; ++j) detail::axpy(s[j], V + j * GD, o, D);
    }
  }, min_tasks);
}

}  // namespace sparselm::kernels
