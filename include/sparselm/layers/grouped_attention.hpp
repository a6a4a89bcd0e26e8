#pragma once
// Grouped-query causal self-attention with rotary positions (LLaMA's attention): separate Q, K, V
// projections, G = kv_heads key/value heads shared by groups of H/G query heads (G = H: multi-head,
// G = 1: multi-query), rotary position embedding applied to Q and K inside the layer.
//
// Legend: B batch, T sequence, N = B·T rows, C channels, H heads, G kv heads, D head width,
// HD = H·D, GD = G·D.
//   q (N,HD) = x·Wq [+ b]   k, v (N,GD) = x·Wk, x·Wv [+ b]     W (in, out) as every linear here
//   q, k ← rope(q), rope(k)                                  layers/rotary.hpp (HF rotate-half)
//   qkv (N,3HD) = q | k, v repeated: head h reads kv head h / (H/G)          (HF's repeat_kv)
//   a (N,HD) = softmax(Q Kᵀ / sqrt(D), causal) V          kernels::attention_forward on qkv
//   y (N,C)  = a·Wo [+ b]
// backward: the heads' K, V gradients are summed over each group, Q and K rotated back (−angle).
// Tensors "<prefix>.{q,k,v,o}_proj.weight" (HF LLaMA names; stored (in, out) like every linear).
// forward_cached keeps G·D keys and values per position in the kv_cache (kv_width()).
// The layer keeps what backward reads in its cache and its backward's temporaries (datt, dqkv) in
// its workspace, one for every instance of a model (scratch::get).
// Tensor parallelism (parallel/tensor_parallel.hpp): each rank of a group of P holds H/P query heads
// and the G/P key/value heads they read (P must divide G), its columns of Wq, Wk, Wv and its rows of
// Wo; forward sums y over the group (then Wo's bias, once), backward sums dx.

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "sparselm/kernels/attention.hpp"
#include "sparselm/kernels/decode_attention.hpp"
#include "sparselm/layers/block_options.hpp"
#include "sparselm/layers/context.hpp"
#include "sparselm/layers/kv_cache.hpp"
#include "sparselm/layers/linear.hpp"
#include "sparselm/layers/rotary.hpp"
#include "sparselm/layers/tensor_parallel.hpp"
#include "sparselm/layers/visit.hpp"

namespace sparselm {

// grouped_query_attention's temporaries (every instance shares one): the gradients of the heads'
// output (N,HD) and of the attention kernel's qkv (N,3HD).
struct grouped_attention_workspace {
  buffer datt, dqkv;
  std::size_t bytes() const noexcept { return buffers_bytes(datt, dqkv); }
};

template <class T = float, sparsity_type Sparsity = dense>
class grouped_query_attention {
 public:
  using workspace = grouped_attention_workspace;
  using linear_type = linear<T, Sparsity>;
  static constexpr kernels::attention_mask mask = kernels::attention_mask::causal;
  // Splits over a tensor-parallel group (block_options::tensor; layers/branch.hpp).
  static constexpr bool tensor_parallel = true;
  struct cache {
    typename linear_type::cache q_c, k_c, v_c, o_c;
    buffer tp_dx;        // this rank's part of dx, when a tensor-parallel backward accumulates
    buffer q, k, v;      // (N,HD), (N,GD), (N,GD) projections (q, k rotated)
    buffer qkv;          // (N,3HD) the attention kernel's input
    buffer att, lse;     // (N,HD), (B·H·T)
    buffer rope;         // (T,D) cos | sin of the pass's positions
  };

  grouped_query_attention() = default;
  // tp: split the heads over a tensor-parallel group (above): heads() and kv_heads() are this rank's.
  grouped_query_attention(arena_layout& layout, const std::string& prefix, std::size_t channels, std::size_t heads,
                          std::size_t kv_heads, std::size_t head_dim, float rope_theta = 10000.0f, bool qkv_bias = false,
                          bool proj_bias = false, float attn_dropout = 0.0f, std::uint64_t site = 0,
                          const sparse_plan* plan = nullptr, parallel::tensor_split tp = {})
      : c_(channels), h_(tp.share(heads, "attention '" + prefix + "': heads")),
        g_(tp.share(kv_heads ? kv_heads : heads, "attention '" + prefix + "': key/value heads")), d_(head_dim),
        drop_(attn_dropout), site_(tp.active() ? mix_stream(site, 0x7470 + tp.rank) : site),
        rope_(valid(prefix, channels, heads, kv_heads, head_dim), rope_theta, "attention '" + prefix + "'"),
        q_(layout, prefix + ".q_proj", channels, h_ * d_, qkv_bias, plan),
        k_(layout, prefix + ".k_proj", channels, g_ * d_, qkv_bias, plan),
        v_(layout, prefix + ".v_proj", channels, g_ * d_, qkv_bias, plan),
        o_(layout, prefix + ".o_proj", h_ * d_, channels, proj_bias, plan, linear_role::residual_output) {
    for (auto* l : {&q_, &k_, &v_}) l->set_split({parallel::split_kind::columns, 1, tp});
    o_.set_split({parallel::split_kind::rows, 1, tp});
  }
  // As a block's part (layers/block.hpp).
  grouped_query_attention(arena_layout& layout, const std::string& prefix, const block_options& o)
      : grouped_query_attention(layout, prefix, o.channels, o.heads, o.kv_heads, o.head_dim, o.rope_theta, o.qkv_bias,
                                o.proj_bias, o.attn_dropout, mix_stream(o.site, 1), o.plan, o.tensor) {}

  std::size_t heads() const noexcept { return h_; }
  std::size_t kv_heads() const noexcept { return g_; }
  std::size_t head_dim() const noexcept { return d_; }
  std::size_t kv_width() const noexcept { return g_ * d_; }
  const rotary_embedding& rotary() const noexcept { return rope_; }
  const linear_type& q_proj() const noexcept { return q_; }
  const linear_type& k_proj() const noexcept { return k_; }
  const linear_type& v_proj() const noexcept { return v_; }
  const linear_type& o_proj() const noexcept { return o_; }
  template <class F>
  void visit(F&& f) const {
    f(q_);
    f(k_);
    f(v_);
    f(o_);
  }

  void forward(const step_context& s, const_matrix_view<float> x, matrix_view<float> y, cache& c) const {
    forward_local(s, x, y, c);
    detail::reduce_output(s, o_, y);
  }

  // dx assigned (or accumulated when accumulate_dx).
  void backward(const step_context& s, const_matrix_view<float> dy, matrix_view<float> dx, cache& c,
                bool accumulate_dx = false) const {
    detail::reduce_input_grad(s, q_, dx, accumulate_dx, c.tp_dx,
                              [&](matrix_view<float> d, bool acc) { backward_local(s, dy, d, c, acc); });
  }

  // Incremental decoding (one process: a model split over ranks does not decode): x holds s.seq new
  // positions of each of s.batch sequences at positions [past, past + s.seq); their rotated keys and
  // values go into layer `layer` of kv (width G·D).
  void forward_cached(const step_context& s, const_matrix_view<float> x, matrix_view<float> y, cache& c, kv_cache& kv,
                      std::size_t layer, std::size_t past) const {
    SPARSELM_CHECK(!o_.split().active(), "attention '", o_.weight().name,
                   "': decoding with a kv cache runs in one process, not split over a tensor-parallel group");
    const std::size_t B = s.batch, n = s.seq, N = x.rows, HD = h_ * d_, GD = g_ * d_;
    SPARSELM_CHECK(N == B * n && kv.batch() == B && kv.width() == GD && layer < kv.layers(),
                   "attention: cached forward of ", N, " rows (", B, " x ", n, ", kv width ", GD,
                   ") does not fit the kv cache (batch ", kv.batch(), ", width ", kv.width(), ", layers ", kv.layers(), ")");
    auto q = project(s, x, c, n, past);
    const float* k = c.k.get(N * GD).data();
    const float* v = c.v.get(N * GD).data();
    for (std::size_t b = 0; b < B; ++b) {
      auto K = kv.keys(layer, b), V = kv.values(layer, b);
      for (std::size_t i = 0; i < n; ++i) {
        std::copy_n(k + (b * n + i) * GD, GD, K.row(past + i));
        std::copy_n(v + (b * n + i) * GD, GD, V.row(past + i));
      }
    }
    auto att = c.att.matrix(N, HD);
    const kernels::decode_shape ds{B, n, past, kv.capacity(), h_, d_};
    kernels::grouped_decode_attention(q, kv.keys(layer, 0).data, kv.values(layer, 0).data, ds, g_, att,
                                      c.lse.get(B * h_ * kv.capacity()));
    o_.forward(s, att, y, c.o_c);
  }

 private:
  void forward_local(const step_context& s, const_matrix_view<float> x, matrix_view<float> y, cache& c) const {
    const std::size_t N = x.rows, HD = h_ * d_;
    SPARSELM_CHECK(N == s.batch * s.seq, "attention: ", N, " rows but batch ", s.batch, " x seq ", s.seq);
    auto q = project(s, x, c, s.seq, 0);
    auto qkv = c.qkv.matrix(N, 3 * HD);
    const std::size_t rep = h_ / g_, GD = g_ * d_;
    const float* k = c.k.get(N * GD).data();
    const float* v = c.v.get(N * GD).data();
    parallel_for(0, N, [&](std::size_t r) {
      float* dst = qkv.row(r);
      std::copy_n(q.row(r), HD, dst);
      for (std::size_t h = 0; h < h_; ++h) {
        std::copy_n(k + r * GD + (h / rep) * d_, d_, dst + HD + h * d_);
        std::copy_n(v + r * GD + (h / rep) * d_, d_, dst + 2 * HD + h * d_);
      }
    }, 64);
    auto att = c.att.matrix(N, HD);
    kernels::attention_forward(const_matrix_view<float>(qkv), att, c.lse.get(s.batch * h_ * s.seq), shape(s), mask,
                               scale(), s.lengths, dropout(s), s.compute);
    o_.forward(s, att, y, c.o_c);
  }

  void backward_local(const step_context& s, const_matrix_view<float> dy, matrix_view<float> dx, cache& c,
                      bool accumulate_dx) const {
    const std::size_t N = dy.rows, HD = h_ * d_, GD = g_ * d_, rep = h_ / g_;
    auto& w = s.tmp->get<workspace>();
    auto datt = w.datt.matrix(N, HD);
    o_.backward(s, dy, datt, c.o_c);
    auto dqkv = w.dqkv.matrix(N, 3 * HD);
    kernels::attention_backward(const_matrix_view<float>(datt), const_matrix_view<float>(c.qkv.matrix(N, 3 * HD)),
                                const_matrix_view<float>(c.att.matrix(N, HD)), c.lse.get(s.batch * h_ * s.seq), dqkv,
                                shape(s), mask, scale(), s.lengths, dropout(s), s.compute);
    // Reuse the forward's q, k, v buffers for dq, dk, dv (the kernel has read qkv; q, k, v are not needed again).
    auto dq = c.q.matrix(N, HD), dk = c.k.matrix(N, GD), dv = c.v.matrix(N, GD);
    parallel_for(0, N, [&](std::size_t r) {
      const float* src = dqkv.row(r);
      std::copy_n(src, HD, dq.row(r));
      std::fill_n(dk.row(r), GD, 0.0f);
      std::fill_n(dv.row(r), GD, 0.0f);
      for (std::size_t h = 0; h < h_; ++h)
        for (std::size_t i = 0; i < d_; ++i) {
          dk.row(r)[(h / rep) * d_ + i] += src[HD + h * d_ + i];
          dv.row(r)[(h / rep) * d_ + i] += src[2 * HD + h * d_ + i];
        }
    }, 64);
    const_matrix_view<float> table(c.rope.get(s.seq * d_).data(), s.seq, d_);
    rope_.apply(dq, 0, h_, s.seq, table, /*inverse=*/true);
    rope_.apply(dk, 0, g_, s.seq, table, /*inverse=*/true);
    q_.backward(s, dq, dx, c.q_c, accumulate_dx);
    k_.backward(s, dk, dx, c.k_c, true);
    v_.backward(s, dv, dx, c.v_c, true);
  }

  // q, k, v of x into the cache, q and k rotated for positions [past, past + n) of each sequence.
  matrix_view<float> project(const step_context& s, const_matrix_view<float> x, cache& c, std::size_t n,
                             std::size_t past) const {
    const std::size_t N = x.rows;
    auto q = c.q.matrix(N, h_ * d_), k = c.k.matrix(N, g_ * d_), v = c.v.matrix(N, g_ * d_);
    q_.forward(s, x, q, c.q_c);
    k_.forward(s, x, k, c.k_c);
    v_.forward(s, x, v, c.v_c);
    auto table = c.rope.matrix(n, d_);
    rope_.fill(past, n, table);
    rope_.apply(q, 0, h_, n, table);
    rope_.apply(k, 0, g_, n, table);
    return q;
  }

  static std::size_t valid(const std::string& prefix, std::size_t channels, std::size_t heads, std::size_t kv_heads,
                           std::size_t head_dim) {
    SPARSELM_CHECK(channels > 0 && heads > 0 && head_dim > 0, "attention '", prefix,
                   "': zero channels, heads or head_dim");
    SPARSELM_CHECK(kv_heads == 0 || heads % kv_heads == 0, "attention '", prefix, "': field 'num_attention_heads' (",
                   heads, ") is not divisible by 'num_key_value_heads' (", kv_heads, ")");
    return head_dim;
  }
  kernels::attention_shape shape(const step_context& s) const { return {s.batch, s.seq, h_, d_}; }
  float scale() const { return 1.0f / std::sqrt(float(d_)); }
  kernels::attention_dropout dropout(const step_context& s) const {
    if (!s.training || drop_ <= 0) return {};
    return {drop_, s.rng, s.stream(site_)};
  }

  std::size_t c_ = 0, h_ = 0, g_ = 0, d_ = 0;
  float drop_ = 0.0f;
  std::uint64_t site_ = 0;
  rotary_embedding rope_;
  linear_type q_, k_, v_, o_;
};

}  // namespace sparselm
