#pragma once
// Optimiser-state sharding (ZeRO stage 1): which tensors of a layout each of P data-parallel
// replicas owns the optimiser slots of.
//
// When to use: data-parallel training where every replica holds the full params and grads but
// only 1/P of the optimiser slots (Adam's m and v are 2x the params in fp32). Replica r attaches
// its optimiser with partition_tensors(layout, P)[r] (slot_optimizer::attach(layout, range),
// optim/engine.hpp), steps only the params of its tensors, and the replicas then exchange the
// updated params of their ranges (an allgather over the flat arena; the owned ranges are
// contiguous in it). Ranges are whole tensors, so per-tensor quantities (LAMB's trust ratio) stay
// local to one replica and the sharded update is bit-identical to the unsharded one.
//
//   auto parts = sparselm::optim::partition_tensors(*layout, world);
//   sparselm::optim::adamw<> opt(cfg);
//   opt.attach(layout, parts[rank]);             // slots for parts[rank] only
//   opt.step(params, grads, lr);                 // updates the params of parts[rank] only
//   auto [first, last] = opt.owned_elements();   // params.all()[first, last) to share with the others

#include <algorithm>
#include <cstddef>
#include <limits>
#include <vector>

#include "sparselm/core/arena.hpp"
#include "sparselm/core/checked.hpp"
#include "sparselm/core/error.hpp"

namespace sparselm::optim {

// Tensor indices [begin, end) of an arena_layout.
struct tensor_range {
  std::size_t begin = 0, end = 0;
  std::size_t size() const noexcept { return end - begin; }
  bool empty() const noexcept { return begin == end; }
  bool contains(std::size_t tensor) const noexcept { return tensor >= begin && tensor < end; }
  friend bool operator==(const tensor_range&, const tensor_range&) = default;
};

// Flat element offsets [first, last) of an arena (padding included).
struct element_range {
  std::size_t first = 0, last = 0;
  std::size_t size() const noexcept { return last - first; }
  friend bool operator==(const element_range&, const element_range&) = default;
};

// Flat elements of the tensors in `r`: from the offset of r.begin to the end of r.end − 1's
// padded storage (the next tensor's offset, or total()).
inline element_range flat_elements(const arena_layout& layout, tensor_range r) {
  SPARSELM_CHECK(r.begin <= r.end && r.end <= layout.count(), "flat_elements: tensor range [", r.begin, ", ", r.end,
                 ") is outside the layout (", layout.count(), " tensors)");
  auto start = [&](std::size_t i) { return i < layout.count() ? layout[i].offset : layout.total(); };
  return r.empty() ? element_range{} : element_range{start(r.begin), start(r.end)};
}

// Splits the tensors of `layout` into `parts` contiguous ranges, in layout order, covering every
// tensor, balanced by padded element count: range k ends with the tensor that brings the running
// total to k+1 parts of the total (or just before, to leave one tensor for each later range), so
// no range holds more than total/parts + the largest tensor. A range is empty only when the
// layout has fewer tensors than `parts` (then each of the first count() ranges holds one tensor).
inline constexpr std::size_t max_parts = std::size_t(1) << 20;
static_assert(limits::arena_elements <= std::numeric_limits<std::size_t>::max() / max_parts);
inline std::vector<tensor_range> partition_tensors(const arena_layout& layout, std::size_t parts) {
  SPARSELM_CHECK(parts > 0 && parts <= max_parts, "partition_tensors: parts must be in [1, ", max_parts, "], got ",
                 parts);
  const std::size_t n = layout.count();
  const std::size_t total = layout.total();
  std::vector<std::size_t> prefix(n + 1, 0);  // padded elements of tensors [0, i)
  for (std::size_t i = 0; i < n; ++i) prefix[i + 1] = i + 1 < n ? layout[i + 1].offset : total;

  std::vector<tensor_range> out(parts);
  std::size_t begin = 0;
  for (std::size_t k = 0; k < parts; ++k) {
    const std::size_t later = parts - 1 - k;  // ranges after this one
    std::size_t end = n;
    if (later > 0) {
      // the first cut where prefix / total >= (k + 1) / parts (exact: total <= 2^40, parts <= 2^20)
      end = begin;
      while (end < n && prefix[end] * parts < (k + 1) * total) ++end;
      if (n - begin > later)
        end = std::clamp(end, begin + 1, n - later);  // one tensor at least, and one left for each later range
      else
        end = std::min(begin + 1, n);  // fewer tensors than ranges
    }
    out[k] = {begin, end};
    begin = end;
  }
  return out;
}

}  // namespace sparselm::optim
