#pragma once
// The branch contract: what a residual block (layers/block.hpp) needs of its parts, with defaults,
// so that any `layer` written downstream plugs into a block.
//
//   A norm     a layer; backward(s, dy, dx, cache, accumulate_dx) if it can add into dx (else the
//              block runs backward into a temporary and adds it).
//   A branch   a layer (attention or feed-forward). Optional members, with their defaults:
//     bool compact_input(s) const         the branch keeps its input itself, in bf16   (false)
//                                         (may be static)
//     forward(s, x, y, cache, keeper)     input_keeper::layer: keep x yourself         (never asked)
//     backward(s, dy, dx, cache, acc)     add into dx when acc                          (temporary + add)
//     forward_cached(s, x, y, cache, kv, layer, past)   decoding; attention must have it; a branch
//                                         without it (a feed-forward) runs forward
//     kv_width()                          the kv-cache width of an attention (default heads()·head_dim())
// Every member is called on a const part. A block checks its parts with check_part (the layer
// members, core/layer.hpp: check_layer_members),
// whose static_asserts name the missing member.
//
// Parts are built by make_part<P>(layout, prefix, block_options): P(layout, prefix, options) when P
// has that constructor, else (for norms) P(layout, prefix, channels, norm_options).

#include <concepts>
#include <cstddef>
#include <string>

#include "sparselm/core/view.hpp"
#include "sparselm/kernels/reduce.hpp"
#include "sparselm/layers/block_options.hpp"
#include "sparselm/layers/context.hpp"
#include "sparselm/layers/kv_cache.hpp"
#include "sparselm/layers/linear.hpp"

namespace sparselm {

// The members a block needs of each part (norm or branch): those of a layer (core/layer.hpp), each
// named by its own static_assert.
template <class L>
constexpr bool check_part() {
  return check_layer_members<L>();
}
template <class L>
concept attention_part = requires(const L& a) {
  { a.heads() } -> std::convertible_to<std::size_t>;
  { a.head_dim() } -> std::convertible_to<std::size_t>;
};

// --- defaults of the optional members ---

template <class L>
bool branch_compact_input(const L& l, const step_context& s) {
  if constexpr (requires { { l.compact_input(s) } -> std::convertible_to<bool>; }) return l.compact_input(s);
  return false;
}

template <class L>
void branch_forward(const L& l, const step_context& s, const_matrix_view<float> x, matrix_view<float> y,
                    typename L::cache& c, input_keeper k) {
  if constexpr (requires { l.forward(s, x, y, c, k); }) {
    l.forward(s, x, y, c, k);
  } else {
    SPARSELM_CHECK(k == input_keeper::caller, "block: a part without input_keeper support was asked to keep its input");
    l.forward(s, x, y, c);
  }
}

// dx = or += (accumulate) the part's input gradient; tmp: a buffer for parts that only assign.
template <class L>
void branch_backward(const L& l, const step_context& s, const_matrix_view<float> dy, matrix_view<float> dx,
                     typename L::cache& c, bool accumulate, buffer& tmp) {
  if constexpr (requires { l.backward(s, dy, dx, c, accumulate); }) {
    l.backward(s, dy, dx, c, accumulate);
  } else if (!accumulate) {
    l.backward(s, dy, dx, c);
  } else {
    auto t = tmp.matrix(dx.rows, dx.cols);
    l.backward(s, dy, t, c);
    kernels::add_inplace(const_matrix_view<float>(t), dx);
  }
}

template <class L>
void branch_forward_cached(const L& l, const step_context& s, const_matrix_view<float> x, matrix_view<float> y,
                           typename L::cache& c, kv_cache& kv, std::size_t layer, std::size_t past) {
  if constexpr (requires { l.forward_cached(s, x, y, c, kv, layer, past); }) l.forward_cached(s, x, y, c, kv, layer, past);
  else l.forward(s, x, y, c);
}

// Width of one position's keys (and values) in a kv_cache.
template <class A>
std::size_t kv_width_of(const A& a) {
  if constexpr (requires { { a.kv_width() } -> std::convertible_to<std::size_t>; }) return a.kv_width();
  else return a.heads() * a.head_dim();
}

// --- building a part ---

// A part built from the block's options that splits itself over a tensor-parallel group
// (block_options::tensor) says so with `static constexpr bool tensor_parallel = true`; any other such
// part refuses an active split. Norms (built from channels alone) are replicated on every rank.
template <class P>
P make_part(arena_layout& layout, const std::string& prefix, const block_options& o) {
  if constexpr (std::constructible_from<P, arena_layout&, const std::string&, const block_options&>) {
    if constexpr (!requires { requires P::tensor_parallel; })
      SPARSELM_CHECK(!o.tensor.active(), "'", prefix, "': this part does not split over a tensor-parallel group (",
                     o.tensor.size, " ranks); tensor parallelism splits self-attention, grouped-query attention and "
                     "the GELU and gated feed-forward layers only");
    return P(layout, prefix, o);
  }
  else if constexpr (std::constructible_from<P, arena_layout&, const std::string&, std::size_t, const norm_options&>)
    return P(layout, prefix, o.channels, o.norm);
  else
    static_assert(sizeof(P) == 0,
                  "make_part: a block part needs a constructor (arena_layout&, const std::string& prefix, const "
                  "block_options&) or, for a norm, (arena_layout&, const std::string&, std::size_t channels, const "
                  "norm_options&)");
}

}  // namespace sparselm
