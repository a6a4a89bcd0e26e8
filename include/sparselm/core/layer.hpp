#pragma once
// The layer concept: what the block, the block stack, the trainer's models and
// testing::check_layer require of a layer (const forward and backward over a step_context, a
// cache type, and its tensors listed by parameters() or reached by visit()). What a block needs of
// a part beyond it is the branch contract (layers/branch.hpp).

#include <concepts>
#include <vector>

#include "sparselm/core/step_context.hpp"
#include "sparselm/core/view.hpp"

namespace sparselm {

// A layer mapping a (N, in) matrix to a (N, out) matrix; forward and backward are const (a layer's
// state lives in the arenas and its cache). backward assigns dx (dx may alias dy only
// where the layer documents it) and accumulates parameter gradients. Its tensors are listed by
// parameters() (a leaf) or found by visiting its sub-layers (a composite: visit(f), see
// layers/visit.hpp; parameters_of(l) lists either kind).
template <class L>
concept layer = requires(const L& l, const step_context& s, typename L::cache& c, const_matrix_view<float> x,
                         matrix_view<float> y, const_matrix_view<float> dy, matrix_view<float> dx) {
  l.forward(s, x, y, c);
  l.backward(s, dy, dx, c);
} && (requires(const L& l) {
  { l.parameters() } -> std::convertible_to<std::vector<param_ref>>;
} || requires(const L& l) { l.visit([](const auto&) {}); });

}  // namespace sparselm
