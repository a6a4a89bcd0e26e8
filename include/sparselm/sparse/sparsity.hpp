#pragma once
// Sparsity types for linear layers: `dense`, or `block_sparse<B>` with B in {1, 4, 8, 16}.

#include <concepts>
#include <cstddef>

namespace sparselm {

struct dense {
  static constexpr bool is_sparse = false;
  static constexpr std::size_t block = 0;
};

template <std::size_t B>
struct block_sparse {
  static_assert(B == 1 || B == 4 || B == 8 || B == 16,
                "sparselm::block_sparse<B>: the block size B must be 1, 4, 8 or 16");
  static constexpr bool is_sparse = true;
  static constexpr std::size_t block = B;
};

template <class S>
concept sparsity_type = requires {
  { S::is_sparse } -> std::convertible_to<bool>;
  { S::block } -> std::convertible_to<std::size_t>;
};

}  // namespace sparselm
