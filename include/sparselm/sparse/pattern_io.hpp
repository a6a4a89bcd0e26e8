#pragma once
// Block patterns and explored maps as int32 buffers, for checkpoints that store them as I32 tensors.
//
// A pattern is a (nnz, 2) tensor: row k is (block row, block column) of arena slot k, so slot order
// (which the values tensor (nnz, B, B) depends on) survives the round trip. Block size and grid
// come from the model, not the buffer: load into a pattern that already has them.
//
//   io.add_i32(name + ".pattern", sparse::pattern_shape(p), sparse::pattern_to_i32(p));
//   sparse::pattern_from_i32(name, p, io.i32(name + ".pattern"));

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "sparselm/core/error.hpp"
#include "sparselm/sparse/block_pattern.hpp"
#include "sparselm/sparse/prune_regrow.hpp"

namespace sparselm::sparse {

inline std::vector<std::size_t> pattern_shape(const block_pattern& p) { return {p.nnz(), 2}; }

// Writes (row, col) per slot into out (size 2·nnz).
inline void pattern_to_i32(const std::string& name, const block_pattern& p, std::span<std::int32_t> out) {
  SPARSELM_CHECK(out.size() == 2 * p.nnz(), name, ": pattern buffer of ", out.size(), " int32 for ", p.nnz(),
                 " blocks (expected ", 2 * p.nnz(), ")");
  SPARSELM_CHECK(p.rows_b <= std::size_t(std::numeric_limits<std::int32_t>::max()) &&
                     p.cols_b <= std::size_t(std::numeric_limits<std::int32_t>::max()),
                 name, ": block grid ", p.rows_b, "x", p.cols_b, " does not fit int32");
  for (std::size_t s = 0; s < p.nnz(); ++s) {
    out[2 * s] = std::int32_t(p.row[s]);
    out[2 * s + 1] = std::int32_t(p.col[s]);
  }
}

inline std::vector<std::int32_t> pattern_to_i32(const block_pattern& p) {
  std::vector<std::int32_t> out(2 * p.nnz());
  pattern_to_i32("block_pattern", p, out);
  return out;
}

// Replaces p's slots with those in buf and finalizes. p must already carry the block size and grid,
// and buf must hold exactly p.nnz() blocks (nnz is fixed for a run). Throws, naming the weight, on
// a wrong size, a negative or out-of-grid coordinate, or a block listed twice; p is unchanged then.
inline void pattern_from_i32(const std::string& name, block_pattern& p, std::span<const std::int32_t> buf) {
  SPARSELM_CHECK(buf.size() % 2 == 0, name, ": pattern buffer has an odd number of int32 (", buf.size(),
                 "); expected (nnz, 2)");
  SPARSELM_CHECK(buf.size() / 2 == p.nnz(), name, ": pattern buffer holds ", buf.size() / 2,
                 " blocks, the weight has ", p.nnz());
  block_pattern q;
  q.block = p.block;
  q.rows_b = p.rows_b;
  q.cols_b = p.cols_b;
  q.row.resize(buf.size() / 2);
  q.col.resize(buf.size() / 2);
  for (std::size_t s = 0; s < q.row.size(); ++s) {
    std::int32_t r = buf[2 * s], c = buf[2 * s + 1];
    SPARSELM_CHECK(r >= 0 && c >= 0 && std::size_t(r) < q.rows_b && std::size_t(c) < q.cols_b, name, ": slot ", s,
                   " at block (", r, ", ", c, ") is outside the ", q.rows_b, "x", q.cols_b, " block grid");
    q.row[s] = std::uint32_t(r);
    q.col[s] = std::uint32_t(c);
  }
  q.finalize(name);  // duplicates
  p = std::move(q);
}

// Explored map as int32 0/1 per grid position ((rows_b, cols_b) row-major).
inline std::vector<std::int32_t> explored_to_i32(const explored_map& m) {
  return std::vector<std::int32_t>(m.ever.begin(), m.ever.end());
}

// Reads an explored map for a (rows_b, cols_b) grid. Values must be 0 or 1.
inline explored_map explored_from_i32(const std::string& name, std::size_t rows_b, std::size_t cols_b,
                                      std::span<const std::int32_t> buf) {
  SPARSELM_CHECK(buf.size() == rows_b * cols_b, name, ": explored buffer of ", buf.size(), " values for a ", rows_b,
                 "x", cols_b, " block grid");
  explored_map m;
  m.ever.resize(buf.size());
  for (std::size_t g = 0; g < buf.size(); ++g) {
    SPARSELM_CHECK(buf[g] == 0 || buf[g] == 1, name, ": explored buffer has ", buf[g], " at block (", g / cols_b,
                   ", ", g % cols_b, "); expected 0 or 1");
    m.ever[g] = std::uint8_t(buf[g]);
    m.count += std::size_t(buf[g]);
  }
  return m;
}

// The weight as a dense (in, out) row-major matrix: values (nnz, B, B) placed at their blocks
// (slot s is block (row[s], col[s]), input index first inside a block), zeros elsewhere.
inline void pattern_to_dense(const std::string& name, const block_pattern& p, std::span<const float> values,
                             std::span<float> out) {
  const std::size_t B = p.block, bb = B * B, cols = p.out();
  SPARSELM_CHECK(values.size() == p.nnz() * bb, name, ": ", values.size(), " values for ", p.nnz(), " blocks of ", B,
                 "x", B);
  SPARSELM_CHECK(out.size() == p.in() * cols, name, ": dense output of ", out.size(), " floats for a ", p.in(), "x",
                 cols, " weight");
  std::fill(out.begin(), out.end(), 0.0f);
  for (std::size_t s = 0; s < p.nnz(); ++s)
    for (std::size_t r = 0; r < B; ++r)
      std::copy_n(values.data() + s * bb + r * B, B, out.data() + (p.row[s] * B + r) * cols + p.col[s] * B);
}

}  // namespace sparselm::sparse
