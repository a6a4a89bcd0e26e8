#pragma once
// Initial state of block-sparse weights: how many blocks each weight keeps (uniform or ERK),
// which blocks (uniformly without replacement), and their starting values (density-scaled Glorot).
//
//   std::size_t nnz = sparse::nnz_blocks("h.0.mlp.c_fc.weight", 768, 3072, 16, 0.9);
//   auto p = sparse::random_pattern("h.0.mlp.c_fc.weight", 768, 3072, 16, nnz, rng, sparse::pattern_stream(t));
//   sparse::init_values("h.0.mlp.c_fc.weight", p, params[t], rng, sparse::value_stream(t));
//
// Everything here is a pure function of (seed, stream, sizes): the same pattern and values for any
// thread count.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include "sparselm/core/error.hpp"
#include "sparselm/core/rng.hpp"
#include "sparselm/core/threads.hpp"
#include "sparselm/sparse/block_pattern.hpp"
#include "sparselm/sparse/detail/common.hpp"

namespace sparselm::sparse {

// ---------------------------------------------------------------------------------------------
// Random streams. Dense initialisation uses stream = arena index of the tensor; the block-sparse
// helpers keep that for values and derive separate streams for the pattern and for each update.

constexpr std::uint64_t value_stream(std::uint64_t tensor) noexcept { return tensor; }
constexpr std::uint64_t pattern_stream(std::uint64_t tensor) noexcept { return mix_stream(tensor, 0x7061747465726eull); }
constexpr std::uint64_t regrow_stream(std::uint64_t tensor, std::uint64_t step) noexcept {
  return mix_stream(mix_stream(tensor, 0x726567726f77ull), step);
}

// ---------------------------------------------------------------------------------------------
// How many blocks each weight keeps.

enum class allocation { uniform, erk };

inline constexpr detail::enum_names<allocation, 2> allocation_names{{{"uniform", allocation::uniform},
                                                                     {"erk", allocation::erk}}};
inline const char* to_string(allocation a) noexcept { return detail::enum_name(allocation_names, a); }
inline allocation parse_allocation(const std::string& s, const std::string& what = "allocation") {
  return detail::parse_enum(allocation_names, s, what, "allocation");
}

// A 2-D weight (in, out) that will be block-sparse.
struct weight_shape {
  std::string name;
  std::size_t in = 0;
  std::size_t out = 0;
};

// Throws unless B > 0, in and out are positive multiples of B and the block grid fits 32-bit
// positions (patterns store grid coordinates as uint32).
inline void check_block_grid(const std::string& name, std::size_t in, std::size_t out, std::size_t block) {
  SPARSELM_CHECK(block > 0, name, ": block size is zero");
  SPARSELM_CHECK(in > 0 && out > 0, name, ": shape (", in, ", ", out, ") has a zero dimension");
  SPARSELM_CHECK(in % block == 0 && out % block == 0, name, ": shape (", in, ", ", out,
                 ") is not divisible by the block size ", block);
  SPARSELM_CHECK((in / block) * (out / block) <= std::numeric_limits<std::uint32_t>::max(), name, ": block grid ",
                 in / block, "x", out / block, " is too large");
}

inline void check_sparsity(const std::string& name, double sparsity) {
  SPARSELM_CHECK(std::isfinite(sparsity) && sparsity >= 0.0 && sparsity < 1.0, name, ": sparsity ", sparsity,
                 " is outside [0, 1)");
}

// nnz_blocks = ceil((1 − s)·(in/B)·(out/B)); a product within 1e-9 (relative) of an integer counts
// as that integer, so floating-point error in 1 − s never adds a block.
inline std::size_t nnz_blocks(const std::string& name, std::size_t in, std::size_t out, std::size_t block,
                              double sparsity) {
  check_block_grid(name, in, out, block);
  check_sparsity(name, sparsity);
  std::size_t grid = (in / block) * (out / block);
  std::size_t n = std::min(grid, detail::ceil_count((1.0 - sparsity) * double(grid)));
  SPARSELM_CHECK(n > 0, name, ": sparsity ", sparsity, " leaves no block of the ", in / block, "x", out / block,
                 " grid");
  return n;
}

// Number of blocks per weight, in the order given.
//  - uniform: nnz_blocks(w) for every weight.
//  - erk (Erdős–Rényi-kernel): density_w = min(1, ε·(in+out)/(in·out)), with ε chosen so the total
//    equals the uniform total Σ nnz_blocks(w). Weights whose density would exceed 1 are made dense
//    and ε is recomputed over the rest until no density exceeds 1. Real block counts are then
//    rounded by largest remainder (ties to the earlier weight), so the total is exact.
// Throws (naming the weight) on bad shapes, sparsity outside [0, 1) or a weight left with no block.
inline std::vector<std::size_t> allocate_blocks(std::span<const weight_shape> weights, std::size_t block,
                                                double sparsity, allocation kind = allocation::uniform) {
  const std::size_t n = weights.size();
  std::vector<std::size_t> uniform(n), grid(n);
  std::size_t budget = 0;
  for (std::size_t i = 0; i < n; ++i) {
    uniform[i] = nnz_blocks(weights[i].name, weights[i].in, weights[i].out, block, sparsity);
    grid[i] = (weights[i].in / block) * (weights[i].out / block);
    budget += uniform[i];
  }
  if (kind == allocation::uniform) return uniform;

  std::vector<double> raw(n);
  for (std::size_t i = 0; i < n; ++i)
    raw[i] = double(weights[i].in + weights[i].out) / (double(weights[i].in) * double(weights[i].out));
  std::vector<char> dense(n, 0);
  double eps = 0.0;
  for (;;) {
    double rhs = double(budget), divisor = 0.0;
    for (std::size_t i = 0; i < n; ++i) {
      if (dense[i])
        rhs -= double(grid[i]);
      else
        divisor += raw[i] * double(grid[i]);
    }
    if (divisor <= 0.0) break;  // every weight is dense
    eps = rhs / divisor;
    bool capped = false;
    for (std::size_t i = 0; i < n; ++i)
      if (!dense[i] && eps * raw[i] >= 1.0) dense[i] = 1, capped = true;
    if (!capped) break;
  }

  std::vector<std::size_t> nnz(n);
  std::vector<double> frac(n, 0.0);
  std::size_t assigned = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (dense[i]) {
      nnz[i] = grid[i];
    } else {
      double x = std::min(double(grid[i]), eps * raw[i] * double(grid[i]));
      nnz[i] = std::size_t(std::floor(x));
      frac[i] = x - double(nnz[i]);
    }
    assigned += nnz[i];
  }
  // Largest remainder; loop in case floating-point error left more than one block per weight.
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return frac[a] > frac[b]; });
  while (assigned < budget) {
    std::size_t before = assigned;
    for (std::size_t i : order)
      if (assigned < budget && nnz[i] < grid[i]) ++nnz[i], ++assigned;
    if (assigned == before) break;
  }
  while (assigned > budget) {
    std::size_t before = assigned;
    for (auto it = order.rbegin(); it != order.rend(); ++it)
      if (assigned > budget && nnz[*it] > 1) --nnz[*it], --assigned;
    if (assigned == before) break;
  }
  for (std::size_t i = 0; i < n; ++i)
    SPARSELM_CHECK(nnz[i] > 0, weights[i].name, ": ERK allocation at sparsity ", sparsity,
                   " leaves this weight no block");
  return nnz;
}

// ---------------------------------------------------------------------------------------------
// Which blocks.

namespace detail {
// Partial Fisher–Yates: afterwards items[0..k) is a uniform sample without replacement of the
// original items, in draw order. Draw i uses rng.below(stream, i, n − i).
inline void partial_shuffle(std::vector<std::uint32_t>& items, std::size_t k, const counter_rng& rng,
                            std::uint64_t stream) noexcept {
  const std::size_t n = items.size();
  k = std::min(k, n);
  for (std::size_t i = 0; i < k; ++i) {
    std::size_t j = i + std::size_t(rng.below(stream, i, n - i));
    std::swap(items[i], items[j]);
  }
}
}  // namespace detail

// A pattern of `nnz` blocks chosen uniformly without replacement from the (in/B)x(out/B) grid.
// Slots are assigned in row-major grid order (slot 0 is the first active block of block row 0).
// The result is finalized.
inline block_pattern random_pattern(const std::string& name, std::size_t in, std::size_t out, std::size_t block,
                                    std::size_t nnz, const counter_rng& rng, std::uint64_t stream) {
  check_block_grid(name, in, out, block);
  block_pattern p;
  p.block = block;
  p.rows_b = in / block;
  p.cols_b = out / block;
  const std::size_t grid = p.rows_b * p.cols_b;
  SPARSELM_CHECK(nnz > 0 && nnz <= grid, name, ": ", nnz, " blocks requested in a ", p.rows_b, "x", p.cols_b,
                 " block grid");
  std::vector<std::uint32_t> pos(grid);
  std::iota(pos.begin(), pos.end(), std::uint32_t{0});
  detail::partial_shuffle(pos, nnz, rng, stream);
  pos.resize(nnz);
  std::sort(pos.begin(), pos.end());
  p.row.resize(nnz);
  p.col.resize(nnz);
  for (std::size_t s = 0; s < nnz; ++s) {
    p.row[s] = std::uint32_t(pos[s] / p.cols_b);
    p.col[s] = std::uint32_t(pos[s] % p.cols_b);
  }
  p.finalize(name);
  return p;
}

// ---------------------------------------------------------------------------------------------
// Starting values.

// a = sqrt(6 / ((fan_in + fan_out)·density)): Glorot-uniform scaled so that the variance of a
// unit's input sum matches a dense Glorot initialisation.
inline double init_bound(std::size_t fan_in, std::size_t fan_out, double density) {
  SPARSELM_CHECK(fan_in + fan_out > 0, "init_bound: fan_in + fan_out is zero");
  SPARSELM_CHECK(density > 0.0 && density <= 1.0, "init_bound: density ", density, " is outside (0, 1]");
  return std::sqrt(6.0 / (double(fan_in + fan_out) * density));
}

// values[s·B² + r·B + c] = a·(2u − 1), u = rng.uniform(stream, dense element index of that value),
// with fan_in = in, fan_out = out and the pattern's actual density. Values lie in [−a, a). Keyed by
// the dense element index, so a value depends on where its block sits, not on slot order.
// fan_in, fan_out (non-zero): the whole weight's, for a pattern that is one rank's slice of it
// (tensor parallelism: the slice's values are drawn at the whole weight's scale).
inline void init_values(const std::string& name, const block_pattern& p, std::span<float> values,
                        const counter_rng& rng, std::uint64_t stream, std::size_t fan_in = 0,
                        std::size_t fan_out = 0) {
  const std::size_t B = p.block, bb = B * B;
  SPARSELM_CHECK(p.nnz() > 0, name, ": pattern has no blocks");
  SPARSELM_CHECK(values.size() == p.nnz() * bb, name, ": ", values.size(), " values for ", p.nnz(), " blocks of ",
                 B, "x", B);
  const float a = float(init_bound(fan_in ? fan_in : p.in(), fan_out ? fan_out : p.out(), p.density()));
  const std::size_t out = p.out();
  parallel_for(
      0, p.nnz(),
      [&](std::size_t s) {
        float* v = values.data() + s * bb;
        for (std::size_t r = 0; r < B; ++r) {
          std::size_t base = (std::size_t(p.row[s]) * B + r) * out + std::size_t(p.col[s]) * B;
          for (std::size_t c = 0; c < B; ++c) v[r * B + c] = a * (2.0f * rng.uniform(stream, base + c) - 1.0f);
        }
      },
      16);
}

}  // namespace sparselm::sparse
