#pragma once
// Recompute policies: what a block stack keeps from the forward pass for the backward pass.
//
// When to use: `none` (default) keeps every block's activations — fastest, most memory.
// `blocks` keeps only each block's input (the residual stream) and re-runs the block's forward just
// before its backward: about one extra forward pass of compute (~+33 % step time) for the
// activation memory of one block instead of all of them. Results are bit-identical (dropout masks
// are counter-based and are regenerated exactly).
//
// A policy acts on a stack (models/stack.hpp) through three primitives:
//   st.forward_block(s, l, slot, k)    block l's forward for the micro-batch in `slot`, caching in
//                                      cache k (its output is the next residual)
//   st.recompute_block(s, l, slot, k)  the same forward again, output discarded, cache k refilled
//   st.backward_block(s, l, slot, k)   block l's backward from cache k, in place on the gradient
// and says how many caches per micro-batch in flight the stack allocates (caches(L)). A new policy
// (e.g. keep everything but the feed-forward activations) is one more type here.
//
// `configured` (the default policy bundle's, train/trainer.hpp) is the run-time choice: it follows
// the run config's "trainer.recompute" ("none" | "blocks", trainer_options::recompute), so one
// compiled trainer serves both; `none` and `blocks` fix the choice at compile time.

#include <concepts>
#include <cstddef>

#include "sparselm/core/step_context.hpp"

namespace sparselm::recompute {

struct none {
  static constexpr const char* name = "none";
  static constexpr std::size_t caches(std::size_t layers) noexcept { return layers; }
  template <class Stack>
  static void forward(Stack& st, const step_context& s, std::size_t l, std::size_t slot) {
    st.forward_block(s, l, slot, l);
  }
  template <class Stack>
  static void backward(Stack& st, const step_context& s, std::size_t l, std::size_t slot) {
    st.backward_block(s, l, slot, l);
  }
};

struct blocks {
  static constexpr const char* name = "blocks";
  static constexpr std::size_t caches(std::size_t) noexcept { return 1; }
  template <class Stack>
  static void forward(Stack& st, const step_context& s, std::size_t l, std::size_t slot) {
    st.forward_block(s, l, slot, 0);
  }
  template <class Stack>
  static void backward(Stack& st, const step_context& s, std::size_t l, std::size_t slot) {
    st.recompute_block(s, l, slot, 0);
    st.backward_block(s, l, slot, 0);
  }
};

// The run's choice (step_context::recompute_blocks, set by the trainer from its options). Caches:
// as many as `none` needs; a block's cache allocates its buffers on first use, so under "blocks"
// the unused ones cost nothing.
struct configured {
  static constexpr const char* name = "configured";
  static constexpr std::size_t caches(std::size_t layers) noexcept { return none::caches(layers); }
  template <class Stack>
  static void forward(Stack& st, const step_context& s, std::size_t l, std::size_t slot) {
    if (s.recompute_blocks)
      blocks::forward(st, s, l, slot);
    else
      none::forward(st, s, l, slot);
  }
  template <class Stack>
  static void backward(Stack& st, const step_context& s, std::size_t l, std::size_t slot) {
    if (s.recompute_blocks)
      blocks::backward(st, s, l, slot);
    else
      none::backward(st, s, l, slot);
  }
};

// The names a run config may give "trainer.recompute" (the policies a configured step can follow).
inline constexpr const char* names[] = {none::name, blocks::name};

template <class R>
concept policy = requires {
  { R::name } -> std::convertible_to<const char*>;
  { R::caches(std::size_t(1)) } -> std::convertible_to<std::size_t>;
};

}  // namespace sparselm::recompute
