#pragma once
// A block pattern for benchmarks: ceil((1 - sparsity) * cells) blocks of B x B, chosen uniformly
// (partial Fisher-Yates with std::mt19937(seed)), for an in x out weight.
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "sparselm/sparse/block_pattern.hpp"

namespace sparselm::bench {

inline sparse::block_pattern random_pattern(std::size_t B, std::size_t in, std::size_t out, double sparsity,
                                            std::uint32_t seed) {
  sparse::block_pattern p;
  p.block = B;
  p.rows_b = in / B;
  p.cols_b = out / B;
  const std::size_t cells = p.rows_b * p.cols_b;
  const std::size_t n = std::size_t(std::ceil((1.0 - sparsity) * double(cells)));
  std::vector<std::uint32_t> idx(cells);
  std::iota(idx.begin(), idx.end(), 0u);
  std::mt19937 rng(seed);
  for (std::size_t k = 0; k < n; ++k) std::swap(idx[k], idx[k + rng() % (cells - k)]);
  for (std::size_t k = 0; k < n; ++k) {
    p.row.push_back(idx[k] / std::uint32_t(p.cols_b));
    p.col.push_back(idx[k] % std::uint32_t(p.cols_b));
  }
  p.finalize("bench");
  return p;
}

}  // namespace sparselm::bench
