#pragma once
// Which flat gradient range each part of a transformer (models/transformer.hpp) finishes in
// backward, so a data-parallel step can start summing a part's gradients over the replicas while
// backward goes on with the parts before it (step_context::grads_ready).

#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

#include "sparselm/core/arena.hpp"
#include "sparselm/layers/visit.hpp"

namespace sparselm {

// The flat gradient range each part finishes: the embedding [0, block 0), block l up to block
// l + 1, the head from the end of the last block; the ranges tile the arena. A tensor the head
// shares with the embedding (tied weights) lies in the embedding's range, whose backward comes
// last. Empty when the layout does not follow that order (the gradients are then combined
// after the whole backward).
template <class Embedding, class Stack, class Head>
std::vector<std::pair<std::size_t, std::size_t>> gradient_part_ranges(const arena_layout& L, const Embedding& emb,
                                                                      const Stack& stack, const Head& head) {
  auto span_of = [&](const auto& part) {
    std::size_t lo = L.total(), hi = 0;
    for (const auto& p : parameters_of(part)) {
      lo = std::min(lo, L[p.index].offset);
      hi = std::max(hi, L[p.index].offset + L[p.index].size);
    }
    return std::pair{lo, hi};
  };
  const std::size_t n = stack.size();
  if (n == 0) return {};
  std::vector<std::pair<std::size_t, std::size_t>> r(n + 2);
  std::vector<std::pair<std::size_t, std::size_t>> used(n);
  for (std::size_t l = 0; l < n; ++l) used[l] = span_of(stack[l]);
  for (std::size_t l = 0; l < n; ++l) {
    r[1 + l] = {used[l].first, l + 1 < n ? used[l + 1].first : used[l].second};
    if (used[l].first > used[l].second || r[1 + l].second < used[l].second) return {};
  }
  r[0] = {0, used[0].first};
  r[n + 1] = {used[n - 1].second, L.total()};
  if (span_of(emb).second > r[0].second) return {};
  for (const auto& p : parameters_of(head)) {
    const std::size_t lo = L[p.index].offset, hi = lo + L[p.index].size;
    const bool in_emb = hi <= r[0].second, in_head = lo >= r[n + 1].first;
    if (!in_emb && !in_head) return {};
  }
  return r;
}

// Tensor index ranges [begin, end) of a pipeline's stages, for optimiser state sharded by stage:
// `parts` as from gradient_part_ranges (embedding, blocks, head), `first` the first block of
// stages 1..S-1. Stage 0 takes every tensor before its successor's first block (the embedding and
// with it a tied head tensor), the last stage every tensor from its first block on (the head).
// The ranges cover the layout's tensors in order. Empty when `parts` is.
inline std::vector<std::pair<std::size_t, std::size_t>> stage_tensor_ranges(
    const arena_layout& L, const std::vector<std::pair<std::size_t, std::size_t>>& parts,
    const std::vector<std::size_t>& first) {
  if (parts.empty()) return {};
  // the first tensor whose storage starts at or after flat offset `at`
  auto tensor_at = [&](std::size_t at) {
    std::size_t i = 0;
    while (i < L.count() && L[i].offset < at) ++i;
    return i;
  };
  std::vector<std::pair<std::size_t, std::size_t>> r;
  std::size_t begin = 0;
  for (std::size_t b : first) {
    const std::size_t end = tensor_at(parts.at(1 + b).first);
    r.emplace_back(begin, end);
    begin = end;
  }
  r.emplace_back(begin, L.count());
  return r;
}

// The tensors the head writes that lie before the first block, given the part ranges of
// gradient_part_ranges: the table of a projection tied to the embedding (a head with one says so
// with projection().embedding(), layers/lm_head.hpp) and any of its own parameters there. Under a
// pipeline over ranks the last stage adds to their gradients although stage 0 owns them.
template <class Head>
std::vector<std::size_t> tied_head_tensors(const arena_layout& L,
                                           const std::vector<std::pair<std::size_t, std::size_t>>& parts,
                                           const Head& head) {
  std::vector<std::size_t> v;
  if (parts.size() < 2) return v;
  auto add = [&](std::size_t i) {
    if (L[i].offset < parts[1].first && std::find(v.begin(), v.end(), i) == v.end()) v.push_back(i);
  };
  if constexpr (requires { head.projection().embedding().index; }) add(head.projection().embedding().index);
  for (const auto& p : parameters_of(head)) add(p.index);
  return v;
}

}  // namespace sparselm
