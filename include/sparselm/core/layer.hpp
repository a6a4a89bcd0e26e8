#pragma once
// The layer concept: what the block, the block stack, the trainer's models and
// testing::check_layer require of a layer (const forward and backward over a step_context, a
// cache type, and its tensors listed by parameters() or reached by visit()). What a block needs of
// a part beyond it is the branch contract (layers/branch.hpp). check_layer_members<L>() states the
// same requirements one by one, in static_asserts that name the missing member; the block and
// testing::check_layer call it, so a type that is not a layer fails there and not deep inside.

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

template <class L>
concept has_cache = requires { typename L::cache; } && std::default_initializable<typename L::cache>;
template <class L>
concept has_const_forward = requires(const L& l, const step_context& s, typename L::cache& c, const_matrix_view<float> x,
                                     matrix_view<float> y) { l.forward(s, x, y, c); };
template <class L>
concept has_const_backward = requires(const L& l, const step_context& s, typename L::cache& c,
                                      const_matrix_view<float> dy, matrix_view<float> dx) { l.backward(s, dy, dx, c); };

// The layer concept member by member: true for a layer; otherwise a static_assert names the first
// missing member (callers static_assert on the result).
template <class L>
constexpr bool check_layer_members() {
  static_assert(has_cache<L>, "layer: needs a default-constructible nested type 'cache'");
  if constexpr (has_cache<L>) {
    static_assert(has_const_forward<L>,
                  "layer: needs a const member 'forward(const step_context&, const_matrix_view<float> x, "
                  "matrix_view<float> y, cache&) const'");
    static_assert(has_const_backward<L>,
                  "layer: needs a const member 'backward(const step_context&, const_matrix_view<float> dy, "
                  "matrix_view<float> dx, cache&) const'");
    static_assert(requires(const L& l) { l.visit([](const auto&) {}); } ||
                      requires(const L& l) { { l.parameters() } -> std::convertible_to<std::vector<param_ref>>; },
                  "layer: needs 'parameters() const' returning std::vector<param_ref> (a leaf) or 'visit(f) const' "
                  "(a composite)");
  }
  return layer<L>;
}

}  // namespace sparselm
