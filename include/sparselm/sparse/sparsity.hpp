#pragma once
// Sparsity tags for weights: `dense` or `block_sparse<B>` (square B x B blocks, B in {1, 4, 8, 16}).
//
// Layers take the tag as a template parameter, so the block size is a compile-time constant all the
// way down to the kernels (kernels/bsr.hpp):
//
//   sparselm::linear<float, sparselm::block_sparse<16>> fc(...);
//   static_assert(sparselm::sparsity_type<sparselm::dense>);
//
// or, with `block_sparse<runtime_block>`, a value of the sparse_plan (layers/linear.hpp) that each
// product dispatches on (with_block_size below) to the same kernel instances: one model type serves
// every block size. The programs build their models so (train/registry.hpp): each family compiles two
// models (dense and block-sparse) instead of one per block size.
//
//   sparselm::gpt<float, sparselm::block_sparse<sparselm::runtime_block>> m(cfg, {.sparsity = 0.9, .block = 8});

#include <algorithm>
#include <array>
#include <concepts>
#include <cstddef>

namespace sparselm {

// The block sizes the kernels are written and instantiated for: the one list that the layers'
// checks, the registry (train/registry.hpp), the compiled kernels' instances (the ends of
// kernels/bsr.hpp and kernels/bsr_bf16.hpp, built by src/kernels_bsr*.cpp) and the programs'
// options use. It is written once, for the preprocessor: SPARSELM_FOR_EACH_BLOCK_SIZE(X) expands
// to X(B) for each size in order, SPARSELM_FOR_EACH_BLOCK_SIZE_ABOVE_1(X) to those above 1 (the
// bf16 block-sparse products have no B = 1 form); `block_sizes` is that list as an array. Adding a
// size means a kernel path for it and one entry here.
#define SPARSELM_FOR_EACH_BLOCK_SIZE_ABOVE_1(X) X(4) X(8) X(16)
#define SPARSELM_FOR_EACH_BLOCK_SIZE(X) X(1) SPARSELM_FOR_EACH_BLOCK_SIZE_ABOVE_1(X)
#define SPARSELM_BLOCK_SIZE_ENTRY(B) B,
inline constexpr auto block_sizes = std::to_array<std::size_t>({SPARSELM_FOR_EACH_BLOCK_SIZE(SPARSELM_BLOCK_SIZE_ENTRY)});
#undef SPARSELM_BLOCK_SIZE_ENTRY
constexpr bool is_block_size(std::size_t b) noexcept {
  for (std::size_t s : block_sizes)
    if (s == b) return true;
  return false;
}
static_assert(std::ranges::is_sorted(block_sizes) && std::ranges::adjacent_find(block_sizes) == block_sizes.end(),
              "sparselm::block_sizes: SPARSELM_FOR_EACH_BLOCK_SIZE must list distinct sizes in ascending order");

// Dense weights: every entry is stored and trained.
struct dense {
  static constexpr bool is_sparse = false;
  static constexpr std::size_t block = 0;
};

// The B of block_sparse<B> whose block size is chosen at run time (the sparse_plan's).
inline constexpr std::size_t runtime_block = 0;

// Block-sparse weights with B x B blocks; the number of active blocks is fixed for a run.
// block_sparse<runtime_block>: B is the sparse_plan's `block`, one of block_sizes.
template <std::size_t B>
struct block_sparse {
  static_assert(B == runtime_block || is_block_size(B),
                "sparselm::block_sparse<B>: B must be one of sparselm::block_sizes (1, 4, 8, 16) or runtime_block");
  static constexpr bool is_sparse = true;
  static constexpr std::size_t block = B;  // runtime_block (0): see the plan
};

// True for the sparsity tags above.
template <class S>
concept sparsity_type = requires {
  { S::is_sparse } -> std::convertible_to<bool>;
  { S::block } -> std::convertible_to<std::size_t>;
} && (!S::is_sparse || S::block == runtime_block || is_block_size(S::block));

namespace detail {
template <std::size_t I, class F>
decltype(auto) with_block_size_from(std::size_t b, F& f) {
  if constexpr (I + 1 < block_sizes.size())
    if (b != block_sizes[I]) return with_block_size_from<I + 1>(b, f);
  return f.template operator()<block_sizes[I]>();
}
}  // namespace detail

// f.template operator()<B>() for the B of block_sizes equal to b (b must be one: callers check it
// where the value enters, e.g. the linear layer's constructor).
template <class F>
decltype(auto) with_block_size(std::size_t b, F&& f) {
  return detail::with_block_size_from<0>(b, f);
}

// f.template operator()<B>() for the block size of a weight of sparsity S: S::block, or b when S is
// block_sparse<runtime_block>.
template <class S, class F>
decltype(auto) with_block_of(std::size_t b, F&& f) {
  if constexpr (S::block != runtime_block)
    return f.template operator()<S::block>();
  else
    return with_block_size(b, f);
}

}  // namespace sparselm
