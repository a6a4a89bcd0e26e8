// Prune and regrow on one weight, and the multi-weight update driver, on hand-built cases.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "sparselm/core/threads.hpp"
#include "sparselm/sparse/init.hpp"
#include "sparselm/sparse/prune_regrow.hpp"
#include "sparselm/sparse/update.hpp"

// Each test file is its own namespace: the area's files are compiled as one unity translation unit
// (tests/CMakeLists.txt), and their helpers must not meet.
namespace SPARSELM_UNITY_ID {

using namespace sparselm;
using namespace sparselm::sparse;
using doctest::Contains;

namespace {

block_pattern make_pattern(std::size_t B, std::size_t rb, std::size_t cb,
                           std::vector<std::pair<std::uint32_t, std::uint32_t>> blocks) {
  block_pattern p;
  p.block = B, p.rows_b = rb, p.cols_b = cb;
  for (auto [r, c] : blocks) p.row.push_back(r), p.col.push_back(c);
  p.finalize("test");
  return p;
}

std::uint32_t pos(const block_pattern& p, std::size_t s) { return p.row[s] * std::uint32_t(p.cols_b) + p.col[s]; }

std::set<std::uint32_t> active(const block_pattern& p) {
  std::set<std::uint32_t> a;
  for (std::size_t s = 0; s < p.nnz(); ++s) a.insert(pos(p, s));
  return a;
}

// 3x3 grid of 2x2 blocks, active at (0,0), (0,1), (1,1), (2,2) = positions 0, 1, 4, 8.
//   slot 0: 0.9 0.9 0.9 1.3   L1 4.0  L2² 4.12  max 1.3
//   slot 1: 2.5 0   0   0     L1 2.5  L2² 6.25  max 2.5
//   slot 2: 1.2 1.2 1.2 0.1   L1 3.7  L2² 4.33  max 1.2
//   slot 3: 1.5 -1.5 0  0     L1 3.0  L2² 4.5   max 1.5
// Smallest first: L1 1,3,2,0; L2 0,2,3,1; max 2,0,3,1.
block_pattern metric_pattern() { return make_pattern(2, 3, 3, {{0, 0}, {0, 1}, {1, 1}, {2, 2}}); }
std::vector<float> metric_values() {
  return {0.9f, 0.9f, 0.9f, 1.3f, 2.5f, 0, 0, 0, 1.2f, 1.2f, 1.2f, 0.1f, 1.5f, -1.5f, 0, 0};
}

}  // namespace

TEST_CASE("prune picks the k smallest blocks by L1 (default), L2 or max") {
  auto p = metric_pattern();
  auto v = metric_values();
  auto n = compute_block_norms("w", p, v);
  CHECK(n.l1[0] == doctest::Approx(4.0));
  CHECK(n.sq[2] == doctest::Approx(4.33));
  CHECK(n.max_abs[3] == 1.5);
  CHECK(select_prune(n, 1, prune_metric::l1) == std::vector<std::uint32_t>{1});
  CHECK(select_prune(n, 1, prune_metric::l2) == std::vector<std::uint32_t>{0});
  CHECK(select_prune(n, 1, prune_metric::max_abs) == std::vector<std::uint32_t>{2});
  CHECK(select_prune(n, 2, prune_metric::l1) == std::vector<std::uint32_t>{1, 3});
  CHECK(select_prune(n, 3, prune_metric::l2) == std::vector<std::uint32_t>{0, 2, 3});

  // Through prune_regrow: with L1 only slot 1 changes block; with max only slot 2.
  for (auto [metric, slot] : {std::pair{prune_metric::l1, 1u}, std::pair{prune_metric::max_abs, 2u}}) {
    auto q = metric_pattern();
    auto w = metric_values();
    auto r = prune_regrow("w", q, w, 1, {metric, regrow_method::random}, counter_rng(1), 0);
    CHECK(r.slots == std::vector<std::uint32_t>{slot});
    for (std::uint32_t s = 0; s < 4; ++s) CHECK((pos(q, s) != pos(p, s)) == (s == slot));
  }
}

TEST_CASE("prune ties go to the lower slot; L1 uses absolute values") {
  auto p = make_pattern(2, 2, 2, {{0, 0}, {0, 1}, {1, 0}});
  std::vector<float> v{-1, -1, -1, -1, 1, 1, 1, 1, 1, -1, 1, -1};  // all L1 4, L2² 4, max 1
  auto n = compute_block_norms("w", p, v);
  for (auto m : {prune_metric::l1, prune_metric::l2, prune_metric::max_abs}) {
    CHECK(select_prune(n, 1, m) == std::vector<std::uint32_t>{0});
    CHECK(select_prune(n, 2, m) == std::vector<std::uint32_t>{0, 1});
  }
}

TEST_CASE("rigl regrows the largest pooled |gradient| among blocks inactive before pruning") {
  // Active positions 0, 1, 4, 8; slots 0 and 2 are the weakest and are pruned (k = 2).
  auto p = make_pattern(2, 3, 3, {{0, 0}, {0, 1}, {1, 1}, {2, 2}});
  std::vector<float> v{0.1f, 0.1f, 0.1f, 0.1f, 5, 5, 5, 5, 0.2f, 0.2f, 0.2f, 0.2f, 5, 5, 5, 5};
  // The just-pruned positions 0 and 4 have the largest scores, the survivors next: none of them
  // may be chosen. Among inactive positions 2, 3, 5, 6, 7: |-7| at 3 and 7 at 6 tie -> 3 first.
  std::vector<float> scores{1000, 500, 5, -7, 900, 3, 7, 1, 500};
  std::vector<std::size_t> reset;
  auto r = prune_regrow("w", p, v, 2, {prune_metric::l1, regrow_method::rigl}, counter_rng(1), 0, scores,
                        [&](std::size_t s) { reset.push_back(s); });
  CHECK(r.slots == std::vector<std::uint32_t>{0, 2});
  CHECK(r.pruned == std::vector<std::uint32_t>{0, 4});
  CHECK(r.regrown == std::vector<std::uint32_t>{3, 6});
  CHECK(reset == std::vector<std::size_t>{0, 2});
  CHECK(p.row == std::vector<std::uint32_t>{1, 0, 2, 2});  // slot 0 -> (1,0), slot 2 -> (2,0)
  CHECK(p.col == std::vector<std::uint32_t>{0, 1, 0, 2});
  CHECK(r.pruned_l1 == doctest::Approx(1.2));
  CHECK(r.pruned_l2 == doctest::Approx(std::sqrt(4 * 0.01 + 4 * 0.04)));
  CHECK(r.weight_l1 == doctest::Approx(41.2));
}

TEST_CASE("random regrow never brings back a just-pruned block") {
  // 2x2 grid, 2 active, k = 2: the only eligible blocks are the 2 inactive ones, whatever the draw.
  for (std::uint64_t stream = 0; stream < 50; ++stream) {
    auto p = make_pattern(1, 2, 2, {{0, 0}, {1, 1}});
    std::vector<float> v{1, 2};
    auto r = prune_regrow("w", p, v, 2, {}, counter_rng(3), stream);
    CHECK(r.count() == 2);
    CHECK(active(p) == std::set<std::uint32_t>{1, 2});
  }
}

TEST_CASE("random regrow is uniform over eligible blocks and deterministic") {
  // 3x3 grid, active 0, 4, 8, k = 1: each of the 6 inactive blocks has probability 1/6.
  // 6000 draws -> 1000 each (sd ~29); allow +-150. Just-pruned position 0 never comes back.
  counter_rng rng(21);
  std::vector<int> hits(9, 0);
  for (std::uint64_t t = 0; t < 6000; ++t) {
    auto p = make_pattern(1, 3, 3, {{0, 0}, {1, 1}, {2, 2}});
    std::vector<float> v{0.5f, 1, 1};
    auto r = prune_regrow("w", p, v, 1, {}, rng, regrow_stream(7, t));
    ++hits[r.regrown[0]];
  }
  CHECK(hits[0] == 0);
  CHECK(hits[4] == 0);
  CHECK(hits[8] == 0);
  for (int g : {1, 2, 3, 5, 6, 7}) CHECK(std::abs(hits[g] - 1000) < 150);

  // Same (seed, stream) -> same choice, with one thread or two.
  auto run = [&](int threads) {
    int old = num_threads();
    set_num_threads(threads);
    auto p = random_pattern("w", 64, 64, 4, 40, rng, 1);  // 16x16 grid
    std::vector<float> v(40 * 16);
    init_values("w", p, v, rng, 2);
    prune_regrow("w", p, v, 15, {}, rng, regrow_stream(0, 100));
    set_num_threads(old);
    return std::pair{p.row, p.col};
  };
  CHECK(run(1) == run(2));
  CHECK(run(2) == run(2));
}

TEST_CASE("slots move with their blocks: regrown zero, survivors bit-identical, reset exactly the reused slots") {
  counter_rng rng(4);
  auto p = random_pattern("w", 16, 16, 4, 6, rng, 0);  // 4x4 grid, 6 blocks
  std::vector<float> v(6 * 16);
  init_values("w", p, v, rng, 1);
  auto before = p;
  auto vb = v;
  std::vector<std::size_t> reset;
  auto r = prune_regrow("w", p, v, 3, {}, rng, 5, {}, [&](std::size_t s) { reset.push_back(s); });
  REQUIRE(r.count() == 3);
  CHECK(p.nnz() == 6);
  CHECK(reset == std::vector<std::size_t>(r.slots.begin(), r.slots.end()));
  auto before_active = active(before);
  for (std::size_t s = 0; s < 6; ++s) {
    bool reused = std::find(r.slots.begin(), r.slots.end(), s) != r.slots.end();
    if (reused) {
      CHECK(before_active.count(pos(p, s)) == 0);  // regrown block was inactive before
      CHECK(std::all_of(v.begin() + s * 16, v.begin() + (s + 1) * 16, [](float x) { return x == 0.0f; }));
    } else {
      CHECK(pos(p, s) == pos(before, s));
      CHECK(std::memcmp(v.data() + s * 16, vb.data() + s * 16, 16 * sizeof(float)) == 0);
    }
  }
  for (auto g : r.pruned) CHECK(active(p).count(g) == 0);
  // The orderings were rebuilt.
  auto check = p;
  check.finalize();
  CHECK(check.col_slots == p.col_slots);
  CHECK(check.row_slots == p.row_slots);
  CHECK(p.col_ptr.back() == 6);
}

TEST_CASE("k is clamped to nnz and to the blocks inactive before pruning; k = 0 changes nothing") {
  auto p = make_pattern(1, 2, 2, {{0, 0}, {0, 1}, {1, 0}});  // one inactive block
  std::vector<float> v{3, 1, 2};
  auto r = prune_regrow("w", p, v, 5, {}, counter_rng(1), 0);
  CHECK(r.count() == 1);
  CHECK(r.slots == std::vector<std::uint32_t>{1});
  CHECK(active(p) == std::set<std::uint32_t>{0, 2, 3});
  auto q = make_pattern(1, 3, 3, {{0, 0}, {2, 2}});
  std::vector<float> w{1, 2};
  CHECK(prune_regrow("w", q, w, 5, {}, counter_rng(1), 0).count() == 2);
  auto z = make_pattern(1, 3, 3, {{0, 0}, {2, 2}});
  auto r0 = prune_regrow("w", z, w, 0, {}, counter_rng(1), 0);
  CHECK(r0.count() == 0);
  CHECK(active(z) == std::set<std::uint32_t>{0, 8});
}

TEST_CASE("prune_regrow errors name the weight") {
  auto p = metric_pattern();
  auto v = metric_values();
  CHECK_THROWS_WITH_AS(prune_regrow("h.0.attn.c_attn", p, v, 1, {prune_metric::l1, regrow_method::rigl},
                                    counter_rng(1), 0),
                       Contains("h.0.attn.c_attn: rigl regrowth needs the pooled dense gradient"), error);
  std::vector<float> short_scores(8, 1.0f);
  CHECK_THROWS_WITH_AS(prune_regrow("h.0.attn.c_attn", p, v, 1, {prune_metric::l1, regrow_method::rigl},
                                    counter_rng(1), 0, short_scores),
                       Contains("pooled gradient has 8 values for a 3x3 block grid"), error);
  std::vector<float> nan_scores(9, 1.0f);
  nan_scores[5] = std::nanf("");
  CHECK_THROWS_WITH_AS(prune_regrow("h.0.attn.c_attn", p, v, 1, {prune_metric::l1, regrow_method::rigl},
                                    counter_rng(1), 0, nan_scores),
                       Contains("not finite at block (1, 2)"), error);
  auto bad = v;
  bad[9] = std::nanf("");
  CHECK_THROWS_WITH_AS(prune_regrow("h.0.mlp", p, bad, 1, {}, counter_rng(1), 0),
                       Contains("h.0.mlp: block (1, 1) in slot 2 has a non-finite value"), error);
  std::vector<float> few(15);
  CHECK_THROWS_WITH_AS(prune_regrow("h.0.mlp", p, few, 1, {}, counter_rng(1), 0), Contains("h.0.mlp: 15 values"),
                       error);
  auto dup = p;
  dup.row[1] = 0, dup.col[1] = 0;  // not finalized: (0,0) twice
  CHECK_THROWS_WITH_AS(prune_regrow("h.0.mlp", dup, v, 1, {}, counter_rng(1), 0), Contains("appears twice"), error);
  CHECK(pos(p, 0) == 0);  // the failed calls changed nothing
  CHECK(v == metric_values());
}

// ---------------------------------------------------------------------------------------------
// The multi-weight driver.

namespace {
update_config config(double ratio, std::size_t T, std::size_t period, regrow_method regrow = regrow_method::random) {
  update_config c;
  c.schedule.prune_ratio = ratio;
  c.schedule.total_steps = T;
  c.schedule.update_period = period;
  c.regrow = regrow;
  return c;
}
}  // namespace

namespace {
// A 1x4 grid, one active block at 0, rigl with scores (0, 3, 2, 1), k = ceil(1 * f) = 1 every step.
struct one_block_rigl {
  block_pattern p = make_pattern(1, 1, 4, {{0, 0}});
  std::vector<float> v{1.0f};
  std::vector<float> scores{0, 3, 2, 1};
  pattern_updater up{config(1.0, 1000, 1, regrow_method::rigl)};
  std::vector<sparse_weight> ws{{"w", &p, v, 0, scores}};
};
}  // namespace

TEST_CASE("explored fraction grows by the never-active blocks regrown") {
  //   t=1: candidates {1,2,3} -> 1   explored {0,1}     2/4
  //   t=2: candidates {0,2,3} -> 2   explored {0,1,2}   3/4
  //   t=3: candidates {0,1,3} -> 1   explored unchanged 3/4
  one_block_rigl f;
  auto& [p, v, scores, up, ws] = f;
  auto s1 = up.update(1, ws);
  CHECK(p.col[0] == 1);
  CHECK(s1.weights[0].explored == 0.5);
  v[0] = 1.0f;
  auto s2 = up.update(2, ws);
  CHECK(p.col[0] == 2);
  CHECK(s2.weights[0].explored == 0.75);
  CHECK(s2.weights[0].explored_blocks == 3);
  v[0] = 1.0f;
  auto s3 = up.update(3, ws);
  CHECK(p.col[0] == 1);
  CHECK(s3.explored == 0.75);
  CHECK(up.explored("w")->ever == std::vector<std::uint8_t>{1, 1, 1, 0});
}

TEST_CASE("explored maps start from the pattern just before a weight's first update") {
  // The updater is built while the pattern is {0}; the pattern is then replaced by {3} (as loading a
  // checkpoint or pruning does) before the first update, which moves it to 1 (scores 0, 3, 2, 1).
  // Block 0 was never active in the trained pattern: explored = {1, 3}, not {0, 1, 3}.
  one_block_rigl f;
  auto& [p, v, scores, up, ws] = f;
  CHECK(up.explored("w") == nullptr);
  p = make_pattern(1, 1, 4, {{0, 3}});
  auto s1 = up.update(1, ws);
  CHECK(p.col[0] == 1);
  CHECK(up.explored("w")->ever == std::vector<std::uint8_t>{0, 1, 0, 1});
  CHECK(s1.weights[0].explored_blocks == 2);
  // untrack (a resume from a checkpoint saved before any update): the next update starts afresh.
  up.untrack("w");
  CHECK(up.explored("w") == nullptr);
  v[0] = 1.0f;
  up.update(2, ws);  // candidates {0, 2, 3}: 2
  CHECK(p.col[0] == 2);
  CHECK(up.explored("w")->ever == std::vector<std::uint8_t>{0, 1, 1, 0});
}

TEST_CASE("update driver: schedule check, k per weight, reset callback per reused slot, aggregated stats") {
  counter_rng rng(99);
  // Weight a: 4x4 grid of 2x2 blocks, 8 active; weight b: 2x8 grid, 4 active.
  auto pa = random_pattern("a", 8, 8, 2, 8, rng, pattern_stream(3));
  auto pb = random_pattern("b", 4, 16, 2, 4, rng, pattern_stream(5));
  std::vector<float> va(8 * 4), vb(4 * 4);
  init_values("a", pa, va, rng, 3);
  init_values("b", pb, vb, rng, 5);
  // prune_ratio 0.5, T = 100, period 10: at t = 50, k = ceil(ceil(0.5 nnz) * 0.5): a 2, b 1.
  pattern_updater up(config(0.5, 100, 10), rng);
  std::vector<sparse_weight> ws{{"a", &pa, va, 3}, {"b", &pb, vb, 5}};
  std::vector<std::tuple<std::size_t, std::size_t, std::size_t>> resets;
  auto cb = [&](std::size_t t, std::size_t off, std::size_t n) { resets.emplace_back(t, off, n); };

  auto pa0 = pa;
  auto none = up.update(45, ws, cb);  // not an update step
  CHECK_FALSE(none.updated);
  CHECK(none.weights.empty());
  CHECK(resets.empty());
  CHECK(pa.row == pa0.row);
  CHECK(pa.col == pa0.col);
  CHECK_FALSE(up.update(100, ws, cb).updated);  // never at the last step

  // The driver equals prune_regrow on each weight with regrow_stream(tensor, t).
  auto ea = pa, eb = pb;
  auto eva = va, evb = vb;
  auto ra = prune_regrow("a", ea, eva, 2, {}, rng, regrow_stream(3, 50));
  auto rb = prune_regrow("b", eb, evb, 1, {}, rng, regrow_stream(5, 50));

  auto st = up.update(50, ws, cb);
  CHECK(st.updated);
  CHECK(st.fraction == doctest::Approx(0.5));
  CHECK(pa.row == ea.row);
  CHECK(pa.col == ea.col);
  CHECK(pb.row == eb.row);
  CHECK(va == eva);
  CHECK(vb == evb);
  REQUIRE(resets.size() == 3);
  CHECK(resets[0] == std::tuple<std::size_t, std::size_t, std::size_t>{3, ra.slots[0] * 4, 4});
  CHECK(resets[1] == std::tuple<std::size_t, std::size_t, std::size_t>{3, ra.slots[1] * 4, 4});
  CHECK(resets[2] == std::tuple<std::size_t, std::size_t, std::size_t>{5, rb.slots[0] * 4, 4});
  CHECK(st.pruned == 3);
  CHECK(st.regrown == 3);
  CHECK(st.nnz == 12);
  CHECK(st.blocks == 32);
  CHECK(st.weights[0].pruned == 2);
  CHECK(st.weights[1].pruned == 1);
  // First update: explored = initial blocks + regrown ones (all new): (8 + 2) + (4 + 1).
  CHECK(st.explored_blocks == 15);
  CHECK(st.explored == doctest::Approx(15.0 / 32));
  CHECK(st.weights[0].pruned_l1 == doctest::Approx(ra.pruned_l1));
  CHECK(st.weights[1].weight_l2 == doctest::Approx(rb.weight_l2));

  nlohmann::json j = st;
  CHECK(j["step"] == 50);
  CHECK(j["pruned"] == 3);
  CHECK(j["weights"][1]["name"] == "b");
  CHECK(j["weights"][0]["explored"].get<double>() == doctest::Approx(10.0 / 16));
  for (auto key : {"nnz", "blocks", "pruned", "regrown", "explored", "pruned_l1", "pruned_l2", "weight_l1", "weight_l2"})
    CHECK(j["weights"][0].contains(key));
}

TEST_CASE("update driver is all-or-nothing and names the weight") {
  counter_rng rng(1);
  auto pa = random_pattern("a", 8, 8, 2, 8, rng, 0);
  auto pb = random_pattern("b", 8, 8, 2, 8, rng, 1);
  std::vector<float> va(32, 1.0f), vb(31, 1.0f);  // b is one value short
  pattern_updater up(config(0.5, 100, 10));
  auto pa0 = pa;
  std::vector<sparse_weight> ws{{"a", &pa, va, 0}, {"h.1.mlp.c_proj.weight", &pb, vb, 1}};
  CHECK_THROWS_WITH_AS(up.update(10, ws), Contains("h.1.mlp.c_proj.weight: 31 values"), error);
  CHECK(pa.row == pa0.row);
  CHECK(pa.col == pa0.col);
  CHECK(up.explored("a") == nullptr);

  pattern_updater rigl(config(0.5, 100, 10, regrow_method::rigl));
  std::vector<float> vb2(32, 1.0f);
  std::vector<sparse_weight> ws2{{"h.1.mlp.c_proj.weight", &pb, vb2, 1}};
  CHECK(rigl.needs_dense_gradient(10));
  CHECK_FALSE(rigl.needs_dense_gradient(11));
  CHECK_FALSE(up.needs_dense_gradient(10));
  CHECK_THROWS_WITH_AS(rigl.update(10, ws2), Contains("h.1.mlp.c_proj.weight: rigl regrowth needs the pooled dense gradient at step 10"),
                       error);
  std::vector<sparse_weight> twice{{"a", &pa, va, 0}, {"a", &pa, va, 0}};
  CHECK_THROWS_WITH_AS(up.update(10, twice), Contains("a: weight listed twice"), error);
}

TEST_CASE("tensor parallelism: a replicated weight regrows from the group's stream, a slice from its rank's") {
  // Two ranks' updaters: their own streams differ (parallel::shard_seed), the group's is shared.
  // Random regrowth over a 1x64 grid with 8 active blocks, half pruned at step 1: the weight every
  // rank holds whole (replicated) makes the same update on both, a slice (not replicated) draws its
  // own -- so without the group's stream the replicated patterns would part.
  auto run = [](std::uint64_t own, bool replicated, bool group) {
    std::vector<std::pair<std::uint32_t, std::uint32_t>> blocks;
    for (std::uint32_t j = 0; j < 8; ++j) blocks.push_back({0, j});
    block_pattern p = make_pattern(1, 1, 64, blocks);
    std::vector<float> v(8);
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = float(i + 1);
    pattern_updater up(config(0.5, 1000, 1), counter_rng(own));
    if (group) up.set_group_rng(counter_rng(7));
    sparse_weight w{"w", &p, v, 0};
    w.replicated = replicated;
    up.update(1, std::span<const sparse_weight>(&w, 1));
    return p.col;
  };
  CHECK(run(1, true, true) == run(2, true, true));     // replicated: the group's stream on both ranks
  CHECK(run(1, false, true) != run(2, false, true));   // a slice: each rank its own
  CHECK(run(1, true, false) != run(2, true, false));   // no group stream: the ranks' own (they part)
  CHECK(run(1, true, true) != run(1, false, true));    // the group's stream is not the rank's own
}

}  // namespace SPARSELM_UNITY_ID
