#pragma once
// Tied language-model head fused with the loss: logits = x · Eᵀ (+ bias), softmax cross-entropy,
// and the backward, computed over row chunks so the (N,V) logits never exist all at once.
//
// Legend: N rows, C channels (the embedding width), V vocab.
//   x (N,C), E (V,C) the tied embedding matrix, logits chunk (R,V), dx (N,C)
//   forward:  logits = x·Eᵀ [+ b]              gemm NT
//   backward: dx = dlogits·E                    gemm NN
//             dE += dlogitsᵀ·x ; db += colsum   gemm TN
// The GEMMs take the step's compute type (step_context::compute, kernels::gemm_as); the logits,
// the softmax and the loss are fp32.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <span>

#include "sparselm/core/threads.hpp"
#include "sparselm/kernels/cross_entropy.hpp"
#include "sparselm/kernels/gemm.hpp"
#include "sparselm/kernels/gemm_bf16.hpp"
#include "sparselm/kernels/reduce.hpp"
#include "sparselm/layers/context.hpp"

namespace sparselm {

// Targets equal to this are ignored by the loss (padding), as in PyTorch.
inline constexpr std::int32_t ignore_index = -100;

// Sums over a batch; the mean loss is loss_sum / weight_sum.
struct loss_stats {
  double loss_sum = 0;    // Σ w_i · CE_i
  double weight_sum = 0;  // Σ w_i
  double ce_sum = 0;      // Σ CE_i (unweighted; equals loss_sum without weights)
  std::size_t correct = 0, count = 0;
  // A second objective reported beside the first (BERT's next-sentence prediction): its summed
  // loss, correct predictions and count. Its loss is already included in loss_sum.
  double aux_loss_sum = 0;
  std::size_t aux_correct = 0, aux_count = 0;

  double mean_loss() const noexcept { return weight_sum > 0 ? loss_sum / weight_sum : 0.0; }
  double mean_ce() const noexcept { return count ? ce_sum / double(count) : 0.0; }
  double perplexity() const noexcept { return std::exp(mean_ce()); }
  double accuracy() const noexcept { return count ? double(correct) / double(count) : 0.0; }
  double aux_mean_loss() const noexcept { return aux_count ? aux_loss_sum / double(aux_count) : 0.0; }
  double aux_accuracy() const noexcept { return aux_count ? double(aux_correct) / double(aux_count) : 0.0; }
  loss_stats& operator+=(const loss_stats& o) noexcept {
    loss_sum += o.loss_sum;
    weight_sum += o.weight_sum;
    ce_sum += o.ce_sum;
    correct += o.correct;
    count += o.count;
    aux_loss_sum += o.aux_loss_sum;
    aux_correct += o.aux_correct;
    aux_count += o.aux_count;
    return *this;
  }
};

class tied_lm_head {
 public:
  // The temporaries of forward_backward (scratch::get): a chunk's logits (rows,V) and its rows'
  // cross-entropy (rows).
  struct workspace {
    buffer logits, ce;
    std::size_t bytes() const noexcept { return buffers_bytes(logits, ce); }
  };

  tied_lm_head() = default;
  // embedding: the (V,C) tensor whose transpose is the output projection; bias: optional (V).
  tied_lm_head(param_ref embedding, std::size_t vocab, std::size_t channels, std::optional<param_ref> bias = {},
               std::size_t chunk_rows = 1024)
      : e_(std::move(embedding)), b_(std::move(bias)), v_(vocab), c_(channels), chunk_(std::max<std::size_t>(1, chunk_rows)) {}

  std::size_t chunk_rows() const noexcept { return chunk_; }
  // The tied (V,C) tensor and the optional (V) bias.
  const param_ref& embedding() const noexcept { return e_; }
  const std::optional<param_ref>& bias() const noexcept { return b_; }
  void set_chunk_rows(std::size_t r) { chunk_ = std::max<std::size_t>(1, r); }

  // Loss over x's rows. When dx has rows, also computes dx (assigned) and accumulates dE (and db),
  // scaled by grad_scale: the gradient is that of grad_scale · Σ w_i·CE_i.
  // weights: empty (all 1) or one per row. ce_out (optional, one per row) receives the unweighted CE.
  loss_stats forward_backward(const step_context& s, const_matrix_view<float> x, std::span<const std::int32_t> targets,
                              std::span<const float> weights, float grad_scale, matrix_view<float> dx,
                              std::span<float> ce_out = {}) const {
    const std::size_t N = x.rows;
    SPARSELM_CHECK(x.cols == c_, "lm head: x ", shape_string(x), " has ", x.cols, " channels, expected ", c_);
    SPARSELM_CHECK(targets.size() == N, "lm head: ", targets.size(), " targets for ", N, " rows");
    SPARSELM_CHECK(weights.empty() || weights.size() == N, "lm head: ", weights.size(), " weights for ", N, " rows");
    SPARSELM_CHECK(ce_out.empty() || ce_out.size() == N, "lm head: ", ce_out.size(), " cross-entropy outputs for ", N,
                   " rows");
    const bool grad = dx.rows > 0;
    const auto E = s.pm(e_.index);
    loss_stats st;
    auto& ws = s.tmp->get<workspace>();
    std::span<float> ce = ws.ce.get(std::min(N, chunk_));
    for (std::size_t r0 = 0; r0 < N; r0 += chunk_) {
      const std::size_t R = std::min(chunk_, N - r0);
      auto logits = ws.logits.matrix(R, v_);
      auto xr = x.rows_slice(r0, R);
      kernels::gemm_as(s.compute, kernels::trans::n, kernels::trans::t, 1.0f, xr, E, 0.0f, logits,
                       b_ ? s.p(b_->index).data() : nullptr);
      auto w = weights.empty() ? weights : weights.subspan(r0, R);
      auto cs = kernels::cross_entropy(logits, targets.subspan(r0, R), w, ignore_index, grad_scale, grad,
                                       ce.subspan(0, R));
      st.loss_sum += cs.loss_sum;
      st.weight_sum += cs.weight_sum;
      st.correct += cs.correct;
      st.count += cs.count;
      for (std::size_t i = 0; i < R; ++i) st.ce_sum += ce[i];
      if (!ce_out.empty()) std::copy_n(ce.begin(), R, ce_out.begin() + std::ptrdiff_t(r0));
      if (grad) {
        kernels::gemm_as(s.compute, kernels::trans::n, kernels::trans::n, 1.0f, logits, E, 0.0f, dx.rows_slice(r0, R));
        kernels::gemm_as(s.compute, kernels::trans::t, kernels::trans::n, 1.0f, logits, xr, 1.0f, s.gm(e_.index));
        if (b_) kernels::add_column_sums(logits, s.g(b_->index));
      }
    }
    return st;
  }

  // Logits only (no loss): out (N,V). Up to few_rows rows (decoding) stream E once instead of
  // packing it for the GEMM, which would cost more than the product itself.
  static constexpr std::size_t few_rows = 4;
  void logits(const step_context& s, const_matrix_view<float> x, matrix_view<float> out) const {
    SPARSELM_CHECK(x.cols == c_ && out.rows == x.rows && out.cols == v_, "lm head: x ", shape_string(x), " and out ",
                   shape_string(out), " do not fit ", c_, " channels and ", v_, " logits");
    const float* bias = b_ ? s.p(b_->index).data() : nullptr;
    if (x.rows > few_rows) {
      kernels::gemm_as(s.compute, kernels::trans::n, kernels::trans::t, 1.0f, x, s.pm(e_.index), 0.0f, out, bias);
      return;
    }
    const auto E = s.pm(e_.index);
    parallel_chunks(v_, [&](int, std::size_t v0, std::size_t v1) {
      for (std::size_t v = v0; v < v1; ++v)
        for (std::size_t m = 0; m < x.rows; ++m) out(m, v) = kernels::detail::dot(x.row(m), E.row(v), c_) + (bias ? bias[v] : 0.0f);
    }, 256);
  }

 private:
  param_ref e_;
  std::optional<param_ref> b_;
  std::size_t v_ = 0, c_ = 0, chunk_ = 1024;
};

}  // namespace sparselm
