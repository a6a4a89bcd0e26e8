#pragma once
// Recompute policies: what a model keeps from the forward pass for the backward pass.
//
// When to use: `none` (default) keeps every block's activations — fastest, most memory.
// `blocks` keeps only each block's input and re-runs the block's forward just before its backward:
// about one extra forward pass of compute (~+33 % step time) for activation memory of one block
// instead of all of them. Results are bit-identical (dropout masks are counter-based and are
// regenerated exactly).

#include <concepts>

namespace sparselm::recompute {

struct none {
  static constexpr bool keep_all_blocks = true;
};
struct blocks {
  static constexpr bool keep_all_blocks = false;
};

template <class R>
concept policy = requires {
  { R::keep_all_blocks } -> std::convertible_to<bool>;
};

}  // namespace sparselm::recompute
