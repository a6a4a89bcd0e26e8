// One-shot magnitude pruning (sparse/magnitude.hpp): the blocks of largest L2 norm survive with
// their values, ties to the lower grid position; a whole dense model pruned into a block-sparse one
// computes what the dense model computes with the dropped blocks zeroed.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "../common/errors.hpp"
#include "../common/tiny_bert.hpp"
#include "sparselm/models/bert_finetune.hpp"
#include "sparselm/sparse/magnitude.hpp"
#include "sparselm/sparse/pattern_io.hpp"

// Each test file is its own namespace: the area's files are compiled as one unity translation unit
// (tests/CMakeLists.txt), and their helpers must not meet.
namespace SPARSELM_UNITY_ID {

using namespace sparselm;

TEST_CASE("magnitude_pattern keeps the blocks of largest L2 norm, ties to the lower grid position") {
  // 4 x 8 with B = 2: a 2 x 4 block grid; block (r, c) filled with the value v[r][c].
  const float v[2][4] = {{1.0f, -5.0f, 2.0f, 0.5f}, {3.0f, 2.0f, -4.0f, 0.0f}};
  std::vector<float> dense(4 * 8);
  for (std::size_t i = 0; i < 4; ++i)
    for (std::size_t j = 0; j < 8; ++j) dense[i * 8 + j] = v[i / 2][j / 2];
  // |v|: 5 (0,1), 4 (1,2), 3 (1,0), then 2 twice: (0,2) at position 2 before (1,1) at position 5.
  const auto p = sparse::magnitude_pattern("w", dense, 4, 8, 2, 4);
  REQUIRE(p.nnz() == 4);
  CHECK(p.block == 2);
  CHECK(p.rows_b == 2);
  CHECK(p.cols_b == 4);
  const std::vector<std::uint32_t> rows{0, 0, 1, 1}, cols{1, 2, 0, 2};  // ascending grid positions 1, 2, 4, 6
  CHECK(p.row == rows);
  CHECK(p.col == cols);
  std::vector<float> values(4 * 2 * 2);
  sparse::gather_blocks("w", p, dense, values);
  std::vector<float> back(4 * 8);
  sparse::pattern_to_dense("w", p, values, back);
  for (std::size_t i = 0; i < 4; ++i)
    for (std::size_t j = 0; j < 8; ++j) {
      const std::size_t pos = (i / 2) * 4 + j / 2;
      const bool kept = pos == 1 || pos == 2 || pos == 4 || pos == 6;
      CHECK(back[i * 8 + j] == (kept ? dense[i * 8 + j] : 0.0f));
    }
  // Within a block the values keep their places (input index first).
  std::vector<float> ramp(4 * 8);
  for (std::size_t k = 0; k < ramp.size(); ++k) ramp[k] = float(k);
  const auto q = sparse::magnitude_pattern("ramp", ramp, 4, 8, 2, 1);  // the largest: block (1, 3)
  CHECK(q.row[0] == 1);
  CHECK(q.col[0] == 3);
  std::vector<float> one(4);
  sparse::gather_blocks("ramp", q, ramp, one);
  CHECK(one == std::vector<float>{22, 23, 30, 31});

  CHECK(test::error_of([&] { sparse::magnitude_pattern("w", dense, 4, 8, 2, 0); }).find("0 blocks to keep") !=
        std::string::npos);
  CHECK(test::error_of([&] { sparse::magnitude_pattern("w", dense, 4, 8, 2, 9); }).find("9 blocks to keep of a 2x4") !=
        std::string::npos);
  CHECK(test::error_of([&] { sparse::magnitude_pattern("w", dense, 4, 4, 2, 1); }).find("32 dense values for a 4x4") !=
        std::string::npos);
  dense[13] = std::numeric_limits<float>::quiet_NaN();
  CHECK(test::error_of([&] {
          sparse::magnitude_pattern("w", dense, 4, 8, 2, 1);
        }).find("w: value (1, 5) is not finite") != std::string::npos);
}

TEST_CASE("prune_model: a pruned model computes the dense model with the dropped blocks zeroed") {
  const auto cfg = test::tiny_bert_config();
  using S = block_sparse<16>;
  bert_classifier<> dense(cfg, 3);
  dense.init(4);
  bert_classifier<float, S> sparse(cfg, 3, sparse_plan{.sparsity = 0.5});
  sparse.init(8);
  sparse::prune_model(dense, sparse);

  const auto weights = sparse.sparse_weights();
  REQUIRE(!weights.empty());
  for (const auto& w : weights) {
    const auto& p = *w.pattern;
    const auto d = dense.params().at(w.name);
    std::vector<float> back(d.size());
    sparse::pattern_to_dense(w.name, p, w.values, back);
    // Kept blocks carry the dense values; every kept block's norm is at least every dropped one's.
    std::vector<double> norm(p.rows_b * p.cols_b, 0.0);
    for (std::size_t i = 0; i < p.in(); ++i)
      for (std::size_t j = 0; j < p.out(); ++j)
        norm[(i / 16) * p.cols_b + j / 16] += double(d[i * p.out() + j]) * d[i * p.out() + j];
    std::vector<bool> kept(norm.size(), false);
    for (std::size_t s = 0; s < p.nnz(); ++s) kept[p.row[s] * p.cols_b + p.col[s]] = true;
    double min_kept = 1e300, max_dropped = 0.0;
    for (std::size_t g = 0; g < norm.size(); ++g) {
      if (kept[g])
        min_kept = std::min(min_kept, norm[g]);
      else
        max_dropped = std::max(max_dropped, norm[g]);
    }
    CHECK_MESSAGE(min_kept >= max_dropped, w.name);
    for (std::size_t i = 0; i < p.in(); ++i)
      for (std::size_t j = 0; j < p.out(); ++j) {
        const float want = kept[(i / 16) * p.cols_b + j / 16] ? d[i * p.out() + j] : 0.0f;
        REQUIRE(back[i * p.out() + j] == want);
      }
    // The dense model with the same blocks dropped, for the comparison below.
    std::copy(back.begin(), back.end(), d.begin());
  }
  for (const auto& t : *dense.layout()) {
    if (t.name.find(".weight") != std::string::npos &&
        dense.params().at(t.name).size() != sparse.params().at(t.name).size())
      continue;  // a block-sparse weight (compared above)
    const auto a = dense.params().at(t.name), b = sparse.params().at(t.name);
    CHECK_MESSAGE(std::equal(a.begin(), a.end(), b.begin(), b.end()), t.name << " not copied");
  }
  std::vector<std::int32_t> ids(16), types(16, 0), lengths{8, 6}, labels{1, 2};
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = std::int32_t((i * 7 + 3) % 50);
  const bert_classify_batch b{ids, types, lengths, labels, 2, 8};
  const double ld = dense.evaluate(b).mean_loss(), ls = sparse.evaluate(b).mean_loss();
  CHECK(ls == doctest::Approx(ld).epsilon(1e-5));

  // Another config, or a model whose tensors the dense one lacks, is named before anything changes.
  auto cfg2 = cfg;
  cfg2.intermediate_size = 32;
  bert_classifier<> other(cfg2, 3);
  other.init(1);
  const std::vector<float> before(sparse.params().at(weights[0].name).begin(),
                                  sparse.params().at(weights[0].name).end());
  const std::string e = test::error_of([&] { sparse::prune_model(other, sparse); });
  CHECK_MESSAGE(e.find("prune_model: dense tensor '") != std::string::npos, e);
  CHECK_MESSAGE(e.find("' is [32, 32], the block-sparse weight 32x64") != std::string::npos, e);
  const auto after = sparse.params().at(weights[0].name);
  CHECK(std::equal(after.begin(), after.end(), before.begin(), before.end()));
  bert_classifier<float, S> fresh(cfg, 3, sparse_plan{.sparsity = 0.5});
  CHECK(test::error_of([&] { sparse::prune_model(dense, fresh); }).find("initialise the model (init) first") !=
        std::string::npos);
  bert_classifier<> two_labels(cfg, 2);
  const std::string e2 = test::error_of([&] { sparse::prune_model(two_labels, sparse); });
  CHECK_MESSAGE(e2.find("classifier.") != std::string::npos, e2);
}

}  // namespace SPARSELM_UNITY_ID
