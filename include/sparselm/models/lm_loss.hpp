#pragma once
// Causal-LM batches and the loss options shared by the LM models: plain mean
// cross-entropy, the S1 weighted repeated-token loss, and the autoregression offset.
//
// Legend: B batch, T positions per sequence, N = B·T rows; targets (N) with ignore_index at padding.
//
//   autoregression_offset k: positions t < k of every sequence are not scored, i.e. S1's
//       logits[:, k:-1] against tokens[:, k+1:] (row t of a batch predicts token t + 1).
//   weight_repeats: for each scored position i of a sequence,
//       w_i = 1 / #{ j scored in the same sequence : t_j == t_i }
//       loss = Σ_i w_i·CE_i / N_s          N_s = number of scored positions (not Σ w)
//   otherwise: loss = Σ_i w_i·CE_i / Σ_i w_i over the scored positions (w = the batch's weights or 1).
//
// The normaliser (denominator) of a batch is lm_loss_normaliser(); a model using these options
// reports it as loss_stats::weight_sum, so loss_stats::mean_loss() is the loss above, and
// loss_stats::mean_ce() stays the unweighted mean cross-entropy (S1's `xentropy`).
//
//   lm_loss_targets lt;
//   const token_batch& scored = lt.apply(options, batch);      // masked targets + weights
//   loss_stats st = head.forward_backward(s, x, scored.targets, scored.weights, 1.0f / lt.normaliser(), dx);
//   lt.finish(st);

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "sparselm/core/error.hpp"
#include "sparselm/layers/lm_head.hpp"
#include "sparselm/core/json.hpp"

namespace sparselm {

// One training or evaluation batch: ids and targets (B·T each), optional per-position weights.
struct token_batch {
  std::span<const std::int32_t> ids;
  std::span<const std::int32_t> targets;
  std::span<const float> weights;
  std::size_t batch = 0, seq = 0;

  // Σ weights over the targets that are not ignore_index (the count of such targets without weights).
  double weight_sum() const noexcept {
    double w = 0;
    for (std::size_t i = 0; i < targets.size(); ++i)
      if (targets[i] != ignore_index) w += weights.empty() ? 1.0 : double(weights[i]);
    return w;
  }
};

struct lm_loss_options {
  bool weight_repeats = false;            // S1: down-weight tokens repeated within a sequence
  std::size_t autoregression_offset = 0;  // k: positions t < k are not scored

  bool active() const noexcept { return weight_repeats || autoregression_offset > 0; }
  bool operator==(const lm_loss_options&) const = default;

  // {"weight_repeats": bool, "autoregression_offset": k}; both optional, unknown keys are errors.
  static lm_loss_options from_json(const json& j, const std::string& context = "loss") {
    json_fields r(j, context);
    lm_loss_options o;
    o.weight_repeats = r.get("weight_repeats", o.weight_repeats);
    o.autoregression_offset = r.get("autoregression_offset", o.autoregression_offset);
    r.finish();
    return o;
  }
  json to_json() const { return {{"weight_repeats", weight_repeats}, {"autoregression_offset", autoregression_offset}}; }
};

namespace detail {
inline void check_loss_batch(const lm_loss_options& o, const token_batch& b) {
  SPARSELM_CHECK(b.targets.size() == b.batch * b.seq, "lm loss: ", b.targets.size(), " targets for a ", b.batch, " x ",
                 b.seq, " batch");
  SPARSELM_CHECK(b.weights.empty() || b.weights.size() == b.targets.size(), "lm loss: ", b.weights.size(),
                 " weights for ", b.targets.size(), " targets");
  SPARSELM_CHECK(!(o.weight_repeats && !b.weights.empty()),
                 "lm loss: the batch carries its own weights and the loss option 'weight_repeats' is on; use one");
}
inline bool scored(const lm_loss_options& o, const token_batch& b, std::size_t i) noexcept {
  return b.targets[i] != ignore_index && i % b.seq >= o.autoregression_offset;
}
}  // namespace detail

// The denominator of the batch's loss under o (see the header comment).
inline double lm_loss_normaliser(const lm_loss_options& o, const token_batch& b) {
  if (b.targets.empty()) return 0.0;
  detail::check_loss_batch(o, b);
  double n = 0;
  for (std::size_t i = 0; i < b.targets.size(); ++i)
    if (detail::scored(o, b, i)) n += (o.weight_repeats || b.weights.empty()) ? 1.0 : double(b.weights[i]);
  return n;
}

// w_i = 1 / (occurrences of targets[i] among the scored positions of its sequence); 0 where not
// scored. targets (B·T), weights (B·T).
inline void repeated_token_weights(std::span<const std::int32_t> targets, std::size_t batch, std::size_t seq,
                                   std::size_t offset, std::span<float> weights) {
  SPARSELM_CHECK(targets.size() == batch * seq && weights.size() == targets.size(), "repeated_token_weights: ",
                 targets.size(), " targets and ", weights.size(), " weights for a ", batch, " x ", seq, " batch");
  std::vector<std::pair<std::int32_t, std::size_t>> row;  // (target, position) of the scored positions
  row.reserve(seq);
  for (std::size_t b = 0; b < batch; ++b) {
    row.clear();
    for (std::size_t t = 0; t < seq; ++t) {
      const std::size_t i = b * seq + t;
      weights[i] = 0.0f;
      if (t >= offset && targets[i] != ignore_index) row.emplace_back(targets[i], i);
    }
    std::sort(row.begin(), row.end());
    for (std::size_t s = 0; s < row.size();) {
      std::size_t e = s;
      while (e < row.size() && row[e].first == row[s].first) ++e;
      const float w = 1.0f / float(e - s);
      for (std::size_t k = s; k < e; ++k) weights[row[k].second] = w;
      s = e;
    }
  }
}

// The scored targets (offset applied) and weights of batches, in buffers reused across calls.
class lm_loss_targets {
 public:
  // The batch to hand to the loss: b itself when o is inactive, otherwise a view of this object's
  // buffers (valid until the next apply).
  const token_batch& apply(const lm_loss_options& o, const token_batch& b) {
    weight_repeats_ = o.weight_repeats;
    if (!o.active()) {
      out_ = b;
      normaliser_ = b.targets.empty() ? 0.0 : b.weight_sum();
      return out_;
    }
    detail::check_loss_batch(o, b);
    targets_.assign(b.targets.begin(), b.targets.end());
    for (std::size_t i = 0; i < targets_.size(); ++i)
      if (i % b.seq < o.autoregression_offset) targets_[i] = ignore_index;
    out_ = b;
    out_.targets = targets_;
    if (o.weight_repeats) {
      weights_.resize(targets_.size());
      repeated_token_weights(targets_, b.batch, b.seq, 0, weights_);
      out_.weights = weights_;
    }
    normaliser_ = lm_loss_normaliser(o, b);
    return out_;
  }

  // Denominator of the last applied batch.
  double normaliser() const noexcept { return normaliser_; }

  // Makes stats from the loss over the last applied batch report that batch's normaliser as
  // weight_sum (only the weighted repeated-token loss differs from Σ w).
  void finish(loss_stats& st) const noexcept {
    if (weight_repeats_) st.weight_sum = normaliser_;
  }

 private:
  std::vector<std::int32_t> targets_;
  std::vector<float> weights_;
  token_batch out_;
  double normaliser_ = 0;
  bool weight_repeats_ = false;
};

}  // namespace sparselm
