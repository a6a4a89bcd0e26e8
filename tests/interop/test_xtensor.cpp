// xtensor at the user's boundary: batches from xtensor arrays without copies, logits / hidden
// states / per-token losses / parameters as xtensor, equal to the span-based API.
#include <doctest/doctest.h>

#include <xtensor/xview.hpp>

#include "sparselm/interop/xtensor.hpp"
#include "sparselm/models/gpt.hpp"
#include "sparselm/models/sparse_lm.hpp"

// Each test file is its own namespace: the area's files are compiled as one unity translation unit
// (tests/CMakeLists.txt), and their helpers must not meet.
namespace SPARSELM_UNITY_ID {

using namespace sparselm;

namespace {
gpt_config tiny() {
  auto c = gpt_config::from_json(read_json_file(SPARSELM_SOURCE_DIR "/configs/gpt-tiny.json"), "gpt-tiny");
  c.initializer_range = 0.2f;
  return c;
}
xt::xtensor<std::int32_t, 2> tokens(std::size_t B, std::size_t T, std::uint64_t seed) {
  xt::xtensor<std::int32_t, 2> r = xt::zeros<std::int32_t>(std::array<std::size_t, 2>{B, T});
  counter_rng rng(seed);
  for (std::size_t i = 0; i < r.size(); ++i) r.data()[i] = std::int32_t(rng.below(0, i, 61));
  return r;
}
}  // namespace

TEST_CASE("xtensor: a batch views the arrays' storage; logits and losses match the span API") {
  gpt<> m(tiny());
  m.init(2);
  const auto ids = tokens(2, 5, 1), targets = tokens(2, 5, 2);
  const token_batch b = xt_batch(ids, targets);
  CHECK(b.ids.data() == ids.data());  // no copy
  CHECK(b.targets.data() == targets.data());
  CHECK((b.batch == 2 && b.seq == 5));

  const auto logits = xt_logits(m, ids);
  REQUIRE(logits.shape()[2] == 61);
  std::vector<float> ref(2 * 5 * 61);
  m.logits(std::span<const std::int32_t>(ids.data(), ids.size()), 2, 5, {ref.data(), 10, 61});
  for (std::size_t i = 0; i < ref.size(); ++i) CHECK(logits.data()[i] == ref[i]);
  CHECK(logits(1, 4, 7) == ref[(1 * 5 + 4) * 61 + 7]);

  const auto ce = xt_token_losses(m, ids, targets);
  const loss_stats st = m.evaluate(b);
  CHECK(double(xt::sum(ce)()) == doctest::Approx(st.ce_sum).epsilon(1e-5));
  // One position by hand: -log softmax(logits)[target].
  const float* row = &logits(0, 3, 0);
  double mx = row[0], s = 0;
  for (std::size_t v = 0; v < 61; ++v) mx = std::max(mx, double(row[v]));
  for (std::size_t v = 0; v < 61; ++v) s += std::exp(double(row[v]) - mx);
  CHECK(ce(0, 3) == doctest::Approx(std::log(s) + mx - row[targets(0, 3)]).epsilon(1e-5));
}

TEST_CASE("xtensor: hidden states and parameters are adaptors over the model's storage") {
  gpt<> m(tiny());
  m.init(3);
  const auto ids = tokens(1, 4, 5);
  auto h = xt_hidden_states(m, ids);
  CHECK(h.shape()[0] == 1);
  CHECK(h.shape()[1] == 4);
  CHECK(h.shape()[2] == 16);
  CHECK(h.data() == m.hidden(xt_batch(ids)).data);  // same buffer, no copy

  auto w = xt_parameter(m, "h.1.mlp.c_fc.weight");
  REQUIRE(w.dimension() == 2);
  CHECK(w.shape()[0] == 16);
  CHECK(w.shape()[1] == 64);
  const auto before = xt_logits(m, ids);
  w *= 0.0f;  // writes the model's weights
  for (float v : m.params().at("h.1.mlp.c_fc.weight")) CHECK(v == 0.0f);
  CHECK(xt::any(xt::not_equal(xt_logits(m, ids), before)));
  CHECK_THROWS_WITH_AS(xt_parameter(m, "h.9.nothing"), doctest::Contains("h.9.nothing"), error);

  sparse_lm<float, block_sparse<4>> s(
      sparse_lm_config::from_json(read_json_file(SPARSELM_SOURCE_DIR "/configs/s1-tiny.json"), "s1-tiny"));
  s.init(1);
  auto v = xt_parameter(s, "h.0.attn.c_attn.weight");  // block values (nnz, B, B)
  CHECK(v.dimension() == 3);
  CHECK(v.shape()[1] == 4);
  auto g = xt_gradient(s, "h.0.attn.c_attn.weight");
  CHECK(g.size() == v.size());
}

TEST_CASE("tensor aliases are 64-byte aligned and view as matrices") {
  tensor<float, 2> t({7, 33});
  CHECK(reinterpret_cast<std::uintptr_t>(t.data()) % 64 == 0);
  auto v = view_of(t);
  CHECK(v.rows == 7);
  CHECK(v.cols == 33);
  v(6, 32) = 3.0f;
  CHECK(t(6, 32) == 3.0f);
  array<float> d(std::vector<std::size_t>{2, 3, 4});
  CHECK(reinterpret_cast<std::uintptr_t>(d.data()) % 64 == 0);
  // xtensor knows the storage is aligned (its assignments use aligned loads and stores)
  CHECK(std::is_same_v<xsimd::container_alignment_t<aligned_uvector<float>>, xsimd::aligned_mode>);
  CHECK(std::is_same_v<xsimd::container_alignment_t<aligned_uvector<double>>, xsimd::aligned_mode>);
}

TEST_CASE("xtensor: a view of whole rows is read from its own rows; other layouts are copied or refused") {
  gpt<> m(tiny());
  m.init(4);
  const auto big = tokens(5, 6, 7), big_targets = tokens(5, 6, 8);
  const auto rows = xt::view(big, xt::range(2, 4), xt::all());  // rows 2 and 3, data_offset 12
  const auto trows = xt::view(big_targets, xt::range(2, 4), xt::all());
  const xt::xtensor<std::int32_t, 2> own = rows, own_targets = trows;  // the same tokens, owned

  const token_batch b = xt_batch(rows, trows);
  CHECK(b.ids.data() == big.data() + 12);  // the view's rows, not rows 0-1, and no copy
  CHECK(b.targets.data() == big_targets.data() + 12);
  CHECK((b.batch == 2 && b.seq == 6));
  CHECK(xt::all(xt::equal(xt_logits(m, rows), xt_logits(m, own))));
  CHECK(xt::all(xt::equal(xt_token_losses(m, rows, trows), xt_token_losses(m, own, own_targets))));
  const xt::xtensor<float, 3> h_rows = xt_hidden_states(m, rows);
  const xt::xtensor<float, 3> h_own = xt_hidden_states(m, own);
  CHECK(xt::all(xt::equal(h_rows, h_own)));

  // Columns 1..4 of rows 1..2: a strided layout. The functions that own their result copy it;
  // xt_batch, which returns a view, refuses it by name.
  const auto cols = xt::view(big, xt::range(1, 3), xt::range(1, 5));
  const xt::xtensor<std::int32_t, 2> own_cols = cols;
  CHECK(xt::all(xt::equal(xt_logits(m, cols), xt_logits(m, own_cols))));
  const auto every_other = xt::view(big, xt::range(0, 5, 2), xt::all());  // rows 0, 2, 4
  const xt::xtensor<std::int32_t, 2> own_other = every_other;
  CHECK(xt::all(xt::equal(xt_logits(m, every_other), xt_logits(m, own_other))));
  CHECK_THROWS_WITH_AS(xt_batch(cols), doctest::Contains("xt_batch: ids are not stored row by row"), error);
  CHECK_THROWS_WITH_AS(xt_batch(own, cols), doctest::Contains("xt_batch: targets (2x4) do not match ids (2x6)"), error);
  // An expression (no storage) is evaluated by the owning functions.
  CHECK(xt::all(xt::equal(xt_logits(m, own + 0), xt_logits(m, own))));
}

TEST_CASE("xtensor: bad arrays are errors") {
  gpt<> m(tiny());
  m.init(1);
  xt::xtensor<std::int32_t, 2, xt::layout_type::column_major> col = xt::zeros<std::int32_t>(std::array<std::size_t, 2>{2, 3});
  CHECK_THROWS_WITH_AS(xt_batch(col), doctest::Contains("xt_batch: ids are not stored row by row"), error);
  const auto ids = tokens(2, 3, 1), wrong = tokens(3, 3, 1);
  CHECK_THROWS_WITH_AS(xt_batch(ids, wrong), doctest::Contains("do not match"), error);
  CHECK_THROWS_WITH_AS(xt_token_losses(m, ids, wrong), doctest::Contains("xt_token_losses: targets (3x3) do not match"), error);
  xt::xtensor<std::int32_t, 2> big = tokens(1, 3, 1);
  big(0, 1) = 61;
  CHECK_THROWS_WITH_AS(xt_logits(m, big), doctest::Contains("61"), error);
}

}  // namespace SPARSELM_UNITY_ID
