#pragma once
// BERT's fine-tuning heads on the same encoder as bert<> (models/bert.hpp): the embedding and the
// blocks keep bert<>'s tensor names, so a pre-training checkpoint's encoder loads into either.
//
// Legend: B batch, T sequence, N = B·T rows, C channels, K labels.
//   classification:  pooled (B,C) = tanh(x[CLS]·Wp + bp);  logits (B,K) = dropout(pooled)·Wc + bc
//                    loss = mean CE over the sequences with a label (label < 0: none)
//                    tensors "pooler.dense.*", "classifier.*" (HF BertForSequenceClassification)
//   span (SQuAD):    logits (N,2) = x·Wq + bq; start (B,T) = logits[:, 0], end (B,T) = logits[:, 1],
//                    each softmax over the sequence's valid positions (padding excluded);
//                    loss = (mean CE(start) + mean CE(end)) / 2 over the sequences with a label
//                    tensors "qa_outputs.*" (HF BertForQuestionAnswering)
//
//   bert_classifier<> m(cfg, 2);  m.init(seed);  io::load_model(...)  // encoder from pre-training
//   auto st = m.evaluate(bert_classify_batch{ids, types, lengths, labels, B, T});  // st.accuracy()
//   m.predict(batch, logits);                                                     // (B,K)
//   bert_classifier<> slice(cfg, 2, {}, tp);  slice.predict(batch, logits, t.inference_context());  // split
//
// HF clamps span labels outside the sequence to "ignored"; here they are errors naming the
// sequence, and a label below 0 means no loss for that sequence.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "sparselm/kernels/cross_entropy.hpp"
#include "sparselm/kernels/dropout.hpp"
#include "sparselm/models/bert.hpp"

namespace sparselm {

struct bert_classify_batch {
  std::span<const std::int32_t> ids;          // (B·T)
  std::span<const std::int32_t> token_types;  // (B·T); empty: all 0
  std::span<const std::int32_t> lengths;      // (B) valid tokens per sequence; empty: all T
  std::span<const std::int32_t> labels;       // (B) class of each sequence; < 0: no loss
  std::size_t batch = 0, seq = 0;
};

struct bert_span_batch {
  std::span<const std::int32_t> ids, token_types, lengths;  // as bert_classify_batch
  std::span<const std::int32_t> start_positions;            // (B) answer start token; < 0: no loss
  std::span<const std::int32_t> end_positions;              // (B) answer end token (inclusive)
  std::size_t batch = 0, seq = 0;
};

struct bert_classifier_options {
  std::size_t channels = 0, labels = 2;
  float dropout = 0.0f;      // on the pooled vector (HF: hidden_dropout_prob)
  std::uint64_t site = 3;    // dropout stream
};

namespace detail {
inline std::size_t valid_length(std::span<const std::int32_t> lengths, std::size_t i, std::size_t T) {
  if (lengths.empty()) return T;
  return std::size_t(std::clamp<std::int32_t>(lengths[i], 0, std::int32_t(T)));
}
}  // namespace detail

template <class T = float>
class bert_classification_head {
 public:
  struct cache {
    std::vector<std::int32_t> targets;
    buffer dropped, logits, dpooled;  // (B,C), (B,K), (B,C)
    typename bert_pooler<T>::cache pool_c;
    typename linear<T>::cache cls_c;
  };

  bert_classification_head() = default;
  bert_classification_head(arena_layout& layout, const bert_classifier_options& o) : o_(o) {
    SPARSELM_CHECK(o.labels >= 2, "bert classifier: ", o.labels, " labels; at least 2");
    pooler_ = bert_pooler<T>(layout, o.channels);
    classifier_ = linear<T>(layout, "classifier", o.channels, o.labels);
  }

  template <class F>
  void visit(F&& f) const {
    f(pooler_);
    f(classifier_);
  }
  std::size_t labels() const noexcept { return o_.labels; }

  double loss_normaliser(const bert_classify_batch& b) const {
    for (auto l : b.labels)
      if (l >= 0) return 1.0;
    return 0.0;
  }

  // Loss (mean over the labelled sequences) over x (N,C); with dx rows, also dx (assigned) and the
  // parameter gradients of grad_scale · loss.
  loss_stats forward_backward(const step_context& s, const_matrix_view<float> x, const bert_classify_batch& b,
                              float grad_scale, matrix_view<float> dx, cache& c, std::span<float> = {}) const {
    const std::size_t B = b.batch, C = o_.channels, K = o_.labels;
    SPARSELM_CHECK(b.labels.size() == B, "bert classify batch: ", b.labels.size(), " labels for ", B, " sequences");
    c.targets.assign(B, ignore_index);
    std::size_t labelled = 0;
    for (std::size_t i = 0; i < B; ++i) {
      if (b.labels[i] < 0) continue;
      SPARSELM_CHECK(std::size_t(b.labels[i]) < K, "bert classify batch: label ", b.labels[i], " of sequence ", i,
                     " is outside [0, ", K, ")");
      c.targets[i] = b.labels[i];
      ++labelled;
    }
    const bool grad = dx.rows > 0;
    if (grad) std::fill_n(dx.data, dx.rows * dx.cols, 0.0f);
    loss_stats st;
    st.weight_sum = 1.0;
    if (labelled == 0) return st;
    auto logits = forward(s, x, B, b.seq, c);
    const auto r = kernels::cross_entropy(logits, c.targets, {}, ignore_index, grad_scale / float(labelled), grad);
    st.loss_sum = r.loss_sum / double(labelled);
    st.ce_sum = r.loss_sum;
    st.correct = r.correct;
    st.count = r.count;
    if (grad) {  // logits now hold dloss/dlogits
      auto dpooled = c.dpooled.matrix(B, C);
      classifier_.backward(s, logits, dpooled, c.cls_c);
      if (s.training && o_.dropout > 0) {
        std::span<float> d(dpooled.data, B * C);
        kernels::dropout_backward(d, d, o_.dropout, s.rng, s.stream(o_.site));
      }
      pooler_.backward(s, dpooled, dx, c.pool_c);
    }
    (void)C;
    return st;
  }

  // Class logits (B,K) of every sequence.
  void logits(const step_context& s, const_matrix_view<float> x, matrix_view<float> out, cache& c) const {
    const std::size_t B = out.rows;
    auto l = forward(s, x, B, x.rows / B, c);
    std::copy_n(l.data, B * o_.labels, out.data);
  }

 private:
  matrix_view<float> forward(const step_context& s, const_matrix_view<float> x, std::size_t B, std::size_t L,
                             cache& c) const {
    auto pooled = pooler_.forward(s, x, B, L, c.pool_c);
    auto in = c.dropped.matrix(B, o_.channels);
    std::copy_n(pooled.data, B * o_.channels, in.data);
    if (s.training && o_.dropout > 0) {
      std::span<float> v(in.data, B * o_.channels);
      kernels::dropout_forward(v, v, o_.dropout, s.rng, s.stream(o_.site));
    }
    auto logits = c.logits.matrix(B, o_.labels);
    classifier_.forward(s, in, logits, c.cls_c);
    return logits;
  }

  bert_classifier_options o_;
  bert_pooler<T> pooler_;
  linear<T> classifier_;
};

template <class T = float>
class bert_span_head {
 public:
  struct cache {
    buffer logits, start, end;  // (N,2), (B,T), (B,T)
    std::vector<std::int32_t> start_t, end_t;
    typename linear<T>::cache qa_c;
  };

  bert_span_head() = default;
  bert_span_head(arena_layout& layout, std::size_t channels) : channels_(channels), qa_(layout, "qa_outputs", channels, 2) {}

  template <class F>
  void visit(F&& f) const {
    f(qa_);
  }

  double loss_normaliser(const bert_span_batch& b) const {
    for (auto l : b.start_positions)
      if (l >= 0) return 1.0;
    return 0.0;
  }

  loss_stats forward_backward(const step_context& s, const_matrix_view<float> x, const bert_span_batch& b,
                              float grad_scale, matrix_view<float> dx, cache& c, std::span<float> = {}) const {
    const std::size_t B = b.batch, L = b.seq;
    SPARSELM_CHECK(b.start_positions.size() == B && b.end_positions.size() == B, "bert span batch: ",
                   b.start_positions.size(), " start and ", b.end_positions.size(), " end positions for ", B,
                   " sequences");
    c.start_t.assign(B, ignore_index);
    c.end_t.assign(B, ignore_index);
    std::size_t labelled = 0;
    for (std::size_t i = 0; i < B; ++i) {
      const std::int32_t st = b.start_positions[i], en = b.end_positions[i];
      if (st < 0) continue;
      const std::size_t n = detail::valid_length(b.lengths, i, L);
      SPARSELM_CHECK(std::size_t(st) < n && en >= 0 && std::size_t(en) < n, "bert span batch: answer span [", st, ", ",
                     en, "] of sequence ", i, " is outside its ", n, " valid positions");
      SPARSELM_CHECK(st <= en, "bert span batch: answer of sequence ", i, " ends (", en, ") before it starts (", st,
                     ")");
      c.start_t[i] = st;
      c.end_t[i] = en;
      ++labelled;
    }
    const bool grad = dx.rows > 0;
    if (grad) std::fill_n(dx.data, dx.rows * dx.cols, 0.0f);
    loss_stats st;
    st.weight_sum = 1.0;
    if (labelled == 0) return st;
    auto [start, end] = forward(s, x, b, c);
    // Each of the two means is halved: loss = (CE_start + CE_end) / 2.
    const float g = grad_scale / float(2 * labelled);
    const auto rs = kernels::cross_entropy(start, c.start_t, {}, ignore_index, g, grad);
    const auto re = kernels::cross_entropy(end, c.end_t, {}, ignore_index, g, grad);
    st.loss_sum = (rs.loss_sum + re.loss_sum) / double(2 * labelled);
    st.ce_sum = rs.loss_sum;  // start and end reported apart: main = start, aux = end
    st.correct = rs.correct;
    st.count = rs.count;
    st.aux_loss_sum = re.loss_sum;
    st.aux_correct = re.correct;
    st.aux_count = re.count;
    if (grad) {  // start/end now hold dloss/dlogits; padded positions got probability 0
      auto dl = c.logits.matrix(B * L, 2);
      for (std::size_t n = 0; n < B * L; ++n) {
        dl.data[2 * n] = start.data[n];
        dl.data[2 * n + 1] = end.data[n];
      }
      qa_.backward(s, dl, dx, c.qa_c);
    }
    return st;
  }

  // Start and end logits (B·T, 2) of every position (padding included: mask it by the lengths).
  void logits(const step_context& s, const_matrix_view<float> x, matrix_view<float> out, cache& c) const {
    qa_.forward(s, x, out, c.qa_c);
    (void)c;
  }
  // Start and end logits (B,T) each; padded positions -inf.
  std::pair<matrix_view<float>, matrix_view<float>> forward(const step_context& s, const_matrix_view<float> x,
                                                            const bert_span_batch& b, cache& c) const {
    const std::size_t B = b.batch, L = b.seq;
    auto lg = c.logits.matrix(B * L, 2);
    qa_.forward(s, x, lg, c.qa_c);
    auto start = c.start.matrix(B, L), end = c.end.matrix(B, L);
    constexpr float neg = -std::numeric_limits<float>::infinity();
    for (std::size_t i = 0; i < B; ++i) {
      const std::size_t n = detail::valid_length(b.lengths, i, L);
      for (std::size_t t = 0; t < L; ++t) {
        start.data[i * L + t] = t < n ? lg.data[2 * (i * L + t)] : neg;
        end.data[i * L + t] = t < n ? lg.data[2 * (i * L + t) + 1] : neg;
      }
    }
    return {start, end};
  }

 private:
  std::size_t channels_ = 0;
  linear<T> qa_;
};

// Sequence classification (num_labels classes).
template <class T = float, sparsity_type Sparsity = dense>
class bert_classifier : public bert_encoder_model<T, Sparsity, bert_classification_head<T>, bert_classify_batch> {
  using base = bert_encoder_model<T, Sparsity, bert_classification_head<T>, bert_classify_batch>;

 public:
  // tp: this rank's part of a tensor-parallel group (the encoder's blocks split; the head whole).
  bert_classifier(const bert_config& cfg, std::size_t num_labels, const sparse_plan& plan = {},
                  parallel::tensor_split tp = {})
      : base(
            cfg, plan,
            [&](arena_layout& layout, const bert_embedding&) {
              return bert_classification_head<T>(
                  layout, {.channels = cfg.hidden_size, .labels = num_labels, .dropout = cfg.hidden_dropout_prob});
            },
            tp) {}
  std::size_t num_labels() const noexcept { return this->head().labels(); }
  // The same model unsplit, built with `plan` (a tensor-parallel group's whole model:
  // models/tensor_shards.hpp, unsplit_model).
  bert_classifier unsplit(const sparse_plan& plan) const { return bert_classifier(this->config(), num_labels(), plan); }
  // Class logits (B, num_labels). ctx: a split model's group sum (trainer::inference_context()).
  void predict(const bert_classify_batch& b, matrix_view<float> out, step_context ctx = {}) {
    this->logits(b, out, ctx);
  }
};

// Extractive question answering (SQuAD): start and end logits per position.
template <class T = float, sparsity_type Sparsity = dense>
class bert_qa : public bert_encoder_model<T, Sparsity, bert_span_head<T>, bert_span_batch> {
  using base = bert_encoder_model<T, Sparsity, bert_span_head<T>, bert_span_batch>;

 public:
  // tp: this rank's part of a tensor-parallel group (the encoder's blocks split; the head whole).
  explicit bert_qa(const bert_config& cfg, const sparse_plan& plan = {}, parallel::tensor_split tp = {})
      : base(
            cfg, plan,
            [&](arena_layout& layout, const bert_embedding&) { return bert_span_head<T>(layout, cfg.hidden_size); },
            tp) {}
  // Start and end logits (B·T, 2) of every position. ctx: a split model's group sum
  // (trainer::inference_context()).
  void predict(const bert_span_batch& b, matrix_view<float> out, step_context ctx = {}) { this->logits(b, out, ctx); }
};

}  // namespace sparselm
