#pragma once
// Walking a layer tree. A composite layer exposes `visit(f)`, calling f on each of its direct
// sub-layers (and on tensors it owns directly, as param_refs); a leaf layer (linear, layer_norm)
// has no visit and lists its tensors with parameters(). Everything a model used to list by hand —
// initialisation, parameter lists, the block-sparse weights a pattern updater rewrites — is
// derived by walking the tree:
//
//   visit_tree(block, [&](const auto& node) {          // pre-order: block, its norms, attention, ...
//     if constexpr (is_linear_v<std::decay_t<decltype(node)>>) init(node);
//   });
//   std::vector<param_ref> p = parameters_of(block);    // every tensor, in registration order
//
// A new layer takes part by giving itself a visit() over its members; nothing else changes.

#include <type_traits>
#include <vector>

#include "sparselm/layers/context.hpp"
#include "sparselm/sparse/sparsity.hpp"

namespace sparselm {

template <class T, sparsity_type Sparsity>
class linear;
class layer_norm;

template <class L>
struct is_linear : std::false_type {};
template <class T, sparsity_type S>
struct is_linear<linear<T, S>> : std::true_type {};
template <class L>
inline constexpr bool is_linear_v = is_linear<L>::value;

// A layer with sub-layers or directly owned tensors to visit.
template <class L>
concept composite_layer = requires(const L& l) { l.visit([](const auto&) {}); };

// f(node) for node and, recursively, every sub-layer and directly owned tensor below it (pre-order).
template <class Node, class F>
void visit_tree(const Node& node, F&& f) {
  f(node);
  if constexpr (composite_layer<Node>) node.visit([&](const auto& child) { visit_tree(child, f); });
}

// Every tensor of a layer tree, in the order the tree registers them.
template <class Node>
std::vector<param_ref> parameters_of(const Node& node) {
  std::vector<param_ref> r;
  visit_tree(node, [&](const auto& n) {
    using N = std::decay_t<decltype(n)>;
    if constexpr (std::is_same_v<N, param_ref>) {
      r.push_back(n);
    } else if constexpr (!composite_layer<N> && requires { n.parameters(); }) {
      for (auto& p : n.parameters()) r.push_back(p);
    }
  });
  return r;
}

}  // namespace sparselm
