// Data parallelism in the trainer without MPI: replicas as threads of this process over a
// shared-memory replica_group (blocking collectives; every rank calls them in the same order).
// The model reports each part's gradient range exactly once per step, and the ranges tile the
// arena; P replicas on their rows of a batch train as one process on the whole batch (within
// float rounding) and hold bit-identical weights; sharded optimiser state (ZeRO-1) is bit-identical
// to unsharded; a sharded checkpoint state gathers to the unsharded one, and a save whose slots
// are streamed to rank 0 writes the same file.
#include <doctest/doctest.h>

#include <algorithm>
#include <barrier>
#include <functional>
#include <limits>
#include <cmath>
#include <cstring>
#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>
#include <vector>

#include "../common/tiny_bert.hpp"
#include "../common/thread_replicas.hpp"
#include "../common/tiny_gpt.hpp"
#include "sparselm/core/threads.hpp"
#include "sparselm/io/checkpoint.hpp"
#include "sparselm/models/bert.hpp"
#include "sparselm/models/gpt.hpp"
#include "sparselm/models/sparse_lm.hpp"
#include "sparselm/optim/slot_choice.hpp"
#include "sparselm/parallel/replica_group.hpp"
#include "sparselm/train/lm_job.hpp"
#include "sparselm/train/replica_checks.hpp"
#include "sparselm/train/trainer.hpp"

// Each test file is its own namespace: the area's files are compiled as one unity translation unit
// (tests/CMakeLists.txt), and their helpers must not meet.
namespace SPARSELM_UNITY_ID {

using namespace sparselm;
using test::thread_replicas;

namespace {

gpt_config small() { return test::small_gpt_config(); }

// Batches of 4 rows x 16 positions; rows [lo, hi) of batch k as a token_batch.
struct toy_data {
  std::vector<std::vector<std::int32_t>> ids, targets;
  explicit toy_data(int n) {
    std::mt19937 g(11);
    for (int b = 0; b < n; ++b) {
      std::vector<std::int32_t> x, y;
      for (int i = 0; i < 4 * 16; ++i) {
        x.push_back(std::int32_t(g() % 64));
        y.push_back(std::int32_t((x.back() * 7 + 1) % 64));
      }
      ids.push_back(x), targets.push_back(y);
    }
  }
  token_batch rows(int k, std::size_t lo, std::size_t hi) const {
    return {std::span<const std::int32_t>(ids[k]).subspan(lo * 16, (hi - lo) * 16),
            std::span<const std::int32_t>(targets[k]).subspan(lo * 16, (hi - lo) * 16), {}, hi - lo, 16};
  }
};

struct dp_policies : default_policies {
  using data_parallel = sparselm::data_parallel::mpi;
};

optim::schedule lr() { return optim::make_schedule({{"type", "constant"}, {"lr", 3e-3}}); }

// AdamW with a run-time slot type (optim/slot_choice.hpp).
struct choice_policies : dp_policies {
  using optimizer = optim::slot_choice<optim::adamw>;
};

// A GPT replica with AdamW slots of type `slots` ("float", "bf16", "half"), sharded or not, after
// 3 steps on its rows of the toy batches; then f(trainer).
template <class F>
void after_choice_steps(parallel::replica_group& g, const toy_data& d, const char* slots, bool shard, F&& f) {
  gpt<> m(small());
  m.init(5);
  trainer_options o;
  o.shard_optimizer = shard;
  trainer<gpt<>, choice_policies> t(m, o, optim::slot_choice<optim::adamw>({{"type", "adamw"}, {"slots", slots}}),
                                    lr());
  t.set_replicas(g);
  for (int k = 0; k < 3; ++k) {
    const auto [lo, hi] = parallel::replica_group::slice(4, g.rank(), g.size());
    const token_batch b = d.rows(k, lo, hi);
    t.train_step(std::span<const token_batch>(&b, 1));
  }
  f(t);
}

// Trains `steps` steps on rank r of P (rows split as the training loop splits them); returns the
// losses and the final parameters.
template <class Model>
std::pair<std::vector<double>, std::vector<float>> train_replica(Model& model, parallel::replica_group& g,
                                                                 const toy_data& d, int steps, bool shard) {
  trainer_options o;
  o.shard_optimizer = shard;
  trainer<Model, dp_policies> t(model, o, optim::adamw<float>(nlohmann::json::object()), lr());
  t.set_replicas(g);
  t.sync_parameters();
  std::vector<double> losses;
  for (int k = 0; k < steps; ++k) {
    const auto [lo, hi] = parallel::replica_group::slice(4, g.rank(), g.size());
    const token_batch b = d.rows(k, lo, hi);
    losses.push_back(t.train_step(std::span<const token_batch>(&b, 1)).loss.mean_loss());
  }
  t.check_replicas_agree("at the end of the test");
  return {losses, test::param_snapshot(model)};
}

}  // namespace

TEST_CASE("the model reports every part's gradient range once per step, and the ranges tile the arena") {
  for (std::size_t micro : {1u, 2u, 3u}) {
    gpt<> m(small());
    m.init(1);
    const toy_data d(3);
    std::vector<std::pair<std::size_t, std::size_t>> got;
    std::function<void(std::size_t, std::size_t)> ready = [&](std::size_t b, std::size_t e) {
      got.emplace_back(b, e);
    };
    step_context ctx;
    ctx.training = true;
    ctx.grads_ready = &ready;
    std::vector<token_batch> mb;
    for (std::size_t k = 0; k < micro; ++k) mb.push_back(d.rows(int(k), 0, 4));
    std::vector<float> scales(micro, 1.0f);
    m.grads().zero();
    m.forward_backward<recompute::none, pipeline::none>(ctx, mb, scales);
    CAPTURE(micro);
    REQUIRE(got.size() == small().n_layer + 2);  // embedding, each block, head
    std::sort(got.begin(), got.end());
    std::size_t at = 0;
    for (auto [b, e] : got) {
      CHECK(b == at);
      CHECK(e > b);
      at = e;
    }
    CHECK(at == m.params().all().size());
  }
}

TEST_CASE("2 and 3 replicas on their rows train as one process on the whole batch") {
  const toy_data d(6);
  gpt<> single(small());
  single.init(3);
  thread_replicas one(1);
  std::vector<double> ref_loss;
  std::vector<float> ref_w;
  one.run([&](std::size_t, parallel::replica_group& g) {
    std::tie(ref_loss, ref_w) = train_replica(single, g, d, 6, false);
  });
  for (std::size_t P : {2u, 3u}) {
    for (bool shard : {false, true}) {
      CAPTURE(P);
      CAPTURE(shard);
      std::vector<std::vector<double>> losses(P);
      std::vector<std::vector<float>> weights(P);
      thread_replicas group(P);
      group.run([&](std::size_t r, parallel::replica_group& g) {
        gpt<> m(small());
        m.init(r == 0 ? 3 : 100 + r);  // other seeds: sync_parameters gives every rank rank 0's weights
        std::tie(losses[r], weights[r]) = train_replica(m, g, d, 6, shard);
      });
      for (std::size_t r = 1; r < P; ++r) {
        CHECK(losses[r] == losses[0]);
        CHECK(weights[r] == weights[0]);
      }
      for (std::size_t k = 0; k < ref_loss.size(); ++k)
        CHECK(losses[0][k] == doctest::Approx(ref_loss[k]).epsilon(1e-5));
      double worst = 0, scale = 0;
      for (std::size_t i = 0; i < ref_w.size(); ++i) {
        worst = std::max(worst, double(std::abs(weights[0][i] - ref_w[i])));
        scale = std::max(scale, double(std::abs(ref_w[i])));
      }
      CHECK(worst <= 1e-3 * scale);
    }
  }
}

TEST_CASE("sharded optimiser state is bit-identical to unsharded and gathers into the whole state") {
  const toy_data d(4);
  const std::size_t P = 2;
  std::vector<std::vector<float>> w_plain(P), w_shard(P), slots_plain, slots_shard;
  for (bool shard : {false, true}) {
    thread_replicas group(P);
    group.run([&](std::size_t r, parallel::replica_group& g) {
      gpt<> m(small());
      m.init(5);
      trainer_options o;
      o.shard_optimizer = shard;
      o.clip = clip_mode::global_norm;
      o.max_norm = 0.05f;  // clipping on every step: the sharded norm must equal the unsharded one
      trainer<gpt<>, dp_policies> t(m, o, optim::adamw<float>(nlohmann::json::object()), lr());
      t.set_replicas(g);
      CHECK(t.sharded() == shard);
      for (int k = 0; k < 4; ++k) {
        const auto [lo, hi] = parallel::replica_group::slice(4, r, P);
        const token_batch b = d.rows(k, lo, hi);
        CHECK(t.train_step(std::span<const token_batch>(&b, 1)).grad_norm > 0.05);
      }
      // sharded: each rank summed only its own tensors (the others' became NaN in this group)
      CHECK((static_cast<thread_replicas::member&>(g).scatters_started > 0) == shard);
      (shard ? w_shard : w_plain)[r] = test::param_snapshot(m);
      t.gather_optimizer_state();
      if (r == 0) {
        auto st = t.checkpoint_state();
        CHECK(st.step == 4);
        auto& out = shard ? slots_shard : slots_plain;
        for (auto& s : st.slots) out.emplace_back(s.slots->all().begin(), s.slots->all().end());
      }
      t.release_gathered_state();
    });
  }
  CHECK(w_shard[0] == w_plain[0]);
  CHECK(w_shard[1] == w_plain[1]);
  REQUIRE(slots_plain.size() == 2);
  CHECK(slots_shard == slots_plain);
}

// 16-bit slots of a run-time slot choice (optim/slot_choice.hpp) are gathered in their own type
// when sharded, and a checkpoint written from them holds the same BF16 / F16 tensors, byte for
// byte, as the unsharded run's; checkpoint_state() still hands out their float values.
TEST_CASE("sharded bf16 / half optimiser slots gather and save in their own type") {
  const toy_data d(3);
  const std::size_t P = 2;
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("sparselm-sharded16-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  for (const char* slots : {"bf16", "half"}) {
    INFO("slots ", slots);
    std::vector<float> widened[2];
    for (bool shard : {false, true}) {
      const fs::path file = dir / (std::string(slots) + (shard ? "-sharded" : "-plain") + ".safetensors");
      thread_replicas group(P);
      group.run([&](std::size_t r, parallel::replica_group& g) {
        after_choice_steps(g, d, slots, shard, [&](auto& t) {
          t.gather_optimizer_state();
          CHECK(t.visit_gathered16([](const auto&) {}) == shard);
          if (r == 0) {
            io::save_training_state(file, t, nlohmann::json::object());
            for (const auto& s : t.checkpoint_state().slots)
              widened[shard].insert(widened[shard].end(), s.slots->all().begin(), s.slots->all().end());
          }
          t.release_gathered_state();
          CHECK_FALSE(t.visit_gathered16([](const auto&) {}));
        });
      });
    }
    CHECK(!widened[0].empty());
    CHECK(widened[1] == widened[0]);
    io::safetensors_file plain(dir / (std::string(slots) + "-plain.safetensors"));
    io::safetensors_file sharded(dir / (std::string(slots) + "-sharded.safetensors"));
    const auto stored = std::string(slots) == "bf16" ? io::st_dtype::bf16 : io::st_dtype::f16;
    std::size_t n = 0;
    for (const auto& ti : plain.tensors()) {
      if (ti.name.rfind("optimizer.", 0) != 0) continue;
      ++n;
      REQUIRE(sharded.contains(ti.name));
      CHECK(ti.dtype == stored);
      const auto a = plain.bytes(ti), b = sharded.bytes(sharded.info(ti.name));
      CHECK(std::equal(a.begin(), a.end(), b.begin(), b.end()));
    }
    CHECK(n > 0);
  }
  fs::remove_all(dir);
}

// The jobs save sharded state through trainer::stream_optimizer_state: the other ranks' slots
// reach rank 0 in chunks while it writes. The file equals the one written from the gathered state,
// byte for byte (float and bf16 slots, 2 and 3 ranks), and with 2 ranks the unsharded run's too.
// A stream that no save takes is drained by release_gathered_state(), so no rank is left waiting.
TEST_CASE("sharded optimiser state streamed into a save: the gathered state's file, byte for byte") {
  const toy_data d(3);
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("sparselm-streamed-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  auto slurp = [](const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
  };
  for (const char* slots : {"float", "bf16"})
    for (std::size_t P : {std::size_t(2), std::size_t(3)}) {
      INFO("slots ", slots, ", ", P, " ranks");
      const std::string stem = std::string(slots) + "-" + std::to_string(P);
      for (bool shard : {false, true}) {
        thread_replicas group(P);
        group.run([&](std::size_t r, parallel::replica_group& g) {
          after_choice_steps(g, d, slots, shard, [&](auto& t) {
            const nlohmann::json run = {{"rank_count", P}};
            if (shard) {  // the gathered state's file, for comparison
              t.gather_optimizer_state();
              if (r == 0) io::save_training_state(dir / (stem + "-gathered"), t, run);
              t.release_gathered_state();
              t.stream_optimizer_state();  // taken by no save: drained
              CHECK((t.streamed_slots() != nullptr) == (r == 0));
              t.release_gathered_state();
              CHECK(t.streamed_slots() == nullptr);
            }
            t.stream_optimizer_state();
            if (r == 0) io::save_training_state(dir / (stem + (shard ? "-streamed" : "-plain")), t, run);
            t.release_gathered_state();
            CHECK(t.streamed_slots() == nullptr);
          });
        });
      }
      const std::string streamed = slurp(dir / (stem + "-streamed"));
      CHECK(streamed.size() > 100000);
      CHECK(streamed == slurp(dir / (stem + "-gathered")));
      if (P == 2) CHECK(streamed == slurp(dir / (stem + "-plain")));
    }
  fs::remove_all(dir);
}

TEST_CASE("S1 sparse LM with RigL scores: replicas sum the pooled dense gradients") {
  // The pooled scores of a dense-gradient step are summed over the replicas like the gradients.
  sparse_lm_config c;
  c.vocab_size = 64;
  c.sequence_length = 16;
  c.layers = 1;
  c.hidden_length = 32;
  c.ff_length = 64;
  c.attention_heads = 2;
  c.qkv_length = 16;
  c.embedding_length = 16;
  c.block_size = 8;
  c.sparsity = 0.5;
  // unweighted loss: both halves have 2 x 12 targets, so the micro-batch means of one process
  // and the replicas' global mean scale the gradients alike
  c.loss = lm_loss_options{false, 4};
  const toy_data d(1);
  std::vector<std::vector<float>> scores(2);
  std::vector<float> whole;
  auto pooled = [](auto& m) {
    std::vector<float> v;
    for (auto& w : m.sparse_weights()) v.insert(v.end(), w.pooled_grad.begin(), w.pooled_grad.end());
    return v;
  };
  {
    using M = sparse_lm<float, block_sparse<8>>;
    thread_replicas group(2);
    group.run([&](std::size_t r, parallel::replica_group& g) {
      M m(c);
      m.init(9);
      trainer<M, dp_policies> t(m, trainer_options{}, optim::adamw<float>(nlohmann::json::object()), lr());
      t.set_replicas(g);
      t.set_hooks({[](std::size_t) { return true; }, {}});
      const token_batch b = d.rows(0, 2 * r, 2 * r + 2);
      t.train_step(std::span<const token_batch>(&b, 1));
      scores[r] = pooled(m);
    });
    // one process, the two halves as two micro-batches (the replicas' rows)
    M m(c);
    m.init(9);
    trainer_options o;
    o.accumulation.steps = 2;
    o.accumulation.scale_before = true;  // each micro-batch's gradient x 1/2, as the replicas' global mean
    trainer<M> t(m, o, optim::adamw<float>(nlohmann::json::object()), lr());
    t.set_hooks({[](std::size_t) { return true; }, {}});
    const std::vector<token_batch> mb = {d.rows(0, 0, 2), d.rows(0, 2, 4)};
    t.train_step(mb);
    whole = pooled(m);
  }
  REQUIRE(!whole.empty());
  CHECK(scores[0] == scores[1]);
  REQUIRE(scores[0].size() == whole.size());
  for (std::size_t i = 0; i < whole.size(); ++i) CHECK(scores[0][i] == doctest::Approx(whole[i]).epsilon(1e-5));
}

// BERT's loss is the sum of two means (MLM over the masked positions, NSP over the labelled
// sequences). The replicas' rows hold different numbers of each (rank 0: 4 masked, 2 labelled;
// rank 1: 2 and 1), so averaging each rank's own means would weight rank 1's predictions double;
// the trainer sums the counts over the replicas and each rank divides by the global ones.
TEST_CASE("BERT: replicas with unequal masked and labelled counts train as one process") {
  constexpr std::size_t B = 4, T = 16, S = 3;  // sequences, positions, prediction slots per sequence
  std::vector<std::int32_t> ids(B * T), types(B * T), pos(B * S), labels(B * S, -1), nsp{0, 1, -1, 1};
  std::mt19937 rng(5);
  for (std::size_t i = 0; i < B * T; ++i) ids[i] = std::int32_t(rng() % 50), types[i] = (i % T) >= T / 2;
  const std::size_t masked[B] = {3, 1, 2, 0};
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t k = 0; k < S; ++k) {
      pos[b * S + k] = std::int32_t(1 + 4 * k + b);
      if (k < masked[b]) labels[b * S + k] = std::int32_t(rng() % 50);
    }
  auto rows = [&](std::size_t lo, std::size_t hi) {
    bert_batch b;
    b.ids = std::span<const std::int32_t>(ids).subspan(lo * T, (hi - lo) * T);
    b.token_types = std::span<const std::int32_t>(types).subspan(lo * T, (hi - lo) * T);
    b.masked_positions = std::span<const std::int32_t>(pos).subspan(lo * S, (hi - lo) * S);
    b.masked_labels = std::span<const std::int32_t>(labels).subspan(lo * S, (hi - lo) * S);
    b.nsp_labels = std::span<const std::int32_t>(nsp).subspan(lo, hi - lo);
    b.batch = hi - lo, b.seq = T;
    return b;
  };
  struct result {
    std::vector<double> loss, mlm, nsp;
    std::vector<float> w;
  };
  auto train = [&](parallel::replica_group& g, int seed) {
    bert<> m(test::tiny_bert_config());
    m.init(std::uint64_t(seed));
    trainer<bert<>, dp_policies> t(m, {}, optim::adamw<float>(nlohmann::json::object()), lr());
    t.set_replicas(g);
    t.sync_parameters();
    result r;
    const auto [lo, hi] = parallel::replica_group::slice(B, g.rank(), g.size());
    const bert_batch b = rows(lo, hi);
    for (int k = 0; k < 4; ++k) {
      const auto st = t.train_step(std::span<const bert_batch>(&b, 1)).loss;
      r.loss.push_back(st.mean_loss()), r.mlm.push_back(st.mean_ce()), r.nsp.push_back(st.aux_mean_loss());
    }
    r.w = test::param_snapshot(m);
    return r;
  };
  result ref;
  thread_replicas one(1);
  one.run([&](std::size_t, parallel::replica_group& g) { ref = train(g, 3); });
  std::vector<result> got(2);
  thread_replicas two(2);
  two.run([&](std::size_t r, parallel::replica_group& g) { got[r] = train(g, r == 0 ? 3 : 9); });
  CHECK(got[1].w == got[0].w);
  for (std::size_t k = 0; k < ref.loss.size(); ++k) {
    CAPTURE(k);
    CHECK(got[0].loss[k] == doctest::Approx(ref.loss[k]).epsilon(1e-5));
    CHECK(got[0].mlm[k] == doctest::Approx(ref.mlm[k]).epsilon(1e-5));
    CHECK(got[0].nsp[k] == doctest::Approx(ref.nsp[k]).epsilon(1e-5));
  }
  double worst = 0, scale = 0;
  for (std::size_t i = 0; i < ref.w.size(); ++i) {
    worst = std::max(worst, double(std::abs(got[0].w[i] - ref.w[i])));
    scale = std::max(scale, double(std::abs(ref.w[i])));
  }
  CHECK(worst <= 1e-4 * scale);
}

// What a job checks before its ranks train together (train/replica_checks.hpp): each check is a
// collective, and the rank that differs from rank 0 fails with a message naming what differs.
TEST_CASE("replica checks: a rank with another config, other data or other examples fails and says which") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("sparselm-replica-checks-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir / name, std::ios::binary) << text;
    return dir / name;
  };
  const fs::path a = write("a.bin", "tokens tokens"), a2 = write("a2.bin", "tokens tokens"),
                 b = write("b.bin", "tokens tokenz");
  thread_replicas g(2);
  // Equal everywhere: no error on any rank.
  g.run([&](std::size_t r, parallel::replica_group& m) {
    check_same_config(m, {{"lr", 0.1}, {"steps", 5}}, "prog");
    check_same_files(m, {r == 0 ? a : a2, fs::path()}, "prog");  // same contents, empty paths skipped
    check_same_fingerprint(m, 42, "prog", "training examples");
  });
  // The message each rank fails with ("" for none).
  auto errors = [&](const std::function<void(std::size_t, parallel::replica_group&)>& f) {
    std::vector<std::string> msg(2);
    g.run([&](std::size_t r, parallel::replica_group& m) {
      try {
        f(r, m);
      } catch (const error& e) {
        msg[r] = e.what();
      }
    });
    return msg;
  };
  // A config: rank 1 compares with rank 0's and fails alone, naming the differing field.
  const auto cfg = errors([](std::size_t r, parallel::replica_group& m) {
    check_same_config(m, {{"lr", r == 0 ? 0.1 : 0.2}, {"steps", 5}}, "prog");
  });
  CHECK(cfg[0].empty());
  CHECK(cfg[1].find("prog: data parallel: rank 1 runs another config than rank 0") != std::string::npos);
  CHECK(cfg[1].find("/lr: rank 0 0.1, rank 1 0.2") != std::string::npos);
  CHECK(cfg[1].find("steps") == std::string::npos);
  // Files and fingerprints: every rank sees all of them, so every rank fails, naming rank 1.
  const auto files =
      errors([&](std::size_t r, parallel::replica_group& m) { check_same_files(m, {r == 0 ? a : b}, "prog"); });
  CHECK(files[0].find("prog: data parallel: rank 1 has other contents in '" + a.string() + "'") == 0);  // its path
  CHECK(files[1].find("prog: data parallel: rank 1 has other contents in '" + b.string() + "'") == 0);
  const auto ex = errors([](std::size_t r, parallel::replica_group& m) {
    check_same_fingerprint(m, r == 0 ? 42 : 43, "prog", "training examples");
  });
  CHECK(ex[0] == ex[1]);
  CHECK(ex[1] == "prog: data parallel: rank 1 has other training examples than rank 0");
  // The run directory: rank 0 takes the lock and tidies; a fresh run in it afterwards is refused.
  const fs::path out = dir / "run";
  g.run([&](std::size_t r, parallel::replica_group& m) {
    std::optional<io::run_lock> lock;
    claim_run_dir(m, lock, out, "prog", false, false);
    CHECK(lock.has_value() == (r == 0));
    CHECK(fs::exists(out / io::lock_file));  // created before the barrier rank 1 waited at
  });
  write("run/metrics.jsonl", "{}\n");
  std::string refused;
  g.run([&](std::size_t r, parallel::replica_group& m) {
    std::optional<io::run_lock> lock;
    try {
      claim_run_dir(m, lock, out, "prog", false, false);
    } catch (const error& e) {
      CHECK(r == 0);
      refused = e.what();
      m.barrier();  // the barrier rank 1 waits at (a real job then ends every rank)
    }
  });
  CHECK(refused.find("prog: '" + out.string() + "' is not empty (it holds 'metrics.jsonl'") == 0);
  fs::remove_all(dir);
}

}  // namespace SPARSELM_UNITY_ID
