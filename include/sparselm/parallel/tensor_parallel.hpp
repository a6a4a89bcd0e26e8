#pragma once
// Tensor parallelism (Megatron-style 1-D): the ranks of a tensor-parallel group each hold a slice of
// every block's projections and compute their share of each sub-layer; the residual stream, the
// norms, the embedding and the head are replicated (every rank of the group holds them whole).
//
//   attention:     Wqkv (C, 3HD) split by columns (each rank: H/P heads of Q, K and V),
//                  Wo (HD, C) split by rows; its bias is added once, after the sum
//   feed-forward:  W1 (C, F) split by columns (F/P hidden units), W2 (F, C) split by rows
//   forward:       y = Σ_ranks (x · W1_r) · W2_r       one in-place sum per sub-layer
//   backward:      dx = Σ_ranks dh_r · W1_rᵀ          one in-place sum per sub-layer
//
// What a layer needs to know is its part of the group (tensor_split: rank and size); what it calls
// to sum is the step's tensor_sum (step_context::tensor_sum, made from a replica_group by
// tensor_sum_over). A layer's weights record how they are split (weight_split), so tools can
// assemble the whole model from its slices (models/tensor_shards.hpp).
// Design and limits: docs/design/distribution.md, "Tensor parallelism".

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>

#include "sparselm/core/error.hpp"
#include "sparselm/core/rng.hpp"
#include "sparselm/parallel/replica_group.hpp"

namespace sparselm::parallel {

// This process's part of a tensor-parallel group: rank `rank` of `size` (size 1: no split).
struct tensor_split {
  std::size_t rank = 0, size = 1;

  bool active() const noexcept { return size > 1; }
  // n items (heads, hidden units) split into size equal shares: one share. `what` names them in the
  // error when n does not divide.
  std::size_t share(std::size_t n, const std::string& what) const {
    SPARSELM_CHECK(size >= 1 && rank < size, "tensor parallelism: rank ", rank, " of a group of ", size);
    SPARSELM_CHECK(n % size == 0, what, " (", n, ") do not split over a tensor-parallel group of ", size,
                   " ranks (--tensor-parallel must divide it)");
    return n / size;
  }
};

// How a weight of a tensor-parallel layer is split: none (replicated), by columns (output
// features; `parts` equal groups of columns each split on its own, 3 for a fused Q|K|V), or by rows
// (input features). A row-split projection's bias is not split: it is added once after the sum.
enum class split_kind { none, columns, rows };
struct weight_split {
  split_kind kind = split_kind::none;
  std::size_t parts = 1;
  tensor_split of{};

  bool active() const noexcept { return kind != split_kind::none && of.active(); }
};

// The in-place sum over a tensor-parallel group, as the step context carries it.
using tensor_sum_fn = std::function<void(std::span<float>)>;
inline tensor_sum_fn tensor_sum_over(replica_group& group) {
  return [&group](std::span<float> x) { group.all_reduce(x, reduce_op::sum); };
}

// The initialisation seed of a rank's slices: each rank draws its own (the replicated tensors use
// the run's seed on every rank, so they start equal).
inline std::uint64_t shard_seed(std::uint64_t seed, const tensor_split& t) noexcept {
  return t.active() ? mix_stream(mix_stream(seed, 0x7470), t.rank) : seed;
}

}  // namespace sparselm::parallel
