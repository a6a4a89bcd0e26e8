// libFuzzer: block-pattern and explored-map buffers (sparse/pattern_io.hpp) as a checkpoint's
// I32 tensors hold them: the first 4 bytes pick the grid, the rest are the int32 values.
#include <cstring>
#include <vector>

#include "fuzz_common.hpp"
#include "sparselm/sparse/pattern_io.hpp"

SPARSELM_FUZZ_TARGET(pattern) {
  if (size < 4) return 0;
  const std::size_t rows = 1 + data[0] % 16, cols = 1 + data[1] % 16, nnz = data[2] % (rows * cols + 1);
  std::vector<std::int32_t> buf((size - 4) / 4);
  if (!buf.empty()) std::memcpy(buf.data(), data + 4, buf.size() * 4);
  fuzz::expect_clean([&] {
    sparselm::sparse::block_pattern p;
    p.block = 4;
    p.rows_b = rows;
    p.cols_b = cols;
    for (std::size_t k = 0; k < nnz; ++k) {
      p.row.push_back(std::uint32_t(k / cols));
      p.col.push_back(std::uint32_t(k % cols));
    }
    p.finalize("fuzz");
    const auto before = sparselm::sparse::pattern_to_i32(p);
    try {
      sparselm::sparse::pattern_from_i32("fuzz", p, buf);
    } catch (const sparselm::error&) {
      if (sparselm::sparse::pattern_to_i32(p) != before) std::abort();  // unchanged on error
    }
    if (data[3] & 1) (void)sparselm::sparse::explored_from_i32("fuzz", rows, cols, buf);
  });
  return 0;
}
