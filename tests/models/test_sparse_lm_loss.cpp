// The S1 weighted repeated-token loss with autoregression offset (models/lm_loss.hpp):
// hand-built cases, a naive double-precision reference (loss and logit gradient), and the GPT
// config option end to end (loss from the model's logits, trainer normaliser, config errors).
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "sparselm/core/rng.hpp"
#include "sparselm/kernels/cross_entropy.hpp"
#include "sparselm/models/gpt.hpp"
#include "sparselm/models/lm_loss.hpp"
#include "sparselm/train/trainer.hpp"

// Each test file is its own namespace: the area's files are compiled as one unity translation unit
// (tests/CMakeLists.txt), and their helpers must not meet.
namespace SPARSELM_UNITY_ID {

using namespace sparselm;

namespace {
constexpr std::int32_t X = ignore_index;

// Naive S1 loss from full logits (N,V): w_i by counting, CE_i in double; returns (loss, xentropy)
// and fills dlogits = ∂loss/∂logits.
struct naive_result {
  double loss = 0, xent = 0;
  std::size_t n = 0;
  std::vector<double> grad;
};
naive_result naive_loss(const std::vector<float>& logits, const std::vector<std::int32_t>& tg, std::size_t B, std::size_t T,
                        std::size_t V, std::size_t k, bool weighted) {
  naive_result r;
  r.grad.assign(logits.size(), 0.0);
  std::vector<double> w(B * T, 0.0);
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t i = k; i < T; ++i) {
      if (tg[b * T + i] == X) continue;
      std::size_t same = 0;
      for (std::size_t j = k; j < T; ++j) same += tg[b * T + j] == tg[b * T + i];
      w[b * T + i] = weighted ? 1.0 / double(same) : 1.0;
      ++r.n;
    }
  for (std::size_t i = 0; i < B * T; ++i) {
    if (w[i] == 0) continue;
    double m = -1e300, s = 0;
    for (std::size_t v = 0; v < V; ++v) m = std::max(m, double(logits[i * V + v]));
    for (std::size_t v = 0; v < V; ++v) s += std::exp(double(logits[i * V + v]) - m);
    const double ce = std::log(s) + m - double(logits[i * V + std::size_t(tg[i])]);
    r.loss += w[i] * ce;
    r.xent += ce;
    for (std::size_t v = 0; v < V; ++v)
      r.grad[i * V + v] = w[i] * (std::exp(double(logits[i * V + v]) - m) / s - (int(v) == tg[i] ? 1.0 : 0.0));
  }
  r.loss /= double(r.n);
  r.xent /= double(r.n);
  for (auto& g : r.grad) g /= double(r.n);
  return r;
}
}  // namespace

TEST_CASE("repeated-token weights and normaliser: hand-built cases") {
  const std::vector<std::int32_t> tg{3, 3, 5, 3, 7,  //
                                     1, 2, X, 2, 2};
  std::vector<float> w(10);
  repeated_token_weights(tg, 2, 5, 0, w);
  const float t = 1.0f / 3.0f;
  CHECK(w == std::vector<float>{t, t, 1, t, 1, 1, t, 0, t, t});
  repeated_token_weights(tg, 2, 5, 2, w);
  CHECK(w == std::vector<float>{0, 0, 1, 1, 1, 0, 0, 0, 0.5f, 0.5f});

  token_batch b{tg, tg, {}, 2, 5};
  CHECK(lm_loss_normaliser({}, b) == 9);
  CHECK(lm_loss_normaliser({true, 0}, b) == 9);
  CHECK(lm_loss_normaliser({true, 2}, b) == 5);
  CHECK(lm_loss_normaliser({false, 4}, b) == 2);

  lm_loss_targets lt;
  const auto& s = lt.apply({true, 2}, b);
  CHECK(std::vector<std::int32_t>(s.targets.begin(), s.targets.end()) == std::vector<std::int32_t>{X, X, 5, 3, 7, X, X, X, 2, 2});
  CHECK(std::vector<float>(s.weights.begin(), s.weights.end()) == std::vector<float>{0, 0, 1, 1, 1, 0, 0, 0, 0.5f, 0.5f});
  CHECK(lt.normaliser() == 5);
  loss_stats st{4.0, 4.0, 6.0, 1, 5};
  lt.finish(st);
  CHECK(st.weight_sum == 5);
  CHECK(st.mean_loss() == doctest::Approx(0.8));
  // inactive options: the batch passes through unchanged
  const auto& same = lt.apply({}, b);
  CHECK(same.targets.data() == tg.data());
  CHECK(same.weights.empty());

  // a batch with its own weights: the offset applies, repeat weighting is refused
  std::vector<float> bw(10, 2.0f);
  token_batch wb{tg, tg, bw, 2, 5};
  CHECK(lm_loss_normaliser({false, 2}, wb) == 10);
  CHECK_THROWS_WITH_AS(lt.apply({true, 0}, wb), doctest::Contains("'weight_repeats'"), error);
  token_batch bad{tg, std::span<const std::int32_t>(tg).subspan(0, 7), {}, 2, 5};
  CHECK_THROWS_WITH_AS(lm_loss_normaliser({true, 0}, bad), doctest::Contains("7 targets for a 2 x 5 batch"), error);
}

TEST_CASE("weighted loss with offset: cross-entropy kernel on the prepared targets equals the naive reference") {
  const std::size_t B = 3, T = 12, V = 9;
  counter_rng rng(11);
  std::vector<float> logits(B * T * V);
  rng.fill_normal(logits, 1, 0.0f, 2.0f);
  std::vector<std::int32_t> tg(B * T);
  for (std::size_t i = 0; i < tg.size(); ++i) tg[i] = std::int32_t(rng.below(2, i, 4));  // many repeats
  tg[5] = X;
  tg[T + 9] = X;
  for (std::size_t k : {0ul, 1ul, 4ul})
    for (bool weighted : {false, true}) {
      CAPTURE(k);
      CAPTURE(weighted);
      auto ref = naive_loss(logits, tg, B, T, V, k, weighted);
      lm_loss_targets lt;
      const auto& s = lt.apply({weighted, k}, token_batch{tg, tg, {}, B, T});
      std::vector<float> g = logits, ce(B * T);
      auto cs = kernels::cross_entropy(matrix_view<float>(g.data(), B * T, V), s.targets, s.weights, ignore_index,
                                       float(1.0 / lt.normaliser()), true, ce);
      loss_stats st{cs.loss_sum, cs.weight_sum, 0, cs.correct, cs.count};
      for (float c : ce) st.ce_sum += c;
      lt.finish(st);
      CHECK(lt.normaliser() == double(ref.n));
      CHECK(st.count == ref.n);
      CHECK(st.mean_loss() == doctest::Approx(ref.loss).epsilon(1e-6));
      CHECK(st.mean_ce() == doctest::Approx(ref.xent).epsilon(1e-6));
      double worst = 0;
      for (std::size_t i = 0; i < g.size(); ++i) worst = std::max(worst, std::fabs(double(g[i]) - ref.grad[i]));
      CHECK(worst < 1e-6);
    }
}

TEST_CASE("gpt: the loss option scores like the naive reference and the trainer uses its normaliser") {
  json j = read_json_file(SPARSELM_SOURCE_DIR "/configs/gpt-tiny.json");
  j["loss"] = {{"weight_repeats", true}, {"autoregression_offset", 2}};
  for (auto p : {"embd_pdrop", "attn_pdrop", "resid_pdrop"}) j[p] = 0.0;
  auto cfg = gpt_config::from_json(j, "gpt-tiny+loss");
  CHECK(cfg.loss == lm_loss_options{true, 2});
  CHECK(gpt_config::from_json(cfg.to_json()).loss == cfg.loss);
  CHECK(!gpt_config::from_json(read_json_file(SPARSELM_SOURCE_DIR "/configs/gpt-tiny.json")).to_json().contains("loss"));
  gpt<> m(cfg);
  m.init(3);
  const std::size_t B = 2, T = 8, V = cfg.vocab_size;
  std::vector<std::int32_t> ids(B * T), tg(B * T);
  counter_rng rng(4);
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = std::int32_t(rng.below(1, i, V)), tg[i] = std::int32_t(rng.below(2, i, 5));
  tg[3] = X;
  token_batch b{ids, tg, {}, B, T};
  std::vector<float> logits(B * T * V);
  m.logits(ids, B, T, matrix_view<float>(logits.data(), B * T, V));
  auto ref = naive_loss(logits, tg, B, T, V, 2, true);
  auto st = m.evaluate(b);
  CHECK(st.mean_loss() == doctest::Approx(ref.loss).epsilon(1e-5));
  CHECK(st.mean_ce() == doctest::Approx(ref.xent).epsilon(1e-5));
  CHECK(m.loss_normaliser(b) == double(ref.n));

  // one SGD step through the trainer = params − lr · (gradient of the mean weighted loss)
  m.grads().zero();
  m.forward_backward({}, b, float(1.0 / double(ref.n)));
  std::vector<float> g(m.grads().all().begin(), m.grads().all().end()), p0(m.params().all().begin(), m.params().all().end());
  trainer_options o;
  o.clip = clip_mode::none;
  struct sgd_policies : default_policies {
    using optimizer = optim::sgd<>;
  };
  trainer<gpt<>, sgd_policies> t(m, o, optim::sgd<>(json{{"type", "sgd"}}), optim::make_schedule({{"type", "constant"}, {"lr", 0.5}}));
  auto sm = t.train_step(std::span<const token_batch>(&b, 1));
  CHECK(sm.loss.mean_loss() == doctest::Approx(ref.loss).epsilon(1e-5));
  double worst = 0;
  for (std::size_t i = 0; i < g.size(); ++i) worst = std::max(worst, std::fabs(double(m.params().all()[i]) - (p0[i] - 0.5 * g[i])));
  CHECK(worst < 1e-6);

  // config errors name the field
  json bad = j;
  bad["loss"]["autoregresion_offset"] = 1;
  CHECK_THROWS_WITH_AS(gpt_config::from_json(bad, "cfg"), doctest::Contains("cfg loss: unknown field 'autoregresion_offset'"), error);
  bad = j;
  bad["loss"]["autoregression_offset"] = 4096;
  CHECK_THROWS_WITH_AS(gpt_config::from_json(bad, "cfg"), doctest::Contains("'loss.autoregression_offset' (4096)"), error);
  bad = j;
  bad["loss"]["weight_repeats"] = 1;
  CHECK_THROWS_WITH_AS(gpt_config::from_json(bad, "cfg"), doctest::Contains("'weight_repeats' must be true or false"), error);
  bad = j;
  bad["loss"] = 3;
  CHECK_THROWS_WITH_AS(gpt_config::from_json(bad, "cfg"), doctest::Contains("field 'loss' must be an object"), error);
}

}  // namespace SPARSELM_UNITY_ID
