#pragma once
// Sparsity tags for weights: `dense` or `block_sparse<B>` (square B x B blocks, B in {1, 4, 8, 16}).
//
// Layers take the tag as a template parameter, so the block size is a compile-time constant all the
// way down to the kernels (kernels/bsr.hpp):
//
//   sparselm::linear<float, sparselm::block_sparse<16>> fc(...);
//   static_assert(sparselm::sparsity_type<sparselm::dense>);

#include <array>
#include <concepts>
#include <cstddef>

namespace sparselm {

// The block sizes the kernels are written and instantiated for: the one list that the layers'
// checks, the registry (train/registry.hpp), the compiled kernels (src/kernels_bsr*.cpp) and the
// programs' options use. Adding a size means a kernel path for it and one entry here.
inline constexpr std::array<std::size_t, 4> block_sizes{1, 4, 8, 16};
constexpr bool is_block_size(std::size_t b) noexcept {
  for (std::size_t s : block_sizes)
    if (s == b) return true;
  return false;
}

// Dense weights: every entry is stored and trained.
struct dense {
  static constexpr bool is_sparse = false;
  static constexpr std::size_t block = 0;
};

// Block-sparse weights with B x B blocks; the number of active blocks is fixed for a run.
template <std::size_t B>
struct block_sparse {
  static_assert(is_block_size(B), "sparselm::block_sparse<B>: B must be one of sparselm::block_sizes (1, 4, 8, 16)");
  static constexpr bool is_sparse = true;
  static constexpr std::size_t block = B;
};

// True for the sparsity tags above.
template <class S>
concept sparsity_type = requires {
  { S::is_sparse } -> std::convertible_to<bool>;
  { S::block } -> std::convertible_to<std::size_t>;
} && (!S::is_sparse || is_block_size(S::block));

}  // namespace sparselm
