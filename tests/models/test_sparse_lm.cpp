// The S1 sparse LM (models/sparse_lm.hpp): config reading and errors, the S1 initialisation,
// whole-model gradients by finite differences (dense and block-sparse, weighted loss with offset),
// recompute invariance, ERK allocation, and training with dynamic sparsity.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "../common/scratch.hpp"
#include "sparselm/data/token_file.hpp"
#include "sparselm/io/checkpoint.hpp"
#include "sparselm/testing/layer_check.hpp"
#include "sparselm/models/sparse_lm.hpp"
#include "sparselm/train/dynamic_sparsity.hpp"
#include "sparselm/train/lm_job.hpp"
#include "sparselm/train/run_config.hpp"
#include "sparselm/train/trainer.hpp"

// Each test file is its own namespace: the area's files are compiled as one unity translation unit
// (tests/CMakeLists.txt), and their helpers must not meet.
namespace SPARSELM_UNITY_ID {

using namespace sparselm;

namespace {
json tiny_json() { return read_json_file(SPARSELM_SOURCE_DIR "/configs/s1-tiny.json"); }
sparse_lm_config tiny(std::size_t block = 4) {
  json j = tiny_json();
  j["block_size"] = block;
  return sparse_lm_config::from_json(j, "s1-tiny");
}

struct toy_batch {
  std::size_t B = 2, T = 9;
  std::vector<std::int32_t> ids, targets;
  explicit toy_batch(std::size_t vocab, std::uint64_t seed = 3) {
    counter_rng rng(seed);
    for (std::size_t i = 0; i < B * T; ++i) {
      ids.push_back(std::int32_t(rng.below(1, i, vocab)));
      targets.push_back(std::int32_t(rng.below(2, i, 6)));  // repeats within a sequence
    }
    targets[5] = ignore_index;
  }
  token_batch batch() const { return {ids, targets, {}, B, T}; }
};

template <class Model>
void check_model_gradients(Model& m) {
  toy_batch d(m.config().vocab_size);
  const auto b = d.batch();
  const double n = m.loss_normaliser(b);
  CHECK(n == 2 * (d.T - 2) - 1);  // offset 2 per sequence, one padded target
  m.grads().zero();
  auto st = m.forward_backward({}, b, float(1.0 / n));
  CHECK(st.weight_sum == n);
  CHECK(st.count == std::size_t(n));
  CHECK(st.mean_loss() < st.mean_ce());  // repeats are down-weighted
  auto r = sparselm::testing::check_model(m, b, {.max_checks = 500, .tolerance = {.rtol = 2e-2, .atol = 2e-4}});
  CHECK_MESSAGE(r.ok, r.message);
}
}  // namespace

TEST_CASE("sparse_lm config: S1 defaults, round trip, and errors naming the field") {
  sparse_lm_config d;
  CHECK(d.layer_norm_gamma == 0.1f);
  CHECK(d.loss == lm_loss_options{true, 16});
  CHECK(!d.attention_bias);
  auto c = tiny();
  CHECK(sparse_lm_config::from_json(c.to_json()).to_json() == c.to_json());
  auto bad = [](const char* key, json v, const char* msg) {
    json j = tiny_json();
    j[key] = v;
    CAPTURE(key);
    CHECK_THROWS_WITH_AS(sparse_lm_config::from_json(j, "cfg"), doctest::Contains(msg), error);
  };
  bad("block_size", 3, "cfg: field 'block_size' must be one of 0 (dense), 1, 4, 8, 16, got 3");
  bad("hidden_length", 30, "field 'hidden_length' (30) is not a multiple of block_size (4)");
  bad("dtype", "float16", "field 'dtype' must be float32 (the stored weights), got 'float16': bf16 or fp16 compute is the trainer's precision");
  bad("sparsity", 1.0, "field 'sparsity' must be in [0, 1)");
  bad("embedding_length", 15, "'embedding_length' (15) must be even");
  bad("allocation", "dense", "field 'allocation' must be one of uniform, erk");
  bad("hidden_lenght", 32, "cfg: unknown field 'hidden_lenght'");
  bad("layers", 0, "field 'layers' must be >= 1");
  bad("loss", json{{"autoregression_offset", 16}}, "'loss.autoregression_offset' (16) must be < sequence_length (16)");
  bad("activation", "relu", "field 'activation' must be one of gelu_new, gelu");
  CHECK_THROWS_WITH_AS((sparse_lm<float, block_sparse<8>>(tiny())), doctest::Contains("block_size 4 but the model type was compiled for block size 8"), error);
  CHECK_THROWS_WITH_AS((sparse_lm<float, dense>(tiny())), doctest::Contains("compiled for dense (0)"), error);
  CHECK_THROWS_WITH_AS((sparse_lm<float, block_sparse<4>, kernels::gelu_kind::erf>(tiny())), doctest::Contains("activation 'gelu_new'"), error);
}

TEST_CASE("sparse_lm config: block_sparse_attention round trip, defaults and errors naming the field") {
  json j = tiny_json();
  CHECK(!sparse_lm_config::from_json(j).block_sparse_attention);
  CHECK(!sparse_lm_config::from_json(j).to_json().contains("block_sparse_attention"));  // absent stays absent
  j["block_sparse_attention"] = json{{"density", 0.25}};
  auto c = sparse_lm_config::from_json(j);
  REQUIRE(c.block_sparse_attention);
  CHECK(*c.block_sparse_attention == kernels::block_causal_options{.block = 16, .density = 0.25, .seed = 0});
  CHECK(c.to_json()["block_sparse_attention"] == json{{"block", 16}, {"density", 0.25}, {"seed", 0}});
  CHECK(sparse_lm_config::from_json(c.to_json()).to_json() == c.to_json());
  auto bad = [](json v, const char* msg) {
    json b = tiny_json();
    b["block_sparse_attention"] = v;
    CHECK_THROWS_WITH_AS(sparse_lm_config::from_json(b, "cfg"), doctest::Contains(msg), error);
  };
  bad(json{{"density", 1.5}}, "cfg block_sparse_attention: field 'density' must be in [0, 1], got 1.5");
  bad(json{{"block", 0}}, "cfg block_sparse_attention: field 'block' must be in [1, 4096], got 0");
  bad(json{{"dens", 0.5}}, "cfg block_sparse_attention: unknown field 'dens'");
  bad(json{{"seed", -1}}, "cfg block_sparse_attention: field 'seed' must not be negative");
  bad(json(true), "cfg: field 'block_sparse_attention' must be an object");
}

TEST_CASE("sparse_lm: block_sparse_attention (gradients by finite differences; density 1 runs dense; fewer blocks change the loss)") {
  json j = tiny_json();
  j["block_sparse_attention"] = json{{"block", 2}, {"density", 0.5}, {"seed", 3}};
  sparse_lm<float, block_sparse<4>> m(sparse_lm_config::from_json(j));
  for (const auto& blk : m.stack()) {
    REQUIRE(blk.attn().block_pattern());
    CHECK(blk.attn().block_pattern()->block_rows() == 8);  // built for sequence_length 16
  }
  m.init(6);
  check_model_gradients(m);

  toy_batch d(61);
  auto loss_with = [&](json bsa) {
    json k = tiny_json();
    if (!bsa.is_null()) k["block_sparse_attention"] = bsa;
    sparse_lm<float, block_sparse<4>> x(sparse_lm_config::from_json(k));
    x.init(6);
    return x.evaluate(d.batch()).loss_sum;
  };
  const double dense_loss = loss_with(nullptr);
  // density 1 is ordinary causal attention: the model runs the dense kernel
  CHECK(!sparse_lm<float, block_sparse<4>>(sparse_lm_config::from_json(
             [&] { json k = tiny_json(); k["block_sparse_attention"] = json{{"density", 1.0}}; return k; }()))
             .stack()[0].attn().block_pattern());
  CHECK(loss_with(json{{"block", 2}, {"density", 1.0}}) == dense_loss);
  CHECK(std::abs(loss_with(json{{"block", 2}, {"density", 0.0}}) - dense_loss) > 1e-4);
}

TEST_CASE("sparse_lm: block_sparse_attention resumes bit-identically (the pattern comes from config.json)") {
  namespace fs = std::filesystem;
  const fs::path d = test::fresh_dir("models_sparse_lm", "bsa_resume");
  std::vector<std::int32_t> ids(2000);
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = std::int32_t((i * 5 + i / 7) % 61);
  data::write_token_file(d / "train.tok", ids, 61);
  data::write_token_file(d / "valid.tok", std::span(ids).first(300), 61);
  json model = tiny_json();
  model["block_sparse_attention"] = json{{"block", 3}, {"density", 0.5}, {"seed", 5}};
  auto run = [&](const std::string& out, std::size_t steps, bool resume) {
    const json j{{"model", model},
                 {"data", {{"train", (d / "train.tok").string()}, {"valid", (d / "valid.tok").string()}}},
                 {"batch_size", 2},
                 {"seq_len", 14},  // 5 blocks of 3, the last partial
                 {"steps", steps},
                 {"schedule", {{"type", "constant"}, {"lr", 3e-3}}},
                 {"eval_every", 3},
                 {"log_every", 1},
                 {"checkpoint_every", 3},
                 {"out", (d / out).string()}};
    const auto rc = lm_run_config::from_json(j, "run");
    // resumed: the model from the checkpoint's config.json, as a program reading it would build it
    const json mj = resume ? read_json_file((io::resolve_checkpoint(d / out) / io::config_file).string()) : rc.model;
    sparse_lm<float, block_sparse<4>> m(sparse_lm_config::from_json(mj));
    REQUIRE(m.stack()[0].attn().block_pattern());
    m.init(rc.seed);
    trainer<sparse_lm<float, block_sparse<4>>> t(m, rc.trainer, optim::adamw<>(rc.optimizer),
                                                  optim::make_schedule(rc.schedule_json()));
    lm_job job(rc, j, "test_bsa");
    job.run(m, t, {.resume = resume, .print_summary = false});
  };
  run("whole", 6, false);
  run("split", 3, false);
  const fs::path half = io::resolve_checkpoint(d / "split");
  CHECK(read_json_file((half / io::config_file).string()).at("block_sparse_attention") ==
        model["block_sparse_attention"]);
  run("split", 6, true);
  const fs::path a = io::resolve_checkpoint(d / "whole"), b = io::resolve_checkpoint(d / "split");
  CHECK(a.filename() == "step-000006");
  CHECK(b.filename() == "step-000006");
  // the same weights after three more steps (the training state's metadata names its own run directory)
  CHECK(test::slurp(a / io::model_file) == test::slurp(b / io::model_file));
}

TEST_CASE("sparse_lm: S1 initialisation, parameters and sparse projections") {
  sparse_lm<float, block_sparse<4>> m(tiny());
  m.init(7);
  const auto& c = m.config();
  // every norm's gamma is 0.1, beta 0
  std::size_t norms = 0;
  for (const auto& t : *m.layout()) {
    const auto v = m.params().at(t.name);
    const bool is_norm = t.name.find("ln") != std::string::npos;
    if (is_norm && t.name.ends_with(".weight")) {
      ++norms;
      for (float x : v) CHECK(x == 0.1f);
    }
    if (is_norm && t.name.ends_with(".bias"))
      for (float x : v) CHECK(x == 0.0f);
  }
  CHECK(norms == 3 + 2 * c.layers + 2);
  for (float x : m.params().at("head.bias")) CHECK(x == doctest::Approx(std::log(1.0 / 61.0)));
  // no attention biases by default; projections are sparse with the planned block counts
  CHECK(!m.layout()->find("h.0.attn.c_attn.bias"));
  CHECK(!m.layout()->find("h.0.attn.c_proj.bias"));
  CHECK(m.layout()->find("h.0.mlp.c_fc.bias"));
  auto w = m.sparse_weights();
  REQUIRE(w.size() == 2 + 4 * c.layers);
  CHECK(w.front().name == "embedding.up.weight");
  CHECK(w.back().name == "head.down.weight");
  for (auto& sw : w) {
    const std::size_t grid = sw.pattern->rows_b * sw.pattern->cols_b;
    CHECK(sw.pattern->nnz() == std::size_t(std::ceil(0.5 * double(grid) - 1e-9)));
  }
  // values within the density-scaled Glorot bound
  const auto& up = m.embedding().up();
  const double a = std::sqrt(6.0 / (double(up.in() + up.out()) * up.density()));
  for (float x : m.params().at("embedding.up.weight")) CHECK(std::fabs(x) <= a);
  // the attention width is attention_heads · qkv_length, independent of hidden_length
  CHECK(m.stack()[0].attn().qkv().out() == 3 * 2 * 8);
  CHECK(m.stack()[0].attn().proj().in() == 16);

  // ERK: same total number of blocks, different split
  json j = tiny_json();
  j["allocation"] = "erk";
  sparse_lm<float, block_sparse<4>> e(sparse_lm_config::from_json(j));
  std::size_t tu = 0, te = 0;
  bool differs = false;
  for (std::size_t i = 0; i < m.projections().size(); ++i) {
    tu += m.projections()[i]->nnz_blocks();
    te += e.projections()[i]->nnz_blocks();
    differs |= m.projections()[i]->nnz_blocks() != e.projections()[i]->nnz_blocks();
  }
  CHECK(tu == te);
  CHECK(differs);
}

TEST_CASE("sparse_lm: whole-model gradients by finite differences (dense and block-sparse, GELU variants)") {
  SUBCASE("dense") {
    sparse_lm<float, dense> m(tiny(0));
    m.init(5);
    check_model_gradients(m);
  }
  SUBCASE("block_sparse<4> with attention biases and the embedding GELU") {
    json j = tiny_json();
    j["attention_bias"] = true;
    j["embedding_gelu"] = true;
    j["activation"] = "gelu";
    sparse_lm<float, block_sparse<4>, kernels::gelu_kind::erf> m(sparse_lm_config::from_json(j));
    m.init(6);
    check_model_gradients(m);
  }
}

TEST_CASE("sparse_lm: recompute::blocks gives bit-identical gradients; bad batches are errors") {
  sparse_lm<float, block_sparse<4>> m(tiny());
  m.init(9);
  toy_batch d(61);
  m.grads().zero();
  auto a = m.forward_backward<recompute::none>({}, d.batch(), 0.1f);
  std::vector<float> g1(m.grads().all().begin(), m.grads().all().end());
  m.grads().zero();
  auto b = m.forward_backward<recompute::blocks>({}, d.batch(), 0.1f);
  CHECK(a.loss_sum == b.loss_sum);
  CHECK(std::equal(g1.begin(), g1.end(), m.grads().all().begin()));

  std::vector<std::int32_t> ids(2 * 17, 1);
  CHECK_THROWS_WITH_AS(m.evaluate({ids, ids, {}, 2, 17}), doctest::Contains("sequence length 17 exceeds sequence_length 16"), error);
  auto bad = d.ids;
  bad[4] = 61;
  CHECK_THROWS_AS(m.evaluate({bad, d.targets, {}, d.B, d.T}), error);
  CHECK_THROWS_WITH_AS(m.evaluate({d.ids, std::span<const std::int32_t>(d.targets).subspan(1), {}, d.B, d.T}),
                       doctest::Contains("17 targets for 18 token ids"), error);
}

TEST_CASE("sparse_lm: Adam (eps 1e-2), per-tensor clipping, S1 schedule and dynamic sparsity learn a fixed batch") {
  using model_t = sparse_lm<float, block_sparse<4>>;
  model_t m(tiny());
  m.init(3);
  toy_batch d(61);
  struct policies : default_policies {
    using optimizer = optim::adam<float>;
  };
  trainer_options to;
  to.clip = clip_mode::per_tensor;
  to.max_norm = 1.0f;
  trainer<model_t, policies> t(
      m, to, optim::adam<float>(json{{"type", "adam"}}),
      optim::make_schedule({{"type", "bert_power"}, {"peak_lr", 3e-2}, {"warmup_steps", 5}, {"cooldown_steps", 60}, {"min_lr", 1e-3}}));
  dynamic_sparsity<model_t, trainer<model_t, policies>> ds(
      m, t, sparse::update_config::from_json({{"prune_ratio", 0.3}, {"update_period", 10}, {"total_steps", 60}, {"regrow", "rigl"}}), 4);
  std::vector<token_batch> micro{d.batch()};
  const double first = t.train_step(micro).loss.mean_loss();
  double last = first;
  std::size_t logged = 0;
  for (int i = 1; i < 60; ++i) {
    last = t.train_step(micro).loss.mean_loss();
    auto j = ds.take_metrics();
    if (j.contains("sparsity_update")) {
      ++logged;
      CHECK(j["sparsity_update"]["pruned"].get<std::size_t>() == j["sparsity_update"]["regrown"].get<std::size_t>());
    }
  }
  CHECK(ds.updates() == 5);  // steps 10..50, never at the last step
  CHECK(logged == 5);
  for (auto& w : m.sparse_weights()) CHECK(w.pattern->nnz() * 16 == w.values.size());
  CHECK(last < 0.5 * first);
}

}  // namespace SPARSELM_UNITY_ID
