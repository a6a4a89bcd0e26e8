#pragma once
// When the sparsity pattern changes and by how much.
//
// Step t counts completed optimiser steps (1..T). After step t the pattern is updated when
// is_update_step(t): t is a positive multiple of update_period, t ≥ zero_steps and t < T (never
// after the last step). Each weight then prunes and regrows
//   k = ceil(ceil(prune_ratio·nnz) · f(t, T)) blocks, with the cosine decay
//   f(t, T) = 0.5·(1 + cos(phase_delay + period·(t − zero_steps)·2π/(T − zero_steps))), 0 for t < zero_steps.
// The defaults (zero_steps 0, phase_delay 0, period 0.5) give f = 0.5·(1 + cos(π·t/T)): 1 → 0.
//
//   auto s = sparse::prune_schedule::from_json(cfg["sparsity"]);   // {"prune_ratio": 0.5, ...}
//   s.total_steps = steps;
//   if (s.is_update_step(t)) k = s.prune_count(nnz, t);

#include <cmath>
#include <cstddef>
#include <numbers>
#include <string>

#include <nlohmann/json.hpp>

#include "sparselm/core/error.hpp"
#include "sparselm/core/json.hpp"
#include "sparselm/sparse/detail/common.hpp"

namespace sparselm::sparse {

struct prune_schedule {
  double prune_ratio = 0.3;        // fraction of nnz pruned at f = 1; [0, 1]. S1 code 0.3, blog 0.5
  std::size_t update_period = 100; // optimiser steps between pattern updates; ≥ 1
  std::size_t total_steps = 0;     // T, the run length in optimiser steps; set from the training config
  std::size_t zero_steps = 0;      // no update before this step; < T
  double phase_delay = 0.0;        // radians added to the cosine's argument
  double period = 0.5;             // cosine periods over (zero_steps, T]

  // Throws, naming the field, if a value is out of range (including total_steps not yet set).
  void validate(const std::string& what = "prune schedule") const {
    SPARSELM_CHECK(std::isfinite(prune_ratio) && prune_ratio >= 0.0 && prune_ratio <= 1.0, what,
                   ": field 'prune_ratio' must be in [0, 1], got ", prune_ratio);
    SPARSELM_CHECK(update_period >= 1, what, ": field 'update_period' must be at least 1");
    SPARSELM_CHECK(total_steps >= 1, what, ": field 'total_steps' is 0 (set it to the number of optimiser steps)");
    SPARSELM_CHECK(zero_steps < total_steps, what, ": field 'zero_steps' (", zero_steps,
                   ") must be smaller than 'total_steps' (", total_steps, ")");
    SPARSELM_CHECK(std::isfinite(phase_delay), what, ": field 'phase_delay' must be finite");
    SPARSELM_CHECK(std::isfinite(period), what, ": field 'period' must be finite");
  }

  // f(t, T) in [0, 1].
  double fraction(std::size_t t) const {
    validate();
    if (t < zero_steps) return 0.0;
    double x = phase_delay + period * double(t - zero_steps) * 2.0 * std::numbers::pi / double(total_steps - zero_steps);
    return 0.5 * (1.0 + std::cos(x));
  }

  bool is_update_step(std::size_t t) const {
    validate();
    return t > 0 && t >= zero_steps && t < total_steps && t % update_period == 0;
  }

  // k = ceil(ceil(prune_ratio·nnz)·f(t, T)) (products within 1e-9 of an integer count as that
  // integer). Not clamped: prune_regrow clamps k to the blocks that can be regrown.
  std::size_t prune_count(std::size_t nnz, std::size_t t) const {
    double k0 = double(detail::ceil_count(prune_ratio * double(nnz)));
    return detail::ceil_count(k0 * fraction(t));
  }

  // Reads the fields above (all optional; unknown fields are errors). Does not validate, so that
  // total_steps may be filled in afterwards; call validate() once it is.
  static prune_schedule from_json(const nlohmann::json& j, const std::string& what = "prune schedule") {
    json_fields f(j, what);
    prune_schedule s;
    s.read_fields(f);
    f.finish();
    return s;
  }

  // Field readers shared with configs that embed the schedule's fields (update_config).
  void read_fields(json_fields& f) {
    f.read("prune_ratio", prune_ratio);
    f.read("update_period", update_period);
    f.read("total_steps", total_steps);
    f.read("zero_steps", zero_steps);
    f.read("phase_delay", phase_delay);
    f.read("period", period);
  }
};

inline void to_json(nlohmann::json& j, const prune_schedule& s) {
  j = nlohmann::json{{"prune_ratio", s.prune_ratio}, {"update_period", s.update_period},
                     {"total_steps", s.total_steps}, {"zero_steps", s.zero_steps},
                     {"phase_delay", s.phase_delay}, {"period", s.period}};
}

// Learning-rate multiplier for a sparse model ("Towards Structured Dynamic Sparse Pre-Training of
// BERT"): η(s) = η₀·exp(1.969·s² + 0.2905·s). Returns exp(1.969·s² + 0.2905·s).
inline double sparse_lr_scale(double sparsity) {
  SPARSELM_CHECK(std::isfinite(sparsity) && sparsity >= 0.0 && sparsity < 1.0, "sparse_lr_scale: sparsity ",
                 sparsity, " is outside [0, 1)");
  return std::exp(1.969 * sparsity * sparsity + 0.2905 * sparsity);
}

}  // namespace sparselm::sparse
