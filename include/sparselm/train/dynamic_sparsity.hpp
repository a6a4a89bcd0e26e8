#pragma once
// Wires a pattern updater (sparse/update.hpp; docs/design/sparsity-algorithm.md) into a trainer: on RigL update steps the
// sparse layers compute pooled dense gradients during backward; after the optimiser step the
// patterns are pruned and regrown, the optimiser slots of regrown blocks are zeroed, and the
// statistics of the last update are offered to the metrics log.
//
//   sparselm::dynamic_sparsity ds(model, trainer, sparse::update_config::from_json(j), seed);
//   hooks.extra_metrics = [&](std::size_t) { return ds.take_metrics(); };
//   hooks.log_now = [&](std::size_t) { return ds.has_pending(); };   // a line at every update
//
// static sparsity = no dynamic_sparsity object (patterns stay as initialised).
//
// Under tensor parallelism (train/tensor_grid.hpp) each rank updates its own slices: a slice prunes
// and regrows its share (prune_count of the slice's blocks), scored by its part of the dense
// gradient, so every rank keeps its number of blocks; the data replicas of a slice make the same
// update (summed scores, the same seed: the programs seed the updater with parallel::shard_seed).
// The statistics logged are the group's totals. A block-sparse weight every rank holds whole (S1's
// embedding and head projections) makes the same update on every rank (the group's stream,
// group_seed) and counts once in the totals.

#include <cstdint>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "sparselm/core/rng.hpp"
#include "sparselm/kernels/bsr.hpp"
#include "sparselm/layers/visit.hpp"
#include "sparselm/sparse/pattern_io.hpp"
#include "sparselm/sparse/update.hpp"

namespace sparselm {

// The kernels' pooling of a dense gradient into block scores for an update's grad_pooling.
inline kernels::block_pooling block_pooling_of(sparse::grad_pooling p) {
  switch (p) {
    case sparse::grad_pooling::sum: return kernels::block_pooling::sum;
    case sparse::grad_pooling::max: return kernels::block_pooling::max;
    default: return kernels::block_pooling::avg;
  }
}

template <class Model, class Trainer>
class dynamic_sparsity {
 public:
  // seed: this rank's (parallel::shard_seed under tensor parallelism); group_seed: the stream of the
  // block-sparse weights every rank of the group holds whole (S1's embedding and head projections),
  // the same on every rank (absent: seed).
  dynamic_sparsity(Model& model, Trainer& trainer, sparse::update_config cfg, std::uint64_t seed,
                   std::optional<std::uint64_t> group_seed = std::nullopt)
      : model_(model), trainer_(trainer), up_(std::move(cfg), counter_rng(seed)) {
    up_.config().schedule.validate();
    if (group_seed) up_.set_group_rng(counter_rng(*group_seed));
    if constexpr (requires { model.tensor_split(); })
      if (model.tensor_split().active())
        visit_tree(model, [&](const auto& n) {
          using N = std::decay_t<decltype(n)>;
          if constexpr (is_linear_v<N>)
            if constexpr (N::sparsity::is_sparse)
              if (!n.split().active()) replicated_.insert(n.weight().name);
        });
    trainer_.set_hooks({[this](std::size_t step) { return up_.needs_dense_gradient(step); },
                        [this](std::size_t step) { after_update(step); }});
  }
  dynamic_sparsity(const dynamic_sparsity&) = delete;
  dynamic_sparsity& operator=(const dynamic_sparsity&) = delete;

  sparse::pattern_updater& updater() noexcept { return up_; }
  std::size_t updates() const noexcept { return updates_; }

  // Whether an update happened since the last take_metrics (the jobs write a training line then,
  // whatever their logging period, so that every update is logged).
  bool has_pending() const noexcept { return !pending_.is_null(); }

  // Statistics of the update(s) since the last call, as {"sparsity_update": {...}} (empty when none).
  nlohmann::json take_metrics() {
    nlohmann::json j = pending_.is_null() ? nlohmann::json::object() : nlohmann::json{{"sparsity_update", pending_}};
    pending_ = nullptr;
    return j;
  }

 private:
  void after_update(std::size_t step) {
    if (!up_.is_update_step(step)) return;
    auto weights = model_.sparse_weights();
    for (auto& w : weights) w.replicated = replicated_.count(w.name) > 0;
    auto st = up_.update(step, weights, [this](std::size_t tensor, std::size_t offset, std::size_t count) {
      trainer_.optimizer().reset_slots(tensor, offset, count);
    });
    ++updates_;
    if constexpr (requires { trainer_.tensor_ranks().tensor(); })
      if (trainer_.tensor_ranks().active()) {  // the group's totals: each rank updated its slices
        double c[5] = {double(st.nnz), double(st.blocks), double(st.pruned), double(st.regrown),
                       double(st.explored_blocks)};
        if (trainer_.tensor_ranks().tensor().rank() != 0)  // a weight every rank holds whole counts once
          for (const auto& ws : st.weights)
            if (replicated_.count(ws.name)) {
              c[0] -= double(ws.nnz), c[1] -= double(ws.blocks), c[2] -= double(ws.pruned);
              c[3] -= double(ws.regrown), c[4] -= double(ws.explored_blocks);
            }
        trainer_.tensor_ranks().tensor().all_reduce(std::span<double>(c));
        st.nnz = std::size_t(c[0]), st.blocks = std::size_t(c[1]), st.pruned = std::size_t(c[2]);
        st.regrown = std::size_t(c[3]), st.explored_blocks = std::size_t(c[4]);
        st.explored = st.blocks ? c[4] / c[1] : 0.0;
      }
    // totals for the log line; per-weight statistics only when asked (they are long)
    pending_ = nlohmann::json{{"step", st.step},       {"fraction", st.fraction}, {"pruned", st.pruned},
                              {"regrown", st.regrown}, {"nnz", st.nnz},           {"explored", st.explored}};
    if (per_weight_) pending_["weights"] = st.weights;
  }

 public:
  // Include each weight's statistics (norms, explored blocks) in the metrics, not only totals.
  void log_per_weight(bool on) noexcept { per_weight_ = on; }

 private:
  Model& model_;
  Trainer& trainer_;
  sparse::pattern_updater up_;
  std::set<std::string> replicated_;  // block-sparse weights whole on every rank of a split model
  std::size_t updates_ = 0;
  bool per_weight_ = false;
  nlohmann::json pending_;
};

}  // namespace sparselm
