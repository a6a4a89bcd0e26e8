#pragma once
// What the trainer sums over the replicas of a data-parallel run (train/trainer.hpp):
//
//   step_sums          per micro-batch loss normalisers, tokens, samples and the objectives' target
//                      counts of models whose loss is a sum of means, all-reduced once per step
//   sum_over_replicas  loss statistics (every rank gets the global step's numbers)
//   gradient_shards    with sharded optimiser state (ZeRO-1, optim/shard.hpp): each rank's flat
//                      range of the arena, the sum of each rank's own gradients only (sum_scatter),
//                      the global gradient norm from each rank's own tensors, and the all-gather
//                      of the updated parameters
//
// Every sum here is bit-identical on every rank and to the sum one process computes with the
// whole global batch, as the data-parallel tests check (tests/train/test_data_parallel.cpp).

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "sparselm/core/arena.hpp"
#include "sparselm/core/error.hpp"
#include "sparselm/layers/lm_head.hpp"
#include "sparselm/optim/clipping.hpp"
#include "sparselm/optim/shard.hpp"
#include "sparselm/parallel/replica_group.hpp"

namespace sparselm {

namespace detail {
// Denominator of a micro-batch's mean loss: the model's own (loss options such as S1's weighted
// loss, models/lm_loss.hpp) when it has one, else the batch's Σ weights.
template <class Model, class Batch>
double loss_normaliser(const Model& m, const Batch& b) {
  if constexpr (requires { { m.loss_normaliser(b) } -> std::convertible_to<double>; })
    return m.loss_normaliser(b);
  else
    return b.weight_sum();
}

// How many objectives a model's loss averages separately (step_context::objective_counts): the size
// of its objective_counts(batch) array, 0 when it has none.
template <class Model, class Batch>
constexpr std::size_t objective_count_v = [] {
  if constexpr (requires(const Model& m, const Batch& b) { m.objective_counts(b); })
    return std::tuple_size_v<decltype(std::declval<const Model&>().objective_counts(std::declval<const Batch&>()))>;
  else
    return std::size_t{0};
}();
}  // namespace detail

// Sums loss statistics over the replicas of a data-parallel run, in place (every rank gets the sum).
inline void sum_over_replicas(parallel::replica_group& g, loss_stats& st) {
  if (g.size() == 1) return;
  double v[8] = {st.loss_sum,       st.weight_sum,   st.ce_sum,
                 double(st.correct), double(st.count), st.aux_loss_sum,
                 double(st.aux_correct), double(st.aux_count)};
  g.all_reduce(std::span<double>(v));
  st.loss_sum = v[0];
  st.weight_sum = v[1];
  st.ce_sum = v[2];
  st.correct = std::size_t(v[3]);
  st.count = std::size_t(v[4]);
  st.aux_loss_sum = v[5];
  st.aux_correct = std::size_t(v[6]);
  st.aux_count = std::size_t(v[7]);
}

// The per-step counts of K micro-batches of a Model over the replicas, whose rows together form
// the global micro-batches: layout [K normalisers, tokens, samples, K × J objective counts].
template <class Model, class Batch>
class step_sums {
 public:
  static constexpr std::size_t objectives = detail::objective_count_v<Model, Batch>;  // J

  // Counts this rank's micro-batches and sums them over the replicas (one all-reduce).
  void compute(const Model& model, std::span<const Batch> micro, parallel::replica_group& g) {
    K_ = micro.size();
    v_.assign(K_ * (1 + objectives) + 2, 0.0);
    for (std::size_t k = 0; k < K_; ++k) {
      v_[k] = detail::loss_normaliser(model, micro[k]);
      v_[K_] += double(micro[k].batch * micro[k].seq);
      v_[K_ + 1] += double(micro[k].batch);
      if constexpr (objectives > 0) {
        const auto n = model.objective_counts(micro[k]);
        std::copy(n.begin(), n.end(), v_.begin() + std::ptrdiff_t(K_ + 2 + k * objectives));
      }
    }
    g.all_reduce(std::span<double>(v_));
  }

  // The global normaliser of micro-batch k's mean loss. A sum of means (J > 0) divides by the
  // objectives' global counts itself (objective_counts()), so its normaliser is 1 when any
  // objective has a target at all, else 0.
  double normaliser(std::size_t k) const {
    if constexpr (objectives == 0) {
      return v_[k];
    } else {
      for (std::size_t j = 0; j < objectives; ++j)
        if (v_[K_ + 2 + k * objectives + j] > 0) return 1.0;
      return 0.0;
    }
  }
  std::size_t tokens() const noexcept { return std::size_t(v_[K_]); }
  std::size_t samples() const noexcept { return std::size_t(v_[K_ + 1]); }
  // Every micro-batch's global objective counts, k-major (step_context::objective_counts).
  std::span<const double> objective_counts() const noexcept { return std::span<const double>(v_).subspan(K_ + 2); }

 private:
  std::size_t K_ = 0;
  std::vector<double> v_;
};

// Each data-parallel rank's share of the flat gradient and parameter arenas when the optimiser
// state is sharded: the flat ranges of the tensors partition_tensors gives each rank.
class gradient_shards {
 public:
  // Records every rank's flat range for the partition `parts` of `layout`.
  void assign(const arena_layout& layout, const std::vector<optim::tensor_range>& parts) {
    bounds_.resize(parts.size() + 1);
    for (std::size_t r = 0; r < parts.size(); ++r)
      bounds_[r] = parts[r].begin < layout.count() ? layout[parts[r].begin].offset : layout.total();
    bounds_[parts.size()] = layout.total();
  }
  bool active() const noexcept { return !bounds_.empty(); }
  // Flat element offsets of every rank's range, and total() (size() + 1 entries).
  std::span<const std::size_t> bounds() const noexcept { return bounds_; }

  // Byte offsets of every rank's range for elements of `elem` bytes (the gathers' displacements).
  std::vector<std::size_t> byte_bounds(std::size_t elem) const {
    std::vector<std::size_t> b(bounds_.size());
    for (std::size_t r = 0; r < b.size(); ++r) b[r] = bounds_[r] * elem;
    return b;
  }

  // Starts the sum over the replicas of gradient elements [begin, end) of `all`: each rank
  // receives the sum of the part of its own range only (half an all-reduce's traffic).
  void start_sum(parallel::replica_group& g, std::span<float> all, std::size_t begin, std::size_t end) {
    scatter_.resize(bounds_.size());
    for (std::size_t r = 0; r < bounds_.size(); ++r) scatter_[r] = std::clamp(bounds_[r], begin, end) - begin;
    g.sum_scatter(all.subspan(begin, end - begin), scatter_);
  }

  // The global gradient norm when each rank holds the summed gradients of its own tensors only:
  // the per-tensor sums of squares of its tensors (the others' 0) are summed over the replicas,
  // each entry from one rank, so the norm is the unsharded one bit for bit.
  double norm(parallel::replica_group& g, const arena<float>& grads) const {
    const std::size_t r = g.rank();
    auto sq = optim::tensor_sum_squares(grads, bounds_[r], bounds_[r + 1]);
    g.all_reduce(std::span<double>(sq));
    double s = 0.0;
    for (double x : sq) s += x;
    return std::sqrt(s);
  }

  // After each rank updated its own tensors: every rank receives the others' parameters.
  void share_params(parallel::replica_group& g, arena<float>& params) const {
    g.all_gather_bytes(std::as_writable_bytes(params.all()), byte_bounds(sizeof(float)));
  }

 private:
  std::vector<std::size_t> bounds_;   // flat element offsets of each rank's tensors, and total()
  std::vector<std::size_t> scatter_;  // bounds_ within one part's range
};

// Data replicas of a pipeline over ranks (train/rank_grid.hpp) with the optimiser state sharded
// by stage: a stage's replicas sum only the gradient ranges the stage needs: its own tensors, and on
// the last stage the tensors it shares with stage 0 (tied_gradient_sum adds those afterwards), so
// each sum is the one the unsharded grid makes, in the same order.
class stage_range_sums {
 public:
  // Stage s of S: its flat range [bounds[s], bounds[s + 1]), and on the last stage the tied tensors.
  void assign(const arena_layout& L, std::span<const std::size_t> bounds, std::size_t s, std::size_t S,
              const std::vector<std::size_t>& tied) {
    ranges_.assign(1, {bounds[s], bounds[s + 1]});
    if (s + 1 == S)
      for (std::size_t k : tied) ranges_.emplace_back(L[k].offset, L[k].offset + L[k].size);
  }
  bool active() const noexcept { return !ranges_.empty(); }
  // Starts the sum over g of the recorded ranges' part of elements [begin, end) of all.
  void start_sum(parallel::replica_group& g, std::span<float> all, std::size_t begin, std::size_t end) const {
    for (const auto& [lo, hi] : ranges_) {
      const std::size_t a = std::max(lo, begin), b = std::min(hi, end);
      if (a < b) g.start_sum(all.subspan(a, b - a));
    }
  }

 private:
  std::vector<std::pair<std::size_t, std::size_t>> ranges_;  // flat [begin, end) ranges
};

// A pipeline over ranks with the optimiser state sharded by stage (trainer_options::shard_optimizer):
// only a stage's own layers write its tensors' gradients, except head tensors tied to the
// embedding (owned by stage 0), to which the last stage adds. add() sends the last rank's part of
// each to rank 0, which adds it: one message per tied tensor in place of a sum over the arena.
class tied_gradient_sum {
 public:
  void assign(std::vector<std::size_t> tensors) { tensors_ = std::move(tensors); }
  const std::vector<std::size_t>& tensors() const noexcept { return tensors_; }
  void add(parallel::replica_group& g, arena<float>& grads) {
    const std::size_t last = g.size() - 1;
    constexpr std::uint64_t tag = 30000;  // above the pipeline's activation tags (2 per micro-batch)
    for (std::size_t k = 0; k < tensors_.size(); ++k) {
      const auto grad = grads[tensors_[k]];
      if (g.rank() == last) {
        g.send_now(grad, 0, tag + k);
      } else if (g.rank() == 0) {
        in_.resize(grad.size());
        g.recv(in_, last, tag + k);
        for (std::size_t i = 0; i < grad.size(); ++i) grad[i] += in_[i];
      }
    }
  }
  // After the update, when the ranks keep only their stages' parameters (train/stage_params.hpp):
  // rank 0 sends the tied tensors' new values to the last rank, whose head reads them.
  void share_params(parallel::replica_group& g, arena<float>& params) {
    const std::size_t last = g.size() - 1;
    constexpr std::uint64_t tag = 31000;
    for (std::size_t k = 0; k < tensors_.size(); ++k) {
      if (g.rank() == 0)
        g.send_now(params[tensors_[k]], last, tag + k);
      else if (g.rank() == last)
        g.recv(params[tensors_[k]], 0, tag + k);
    }
  }

 private:
  std::vector<std::size_t> tensors_;
  std::vector<float> in_;  // rank 0: the last stage's part of one tied tensor's gradient
};

}  // namespace sparselm
