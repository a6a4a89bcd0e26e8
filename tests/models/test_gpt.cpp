// GPT model: config validation, whole-model gradients by finite differences, recompute and thread
// count invariance, and that a few trainer steps fit a small batch.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "sparselm/testing/layer_check.hpp"
#include "sparselm/core/threads.hpp"
#include "sparselm/models/gpt.hpp"
#include "sparselm/train/trainer.hpp"

// Each test file is its own namespace: the area's files are compiled as one unity translation unit
// (tests/CMakeLists.txt), and their helpers must not meet.
namespace SPARSELM_UNITY_ID {

using namespace sparselm;

namespace {
struct sgd_policies : default_policies {
  using optimizer = optim::sgd<>;
};
gpt_config tiny() { return gpt_config::from_json(read_json_file(SPARSELM_SOURCE_DIR "/configs/gpt-tiny.json"), "gpt-tiny"); }

struct toy_data {
  std::size_t B = 2, T = 7;
  std::vector<std::int32_t> ids, targets;
  toy_data(std::size_t vocab, std::uint64_t seed = 3) {
    counter_rng rng(seed);
    for (std::size_t i = 0; i < B * (T + 1); ++i) ids.push_back(std::int32_t(rng.below(1, i, vocab)));
    std::vector<std::int32_t> seqs = ids;
    ids.clear();
    for (std::size_t b = 0; b < B; ++b)
      for (std::size_t t = 0; t < T; ++t) {
        ids.push_back(seqs[b * (T + 1) + t]);
        targets.push_back(seqs[b * (T + 1) + t + 1]);
      }
    targets[3] = ignore_index;  // a padded position
  }
  token_batch batch() const { return {ids, targets, {}, B, T}; }
};
}  // namespace

TEST_CASE("gpt config: bad values are errors naming the field") {
  auto j = read_json_file(SPARSELM_SOURCE_DIR "/configs/gpt-tiny.json");
  auto bad = [&](const char* key, json v) {
    auto k = j;
    k[key] = v;
    return k;
  };
  CHECK_THROWS_WITH_AS(gpt_config::from_json(bad("n_head", 3)), doctest::Contains("n_embd"), sparselm::error);
  CHECK_THROWS_WITH_AS(gpt_config::from_json(bad("n_layer", 0)), doctest::Contains("n_layer"), sparselm::error);
  CHECK_THROWS_WITH_AS(gpt_config::from_json(bad("n_embdd", 8)), doctest::Contains("n_embdd"), sparselm::error);
  CHECK_THROWS_WITH_AS(gpt_config::from_json(bad("resid_pdrop", 1.5)), doctest::Contains("resid_pdrop"),
                       sparselm::error);
  CHECK_THROWS_WITH_AS(gpt_config::from_json(bad("vocab_size", "many")), doctest::Contains("vocab_size"),
                       sparselm::error);
  CHECK_THROWS_WITH_AS(gpt_config::from_json(bad("activation_function", "relu")),
                       doctest::Contains("activation_function"), sparselm::error);
  auto c = gpt_config::from_json(j);
  auto round = gpt_config::from_json(c.to_json());
  CHECK(round.n_embd == c.n_embd);
  CHECK(round.n_layer == c.n_layer);
}

TEST_CASE("gpt: bad batches are errors") {
  gpt<> m(tiny());
  m.init(1);
  std::vector<std::int32_t> ids(2 * 20, 1), tg(2 * 20, 1);
  CHECK_THROWS_WITH_AS(m.evaluate({ids, tg, {}, 2, 20}), doctest::Contains("n_positions"), sparselm::error);
  std::vector<std::int32_t> bad_ids(2 * 4, 1), bad_tg(2 * 4, 1);
  bad_ids[5] = 61;
  CHECK_THROWS_WITH_AS(m.evaluate({bad_ids, bad_tg, {}, 2, 4}), doctest::Contains("61"), sparselm::error);
  bad_ids[5] = 1;
  bad_tg[2] = 99;
  CHECK_THROWS_WITH_AS(m.evaluate({bad_ids, bad_tg, {}, 2, 4}), doctest::Contains("99"), sparselm::error);
  CHECK_THROWS_AS(m.evaluate({bad_ids, bad_tg, {}, 3, 4}), sparselm::error);
}

TEST_CASE("gpt: whole-model gradient by finite differences") {
  auto cfg = tiny();
  cfg.initializer_range = 0.2f;  // larger weights: a gradient well above float noise
  gpt<> m(cfg);
  m.init(5);
  toy_data d(cfg.vocab_size);
  m.grads().zero();
  auto st = m.forward_backward({}, d.batch(), 1.0f);
  CHECK(st.count == d.B * d.T - 1);
  auto r = sparselm::testing::check_model(m, d.batch(), {.max_checks = 400, .tolerance = {.rtol = 2e-2, .atol = 2e-4}});
  CHECK_MESSAGE(r.ok, r.message);
}

TEST_CASE("gpt: recompute::blocks gives bit-identical gradients; thread count does not change the loss") {
  auto cfg = tiny();
  cfg.embd_pdrop = cfg.attn_pdrop = cfg.resid_pdrop = 0.1f;
  gpt<> m(cfg);
  m.init(9);
  toy_data d(cfg.vocab_size);
  step_context ctx;
  ctx.training = true;
  ctx.rng = counter_rng(77);
  ctx.step = 3;
  m.grads().zero();
  auto a = m.forward_backward<recompute::none>(ctx, d.batch(), 0.5f);
  std::vector<float> ga(m.grads().all().begin(), m.grads().all().end());
  m.grads().zero();
  auto b = m.forward_backward<recompute::blocks>(ctx, d.batch(), 0.5f);
  std::vector<float> gb(m.grads().all().begin(), m.grads().all().end());
  CHECK(a.loss_sum == b.loss_sum);
  CHECK(ga == gb);
  const int threads = num_threads();
  set_num_threads(1);
  m.grads().zero();
  auto c = m.forward_backward<recompute::none>(ctx, d.batch(), 0.5f);
  set_num_threads(threads);
  CHECK(c.loss_sum == doctest::Approx(a.loss_sum).epsilon(1e-6));
  // dropout is active: evaluation (no dropout) differs from the training loss
  CHECK(m.evaluate(d.batch()).loss_sum != a.loss_sum);
}

TEST_CASE("trainer: AdamW steps fit a fixed batch; accumulation of two halves equals one batch") {
  auto cfg = tiny();
  gpt<> m(cfg);
  m.init(11);
  toy_data d(cfg.vocab_size);
  trainer_options o;
  o.max_norm = 1.0f;
  optim::adamw<> opt(json{{"weight_decay", 0.0}});
  trainer<gpt<>> t(m, o, std::move(opt), optim::schedule(optim::constant_schedule(1e-2f), "constant"));
  std::vector<token_batch> micro{d.batch()};
  auto first = t.train_step(micro);
  step_metrics last;
  for (int i = 0; i < 30; ++i) last = t.train_step(micro);
  CHECK(first.loss.mean_loss() > 3.5);  // ~ log(61) at init
  CHECK(last.loss.mean_loss() < 1.0);
  CHECK(last.step == 31);
  CHECK(last.grad_norm > 0);
  CHECK(last.tokens == d.B * d.T);

  // Sum-mode accumulation over the two rows separately (each row's mean loss) vs avg: factor 2.
  gpt<> m2(cfg), m3(cfg);
  m2.init(11);
  m3.init(11);
  std::span<const std::int32_t> ids(d.ids), tg(d.targets);
  std::vector<token_batch> halves{{ids.subspan(0, d.T), tg.subspan(0, d.T), {}, 1, d.T},
                                  {ids.subspan(d.T), tg.subspan(d.T), {}, 1, d.T}};
  trainer_options avg, sum;
  avg.clip = sum.clip = clip_mode::none;
  avg.accumulation = optim::grad_accumulation(2, optim::accumulation_mode::avg);
  sum.accumulation = optim::grad_accumulation(2, optim::accumulation_mode::sum);
  optim::sgd<> sgd_a(json{{"momentum", 0.0}}), sgd_s(json{{"momentum", 0.0}});
  trainer<gpt<>, sgd_policies> ta(
      m2, avg, std::move(sgd_a), optim::schedule(optim::constant_schedule(0.1f))),
      ts(m3, sum, std::move(sgd_s), optim::schedule(optim::constant_schedule(0.1f)));
  auto ma = ta.train_step(halves);
  auto ms = ts.train_step(halves);
  CHECK(ms.grad_norm == doctest::Approx(2 * ma.grad_norm).epsilon(1e-5));
  CHECK_THROWS_AS(ta.train_step(std::span<const token_batch>(halves).subspan(0, 1)), sparselm::error);
}

}  // namespace SPARSELM_UNITY_ID
