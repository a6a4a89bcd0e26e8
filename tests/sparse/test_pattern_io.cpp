// Block patterns and explored maps to and from int32 checkpoint buffers.
#include <doctest/doctest.h>

#include <vector>

#include "sparselm/sparse/init.hpp"
#include "sparselm/sparse/pattern_io.hpp"

// Each test file is its own namespace: the area's files are compiled as one unity translation unit
// (tests/CMakeLists.txt), and their helpers must not meet.
namespace SPARSELM_UNITY_ID {

using namespace sparselm;
using namespace sparselm::sparse;
using doctest::Contains;

namespace {
block_pattern hand_pattern() {
  block_pattern p;
  p.block = 4, p.rows_b = 3, p.cols_b = 5;
  p.row = {2, 0, 1}, p.col = {4, 3, 0};  // slot order deliberately not grid order
  p.finalize();
  return p;
}
block_pattern empty_like(const block_pattern& p) {
  block_pattern q;
  q.block = p.block, q.rows_b = p.rows_b, q.cols_b = p.cols_b;
  q.row.assign(p.nnz(), 0), q.col.assign(p.nnz(), 0);
  return q;
}
}  // namespace

TEST_CASE("pattern to int32: (nnz, 2) rows of (block row, block column) in slot order") {
  auto p = hand_pattern();
  CHECK(pattern_shape(p) == std::vector<std::size_t>{3, 2});
  CHECK(pattern_to_i32(p) == std::vector<std::int32_t>{2, 4, 0, 3, 1, 0});
  std::vector<std::int32_t> small(5);
  CHECK_THROWS_WITH_AS(pattern_to_i32("h.0.attn", p, small), Contains("h.0.attn: pattern buffer of 5 int32"), error);
}

TEST_CASE("pattern round trip keeps slot order and rebuilds the orderings") {
  auto p = random_pattern("w", 64, 128, 8, 37, counter_rng(3), 0);
  auto q = empty_like(p);
  pattern_from_i32("w", q, pattern_to_i32(p));
  CHECK(q.row == p.row);
  CHECK(q.col == p.col);
  CHECK(q.col_ptr == p.col_ptr);
  CHECK(q.col_slots == p.col_slots);
  CHECK(q.row_slots == p.row_slots);
  auto h = hand_pattern();
  auto g = empty_like(h);
  pattern_from_i32("w", g, pattern_to_i32(h));
  CHECK(g.row == h.row);
  CHECK(g.col == h.col);
}

TEST_CASE("corrupt pattern buffers: errors name the weight, the pattern is unchanged") {
  auto p = hand_pattern();
  const auto row0 = p.row, col0 = p.col;
  auto bad = [&](std::vector<std::int32_t> buf, const char* msg) {
    CHECK_THROWS_WITH_AS(pattern_from_i32("h.3.mlp.c_fc.weight", p, buf), Contains(msg), error);
    CHECK(p.row == row0);
    CHECK(p.col == col0);
  };
  bad({2, 4, 0, 3, 1}, "h.3.mlp.c_fc.weight: pattern buffer has an odd number");
  bad({2, 4, 0, 3}, "holds 2 blocks, the weight has 3");
  bad({2, 4, 0, 3, 1, 0, 1, 1}, "holds 4 blocks");
  bad({2, 4, -1, 3, 1, 0}, "slot 1 at block (-1, 3) is outside the 3x5 block grid");
  bad({2, 4, 0, 3, 3, 0}, "slot 2 at block (3, 0) is outside");
  bad({2, 5, 0, 3, 1, 0}, "slot 0 at block (2, 5)");
  bad({2, 4, 0, 3, 2, 4}, "h.3.mlp.c_fc.weight: block (2, 4) appears twice");
}

TEST_CASE("explored map round trip and bad values") {
  auto p = hand_pattern();
  explored_map m(p);
  CHECK(m.count == 3);
  CHECK(m.fraction() == doctest::Approx(3.0 / 15));
  auto buf = explored_to_i32(m);
  CHECK(buf.size() == 15);
  auto r = explored_from_i32("w", 3, 5, buf);
  CHECK(r.ever == m.ever);
  CHECK(r.count == 3);
  buf[7] = 2;
  CHECK_THROWS_WITH_AS(explored_from_i32("h.0.attn.c_proj", 3, 5, buf),
                       Contains("h.0.attn.c_proj: explored buffer has 2 at block (1, 2)"), error);
  buf.pop_back();
  CHECK_THROWS_WITH_AS(explored_from_i32("h.0.attn.c_proj", 3, 5, buf), Contains("14 values for a 3x5 block grid"),
                       error);
}

}  // namespace SPARSELM_UNITY_ID
