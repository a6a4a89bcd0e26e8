#pragma once
// Sparsity tags for weights: `dense` or `block_sparse<B>` (square B x B blocks, B in {1, 4, 8, 16}).
//
// Layers take the tag as a template parameter, so the block size is a compile-time constant all the
// way down to the kernels (kernels/bsr.hpp):
//
//   sparselm::linear<float, sparselm::block_sparse<16>> fc(...);
//   static_assert(sparselm::sparsity_type<sparselm::dense>);

#include <concepts>
#include <cstddef>

namespace sparselm {

// Dense weights: every entry is stored and trained.
struct dense {
  static constexpr bool is_sparse = false;
  static constexpr std::size_t block = 0;
};

// Block-sparse weights with B x B blocks; the number of active blocks is fixed for a run.
template <std::size_t B>
struct block_sparse {
  static_assert(B == 1 || B == 4 || B == 8 || B == 16,
                "sparselm::block_sparse<B>: the block size B must be 1, 4, 8 or 16");
  static constexpr bool is_sparse = true;
  static constexpr std::size_t block = B;
};

// True for the sparsity tags above.
template <class S>
concept sparsity_type = requires {
  { S::is_sparse } -> std::convertible_to<bool>;
  { S::block } -> std::convertible_to<std::size_t>;
} && (!S::is_sparse || S::block == 1 || S::block == 4 || S::block == 8 || S::block == 16);

}  // namespace sparselm
