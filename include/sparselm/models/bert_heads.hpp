#pragma once
// BERT's pre-training batch and head: masked-LM at the masked positions only, and next-sentence
// prediction from the [CLS] position through the pooler.
//
// Legend: B batch, T sequence, N = B·T rows, C channels, V vocab, P prediction slots per sequence,
// M masked positions in the batch (slots with a label ≥ 0).
//   MLM:  xm (M,C) = x[masked rows];  z = LN(gelu(xm·W_t + b_t));  logits (M,V) = z·word_embᵀ + bias
//   NSP:  pooled (B,C) = tanh(x[CLS rows]·W_p + b_p);  logits (B,2) = pooled·W_s + b_s
//   loss = mean CE over the M masked positions + mean CE over the sequences with an NSP label
// Tensors (HF BERT names): "cls.predictions.transform.dense.*", "cls.predictions.transform.LayerNorm.*",
// "cls.predictions.bias", "pooler.dense.*", "cls.seq_relationship.*"; the decoder is tied to
// "embeddings.word_embeddings.weight".
//
// The loss of a micro-batch is its own two means (normaliser 1), so with gradient accumulation
// the step's loss is the average of the micro-batches' losses. Under data parallelism the means are
// over the global micro-batch: the trainer sums objective_counts() (masked predictions, sequences
// with an NSP label) over the replicas and passes them in step_context::objective_counts; each rank
// then contributes its share of the two global means (and weight_sum its share of 1).

#include <array>
#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "sparselm/kernels/cross_entropy.hpp"
#include "sparselm/layers/context.hpp"
#include "sparselm/layers/dense_gelu_norm.hpp"
#include "sparselm/layers/linear.hpp"
#include "sparselm/layers/lm_head.hpp"

namespace sparselm {

struct bert_batch {
  std::span<const std::int32_t> ids;          // (B·T)
  std::span<const std::int32_t> token_types;  // (B·T) segment A = 0, B = 1; empty: all 0
  std::span<const std::int32_t> lengths;      // (B) valid tokens of each sequence (padding after); empty: all T
  std::span<const std::int32_t> masked_positions;  // (B·P) position in its sequence of each prediction slot
  std::span<const std::int32_t> masked_labels;     // (B·P) the original token id; < 0: unused slot
  std::span<const std::int32_t> nsp_labels;        // (B) 0: B follows A, 1: B is random; < 0 or empty: none
  std::size_t batch = 0, seq = 0;
};

namespace detail {
// Rows of x (by index) into a (rows, C) matrix held by out.
inline matrix_view<float> gather_rows(const_matrix_view<float> x, const std::vector<std::size_t>& rows, buffer& out) {
  auto m = out.matrix(rows.size(), x.cols);
  for (std::size_t i = 0; i < rows.size(); ++i) std::copy_n(x.row(rows[i]), x.cols, m.row(i));
  return m;
}
// dx[rows[i]] += d[i].
inline void scatter_add_rows(const_matrix_view<float> d, const std::vector<std::size_t>& rows, matrix_view<float> dx) {
  for (std::size_t i = 0; i < rows.size(); ++i) {
    float* o = dx.row(rows[i]);
    const float* g = d.row(i);
    for (std::size_t j = 0; j < d.cols; ++j) o[j] += g[j];
  }
}
}  // namespace detail

// BERT's pooler, shared by the pre-training (NSP) and classification heads: the hidden state of
// each sequence's first token ([CLS]) through tanh(x·Wp + bp) ("pooler.dense").
template <class T = float>
class bert_pooler {
 public:
  struct cache {
    std::vector<std::size_t> cls_rows;
    buffer xc, hp, pooled, dxc;  // (B,C)
    typename linear<T>::cache dense_c;
  };

  bert_pooler() = default;
  bert_pooler(arena_layout& layout, std::size_t channels) : dense_(layout, "pooler.dense", channels, channels) {}

  template <class F>
  void visit(F&& f) const {
    f(dense_);
  }
  const linear<T>& dense() const noexcept { return dense_; }

  // pooled (B,C) from x (B·T, C), valid until the next forward with this cache.
  matrix_view<float> forward(const step_context& s, const_matrix_view<float> x, std::size_t B, std::size_t L,
                             cache& c) const {
    c.cls_rows.resize(B);
    for (std::size_t i = 0; i < B; ++i) c.cls_rows[i] = i * L;
    auto xc = detail::gather_rows(x, c.cls_rows, c.xc);
    auto hp = c.hp.matrix(B, x.cols), pooled = c.pooled.matrix(B, x.cols);
    dense_.forward(s, xc, hp, c.dense_c);
    for (std::size_t i = 0; i < B * x.cols; ++i) pooled.data[i] = std::tanh(hp.data[i]);
    return pooled;
  }
  // Accumulates the pooler's gradients and adds d/dx to the [CLS] rows of dx, from dpooled (B,C)
  // (overwritten).
  void backward(const step_context& s, matrix_view<float> dpooled, matrix_view<float> dx, cache& c) const {
    const std::size_t n = dpooled.rows * dpooled.cols;
    const float* pooled = c.pooled.matrix(dpooled.rows, dpooled.cols).data;
    for (std::size_t i = 0; i < n; ++i) dpooled.data[i] *= 1.0f - pooled[i] * pooled[i];
    auto dxc = c.dxc.matrix(dpooled.rows, dpooled.cols);
    dense_.backward(s, dpooled, dxc, c.dense_c);
    detail::scatter_add_rows(dxc, c.cls_rows, dx);
  }

 private:
  linear<T> dense_;
};

struct bert_head_options {
  std::size_t channels = 0, vocab = 0;
  norm_options norm{.eps = 1e-12f};
};

template <class T = float>
class bert_pretraining_head {
 public:
  using transform_type = dense_gelu_norm<T, dense, kernels::gelu_kind::erf>;
  struct cache {
    std::vector<std::size_t> mlm_rows;  // rows of x the masked LM reads
    std::vector<std::int32_t> mlm_targets, nsp_targets;
    buffer xm, z, dz, dxm;  // (M,C)
    buffer dpooled;         // (B,C)
    buffer nsp_logits;      // (B,2)
    typename transform_type::cache transform_c;
    typename bert_pooler<T>::cache pool_c;
    typename linear<T>::cache cls_c;
  };

  bert_pretraining_head() = default;
  // word: the (V,C) word embedding the decoder is tied to.
  bert_pretraining_head(arena_layout& layout, param_ref word, const bert_head_options& o) : o_(o) {
    transform_ = transform_type(layout, "cls.predictions.transform.dense", "cls.predictions.transform.LayerNorm",
                                o.channels, o.channels, o.norm);
    bias_ = param_ref{"cls.predictions.bias", layout.add("cls.predictions.bias", {o.vocab}, param_no_decay | param_no_trust)};
    decoder_ = tied_lm_head(std::move(word), o.vocab, o.channels, bias_);
    pooler_ = bert_pooler<T>(layout, o.channels);
    classifier_ = linear<T>(layout, "cls.seq_relationship", o.channels, 2);
  }

  template <class F>
  void visit(F&& f) const {
    f(transform_);
    f(bias_);
    f(pooler_);
    f(classifier_);
  }
  const transform_type& transform() const noexcept { return transform_; }
  const param_ref& decoder_bias() const noexcept { return bias_; }
  // The decoder, tied to the word embedding (models/grad_parts.hpp finds the tied tensor through it).
  const tied_lm_head& projection() const noexcept { return decoder_; }
  const bert_pooler<T>& pooler() const noexcept { return pooler_; }
  const linear<T>& classifier() const noexcept { return classifier_; }

  // 1 when the batch has anything to learn from (each objective is a mean of its own), else 0.
  double loss_normaliser(const bert_batch& b) const {
    for (auto l : b.masked_labels)
      if (l >= 0) return 1.0;
    for (auto l : b.nsp_labels)
      if (l >= 0) return 1.0;
    return 0.0;
  }

  // The target counts of the two objectives: masked predictions, sequences with an NSP label.
  std::array<double, 2> objective_counts(const bert_batch& b) const {
    std::array<double, 2> n{};
    for (auto l : b.masked_labels) n[0] += l >= 0;
    for (auto l : b.nsp_labels) n[1] += l >= 0;
    return n;
  }

  // Loss over x (N,C); when dx has rows, also dx (assigned) and the parameter gradients of
  // grad_scale · loss. ce (optional, N) receives the MLM cross-entropy at masked rows, 0 elsewhere.
  loss_stats forward_backward(const step_context& s, const_matrix_view<float> x, const bert_batch& b, float grad_scale,
                              matrix_view<float> dx, cache& c, std::span<float> ce = {}) const {
    select(b, c);
    const bool grad = dx.rows > 0;
    const std::size_t C = o_.channels, M = c.mlm_rows.size(), B = b.batch;
    if (grad) std::fill_n(dx.data, dx.rows * dx.cols, 0.0f);
    if (!ce.empty()) std::fill(ce.begin(), ce.end(), 0.0f);
    std::size_t labelled = 0;
    for (auto t : c.nsp_targets) labelled += t != ignore_index;
    // each objective's mean: over this batch, or over the global micro-batch the trainer counted
    const double mlm_n = s.objective_count(0, double(M)), nsp_n = s.objective_count(1, double(labelled));
    loss_stats st;
    st.weight_sum = s.objectives ? double(M + labelled) / (mlm_n + nsp_n) : 1.0;

    // masked LM
    if (M > 0) {
      auto xm = detail::gather_rows(x, c.mlm_rows, c.xm);
      auto z = c.z.matrix(M, C);
      transform_.forward(s, xm, z, c.transform_c);
      auto dz = grad ? c.dz.matrix(M, C) : matrix_view<float>{};
      std::vector<float> mce(M);
      const loss_stats m = decoder_.forward_backward(s, z, c.mlm_targets, {}, grad_scale / float(mlm_n), dz, mce);
      st.loss_sum += m.loss_sum / mlm_n;
      st.ce_sum = m.ce_sum;
      st.correct = m.correct;
      st.count = m.count;
      if (!ce.empty())
        for (std::size_t i = 0; i < M; ++i) ce[c.mlm_rows[i]] = mce[i];
      if (grad) {
        auto dxm = c.dxm.matrix(M, C);
        transform_.backward(s, dz, dxm, c.transform_c);
        detail::scatter_add_rows(dxm, c.mlm_rows, dx);
      }
    }

    // next-sentence prediction
    if (labelled > 0) {
      auto pooled = pooler_.forward(s, x, B, b.seq, c.pool_c);
      auto logits = c.nsp_logits.matrix(B, 2);
      classifier_.forward(s, pooled, logits, c.cls_c);
      const auto r = kernels::cross_entropy(logits, c.nsp_targets, {}, ignore_index, grad_scale / float(nsp_n), grad);
      st.loss_sum += r.loss_sum / nsp_n;
      st.aux_loss_sum = r.loss_sum;
      st.aux_correct = r.correct;
      st.aux_count = r.count;
      if (grad) {  // logits now hold dloss/dlogits
        auto dpooled = c.dpooled.matrix(B, C);
        classifier_.backward(s, logits, dpooled, c.cls_c);
        pooler_.backward(s, dpooled, dx, c.pool_c);
      }
    }
    return st;
  }

  // MLM logits (N,V) at every row of x (N,C), no loss.
  void logits(const step_context& s, const_matrix_view<float> x, matrix_view<float> out, cache& c) const {
    auto z = c.z.matrix(x.rows, o_.channels);
    transform_.forward(s, x, z, c.transform_c);
    decoder_.logits(s, z, out);
  }

 private:
  // The rows each objective reads, with their targets; checks the batch's prediction slots.
  void select(const bert_batch& b, cache& c) const {
    const std::size_t B = b.batch, L = b.seq;
    SPARSELM_CHECK(b.masked_positions.size() == b.masked_labels.size(), "bert batch: ", b.masked_positions.size(),
                   " masked positions but ", b.masked_labels.size(), " masked labels");
    SPARSELM_CHECK(b.masked_positions.size() % B == 0, "bert batch: ", b.masked_positions.size(),
                   " masked positions do not split into ", B, " sequences");
    SPARSELM_CHECK(b.nsp_labels.empty() || b.nsp_labels.size() == B, "bert batch: ", b.nsp_labels.size(),
                   " next-sentence labels for ", B, " sequences");
    const std::size_t P = b.masked_positions.size() / B;
    c.mlm_rows.clear();
    c.mlm_targets.clear();
    for (std::size_t i = 0; i < B; ++i)
      for (std::size_t k = 0; k < P; ++k) {
        const std::int32_t label = b.masked_labels[i * P + k], pos = b.masked_positions[i * P + k];
        if (label < 0) continue;
        SPARSELM_CHECK(pos >= 0 && std::size_t(pos) < L, "bert batch: masked position ", pos, " of sequence ", i,
                       " is outside [0, ", L, ")");
        SPARSELM_CHECK(std::size_t(label) < o_.vocab, "bert batch: masked label ", label, " of sequence ", i,
                       " is outside the vocabulary of ", o_.vocab);
        c.mlm_rows.push_back(i * L + std::size_t(pos));
        c.mlm_targets.push_back(label);
      }
    c.nsp_targets.assign(B, ignore_index);
    for (std::size_t i = 0; i < B; ++i) {
      if (b.nsp_labels.empty() || b.nsp_labels[i] < 0) continue;
      SPARSELM_CHECK(b.nsp_labels[i] <= 1, "bert batch: next-sentence label ", b.nsp_labels[i], " of sequence ", i,
                     " is not 0 or 1");
      c.nsp_targets[i] = b.nsp_labels[i];
    }
  }

  bert_head_options o_;
  transform_type transform_;
  param_ref bias_;
  tied_lm_head decoder_;
  bert_pooler<T> pooler_;
  linear<T> classifier_;
};

}  // namespace sparselm
