#pragma once
// One pattern update of one block-sparse weight: prune the k weakest active blocks, regrow k
// blocks among the positions that were inactive before pruning.
//
//   auto r = sparse::prune_regrow(name, pattern, values, k, {prune_metric::l1, regrow_method::random},
//                                 rng, sparse::regrow_stream(tensor, step));
//   for (auto s : r.slots) opt.reset_slots(tensor, s * B * B, B * B);
//
// Slots move with their blocks: block i of the regrown list takes the arena slot of the i-th pruned
// slot (ascending), its values are zeroed, and every other slot keeps its block, values and
// optimiser state. nnz never changes.
//
// The work is split in two so a caller updating several weights can fail before changing any:
// plan_prune_regrow() decides (reads only, may throw), apply_prune_regrow() writes (no throw for a
// plan made from the same pattern).

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include "sparselm/core/error.hpp"
#include "sparselm/core/rng.hpp"
#include "sparselm/core/threads.hpp"
#include "sparselm/sparse/block_pattern.hpp"
#include "sparselm/sparse/init.hpp"

namespace sparselm::sparse {

enum class prune_metric { l1, l2, max_abs };
enum class regrow_method { random, rigl };

inline constexpr detail::enum_names<prune_metric, 3> prune_metric_names{
    {{"l1", prune_metric::l1}, {"l2", prune_metric::l2}, {"max", prune_metric::max_abs}}};
inline const char* to_string(prune_metric m) noexcept { return detail::enum_name(prune_metric_names, m); }
inline prune_metric parse_prune_metric(const std::string& s, const std::string& what = "prune_metric") {
  return detail::parse_enum(prune_metric_names, s, what, "prune metric");
}

inline constexpr detail::enum_names<regrow_method, 2> regrow_method_names{
    {{"random", regrow_method::random}, {"rigl", regrow_method::rigl}}};
inline const char* to_string(regrow_method m) noexcept { return detail::enum_name(regrow_method_names, m); }
inline regrow_method parse_regrow_method(const std::string& s, const std::string& what = "regrow") {
  return detail::parse_enum(regrow_method_names, s, what, "regrow method");
}

struct prune_regrow_options {
  prune_metric metric = prune_metric::l1;
  regrow_method regrow = regrow_method::random;
};

// Per-slot magnitudes of the values, accumulated in double in a fixed order (deterministic).
struct block_norms {
  std::vector<double> l1;      // Σ|w|
  std::vector<double> sq;      // Σw² (the L2 norm squared)
  std::vector<double> max_abs; // max|w|

  double key(std::size_t s, prune_metric m) const noexcept {
    return m == prune_metric::l1 ? l1[s] : m == prune_metric::l2 ? sq[s] : max_abs[s];
  }
};

// Throws (naming the weight and block) if the values' size does not match or a value is not finite.
inline block_norms compute_block_norms(const std::string& name, const block_pattern& p,
                                       std::span<const float> values) {
  const std::size_t bb = p.block * p.block, nnz = p.nnz();
  SPARSELM_CHECK(values.size() == nnz * bb, name, ": ", values.size(), " values for ", nnz, " blocks of ", p.block,
                 "x", p.block);
  block_norms n{std::vector<double>(nnz), std::vector<double>(nnz), std::vector<double>(nnz)};
  parallel_for(
      0, nnz,
      [&](std::size_t s) {
        const float* v = values.data() + s * bb;
        double l1 = 0, sq = 0, mx = 0;
        for (std::size_t e = 0; e < bb; ++e) {
          double a = std::abs(double(v[e]));
          l1 += a;
          sq += a * a;
          mx = std::max(mx, a);
        }
        n.l1[s] = l1, n.sq[s] = sq, n.max_abs[s] = mx;
      },
      64);
  for (std::size_t s = 0; s < nnz; ++s)
    SPARSELM_CHECK(std::isfinite(n.l1[s]), name, ": block (", p.row[s], ", ", p.col[s], ") in slot ", s,
                   " has a non-finite value");
  return n;
}

// The k slots with the smallest metric; equal metrics go to the lower slot first. Ascending slots.
inline std::vector<std::uint32_t> select_prune(const block_norms& n, std::size_t k, prune_metric m) {
  std::vector<std::uint32_t> slots(n.l1.size());
  std::iota(slots.begin(), slots.end(), std::uint32_t{0});
  k = std::min(k, slots.size());
  std::partial_sort(slots.begin(), slots.begin() + std::ptrdiff_t(k), slots.end(), [&](std::uint32_t a, std::uint32_t b) {
    double ka = n.key(a, m), kb = n.key(b, m);
    return ka < kb || (ka == kb && a < b);
  });
  slots.resize(k);
  std::sort(slots.begin(), slots.end());
  return slots;
}

// Grid positions (row·cols_b + col) that are not active in `p`, ascending. Throws if a slot is out
// of the grid or two slots hold the same block.
inline std::vector<std::uint32_t> inactive_positions(const std::string& name, const block_pattern& p) {
  const std::size_t grid = p.rows_b * p.cols_b;
  SPARSELM_CHECK(p.row.size() == p.col.size(), name, ": pattern has ", p.row.size(), " block rows but ",
                 p.col.size(), " block columns");
  std::vector<std::uint8_t> active(grid, 0);
  for (std::size_t s = 0; s < p.nnz(); ++s) {
    SPARSELM_CHECK(p.row[s] < p.rows_b && p.col[s] < p.cols_b, name, ": slot ", s, " at block (", p.row[s], ", ",
                   p.col[s], ") is outside the ", p.rows_b, "x", p.cols_b, " block grid");
    auto& a = active[std::size_t(p.row[s]) * p.cols_b + p.col[s]];
    SPARSELM_CHECK(!a, name, ": block (", p.row[s], ", ", p.col[s], ") appears twice");
    a = 1;
  }
  std::vector<std::uint32_t> free;
  free.reserve(grid - p.nnz());
  for (std::size_t g = 0; g < grid; ++g)
    if (!active[g]) free.push_back(std::uint32_t(g));
  return free;
}

// k of the candidate positions uniformly without replacement, in draw order (draw i uses
// rng.below(stream, i, ·), so the choice is the same for any thread count).
inline std::vector<std::uint32_t> select_regrow_random(std::vector<std::uint32_t> candidates, std::size_t k,
                                                       const counter_rng& rng, std::uint64_t stream) {
  k = std::min(k, candidates.size());
  detail::partial_shuffle(candidates, k, rng, stream);
  candidates.resize(k);
  return candidates;
}

// The k candidate positions with the largest |scores[pos]|; equal scores go to the lower position
// first. `scores` is the pooled dense gradient, (rows_b, cols_b) row-major. In decreasing score.
inline std::vector<std::uint32_t> select_regrow_rigl(const std::string& name, const block_pattern& p,
                                                     std::vector<std::uint32_t> candidates,
                                                     std::span<const float> scores, std::size_t k) {
  SPARSELM_CHECK(scores.size() == p.rows_b * p.cols_b, name, ": pooled gradient has ", scores.size(),
                 " values for a ", p.rows_b, "x", p.cols_b, " block grid");
  for (auto g : candidates)
    SPARSELM_CHECK(std::isfinite(scores[g]), name, ": pooled gradient is not finite at block (", g / p.cols_b, ", ",
                   g % p.cols_b, ")");
  k = std::min(k, candidates.size());
  std::partial_sort(candidates.begin(), candidates.begin() + std::ptrdiff_t(k), candidates.end(),
                    [&](std::uint32_t a, std::uint32_t b) {
                      float sa = std::abs(scores[a]), sb = std::abs(scores[b]);
                      return sa > sb || (sa == sb && a < b);
                    });
  candidates.resize(k);
  return candidates;
}

// What one update does to one weight. slots[i] loses block pruned[i] and gains block regrown[i]
// (grid positions row·cols_b + col). Norms are of the values before the update.
struct prune_regrow_result {
  std::vector<std::uint32_t> slots;    // reused arena slots, ascending
  std::vector<std::uint32_t> pruned;   // parallel to slots
  std::vector<std::uint32_t> regrown;  // parallel to slots
  double pruned_l1 = 0, pruned_l2 = 0; // over the pruned blocks
  double weight_l1 = 0, weight_l2 = 0; // over the whole weight
  std::size_t count() const noexcept { return slots.size(); }
};

// Decides an update without changing anything. k is clamped to min(k, nnz, blocks inactive before
// pruning). `scores` (pooled dense gradient, (rows_b, cols_b)) is required for rigl, ignored for
// random. Throws (naming the weight) on inconsistent sizes or non-finite values/scores.
inline prune_regrow_result plan_prune_regrow(const std::string& name, const block_pattern& p,
                                             std::span<const float> values, std::size_t k,
                                             const prune_regrow_options& opt, const counter_rng& rng,
                                             std::uint64_t stream, std::span<const float> scores = {}) {
  auto candidates = inactive_positions(name, p);
  auto norms = compute_block_norms(name, p, values);
  prune_regrow_result r;
  for (std::size_t s = 0; s < p.nnz(); ++s) r.weight_l1 += norms.l1[s], r.weight_l2 += norms.sq[s];
  r.weight_l2 = std::sqrt(r.weight_l2);
  if (opt.regrow == regrow_method::rigl)
    SPARSELM_CHECK(!scores.empty(), name, ": rigl regrowth needs the pooled dense gradient");
  k = std::min({k, p.nnz(), candidates.size()});
  if (k == 0) return r;
  r.slots = select_prune(norms, k, opt.metric);
  r.regrown = opt.regrow == regrow_method::rigl ? select_regrow_rigl(name, p, std::move(candidates), scores, k)
                                                : select_regrow_random(std::move(candidates), k, rng, stream);
  r.pruned.resize(k);
  for (std::size_t i = 0; i < k; ++i) {
    auto s = r.slots[i];
    r.pruned[i] = std::uint32_t(std::size_t(p.row[s]) * p.cols_b + p.col[s]);
    r.pruned_l1 += norms.l1[s];
    r.pruned_l2 += norms.sq[s];
  }
  r.pruned_l2 = std::sqrt(r.pruned_l2);
  return r;
}

// Writes a plan: moves each reused slot to its regrown block, zeroes that slot's values, finalizes.
inline void apply_prune_regrow(const std::string& name, block_pattern& p, std::span<float> values,
                               const prune_regrow_result& r) {
  const std::size_t bb = p.block * p.block;
  SPARSELM_CHECK(values.size() == p.nnz() * bb, name, ": ", values.size(), " values for ", p.nnz(), " blocks");
  for (std::size_t i = 0; i < r.count(); ++i) {
    auto s = r.slots[i];
    p.row[s] = std::uint32_t(r.regrown[i] / p.cols_b);
    p.col[s] = std::uint32_t(r.regrown[i] % p.cols_b);
    std::fill_n(values.begin() + std::ptrdiff_t(std::size_t(s) * bb), bb, 0.0f);
  }
  if (r.count()) p.finalize(name);
}

// plan + apply; then on_reset(slot) for every reused slot, ascending (zero its optimiser slots).
inline prune_regrow_result prune_regrow(const std::string& name, block_pattern& p, std::span<float> values,
                                        std::size_t k, const prune_regrow_options& opt, const counter_rng& rng,
                                        std::uint64_t stream, std::span<const float> scores = {},
                                        const std::function<void(std::size_t slot)>& on_reset = {}) {
  auto r = plan_prune_regrow(name, p, values, k, opt, rng, stream, scores);
  apply_prune_regrow(name, p, values, r);
  if (on_reset)
    for (auto s : r.slots) on_reset(s);
  return r;
}

// Which blocks of a weight have ever been active ("explored"), one byte per grid position.
struct explored_map {
  std::vector<std::uint8_t> ever;  // (rows_b, cols_b) row-major, 0 or 1
  std::size_t count = 0;           // number of ones

  explored_map() = default;
  explicit explored_map(const block_pattern& p) { mark(p); }

  // Marks the pattern's active blocks. The first call sizes the map; later grids must match.
  void mark(const block_pattern& p) {
    const std::size_t grid = p.rows_b * p.cols_b;
    if (ever.empty()) ever.assign(grid, 0);
    SPARSELM_CHECK(ever.size() == grid, "explored_map: grid of ", grid, " blocks, map of ", ever.size());
    for (std::size_t s = 0; s < p.nnz(); ++s) {
      auto& e = ever[std::size_t(p.row[s]) * p.cols_b + p.col[s]];
      count += e == 0;
      e = 1;
    }
  }
  std::size_t blocks() const noexcept { return ever.size(); }
  double fraction() const noexcept { return ever.empty() ? 0.0 : double(count) / double(ever.size()); }
};

}  // namespace sparselm::sparse
