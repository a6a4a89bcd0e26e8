#pragma once
// One-shot magnitude pruning of dense weights into block-sparse ones: of a dense (in, out) matrix
// the nnz blocks of largest L2 norm survive with their values, the rest are dropped.
//
//   auto p = sparse::magnitude_pattern(name, dense, in, out, B, nnz);  // dense: (in, out) row-major
//   sparse::gather_blocks(name, p, dense, values);                      // values: (nnz, B, B)
//   sparse::prune_model(dense_model, sparse_model);  // a whole model: same tensor names
//
// Ties (equal norms) go to the lower grid position (row-major over the block grid), so the result
// is a pure function of the values. Used to start block-sparse fine-tuning from a dense checkpoint
// (examples/finetune_cli.hpp, --prune-block).

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include "sparselm/core/arena.hpp"
#include "sparselm/core/error.hpp"
#include "sparselm/sparse/block_pattern.hpp"
#include "sparselm/sparse/init.hpp"

namespace sparselm::sparse {


// The pattern of the nnz blocks of largest L2 norm of `dense` (in x out, row-major), slots in
// increasing grid position. Throws naming the weight on a size mismatch, a block count outside
// [1, blocks] or a non-finite value.
inline block_pattern magnitude_pattern(const std::string& name, std::span<const float> dense, std::size_t in,
                                       std::size_t out, std::size_t block, std::size_t nnz) {
  check_block_grid(name, in, out, block);
  SPARSELM_CHECK(dense.size() == in * out, name, ": ", dense.size(), " dense values for a ", in, "x", out, " weight");
  const std::size_t rb = in / block, cb = out / block, grid = rb * cb;
  SPARSELM_CHECK(nnz >= 1 && nnz <= grid, name, ": ", nnz, " blocks to keep of a ", rb, "x", cb, " block grid");
  std::vector<double> norm(grid, 0.0);
  for (std::size_t r = 0; r < in; ++r)
    for (std::size_t c = 0; c < out; ++c) {
      const double v = dense[r * out + c];
      SPARSELM_CHECK(std::isfinite(v), name, ": value (", r, ", ", c, ") is not finite (", v, ")");
      norm[(r / block) * cb + c / block] += v * v;
    }
  std::vector<std::uint32_t> pos(grid);
  std::iota(pos.begin(), pos.end(), std::uint32_t{0});
  std::partial_sort(pos.begin(), pos.begin() + std::ptrdiff_t(nnz), pos.end(),
                    [&](std::uint32_t a, std::uint32_t b) { return norm[a] != norm[b] ? norm[a] > norm[b] : a < b; });
  pos.resize(nnz);
  std::sort(pos.begin(), pos.end());
  block_pattern p;
  p.block = block;
  p.rows_b = rb;
  p.cols_b = cb;
  p.row.resize(nnz);
  p.col.resize(nnz);
  for (std::size_t s = 0; s < nnz; ++s) {
    p.row[s] = std::uint32_t(pos[s] / cb);
    p.col[s] = std::uint32_t(pos[s] % cb);
  }
  p.finalize(name);
  return p;
}

// values (nnz, B, B) = the blocks of `dense` (in x out, row-major) that p holds, slot by slot.
inline void gather_blocks(const std::string& name, const block_pattern& p, std::span<const float> dense,
                          std::span<float> values) {
  const std::size_t B = p.block, out = p.cols_b * B;
  SPARSELM_CHECK(dense.size() == p.rows_b * B * out && values.size() == p.nnz() * B * B, name, ": ", dense.size(),
                 " dense and ", values.size(), " block values for a ", p.rows_b * B, "x", out, " weight of ", p.nnz(),
                 " blocks of ", B, "x", B);
  for (std::size_t s = 0; s < p.nnz(); ++s)
    for (std::size_t i = 0; i < B; ++i)
      std::copy_n(dense.data() + (p.row[s] * B + i) * out + p.col[s] * B, B, values.data() + (s * B + i) * B);
}

// Every block-sparse weight of `sparse_model` (its block size and block count as built) becomes
// the magnitude pruning of the dense tensor of the same name in `dense_model`; every other tensor
// is copied. The two models must have the same tensor names, the dense weights the (in, out)
// shapes of the sparse ones. Throws naming the tensor otherwise, before changing anything.
template <class Dense, class Sparse>
void prune_model(Dense& dense_model, Sparse& sparse_model) {
  const auto& dl = *dense_model.layout();
  const auto& sl = *sparse_model.layout();
  const auto weights = sparse_model.sparse_weights();
  auto dense_index = [&](const std::string& n) {
    const auto i = dl.find(n);
    SPARSELM_CHECK(i.has_value(), "prune_model: the dense model has no tensor '", n, "'");
    return *i;
  };
  std::vector<block_pattern> patterns(weights.size());
  for (std::size_t w = 0; w < weights.size(); ++w) {
    const auto& sw = weights[w];
    const auto& d = dl[dense_index(sw.name)];
    const std::size_t B = sl[sw.tensor].shape[1], nnz = sl[sw.tensor].shape[0];
    const auto& p = *sw.pattern;
    SPARSELM_CHECK(p.block == B, "prune_model: block-sparse weight '", sw.name,
                   "' has no pattern yet: initialise the model (init) first");
    SPARSELM_CHECK((d.shape == std::vector<std::size_t>{p.in(), p.out()}), "prune_model: dense tensor '", sw.name,
                   "' is ", shape_string(d.shape), ", the block-sparse weight ", p.in(), "x", p.out());
    patterns[w] = magnitude_pattern(sw.name, dense_model.params().at(sw.name), d.shape[0], d.shape[1], B, nnz);
  }
  std::vector<bool> is_sparse(sl.count(), false);
  for (const auto& w : weights) is_sparse[w.tensor] = true;
  for (std::size_t i = 0; i < sl.count(); ++i) {
    if (is_sparse[i]) continue;
    const auto& shape = dl[dense_index(sl[i].name)].shape;
    SPARSELM_CHECK(shape == sl[i].shape, "prune_model: tensor '", sl[i].name, "' has shape ", shape_string(shape),
                   " in the dense model and ", shape_string(sl[i].shape), " in the sparse one");
  }
  auto& sp = sparse_model.params();
  for (std::size_t w = 0; w < weights.size(); ++w) {
    *weights[w].pattern = patterns[w];
    gather_blocks(weights[w].name, patterns[w], dense_model.params().at(weights[w].name), sp[weights[w].tensor]);
  }
  for (std::size_t i = 0; i < sl.count(); ++i) {
    if (is_sparse[i]) continue;
    const auto src = dense_model.params().at(sl[i].name);
    std::copy(src.begin(), src.end(), sp[i].begin());
  }
}

}  // namespace sparselm::sparse
