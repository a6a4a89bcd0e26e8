// Initial allocation (uniform, ERK), pattern init and value init of block-sparse weights.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <vector>

#include "sparselm/core/threads.hpp"
#include "sparselm/sparse/init.hpp"

// Each test file is its own namespace: the area's files are compiled as one unity translation unit
// (tests/CMakeLists.txt), and their helpers must not meet.
namespace SPARSELM_UNITY_ID {

using namespace sparselm;
using namespace sparselm::sparse;
using doctest::Contains;

TEST_CASE("nnz_blocks = ceil((1 - s) * (in/B) * (out/B))") {
  CHECK(nnz_blocks("w", 64, 128, 16, 0.9) == 4);   // 4x8 grid: 0.1*32 = 3.2 -> 4
  CHECK(nnz_blocks("w", 32, 32, 4, 0.9) == 7);     // 8x8 grid: 6.4 -> 7
  CHECK(nnz_blocks("w", 112, 16, 16, 0.5) == 4);   // 7x1 grid: 3.5 -> 4
  CHECK(nnz_blocks("w", 64, 64, 16, 0.0) == 16);   // dense
  CHECK(nnz_blocks("w", 64, 64, 16, 0.99) == 1);   // 0.16 -> 1
  // Exact products stay exact although 1 - 0.9 and 1 - 0.7 are not exact in binary.
  CHECK(nnz_blocks("w", 160, 160, 16, 0.9) == 10);  // 10x10 grid: 10
  CHECK(nnz_blocks("w", 10, 10, 1, 0.7) == 30);     // 100 blocks: 30
  CHECK(nnz_blocks("w", 768, 3072, 16, 0.9) == 922);  // 48x192 = 9216: 921.6 -> 922
}

TEST_CASE("nnz_blocks: errors name the weight") {
  CHECK_THROWS_WITH_AS(nnz_blocks("h.0.attn", 65, 64, 16, 0.9), Contains("h.0.attn"), error);
  CHECK_THROWS_WITH_AS(nnz_blocks("h.0.attn", 64, 65, 16, 0.9), Contains("not divisible by the block size 16"), error);
  CHECK_THROWS_WITH_AS(nnz_blocks("h.0.attn", 64, 64, 0, 0.9), Contains("block size is zero"), error);
  CHECK_THROWS_WITH_AS(nnz_blocks("h.0.attn", 0, 64, 16, 0.9), Contains("zero dimension"), error);
  CHECK_THROWS_WITH_AS(nnz_blocks("h.0.attn", 64, 64, 16, 1.0), Contains("outside [0, 1)"), error);
  CHECK_THROWS_WITH_AS(nnz_blocks("h.0.attn", 64, 64, 16, -0.1), Contains("h.0.attn: sparsity"), error);
  CHECK_THROWS_AS(nnz_blocks("h.0.attn", 64, 64, 16, std::nan("")), error);
}

TEST_CASE("allocate_blocks uniform is nnz_blocks per weight") {
  std::vector<weight_shape> ws{{"a", 64, 64}, {"b", 64, 256}};
  CHECK(allocate_blocks(ws, 16, 0.75) == std::vector<std::size_t>{4, 16});
}

TEST_CASE("ERK: density proportional to (in+out)/(in*out), total equals the uniform budget") {
  // a: 4x4 grid, raw (64+64)/(64*64) = 1/32; b: 4x16 grid, raw (64+256)/(64*256) = 5/256.
  // Uniform budget at s = 0.75: 4 + 16 = 20. eps = 20 / (16/32 + 64*5/256) = 20/1.75.
  // Real counts: a 16*eps/32 = 5.714, b 64*eps*5/256 = 14.286 -> floors 5 + 14, the remaining
  // block goes to the larger remainder (a): a 6, b 14.
  std::vector<weight_shape> ws{{"a", 64, 64}, {"b", 64, 256}};
  auto nnz = allocate_blocks(ws, 16, 0.75, allocation::erk);
  CHECK(nnz == std::vector<std::size_t>{6, 14});
}

TEST_CASE("ERK: a density above 1 is capped and the excess redistributed") {
  // e: 2x2 grid (32x32), raw 1/16; d: 16x16 grid (256x256), raw 1/128. s = 0.5: budget 2 + 128 = 130.
  // Round 1: eps = 130 / (4/16 + 256/128) = 57.8, e's density 3.6 > 1 -> e dense (4 blocks).
  // Round 2: eps = (130 - 4) / 2 = 63, d's density 63/128 -> 126 blocks.
  std::vector<weight_shape> ws{{"e", 32, 32}, {"d", 256, 256}};
  CHECK(allocate_blocks(ws, 16, 0.5, allocation::erk) == std::vector<std::size_t>{4, 126});

  // Two small weights capped, one large: x 1 block, y 4 blocks, z gets 207 - 5 = 202.
  std::vector<weight_shape> ws3{{"x", 16, 16}, {"y", 32, 32}, {"z", 512, 512}};
  auto n3 = allocate_blocks(ws3, 16, 0.8, allocation::erk);
  CHECK(n3 == std::vector<std::size_t>{1, 4, 202});
  // Sparsity 0: everything dense.
  CHECK(allocate_blocks(ws3, 16, 0.0, allocation::erk) == std::vector<std::size_t>{1, 4, 1024});
}

TEST_CASE("ERK: total is exact on a larger model and errors name the weight") {
  std::vector<weight_shape> ws{{"qkv", 768, 2304}, {"proj", 768, 768}, {"fc", 768, 3072}, {"fc2", 3072, 768},
                               {"up", 128, 768}};
  auto uni = allocate_blocks(ws, 16, 0.9);
  auto erk = allocate_blocks(ws, 16, 0.9, allocation::erk);
  std::size_t su = 0, se = 0;
  for (std::size_t i = 0; i < ws.size(); ++i) su += uni[i], se += erk[i];
  CHECK(se == su);
  // The smaller weight gets the larger density.
  CHECK(double(erk[4]) / (8 * 48) > double(erk[2]) / (48 * 192));
  std::vector<weight_shape> bad{{"ok", 64, 64}, {"h.3.mlp.c_proj", 64, 60}};
  CHECK_THROWS_WITH_AS(allocate_blocks(bad, 16, 0.9, allocation::erk), Contains("h.3.mlp.c_proj"), error);
  CHECK(parse_allocation("erk") == allocation::erk);
  CHECK_THROWS_WITH_AS(parse_allocation("ERK", "model: field 'allocation'"), Contains("field 'allocation'"), error);
}

TEST_CASE("random_pattern: distinct blocks, deterministic, seed/stream dependent, nnz 0 rejected") {
  counter_rng rng(7);
  auto p = random_pattern("w", 128, 64, 16, 10, rng, pattern_stream(3));  // 8x4 grid
  CHECK(p.nnz() == 10);
  std::set<std::pair<std::uint32_t, std::uint32_t>> seen;
  for (std::size_t s = 0; s < p.nnz(); ++s) seen.insert({p.row[s], p.col[s]});
  CHECK(seen.size() == 10);
  // Slots in row-major grid order.
  for (std::size_t s = 1; s < p.nnz(); ++s) CHECK(p.row[s - 1] * 4 + p.col[s - 1] < p.row[s] * 4 + p.col[s]);
  auto q = random_pattern("w", 128, 64, 16, 10, rng, pattern_stream(3));
  CHECK(q.row == p.row);
  CHECK(q.col == p.col);
  auto r = random_pattern("w", 128, 64, 16, 10, rng, pattern_stream(4));
  auto u = random_pattern("w", 128, 64, 16, 10, counter_rng(8), pattern_stream(3));
  CHECK((r.row != p.row || r.col != p.col));
  CHECK((u.row != p.row || u.col != p.col));
  CHECK_THROWS_WITH_AS(random_pattern("h.1.attn.c_proj", 128, 64, 16, 0, rng, 0), Contains("h.1.attn.c_proj"), error);
  CHECK_THROWS_AS(random_pattern("w", 128, 64, 16, 33, rng, 0), error);
}

TEST_CASE("random_pattern: every block equally likely") {
  // 4x4 grid, 4 blocks: each position is active with probability 1/4. 4000 draws -> 1000 each
  // (sd ~27); allow +-150.
  counter_rng rng(11);
  std::vector<int> hits(16, 0);
  for (std::uint64_t t = 0; t < 4000; ++t) {
    auto p = random_pattern("w", 4, 4, 1, 4, rng, t);
    for (std::size_t s = 0; s < p.nnz(); ++s) ++hits[p.row[s] * 4 + p.col[s]];
  }
  for (int h : hits) CHECK(std::abs(h - 1000) < 150);
}

TEST_CASE("init_values: U(-a, a) with a from the actual density, deterministic") {
  counter_rng rng(5);
  // 4x8 grid at s = 0.9 -> 4 blocks, density 0.125 (not 0.1): a = sqrt(6 / (192 * 0.125)) = 0.5.
  std::size_t nnz = nnz_blocks("w", 64, 128, 16, 0.9);
  auto p = random_pattern("w", 64, 128, 16, nnz, rng, pattern_stream(0));
  CHECK(init_bound(64, 128, p.density()) == doctest::Approx(0.5));
  std::vector<float> v(nnz * 256);
  init_values("w", p, v, rng, value_stream(0));
  float mx = 0;
  double sum = 0, sq = 0;
  for (float x : v) mx = std::max(mx, std::abs(x)), sum += x, sq += double(x) * x;
  CHECK(mx <= 0.5f);
  CHECK(mx > 0.49f);
  CHECK(std::abs(sum / double(v.size())) < 0.03);            // mean 0 (sd of mean ~0.009)
  CHECK(sq / double(v.size()) == doctest::Approx(0.25 / 3).epsilon(0.08));  // variance a^2/3

  // Same numbers with one or two threads.
  std::vector<float> w1(v.size()), w2(v.size());
  int old = num_threads();
  set_num_threads(1);
  init_values("w", p, w1, rng, value_stream(0));
  set_num_threads(2);
  init_values("w", p, w2, rng, value_stream(0));
  set_num_threads(old);
  CHECK(w1 == v);
  CHECK(w2 == v);
}

TEST_CASE("init_values: a block's values depend on its position, not its slot") {
  counter_rng rng(9);
  block_pattern p;
  p.block = 2, p.rows_b = 2, p.cols_b = 3;
  p.row = {0, 1}, p.col = {2, 0};
  p.finalize();
  block_pattern q = p;
  q.row = {1, 0}, q.col = {0, 2};
  q.finalize();
  std::vector<float> vp(8), vq(8);
  init_values("w", p, vp, rng, 1);
  init_values("w", q, vq, rng, 1);
  CHECK(std::equal(vp.begin(), vp.begin() + 4, vq.begin() + 4));
  CHECK(std::equal(vp.begin() + 4, vp.end(), vq.begin()));
  std::vector<float> wrong(7);
  CHECK_THROWS_WITH_AS(init_values("h.2.mlp.c_fc", p, wrong, rng, 1), Contains("h.2.mlp.c_fc: 7 values"), error);
}

}  // namespace SPARSELM_UNITY_ID
