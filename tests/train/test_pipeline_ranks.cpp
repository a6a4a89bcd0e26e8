// A pipeline whose stages are ranks (trainer_options::pipeline with placement ranks), played by
// threads exchanging messages: with shard_optimizer each rank keeps the optimiser state of its own
// stage's tensors only (the embedding and a tied head tensor on stage 0, the head on the last),
// receives only the tied tensor's gradient from the last stage (no sum over the whole arena) and
// trains bit for bit as the unsharded pipeline does; the gathered checkpoint state equals the
// unsharded one.
#include <doctest/doctest.h>

#include <cstddef>
#include <random>
#include <string>
#include <vector>

#include "../common/thread_replicas.hpp"
#include "../common/tiny_bert.hpp"
#include "../common/tiny_gpt.hpp"
#include "sparselm/models/bert.hpp"
#include "sparselm/models/gpt.hpp"
#include "sparselm/train/trainer.hpp"

// Each test file is its own namespace: the area's files are compiled as one unity translation unit
// (tests/CMakeLists.txt), and their helpers must not meet.
namespace SPARSELM_UNITY_ID {

using namespace sparselm;
using test::thread_replicas;

namespace {

struct dp_policies : default_policies {
  using data_parallel = sparselm::data_parallel::mpi;
};

gpt_config four_layers() {
  gpt_config c = test::small_gpt_config();
  c.n_layer = 4;
  return c;
}

// 2 micro-batches of 2 rows x 16 positions per step, the same on every rank.
std::vector<std::vector<std::int32_t>> toy_ids(int n) {
  std::vector<std::vector<std::int32_t>> v;
  for (int b = 0; b < n; ++b) {
    std::vector<std::int32_t> x;
    for (int i = 0; i < 2 * 16; ++i) x.push_back(std::int32_t((b * 131 + i * 17 + i * i) % 64));
    v.push_back(x);
  }
  return v;
}

// The options of these tests' pipelines over ranks: 2 micro-batches per step.
trainer_options pipeline_options(const pipeline::plan& plan, bool shard, clip_mode clip = clip_mode::global_norm,
                                 float max_norm = 1.0f) {
  trainer_options o;
  o.pipeline = plan;
  o.accumulation.steps = 2;
  o.shard_optimizer = shard;
  o.clip = clip;
  o.max_norm = max_norm;
  return o;
}
// A trainer of model m with AdamW at a constant learning rate of 3e-3 (built in place: the caller
// then gives it its ranks with set_replicas).
template <class Model>
trainer<Model, dp_policies> make_trainer(Model& m, const trainer_options& o) {
  return trainer<Model, dp_policies>(m, o, optim::adamw<float>(nlohmann::json::object()),
                                     optim::make_schedule({{"type", "constant"}, {"lr", 3e-3}}));
}

struct rank_result {
  std::vector<double> losses;
  std::vector<float> weights;
  std::size_t state_bytes = 0;
  optim::element_range owned;
  std::vector<std::vector<float>> slots;  // rank 0: the checkpoint state's slots
  std::vector<std::size_t> split;
};

rank_result train_stage(parallel::replica_group& g, const pipeline::plan& plan, bool shard, int steps) {
  const auto ids = toy_ids(2 * steps);
  gpt<> m(four_layers());
  m.init(7);
  // clipping on every step: the norm from the stages' own tensors must be exact
  auto t = make_trainer(m, pipeline_options(plan, shard, clip_mode::global_norm, 0.05f));
  t.set_replicas(g);
  CHECK(t.sharded() == shard);
  rank_result r;
  for (int k = 0; k < steps; ++k) {
    std::vector<token_batch> micro;
    for (int q = 0; q < 2; ++q) {
      const auto& x = ids[std::size_t(2 * k + q)];
      micro.push_back({x, x, {}, 2, 16});  // targets: the ids themselves (any valid targets do)
    }
    const auto sm = t.train_step(micro);
    CHECK(sm.grad_norm > 0.05);
    r.losses.push_back(sm.loss.mean_loss());
  }
  t.check_replicas_agree("at the end of the test");
  r.weights = test::param_snapshot(m);
  r.state_bytes = t.optimizer_state_bytes();
  r.owned = t.optimizer().owned_elements();
  r.split = m.last_pipeline().split;
  t.gather_optimizer_state();
  if (g.rank() == 0) {
    const auto st = t.checkpoint_state();
    CHECK(st.step == std::size_t(steps));
    for (const auto& s : st.slots) r.slots.emplace_back(s.slots->all().begin(), s.slots->all().end());
  }
  t.release_gathered_state();
  return r;
}

}  // namespace

TEST_CASE("pipeline over ranks: optimiser state sharded by stage trains bit for bit as unsharded") {
  using pipeline::order;
  for (const pipeline::plan& plan : {pipeline::plan{2, order::one_f_one_b, {}, pipeline::placement::ranks},
                                    pipeline::plan{3, order::gpipe, {1, 3}, pipeline::placement::ranks}}) {
    const std::size_t S = plan.stages;
    CAPTURE(S);
    std::vector<rank_result> plain(S), sharded(S);
    for (bool shard : {false, true}) {
      thread_replicas group(S);
      group.run([&](std::size_t r, parallel::replica_group& g) {
        (shard ? sharded : plain)[r] = train_stage(g, plan, shard, 3);
        // sharded: no sum over the arena, only the tied embedding's gradient goes from the last
        // rank to rank 0 (unsharded: one all-reduce of the whole arena per step)
        const auto& member = static_cast<thread_replicas::member&>(g);
        CHECK(member.scatters_started == 0);
        CHECK(member.sums_started == (shard ? 0u : 3u));
        if (shard && (r == 0 || r + 1 == S)) CHECK(member.tied_messages == 3u);
      });
    }
    gpt<> layout_of(four_layers());
    const arena_layout& L = *layout_of.layout();
    std::size_t state_sum = 0;
    for (std::size_t r = 0; r < S; ++r) {
      CAPTURE(r);
      CHECK(sharded[r].losses == plain[r].losses);
      CHECK(sharded[r].weights == plain[r].weights);
      CHECK(sharded[r].weights == plain[0].weights);  // and every rank holds the whole updated model
      CHECK(sharded[r].state_bytes < plain[r].state_bytes);
      state_sum += sharded[r].state_bytes;
      // rank r owns its stage's tensors: from the first tensor of its first block to the next stage's
      const auto& split = sharded[r].split;
      REQUIRE(split.size() == S - 1);
      auto block_start = [&](std::size_t b) { return L[*L.find("h." + std::to_string(b) + ".ln_1.weight")].offset; };
      CHECK(sharded[r].owned.first == (r == 0 ? 0 : block_start(split[r - 1])));
      CHECK(sharded[r].owned.last == (r + 1 == S ? L.total() : block_start(split[r])));
    }
    // every slot is held by exactly one rank (AdamW: two slots of the owned elements)
    CHECK(state_sum == plain[0].state_bytes);
    REQUIRE(plain[0].slots.size() == 2);
    CHECK(sharded[0].slots == plain[0].slots);
  }
}

// BERT's decoder is tied to the word embedding through its projection() (models/bert_heads.hpp):
// the last stage's part of that gradient reaches rank 0 and the sharded pipeline is the unsharded one.
TEST_CASE("pipeline over ranks: BERT with state sharded by stage trains bit for bit as unsharded") {
  constexpr std::size_t B = 2, T = 16, P = 3;  // rows per micro-batch, positions, prediction slots per row
  std::vector<std::vector<std::int32_t>> ids(2), types(2), pos(2), labels(2), nsp(2);
  std::mt19937 rng(5);
  for (std::size_t m = 0; m < 2; ++m) {
    for (std::size_t i = 0; i < B * T; ++i) ids[m].push_back(std::int32_t(rng() % 50)), types[m].push_back((i % T) >= T / 2);
    for (std::size_t k = 0; k < B * P; ++k) pos[m].push_back(std::int32_t(1 + 4 * (k % P) + k / P)), labels[m].push_back(std::int32_t(rng() % 50));
    nsp[m] = {std::int32_t(m), 1};
  }
  std::vector<std::vector<float>> w(4);
  std::vector<std::size_t> tied(4);
  for (bool shard : {false, true}) {
    thread_replicas group(2);
    group.run([&](std::size_t r, parallel::replica_group& g) {
      bert<> model(test::tiny_bert_config());
      model.init(3);
      auto t = make_trainer(model,
                            pipeline_options({2, pipeline::order::one_f_one_b, {}, pipeline::placement::ranks}, shard));
      t.set_replicas(g);
      std::vector<bert_batch> micro(2);
      for (std::size_t m = 0; m < 2; ++m) {
        micro[m].ids = ids[m], micro[m].token_types = types[m], micro[m].masked_positions = pos[m];
        micro[m].masked_labels = labels[m], micro[m].nsp_labels = nsp[m], micro[m].batch = B, micro[m].seq = T;
      }
      for (int k = 0; k < 3; ++k) t.train_step(micro);
      // evaluation over the ranks (the NSP objective too): the whole model's numbers
      loss_stats st = t.evaluate(micro[1]);
      t.finish_evaluation(st);
      const loss_stats whole = model.evaluate(micro[1]);
      CHECK(st.loss_sum == whole.loss_sum);
      CHECK(st.aux_loss_sum == whole.aux_loss_sum);
      CHECK(st.aux_count == 2);
      w[2 * shard + r] = test::param_snapshot(model);
      tied[2 * shard + r] = static_cast<thread_replicas::member&>(g).tied_messages;
    });
  }
  CHECK(w[2] == w[0]);
  CHECK(w[3] == w[1]);
  CHECK(w[1] == w[0]);
  CHECK(tied == std::vector<std::size_t>{0, 0, 3, 3});  // one tied tensor (the word embedding) per step
}

// Evaluation over ranks (trainer::evaluate): each rank runs only its stage of the batch, the last
// one's statistics are the whole model's, bit for bit, and finish_evaluation gives them to every
// rank; the ranks before the last send one activation message per batch.
TEST_CASE("pipeline over ranks: evaluation runs each rank's stage only and equals the whole model's") {
  using pipeline::order;
  const auto ids = toy_ids(3);
  for (const pipeline::plan& plan : {pipeline::plan{2, order::one_f_one_b, {}, pipeline::placement::ranks},
                                     pipeline::plan{3, order::gpipe, {1, 3}, pipeline::placement::ranks}}) {
    const std::size_t S = plan.stages;
    CAPTURE(S);
    thread_replicas group(S);
    group.run([&](std::size_t r, parallel::replica_group& g) {
      gpt<> m(four_layers());
      m.init(7);
      auto t = make_trainer(m, pipeline_options(plan, false));
      t.set_replicas(g);
      auto check_pass = [&](std::size_t expected_sends) {
        loss_stats staged, whole;
        for (const auto& x : ids) {  // three batches in a row: each rank's messages in order
          const token_batch b{x, x, {}, 2, 16};
          const loss_stats mine = t.evaluate(b);
          if (r + 1 < S) CHECK(mine.count == 0);  // only the last stage runs the head
          if (r + 1 < S) CHECK(mine.loss_sum == 0.0);
          staged += mine;
          whole += m.evaluate(b);  // the whole model in this process (every rank holds it)
        }
        t.finish_evaluation(staged);
        CHECK(whole.count == 3 * 2 * 16);
        CHECK(staged.count == whole.count);
        CHECK(staged.loss_sum == whole.loss_sum);
        CHECK(staged.correct == whole.correct);
        CHECK(static_cast<thread_replicas::member&>(g).evaluation_sends == (r + 1 < S ? expected_sends : 0u));
      };
      check_pass(3);  // before the first step (the cost model's split, which the steps then use)
      for (int k = 0; k < 2; ++k) {
        std::vector<token_batch> micro;
        for (int q = 0; q < 2; ++q) micro.push_back({ids[std::size_t(q)], ids[std::size_t(q)], {}, 2, 16});
        t.train_step(micro);
      }
      check_pass(6);  // after training: still the whole model's statistics
    });
  }
}

// Ranks that keep only their stage (trainer::stage_local(), train/stage_params.hpp): after
// sync_parameters() a rank of a pipeline over ranks with the optimiser state sharded by stage zeroes
// and gives back the other stages' weights and gradients. It trains bit for bit as ranks that hold
// the whole model, without the all-gather of the parameters (the tied embedding's gradient goes to
// rank 0 and its new values come back); a save's gather gives rank 0 the whole model, released
// again afterwards.
TEST_CASE("pipeline over ranks: stage-local ranks keep only their stage's weights and train bit for bit") {
  using pipeline::order;
  const auto ids = toy_ids(6);
  for (const auto& [plan, clip] :
       {std::pair{pipeline::plan{2, order::one_f_one_b, {}, pipeline::placement::ranks}, clip_mode::global_norm},
        std::pair{pipeline::plan{3, order::gpipe, {1, 3}, pipeline::placement::ranks}, clip_mode::global_norm},
        std::pair{pipeline::plan{2, order::one_f_one_b, {}, pipeline::placement::ranks}, clip_mode::per_tensor}}) {
    const std::size_t S = plan.stages;
    CAPTURE(S);
    CAPTURE(int(clip));
    struct seen {
      std::vector<double> losses;
      std::vector<float> trained, gathered, released;  // the flat parameter arena at three points
      optim::element_range owned;
      std::vector<std::vector<float>> slots;  // rank 0: the gathered optimiser state
    };
    std::vector<seen> whole(S), local(S);
    std::vector<std::size_t> tied;
    for (bool shard : {false, true}) {
      thread_replicas group(S);
      group.run([&](std::size_t r, parallel::replica_group& g) {
        gpt<> m(four_layers());
        m.init(7);
        if (r == 0 && shard) tied = m.tied_tensors();
        // per tensor: a stage-local rank clips its own tensors only
        auto t = make_trainer(m, pipeline_options(plan, shard, clip, 0.05f));
        t.set_replicas(g);
        t.sync_parameters();
        CHECK(t.stage_local() == shard);
        seen& me = (shard ? local : whole)[r];
        auto flat = [&] { return std::vector<float>(m.params().all().begin(), m.params().all().end()); };
        for (int k = 0; k < 3; ++k) {
          std::vector<token_batch> micro;
          for (int q = 0; q < 2; ++q) {
            const auto& x = ids[std::size_t(2 * k + q)];
            micro.push_back({x, x, {}, 2, 16});
          }
          me.losses.push_back(t.train_step(micro).loss.mean_loss());
        }
        t.check_replicas_agree("at the end of the test");
        me.trained = flat();
        me.owned = t.optimizer().owned_elements();
        const auto& member = static_cast<thread_replicas::member&>(g);
        CHECK(member.all_gathers == 0);  // no exchange of the parameters (unsharded: every rank updates all)
        if (shard && (r == 0 || r + 1 == S)) CHECK(member.tied_messages == 6u);  // gradient there, values back
        t.gather_optimizer_state();
        me.gathered = flat();
        if (r == 0)
          for (const auto& sl : t.checkpoint_state().slots)
            me.slots.emplace_back(sl.slots->all().begin(), sl.slots->all().end());
        t.release_gathered_state();
        me.released = flat();
        if (shard) {
          CHECK_THROWS_WITH_AS(t.set_hooks({}), doctest::Contains("set_hooks after sync_parameters()"), error);
          CHECK_THROWS_WITH_AS(t.sync_parameters(), doctest::Contains("sync_parameters() again"), error);
        }
      });
    }
    gpt<> layout_of(four_layers());
    const arena_layout& L = *layout_of.layout();
    REQUIRE(tied.size() == 1);
    const std::size_t t0 = L[tied[0]].offset, t1 = t0 + L[tied[0]].size;
    for (std::size_t r = 0; r < S; ++r) {
      CAPTURE(r);
      CHECK(local[r].losses == whole[r].losses);
      CHECK(whole[r].trained == whole[0].trained);
      // a rank keeps its own tensors (and the last one the tied embedding its head reads); the rest is zero
      std::size_t wrong = 0, kept = 0;
      for (std::size_t e = 0; e < L.total(); ++e) {
        const bool keep = (e >= local[r].owned.first && e < local[r].owned.last) || (r + 1 == S && e >= t0 && e < t1);
        kept += keep;
        wrong += local[r].trained[e] != (keep ? whole[0].trained[e] : 0.0f);
      }
      CHECK(wrong == 0);
      CHECK(kept < L.total());
      // the save's gather: rank 0 holds the whole model until the release
      CHECK(local[r].gathered == (r == 0 ? whole[0].trained : local[r].trained));
      CHECK(local[r].released == local[r].trained);
    }
    REQUIRE(local[0].slots.size() == 2);
    CHECK(local[0].slots == whole[0].slots);
  }
}

// With a hook that needs every layer (a pattern updater) set before sync_parameters(), the ranks
// keep the whole model (and exchange the updated parameters).
TEST_CASE("pipeline over ranks: a pattern-update hook keeps the whole model on each rank") {
  thread_replicas group(2);
  group.run([&](std::size_t, parallel::replica_group& g) {
    gpt<> m(four_layers());
    m.init(7);
    auto t = make_trainer(m, pipeline_options({2, pipeline::order::one_f_one_b, {}, pipeline::placement::ranks}, true));
    t.set_replicas(g);
    std::size_t updates = 0;
    t.set_hooks({{}, [&](std::size_t) { ++updates; }});
    t.sync_parameters();
    CHECK(t.sharded());
    CHECK_FALSE(t.stage_local());
    const auto ids = toy_ids(2);
    t.train_step(std::vector<token_batch>{{ids[0], ids[0], {}, 2, 16}, {ids[1], ids[1], {}, 2, 16}});
    CHECK(updates == 1);
    CHECK(static_cast<thread_replicas::member&>(g).all_gathers == 1u);
    t.check_replicas_agree("after a step");  // every rank holds the same whole model
  });
}

// check_same_parameters (trainer::check_replicas_agree): each rank's fingerprint against rank 0's,
// or, for ranks that keep only their stage, against the first replica of its stage (rank s), and
// a mismatch names both ranks and both CRCs.
TEST_CASE("replica check: a rank whose parameters differ is named with the rank it is compared with") {
  auto run = [](std::vector<std::uint64_t> prints) {
    thread_replicas group(prints.size());
    std::vector<std::string> errors(prints.size());
    group.run([&](std::size_t r, parallel::replica_group& g) {
      try {
        check_same_parameters(g, prints[r], "at step 5");
      } catch (const error& e) {
        errors[r] = e.what();
      }
    });
    return errors;
  };
  const std::uint64_t s1 = std::uint64_t(1) << 32;  // "compare with rank 1" (stage 1's first replica)
  for (const auto& e : run({0xAB, 0xAB, 0xAB})) CHECK(e.empty());
  for (const auto& e : run({0xAB, s1 | 0xCD, 0xAB, s1 | 0xCD})) CHECK(e.empty());  // 2 replicas x 2 stages
  const auto bad = run({0xAB, 0xAB, 0xAC});
  for (const auto& e : bad) {
    CHECK(e.find("at step 5, the parameters of rank 2 (CRC-32C 000000ac) differ from rank 0's (000000ab)") !=
          std::string::npos);
  }
  const auto stage = run({0xAB, s1 | 0xCD, 0xAB, s1 | 0xCE});
  for (const auto& e : stage)
    CHECK(e.find("the parameters of rank 3 (CRC-32C 000000ce) differ from rank 1's (000000cd)") != std::string::npos);
}

}  // namespace SPARSELM_UNITY_ID
