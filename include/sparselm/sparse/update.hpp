#pragma once
// The pattern update of a whole model: schedule check, k per weight, prune and regrow every sparse
// weight, zero the optimiser slots of regrown blocks, statistics for the log.
//
//   sparse::pattern_updater up(sparse::update_config::from_json(cfg), counter_rng(seed));
//   ...after optimiser step t:
//   if (up.is_update_step(t)) {
//     // rigl: fill each weight's pooled dense gradient first (only on these steps)
//     auto stats = up.update(t, weights, [&](std::size_t tensor, std::size_t off, std::size_t n) {
//       opt.reset_slots(tensor, off, n);
//     });
//     log(nlohmann::json(stats));
//   }
//
// update() is all-or-nothing: every weight is planned (and checked) before any is changed.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sparselm/core/error.hpp"
#include "sparselm/core/rng.hpp"
#include "sparselm/sparse/block_pattern.hpp"
#include "sparselm/sparse/detail/common.hpp"
#include "sparselm/sparse/init.hpp"
#include "sparselm/sparse/prune_regrow.hpp"
#include "sparselm/sparse/schedule.hpp"

namespace sparselm::sparse {

// How the kernel that computes the dense gradient Xᵀ·dY pools it to one score per block (rigl).
enum class grad_pooling { sum, avg, max };

inline constexpr detail::enum_names<grad_pooling, 3> grad_pooling_names{
    {{"sum", grad_pooling::sum}, {"avg", grad_pooling::avg}, {"max", grad_pooling::max}}};
inline const char* to_string(grad_pooling p) noexcept { return detail::enum_name(grad_pooling_names, p); }
inline grad_pooling parse_grad_pooling(const std::string& s, const std::string& what = "pooling") {
  return detail::parse_enum(grad_pooling_names, s, what, "pooling");
}

// The schedule's fields plus how to prune and regrow, in one flat JSON object:
//   {"prune_ratio": 0.3, "update_period": 100, "total_steps": 10000, "zero_steps": 0,
//    "phase_delay": 0.0, "period": 0.5, "prune_metric": "l1", "regrow": "random", "pooling": "avg"}
struct update_config {
  prune_schedule schedule;
  prune_metric metric = prune_metric::l1;
  regrow_method regrow = regrow_method::random;
  grad_pooling pooling = grad_pooling::avg;

  prune_regrow_options options() const noexcept { return {metric, regrow}; }

  // All fields optional, unknown fields are errors; does not validate (see prune_schedule).
  static update_config from_json(const nlohmann::json& j, const std::string& what = "sparsity update") {
    json_fields f(j, what);
    update_config c;
    c.schedule.read_fields(f);
    f.read_enum("prune_metric", c.metric, parse_prune_metric);
    f.read_enum("regrow", c.regrow, parse_regrow_method);
    f.read_enum("pooling", c.pooling, parse_grad_pooling);
    f.finish();
    return c;
  }
};

inline void to_json(nlohmann::json& j, const update_config& c) {
  to_json(j, c.schedule);
  j["prune_metric"] = to_string(c.metric);
  j["regrow"] = to_string(c.regrow);
  j["pooling"] = to_string(c.pooling);
}

// One sparse weight as the updater sees it. Non-owning.
struct sparse_weight {
  std::string name;
  block_pattern* pattern = nullptr;
  std::span<float> values;               // (nnz, B, B), the arena tensor
  std::size_t tensor = 0;                // arena index: regrow stream and reset_slots target
  std::span<float> pooled_grad{};        // (rows_b, cols_b) block scores; rigl only
  bool pooled_by_max = false;            // the scores are maxima (summed scores otherwise)
  // Held whole by every rank of a tensor-parallel group whose other weights are split: its random
  // regrowth draws from the group's common stream (pattern_updater::set_group_rng), so every rank
  // makes the same update.
  bool replicated = false;
};

struct weight_update_stats {
  std::string name;
  std::size_t nnz = 0;        // active blocks (constant)
  std::size_t blocks = 0;     // blocks in the grid
  std::size_t pruned = 0;     // = regrown
  std::size_t regrown = 0;
  std::size_t explored_blocks = 0;  // blocks ever active, this update included
  double explored = 0;        // explored_blocks / blocks
  double pruned_l1 = 0, pruned_l2 = 0;  // norms of the pruned blocks
  double weight_l1 = 0, weight_l2 = 0;  // norms of the weight before the update
};

struct update_stats {
  std::size_t step = 0;
  bool updated = false;        // false: not an update step, nothing changed, weights empty
  double fraction = 0;         // f(t, T)
  std::size_t nnz = 0, blocks = 0, pruned = 0, regrown = 0, explored_blocks = 0;
  double explored = 0;         // explored_blocks / blocks over all weights
  std::vector<weight_update_stats> weights;
};

inline void to_json(nlohmann::json& j, const weight_update_stats& s) {
  j = nlohmann::json{{"name", s.name},           {"nnz", s.nnz},
                     {"blocks", s.blocks},       {"pruned", s.pruned},
                     {"regrown", s.regrown},     {"explored_blocks", s.explored_blocks},
                     {"explored", s.explored},   {"pruned_l1", s.pruned_l1},
                     {"pruned_l2", s.pruned_l2}, {"weight_l1", s.weight_l1},
                     {"weight_l2", s.weight_l2}};
}

inline void to_json(nlohmann::json& j, const update_stats& s) {
  j = nlohmann::json{{"step", s.step},         {"updated", s.updated}, {"fraction", s.fraction},
                     {"nnz", s.nnz},           {"blocks", s.blocks},   {"pruned", s.pruned},
                     {"regrown", s.regrown},   {"explored_blocks", s.explored_blocks},
                     {"explored", s.explored}, {"weights", s.weights}};
}

// Called once per reused slot: zero `count` optimiser-slot elements of `tensor` from `offset`
// (offset = slot·B², count = B²) — the signature of optimizer::reset_slots.
using slot_reset_fn = std::function<void(std::size_t tensor, std::size_t offset, std::size_t count)>;

class pattern_updater {
 public:
  explicit pattern_updater(update_config cfg, counter_rng rng = counter_rng{}) : cfg_(std::move(cfg)), rng_(rng) {}

  const update_config& config() const noexcept { return cfg_; }
  update_config& config() noexcept { return cfg_; }

  bool is_update_step(std::size_t t) const { return cfg_.schedule.is_update_step(t); }
  // The dense gradient for rigl is needed only on update steps.
  bool needs_dense_gradient(std::size_t t) const { return cfg_.regrow == regrow_method::rigl && is_update_step(t); }

  // Starts (or restarts) tracking explored blocks of a weight from its current pattern. update()
  // does this itself for a weight it has not seen (the pattern just before its first update, so
  // patterns loaded or pruned after the updater was built count); call it only to restore state.
  void track(const std::string& name, const block_pattern& p) { explored_[name] = explored_map(p); }
  // Forgets a weight's explored map: the next update starts it again from the pattern it sees.
  // The stream of the weights marked replicated (sparse_weight::replicated): the same on every rank
  // of a tensor-parallel group, while rng (the constructor's) is each rank's own.
  void set_group_rng(counter_rng rng) { group_rng_ = rng; }
  void untrack(const std::string& name) { explored_.erase(name); }
  void restore_explored(const std::string& name, explored_map m) { explored_[name] = std::move(m); }
  const explored_map* explored(const std::string& name) const {
    auto it = explored_.find(name);
    return it == explored_.end() ? nullptr : &it->second;
  }

  // After optimiser step t: if is_update_step(t), prune and regrow every weight with
  // k = schedule.prune_count(nnz, t) (random regrowth draws from regrow_stream(tensor, t)), then
  // call reset(tensor, slot·B², B²) for every reused slot (weights in order, slots ascending).
  // Throws before changing anything if any weight is inconsistent.
  update_stats update(std::size_t t, std::span<const sparse_weight> weights, const slot_reset_fn& reset = {}) {
    update_stats st;
    st.step = t;
    st.fraction = cfg_.schedule.fraction(t);
    if (!is_update_step(t)) return st;

    std::vector<prune_regrow_result> plans;
    plans.reserve(weights.size());
    for (std::size_t i = 0; i < weights.size(); ++i) {
      const auto& w = weights[i];
      SPARSELM_CHECK(w.pattern != nullptr, w.name, ": sparse weight has no pattern");
      for (std::size_t j = 0; j < i; ++j)
        SPARSELM_CHECK(weights[j].name != w.name, w.name, ": weight listed twice in a pattern update");
      if (cfg_.regrow == regrow_method::rigl)
        SPARSELM_CHECK(!w.pooled_grad.empty(), w.name, ": rigl regrowth needs the pooled dense gradient at step ", t);
      if (auto e = explored_.find(w.name); e != explored_.end())
        SPARSELM_CHECK(e->second.blocks() == w.pattern->rows_b * w.pattern->cols_b, w.name,
                       ": explored map has ", e->second.blocks(), " blocks, the pattern's grid ",
                       w.pattern->rows_b * w.pattern->cols_b);
      std::size_t k = cfg_.schedule.prune_count(w.pattern->nnz(), t);
      plans.push_back(plan_prune_regrow(w.name, *w.pattern, w.values, k, cfg_.options(),
                                        w.replicated && group_rng_ ? *group_rng_ : rng_, regrow_stream(w.tensor, t),
                                        w.pooled_grad));
    }

    st.updated = true;
    for (std::size_t i = 0; i < weights.size(); ++i) {
      const auto& w = weights[i];
      auto& p = *w.pattern;
      auto& ex = explored_.try_emplace(w.name, p).first->second;  // first sight: the pattern before this update
      apply_prune_regrow(w.name, p, w.values, plans[i]);
      ex.mark(p);
      const std::size_t bb = p.block * p.block;
      if (reset)
        for (auto s : plans[i].slots) reset(w.tensor, std::size_t(s) * bb, bb);

      weight_update_stats ws;
      ws.name = w.name;
      ws.nnz = p.nnz();
      ws.blocks = p.rows_b * p.cols_b;
      ws.pruned = ws.regrown = plans[i].count();
      ws.explored_blocks = ex.count;
      ws.explored = ex.fraction();
      ws.pruned_l1 = plans[i].pruned_l1;
      ws.pruned_l2 = plans[i].pruned_l2;
      ws.weight_l1 = plans[i].weight_l1;
      ws.weight_l2 = plans[i].weight_l2;
      st.nnz += ws.nnz;
      st.blocks += ws.blocks;
      st.pruned += ws.pruned;
      st.regrown += ws.regrown;
      st.explored_blocks += ws.explored_blocks;
      st.weights.push_back(std::move(ws));
    }
    st.explored = st.blocks ? double(st.explored_blocks) / double(st.blocks) : 0.0;
    return st;
  }

 private:
  update_config cfg_;
  counter_rng rng_;
  std::optional<counter_rng> group_rng_;
  std::map<std::string, explored_map> explored_;
};

}  // namespace sparselm::sparse
