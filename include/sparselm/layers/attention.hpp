#pragma once
// Multi-head self-attention with a fused QKV projection.
//
// Legend: B batch, T sequence, N = B·T rows, C channels, H heads, D per-head width (qkv_length;
// GPT uses D = C/H, the S1 sparse LM sets it independently).
//   qkv (N,3HD) = x (N,C) · Wqkv (C,3HD) [+ b]      Q | K | V column blocks, head h at h·D..h·D+D
//   a   (N,HD)  = softmax(Q Kᵀ / sqrt(D) + mask) V   per (b, h); lse (B·H·T) saved
//   y   (N,C)   = a · Wo (HD,C) [+ b]
// The mask kind is a template parameter (causal for GPT, padding for BERT-style encoders).
// forward_cached (causal only) runs new positions against a kv_cache for incremental decoding.
// Static block-sparse causal attention (kernels/block_sparse_attention.hpp): given a block pattern,
// a causal layer computes only the pattern's blocks of the scores, in training and in decoding.
// Its config object is read by block_sparse_attention_from_json (keys block, density, seed).
// The score and value products run in the step's compute type: under bf16 they take bf16 operands
// (Q, K, V, dO and the probabilities P and dS rounded while packed) with fp32 sums; the softmax, its
// log-sum-exp and the gradients stay fp32. With bf16 activations (keeps_bf16) the layer keeps qkv
// and the heads' output in bf16 for backward: the products round them anyway, so only the δ = dO·O
// of the softmax gradient sees the rounded output. fp16 steps keep these products in fp32.

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "sparselm/core/json.hpp"
#include "sparselm/kernels/attention.hpp"
#include "sparselm/kernels/block_sparse_attention.hpp"
#include "sparselm/kernels/convert.hpp"
#include "sparselm/kernels/decode_attention.hpp"
#include "sparselm/layers/block_options.hpp"
#include "sparselm/layers/context.hpp"
#include "sparselm/layers/kv_cache.hpp"
#include "sparselm/layers/linear.hpp"
#include "sparselm/layers/tensor_parallel.hpp"
#include "sparselm/layers/visit.hpp"

namespace sparselm {

// The "block_sparse_attention" config object: {"block": 16, "density": 0.25, "seed": 0}, every key
// optional (these defaults), unknown keys and bad values errors naming the field.
inline kernels::block_causal_options block_sparse_attention_from_json(const json& j, const std::string& context) {
  json_fields r(j, context);
  kernels::block_causal_options o;
  o.block = r.get("block", o.block, [](std::size_t b) {
    return b >= 1 && b <= 4096 ? std::string() : "must be in [1, 4096], got " + std::to_string(b);
  });
  o.density = r.get("density", o.density, in_closed(0.0, 1.0));
  o.seed = r.get("seed", o.seed);
  r.finish();
  return o;
}
inline json block_sparse_attention_to_json(const kernels::block_causal_options& o) {
  return json{{"block", o.block}, {"density", o.density}, {"seed", o.seed}};
}

// self_attention's temporaries (every instance shares one, scratch::get): the gradients of the
// heads' output (N,HD) and of qkv (N,3HD); under bf16 activations the forward's fp32 results first.
struct self_attention_workspace {
  buffer datt, dqkv;
  std::size_t bytes() const noexcept { return buffers_bytes(datt, dqkv); }
};

template <class T = float, sparsity_type Sparsity = dense, kernels::attention_mask Mask = kernels::attention_mask::causal>
class self_attention {
 public:
  using workspace = self_attention_workspace;
  using linear_type = linear<T, Sparsity>;
  static constexpr kernels::attention_mask mask = Mask;
  // Splits over a tensor-parallel group (block_options::tensor; layers/branch.hpp).
  static constexpr bool tensor_parallel = true;
  struct cache {
    typename linear_type::cache qkv_c, proj_c;
    buffer qkv;  // (N,3HD)
    buffer att;  // (N,HD)
    buffer lse;  // (B·H·T)
    buffer_bf16 qkv16, att16;  // the same in bf16 (compact_input)
    bool in_bf16 = false;      // forward kept qkv and att in bf16
    buffer tp_dx;              // this rank's part of dx, when a tensor-parallel backward accumulates
  };

  self_attention() = default;
  // prefix e.g. "h.0.attn" gives "h.0.attn.c_attn.weight" and "h.0.attn.c_proj.weight" (HF GPT-2 names).
  // pattern: static block-sparse causal attention under this block pattern (causal mask only;
  // sequences up to the length the pattern was built for); null: dense attention.
  // tp: split the heads over a tensor-parallel group (parallel/tensor_parallel.hpp): this rank holds
  // heads/tp.size of them, its Q, K and V columns and its rows of the output projection.
  self_attention(arena_layout& layout, const std::string& prefix, std::size_t channels, std::size_t heads,
                 std::size_t head_dim, bool qkv_bias = true, bool proj_bias = true, float attn_dropout = 0.0f,
                 std::uint64_t site = 0, const sparse_plan* plan = nullptr,
                 std::shared_ptr<const kernels::block_causal_pattern> pattern = nullptr, parallel::tensor_split tp = {})
      : c_(channels), h_(tp.share(heads, "attention '" + prefix + "': heads")), d_(head_dim), drop_(attn_dropout),
        site_(tp.active() ? mix_stream(site, 0x7470 + tp.rank) : site), pattern_(std::move(pattern)),
        qkv_(layout, prefix + ".c_attn", channels, 3 * h_ * head_dim, qkv_bias, plan),
        proj_(layout, prefix + ".c_proj", h_ * head_dim, channels, proj_bias, plan, linear_role::residual_output) {
    SPARSELM_CHECK(heads > 0 && head_dim > 0, "attention '", prefix, "': zero heads or head width");
    SPARSELM_CHECK(!pattern_ || Mask == kernels::attention_mask::causal, "attention '", prefix,
                   "': block_sparse_attention needs the causal mask");
    qkv_.set_split({parallel::split_kind::columns, 3, tp});
    proj_.set_split({parallel::split_kind::rows, 1, tp});
  }
  // As a block's part (layers/block.hpp): sizes, biases, dropout, plan, pattern and tensor split
  // from the block's options.
  self_attention(arena_layout& layout, const std::string& prefix, const block_options& o)
      : self_attention(layout, prefix, o.channels, o.heads, o.head_dim, o.qkv_bias, o.proj_bias, o.attn_dropout,
                       mix_stream(o.site, 1), o.plan, o.attn_pattern, o.tensor) {
    SPARSELM_CHECK(o.kv_heads == 0 || o.kv_heads == o.heads, "attention '", prefix, "': field 'kv_heads' (", o.kv_heads,
                   ") must equal 'heads' (", o.heads, "): use grouped_query_attention for fewer key/value heads");
  }

  const linear_type& qkv() const noexcept { return qkv_; }
  const linear_type& proj() const noexcept { return proj_; }
  std::size_t heads() const noexcept { return h_; }
  std::size_t head_dim() const noexcept { return d_; }
  // The static block pattern of the scores, or null (dense attention).
  const kernels::block_causal_pattern* block_pattern() const noexcept { return pattern_.get(); }
  template <class F>
  void visit(F&& f) const {
    f(qkv_);
    f(proj_);
  }

  // True when input_keeper::layer keeps x in bf16 (the QKV projection's choice, layers/linear.hpp).
  bool compact_input(const step_context& s) const { return qkv_.compact_input(s); }
  // True when forward keeps qkv and the heads' output in bf16: bf16 activations whose only readers
  // are bf16 products (the attention's, dense or block-sparse, and the output projection's under
  // compact_input).
  bool keeps_bf16(const step_context& s) const { return compact_input(s); }

  // keeper: who keeps x for backward (input_keeper::layer: the QKV projection keeps a copy).
  void forward(const step_context& s, const_matrix_view<float> x, matrix_view<float> y, cache& c,
               input_keeper keeper = input_keeper::caller) const {
    const std::size_t N = x.rows;
    SPARSELM_CHECK(N == s.batch * s.seq, "attention: ", N, " rows but batch ", s.batch, " x seq ", s.seq);
    c.in_bf16 = keeps_bf16(s);
    if (c.in_bf16) {
      // fp32 results in the workspace (the backward's gradient buffers, free during forward), kept in bf16.
      const std::size_t HD = h_ * d_;
      auto& w = s.tmp->get<workspace>();
      auto q32 = w.dqkv.matrix(N, 3 * HD);
      auto a32 = w.datt.matrix(N, HD);
      auto q16 = c.qkv16.matrix(N, 3 * HD), a16 = c.att16.matrix(N, HD);
      qkv_.forward(s, x, q32, c.qkv_c, keeper);
      kernels::to_bf16(std::span<const float>(q32.data, N * 3 * HD), std::span<bf16>(q16.data, N * 3 * HD));
      attend(s, const_matrix_view<bf16>(q16), a32, c);
      kernels::to_bf16(std::span<const float>(a32.data, N * HD), std::span<bf16>(a16.data, N * HD));
      proj_.forward(s, const_matrix_view<bf16>(a16), y, c.proj_c);
      return detail::reduce_output(s, proj_, y);
    }
    auto qkv = c.qkv.matrix(N, 3 * h_ * d_);
    qkv_.forward(s, x, qkv, c.qkv_c, keeper);
    auto att = c.att.matrix(N, h_ * d_);
    attend(s, const_matrix_view<float>(qkv), att, c);
    proj_.forward(s, att, y, c.proj_c);
    detail::reduce_output(s, proj_, y);
  }

  // Incremental decoding: x holds s.seq new positions of each of s.batch sequences, at positions
  // [past, past + s.seq); their keys and values are written into layer `layer` of kv, and they
  // attend to every cached position up to their own. The caller advances kv after the stack.
  void forward_cached(const step_context& s, const_matrix_view<float> x, matrix_view<float> y, cache& c, kv_cache& kv,
                      std::size_t layer, std::size_t past) const {
    static_assert(Mask == kernels::attention_mask::causal, "self_attention::forward_cached: causal attention only");
    const std::size_t B = s.batch, n = s.seq, N = x.rows, HD = h_ * d_;
    SPARSELM_CHECK(N == B * n && kv.batch() == B && kv.width() == HD && layer < kv.layers(),
                   "attention: cached forward of ", N, " rows (", B, " x ", n, ", width ", HD,
                   ") does not fit the kv cache (batch ", kv.batch(), ", width ", kv.width(), ", layers ", kv.layers(), ")");
    auto qkv = c.qkv.matrix(N, 3 * HD);
    qkv_.forward(s, x, qkv, c.qkv_c);
    for (std::size_t b = 0; b < B; ++b) {
      auto K = kv.keys(layer, b), V = kv.values(layer, b);
      for (std::size_t i = 0; i < n; ++i) {
        const float* r = qkv.row(b * n + i);
        std::copy_n(r + HD, HD, K.row(past + i));
        std::copy_n(r + 2 * HD, HD, V.row(past + i));
      }
    }
    auto att = c.att.matrix(N, HD);
    const kernels::decode_shape ds{B, n, past, kv.capacity(), h_, d_};
    auto scores = c.lse.get(B * h_ * kv.capacity());
    if (pattern_)
      kernels::block_sparse_decode_attention(qkv, kv.keys(layer, 0).data, kv.values(layer, 0).data, ds, *pattern_, att,
                                             scores);
    else
      kernels::decode_attention(qkv, kv.keys(layer, 0).data, kv.values(layer, 0).data, ds, att, scores);
    proj_.forward(s, att, y, c.proj_c);
    detail::reduce_output(s, proj_, y);
  }

  // dx assigned (or accumulated when accumulate_dx).
  void backward(const step_context& s, const_matrix_view<float> dy, matrix_view<float> dx, cache& c,
                bool accumulate_dx = false) const {
    const std::size_t N = dy.rows;
    auto& w = s.tmp->get<workspace>();
    auto datt = w.datt.matrix(N, h_ * d_);
    proj_.backward(s, dy, datt, c.proj_c);
    auto dqkv = w.dqkv.matrix(N, 3 * h_ * d_);
    if (c.in_bf16) {
      const_matrix_view<bf16> qkv(c.qkv16.get(N * 3 * h_ * d_).data(), N, 3 * h_ * d_);
      const_matrix_view<bf16> att(c.att16.get(N * h_ * d_).data(), N, h_ * d_);
      attend_backward(s, datt, qkv, att, dqkv, c);
    } else {
      const_matrix_view<float> qkv(c.qkv.get(N * 3 * h_ * d_).data(), N, 3 * h_ * d_);
      const_matrix_view<float> att(c.att.get(N * h_ * d_).data(), N, h_ * d_);
      attend_backward(s, datt, qkv, att, dqkv, c);
    }
    detail::reduce_input_grad(s, qkv_, dx, accumulate_dx, c.tp_dx, [&](matrix_view<float> d, bool acc) {
      qkv_.backward(s, dqkv, d, c.qkv_c, acc);
    });
  }

 private:
  // The attention core over qkv held in fp32 or bf16 (S): dense, or under the block pattern.
  template <class S>
  void attend(const step_context& s, const_matrix_view<S> qkv, matrix_view<float> att, cache& c) const {
    auto lse = c.lse.get(s.batch * h_ * s.seq);
    if (pattern_)
      kernels::block_sparse_attention_forward(qkv, att, lse, shape(s), *pattern_, scale(), s.lengths, dropout(s),
                                              s.compute);
    else
      kernels::attention_forward(qkv, att, lse, shape(s), Mask, scale(), s.lengths, dropout(s), s.compute);
  }
  template <class S>
  void attend_backward(const step_context& s, const_matrix_view<float> datt, const_matrix_view<S> qkv,
                       const_matrix_view<S> att, matrix_view<float> dqkv, cache& c) const {
    auto lse = c.lse.get(s.batch * h_ * s.seq);
    if (pattern_)
      kernels::block_sparse_attention_backward(datt, qkv, att, lse, dqkv, shape(s), *pattern_, scale(), s.lengths,
                                               dropout(s), s.compute);
    else
      kernels::attention_backward(datt, qkv, att, lse, dqkv, shape(s), Mask, scale(), s.lengths, dropout(s), s.compute);
  }

  kernels::attention_shape shape(const step_context& s) const { return {s.batch, s.seq, h_, d_}; }
  float scale() const { return 1.0f / std::sqrt(float(d_)); }
  kernels::attention_dropout dropout(const step_context& s) const {
    if (!s.training || drop_ <= 0) return {};
    return {drop_, s.rng, s.stream(site_)};
  }

  std::size_t c_ = 0, h_ = 0, d_ = 0;
  float drop_ = 0.0f;
  std::uint64_t site_ = 0;
  std::shared_ptr<const kernels::block_causal_pattern> pattern_;
  linear_type qkv_, proj_;
};

}  // namespace sparselm
