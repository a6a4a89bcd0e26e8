// BERT's fine-tuning models (models/bert_finetune.hpp): sequence classification and span (SQuAD)
// heads on bert<>'s encoder. Whole-model gradients by finite differences (dense and block-sparse),
// padding invariance, the shared tensor names with bert<>, bad batches named, that a few AdamW
// steps fit a small batch, and fine-tuning with pattern updates (finetune_job + dynamic_sparsity).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "../common/errors.hpp"
#include "../common/tiny_bert.hpp"
#include "sparselm/io/atomic_file.hpp"
#include "sparselm/io/huggingface.hpp"
#include "sparselm/io/pretrained.hpp"
#include "sparselm/models/bert.hpp"
#include "sparselm/models/bert_finetune.hpp"
#include "sparselm/testing/layer_check.hpp"
#include "sparselm/train/dynamic_sparsity.hpp"
#include "sparselm/train/finetune_job.hpp"
#include "sparselm/train/trainer.hpp"

// Each test file is its own namespace: the area's files are compiled as one unity translation unit
// (tests/CMakeLists.txt), and their helpers must not meet.
namespace SPARSELM_UNITY_ID {

using namespace sparselm;

namespace {
bert_config tiny() { return test::tiny_bert_config(); }

// Three sequences of 8: the second padded after 6 tokens, the third after 5; segments A/B.
struct toy_data {
  std::size_t B = 3, T = 8;
  std::vector<std::int32_t> ids, types, lengths{8, 6, 5}, labels{2, 0, -1}, starts{3, 2, 1}, ends{5, 2, 4};
  toy_data() {
    counter_rng rng(3);
    for (std::size_t i = 0; i < B * T; ++i) ids.push_back(std::int32_t(rng.below(1, i, 50)));
    for (std::size_t b = 0; b < B; ++b)
      for (std::size_t t = 0; t < T; ++t) types.push_back(t >= 4 ? 1 : 0);
  }
  bert_classify_batch classify() const { return {ids, types, lengths, labels, B, T}; }
  bert_span_batch span() const { return {ids, types, lengths, starts, ends, B, T}; }
};

std::set<std::string> names(const arena_layout& l) {
  std::set<std::string> r;
  for (std::size_t i = 0; i < l.count(); ++i) r.insert(l[i].name);
  return r;
}
}  // namespace

TEST_CASE_TEMPLATE("bert classifier: loss gradients match finite differences", S, dense, block_sparse<16>) {
  bert_classifier<float, S> m(tiny(), 3, {.sparsity = 0.5});
  m.init(11);
  toy_data d;
  const auto st = m.evaluate(d.classify());
  CHECK(st.count == 2);  // the third sequence has no label
  CHECK(st.mean_loss() == doctest::Approx(st.ce_sum / 2).epsilon(1e-6));
  auto r = testing::check_model(m, d.classify(), {.max_checks = 300});
  CHECK_MESSAGE(r.ok, r.message);
  CHECK(r.checked >= 300);
}

TEST_CASE_TEMPLATE("bert qa: span loss gradients match finite differences", S, dense, block_sparse<16>) {
  bert_qa<float, S> m(tiny(), {.sparsity = 0.5});
  m.init(12);
  toy_data d;
  const auto st = m.evaluate(d.span());
  CHECK(st.count == 3);
  CHECK(st.aux_count == 3);
  CHECK(st.mean_loss() == doctest::Approx((st.ce_sum + st.aux_loss_sum) / 6).epsilon(1e-6));
  auto r = testing::check_model(m, d.span(), {.max_checks = 300});
  CHECK_MESSAGE(r.ok, r.message);
  CHECK(r.checked >= 300);
}

TEST_CASE("bert fine-tuning models: bert<>'s encoder names, their own heads") {
  const auto cfg = tiny();
  bert<> pre(cfg);
  bert_classifier<> cls(cfg, 2);
  bert_qa<> qa(cfg);
  const auto p = names(*pre.layout()), c = names(*cls.layout()), q = names(*qa.layout());
  std::size_t shared = 0;
  for (const auto& n : p)
    if (n.rfind("embeddings.", 0) == 0 || n.rfind("encoder.", 0) == 0) {
      CHECK(c.contains(n));
      CHECK(q.contains(n));
      ++shared;
    }
  CHECK(shared > 10);
  for (const char* n : {"pooler.dense.weight", "pooler.dense.bias", "classifier.weight", "classifier.bias"})
    CHECK(c.contains(n));
  CHECK(q.contains("qa_outputs.weight"));
  CHECK(q.contains("qa_outputs.bias"));
  CHECK_FALSE(q.contains("pooler.dense.weight"));
  CHECK(cls.layout()->at("classifier.weight") > 0);
  CHECK((*cls.layout())[cls.layout()->at("classifier.weight")].shape == std::vector<std::size_t>{32, 2});
}

TEST_CASE("bert fine-tuning models start from our pre-training checkpoint (load_pretrained by head)") {
  namespace fs = std::filesystem;
  const auto cfg = tiny();
  bert<> pre(cfg);
  pre.init(5);
  const fs::path dir = fs::path(SPARSELM_TEST_TMPDIR) / "finetune_from_pretraining";
  fs::remove_all(dir);
  io::save_model(dir, pre);

  bert_classifier<> cls(cfg, 3);
  cls.init(9);
  const std::vector<float> head_before(cls.params().at("classifier.weight").begin(),
                                       cls.params().at("classifier.weight").end());
  const auto r = io::load_pretrained(dir, cls, io::hf_bert_map());
  CHECK(r.format == "sparselm");
  CHECK(r.loaded("pooler"));
  CHECK(r.absent_group("classifier"));
  CHECK(r.unused.size() == 7);  // the MLM transform, its norm and bias, and NSP
  for (const auto& t : *cls.layout()) {
    if (t.name.rfind("classifier.", 0) == 0) continue;
    const auto a = cls.params().at(t.name), b = pre.params().at(t.name);
    CHECK_MESSAGE(std::equal(a.begin(), a.end(), b.begin(), b.end()), t.name << " not loaded");
  }
  const auto head_after = cls.params().at("classifier.weight");
  CHECK(std::equal(head_after.begin(), head_after.end(), head_before.begin(), head_before.end()));

  bert_qa<> qa(cfg);
  const auto rq = io::load_pretrained(dir, qa, io::hf_bert_map());
  CHECK(rq.absent_group("qa"));
  CHECK(rq.unused.size() == 9);  // the MLM and NSP heads and the pooler

  // The classifier's own checkpoint loads whole (its head too), and back into a classifier only.
  const fs::path cdir = fs::path(SPARSELM_TEST_TMPDIR) / "finetune_classifier";
  fs::remove_all(cdir);
  io::save_model(cdir, cls);
  bert_classifier<> again(cfg, 3);
  CHECK(io::load_pretrained(cdir, again, io::hf_bert_map()).absent_groups.empty());
  bert_classifier<> five(cfg, 5);  // another label count: the head's shape differs
  CHECK(test::error_of([&] { io::load_pretrained(cdir, five, io::hf_bert_map()); }).find("classifier.weight") !=
        std::string::npos);

  // A pre-training checkpoint with an incomplete head, or an unknown tensor, is an error naming it.
  io::safetensors_writer w;
  for (const auto& t : *pre.layout())
    if (t.name != "cls.seq_relationship.bias" && t.name != "pooler.dense.bias")
      w.add(t.name, t.shape, pre.params().at(t.name));
  w.set_metadata("sparselm.layout", "x");
  const fs::path bad = fs::path(SPARSELM_TEST_TMPDIR) / "finetune_bad";
  fs::create_directories(bad);
  w.write(bad / io::model_file);
  const std::string e = test::error_of([&] { io::load_pretrained(bad, cls, io::hf_bert_map()); });
  CHECK_MESSAGE(e.find("head 'pooler' is incomplete: missing 'pooler.dense.bias'") != std::string::npos, e);
  io::safetensors_writer w2;
  for (const auto& t : *pre.layout()) w2.add(t.name, t.shape, pre.params().at(t.name));
  const std::vector<float> junk(4, 0.0f);
  w2.add("mystery.weight", {4}, junk);
  w2.set_metadata("sparselm.layout", "x");
  w2.write(bad / io::model_file);
  const std::string e2 = test::error_of([&] { io::load_pretrained(bad, cls, io::hf_bert_map()); });
  CHECK_MESSAGE(e2.find("neither the model's nor a known head's: 'mystery.weight'") != std::string::npos, e2);
}

TEST_CASE("a block-sparse pre-training checkpoint starts block-sparse fine-tuning models, which keep its patterns") {
  namespace fs = std::filesystem;
  const auto cfg = tiny();
  using S = block_sparse<16>;
  bert<float, S> pre(cfg, sparse_plan{.sparsity = 0.5});
  pre.init(5);
  const fs::path dir = fs::path(SPARSELM_TEST_TMPDIR) / "finetune_from_sparse";
  fs::remove_all(dir);
  io::save_model(dir, pre);

  const auto sp = io::read_checkpoint_sparsity(dir);
  CHECK(sp.block == 16);
  CHECK(sp.sparsity == doctest::Approx(0.5));
  const auto pre_weights = pre.sparse_weights();
  REQUIRE(sp.blocks.size() == pre_weights.size());
  std::map<std::string, const sparse::block_pattern*> pre_pattern;
  for (const auto& w : pre_weights) {
    CHECK(sp.blocks.at(w.name) == w.pattern->nnz());
    pre_pattern[w.name] = w.pattern;
    // where the blocks are: (row, col) pairs in slot order
    const auto& pairs = sp.patterns.at(w.name);
    REQUIRE(pairs.size() == 2 * w.pattern->nnz());
    bool same = true;
    for (std::size_t k = 0; k < w.pattern->nnz(); ++k)
      same = same && std::size_t(pairs[2 * k]) == std::size_t(w.pattern->row[k]) &&
             std::size_t(pairs[2 * k + 1]) == std::size_t(w.pattern->col[k]);
    CHECK_MESSAGE(same, w.name << ": the pairs read differ from the saved pattern");
  }
  CHECK(sp.patterns.size() == sp.blocks.size());
  auto same_patterns = [&](auto& m) {
    const auto ws = m.sparse_weights();
    REQUIRE(ws.size() == pre_weights.size());
    for (const auto& w : ws) {
      const auto* q = pre_pattern.at(w.name);
      CHECK_MESSAGE((w.pattern->row == q->row && w.pattern->col == q->col), w.name << ": pattern differs");
    }
  };
  // A dense checkpoint of ours says it has no patterns; an HF-style directory has none either.
  bert<> dense_pre(cfg);
  dense_pre.init(5);
  const fs::path ddir = fs::path(SPARSELM_TEST_TMPDIR) / "finetune_from_dense";
  fs::remove_all(ddir);
  io::save_model(ddir, dense_pre);
  CHECK(io::read_checkpoint_sparsity(ddir).block == 0);
  CHECK(io::read_checkpoint_sparsity(ddir).patterns.empty());

  bert_classifier<float, S> cls(cfg, 3, sp.plan());
  cls.init(9);  // other patterns than pre's
  bool differ = false;
  for (const auto& w : cls.sparse_weights())
    differ = differ || w.pattern->row != pre_pattern.at(w.name)->row || w.pattern->col != pre_pattern.at(w.name)->col;
  CHECK(differ);
  const auto r = io::load_pretrained(dir, cls, io::hf_bert_map());
  CHECK(r.format == "sparselm");
  CHECK(r.loaded("pooler"));
  CHECK(r.absent_group("classifier"));
  same_patterns(cls);
  for (const auto& t : *cls.layout()) {
    if (t.name.rfind("classifier.", 0) == 0) continue;
    const auto a = cls.params().at(t.name), b = pre.params().at(t.name);
    CHECK_MESSAGE(std::equal(a.begin(), a.end(), b.begin(), b.end()), t.name << " not loaded");
  }
  // Fine-tuning trains the active blocks and keeps the patterns.
  toy_data d;
  const auto b = d.classify();
  trainer<bert_classifier<float, S>> t(cls, {}, optim::adamw<>(json{{"weight_decay", 0.01}}),
                                       optim::make_schedule({{"type", "constant"}, {"lr", 5e-3}}));
  const double first = cls.evaluate(b).mean_loss();
  const std::vector<float> w0(cls.params().at(pre_weights[0].name).begin(), cls.params().at(pre_weights[0].name).end());
  for (int k = 0; k < 30; ++k) t.train_step(std::span<const bert_classify_batch>(&b, 1));
  CHECK(cls.evaluate(b).mean_loss() < 0.5 * first);
  const auto w1 = cls.params().at(pre_weights[0].name);
  CHECK_FALSE(std::equal(w1.begin(), w1.end(), w0.begin(), w0.end()));
  same_patterns(cls);

  bert_qa<float, S> qa(cfg, sp.plan());
  std::string e = test::error_of([&] { io::load_pretrained(dir, qa, io::hf_bert_map()); });
  CHECK_MESSAGE(e.find("initialise the model (init) before loading into it") != std::string::npos, e);
  qa.init(1);
  const auto rq = io::load_pretrained(dir, qa, io::hf_bert_map());
  CHECK(rq.absent_group("qa"));
  same_patterns(qa);

  // Mismatches are errors naming the culprit, before anything is read.
  bert_classifier<> dense_cls(cfg, 3);
  e = test::error_of([&] { io::load_pretrained(dir, dense_cls, io::hf_bert_map()); });
  CHECK_MESSAGE(
      e.find("loads into a block-sparse model of its block size, not into this dense one") != std::string::npos, e);
  bert_classifier<float, S> from_dense(cfg, 3, sparse_plan{.sparsity = 0.5});
  from_dense.init(1);
  e = test::error_of([&] { io::load_pretrained(ddir, from_dense, io::hf_bert_map()); });
  CHECK_MESSAGE(e.find("has no pattern in the file") != std::string::npos, e);
  bert_classifier<float, S> other_count(cfg, 3, sparse_plan{.sparsity = 0.25});
  other_count.init(1);
  e = test::error_of([&] { io::load_pretrained(dir, other_count, io::hf_bert_map()); });
  CHECK_MESSAGE(e.find("active blocks in the file, the model") != std::string::npos, e);
  sparse_plan plan8 = sp.plan();  // the file's block counts, for blocks of 8
  plan8.block = 8;
  bert_classifier<float, block_sparse<8>> other_block(cfg, 3, plan8);
  other_block.init(1);
  e = test::error_of([&] { io::load_pretrained(dir, other_block, io::hf_bert_map()); });
  CHECK_MESSAGE(e.find("the model's are 8x8") != std::string::npos, e);
}

TEST_CASE("read_checkpoint_sparsity: malformed patterns and configs are named") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(SPARSELM_TEST_TMPDIR) / "sparsity_bad";
  const std::vector<float> v16(2 * 16 * 16, 0.5f), v8(2 * 8 * 8, 0.5f), v_flat(2 * 16 * 8, 0.5f);
  // Writes model.safetensors (ours: with the layout record) from `fill`, and config.json if given.
  auto write = [&](auto fill, const std::string& config = "") {
    fs::remove_all(dir);
    fs::create_directories(dir);
    io::safetensors_writer w;
    fill(w);
    w.set_metadata("sparselm.layout", "x");
    w.write(dir / io::model_file);
    if (!config.empty()) io::atomic_write_text(dir / io::config_file, config);
  };
  auto error = [&] { return test::error_of([&] { io::read_checkpoint_sparsity(dir); }); };
  write([&](io::safetensors_writer& w) {
    w.add("a.weight", {2, 16, 16}, v16);
    w.add_owned("a.weight.pattern", {2, 3}, std::vector<std::int32_t>(6, 0));
  });
  CHECK_MESSAGE(error().find("pattern 'a.weight.pattern' has shape [2, 3], expected (nnz, 2)") != std::string::npos,
                error());
  write([&](io::safetensors_writer& w) { w.add_owned("a.weight.pattern", {2, 2}, std::vector<std::int32_t>(4, 0)); });
  CHECK_MESSAGE(error().find("pattern 'a.weight.pattern' without its values 'a.weight'") != std::string::npos, error());
  write([&](io::safetensors_writer& w) {
    w.add("a.weight", {2, 16, 8}, v_flat);
    w.add_owned("a.weight.pattern", {2, 2}, std::vector<std::int32_t>(4, 0));
  });
  CHECK_MESSAGE(error().find("block-sparse values 'a.weight' have shape [2, 16, 8], expected (2, B, B)") !=
                    std::string::npos,
                error());
  write([&](io::safetensors_writer& w) {
    w.add("a.weight", {2, 16, 16}, v16);
    w.add_owned("a.weight.pattern", {2, 2}, std::vector<std::int32_t>(4, 0));
    w.add("b.weight", {2, 8, 8}, v8);
    w.add_owned("b.weight.pattern", {2, 2}, std::vector<std::int32_t>(4, 0));
  });
  CHECK_MESSAGE(error().find("two block sizes: 'a.weight' has 16, 'b.weight' 8") != std::string::npos, error());
  auto one = [&](io::safetensors_writer& w) {
    w.add("a.weight", {2, 16, 16}, v16);
    w.add_owned("a.weight.pattern", {2, 2}, std::vector<std::int32_t>(4, 0));
  };
  write(one, R"({"sparselm": {"block_size": 16, "sparsity": 1.5}})");
  CHECK_MESSAGE(error().find("sparselm.sparsity 1.5 is not in [0, 1)") != std::string::npos, error());
  write(one, R"({"sparselm": {"block_size": 16, "sparsity": 0.75}})");
  const auto sp = io::read_checkpoint_sparsity(dir);
  CHECK(sp.block == 16);
  CHECK(sp.sparsity == 0.75);
  CHECK(sp.active_blocks() == 2);
  const auto plan = sp.plan();
  CHECK(plan.blocks("a.weight", 64, 64, 16) == 2);
  CHECK(test::error_of([&] { plan.blocks("c.weight", 64, 64, 16); }).find("no block-sparse pattern for the model's "
                                                                          "weight 'c.weight'") != std::string::npos);
}

TEST_CASE("bert fine-tuning models: padded positions change nothing; predictions are the logits") {
  bert_classifier<> cls(tiny(), 3);
  bert_qa<> qa(tiny());
  cls.init(5);
  qa.init(6);
  toy_data d;
  const double lc = cls.evaluate(d.classify()).mean_loss(), lq = qa.evaluate(d.span()).mean_loss();
  auto ids = d.ids;
  ids[8 + 7] = 1;   // sequence 1 is 6 long
  ids[16 + 6] = 2;  // sequence 2 is 5 long
  auto bc = d.classify();
  auto bs = d.span();
  bc.ids = ids;
  bs.ids = ids;
  CHECK(cls.evaluate(bc).mean_loss() == lc);
  CHECK(qa.evaluate(bs).mean_loss() == lq);

  std::vector<float> logits(3 * 3);
  cls.predict(d.classify(), matrix_view<float>{logits.data(), 3, 3, 3});
  // the loss from the predicted logits: mean CE of sequences 0 and 1
  double ce = 0;
  for (int i : {0, 1}) {
    const float* l = logits.data() + 3 * i;
    const double mx = std::max({l[0], l[1], l[2]});
    const double lse = mx + std::log(std::exp(l[0] - mx) + std::exp(l[1] - mx) + std::exp(l[2] - mx));
    ce += lse - l[d.labels[i]];
  }
  CHECK(ce / 2 == doctest::Approx(lc).epsilon(1e-5));

  std::vector<float> span(3 * 8 * 2);
  qa.predict(d.span(), matrix_view<float>{span.data(), 24, 2, 2});
  double loss = 0;
  for (std::size_t i = 0; i < 3; ++i)
    for (int k : {0, 1}) {  // start, end over the valid positions only
      const std::size_t n = std::size_t(d.lengths[i]);
      double mx = -std::numeric_limits<double>::infinity(), sum = 0;
      for (std::size_t t = 0; t < n; ++t) mx = std::max(mx, double(span[2 * (i * 8 + t) + k]));
      for (std::size_t t = 0; t < n; ++t) sum += std::exp(double(span[2 * (i * 8 + t) + k]) - mx);
      const int target = k == 0 ? d.starts[i] : d.ends[i];
      loss += mx + std::log(sum) - double(span[2 * (i * 8 + std::size_t(target)) + k]);
    }
  CHECK(loss / 6 == doctest::Approx(lq).epsilon(1e-5));
}

TEST_CASE("bert fine-tuning models: bad batches are errors naming the culprit") {
  bert_classifier<> cls(tiny(), 3);
  bert_qa<> qa(tiny());
  cls.init(5);
  qa.init(6);
  toy_data d;
  auto bc = d.classify();
  std::vector<std::int32_t> labels{0, 3, 1};
  bc.labels = labels;
  CHECK_THROWS_WITH_AS(cls.evaluate(bc), "bert classify batch: label 3 of sequence 1 is outside [0, 3)", error);
  bc.labels = std::span<const std::int32_t>(d.labels).first(2);
  CHECK_THROWS_WITH_AS(cls.evaluate(bc), "bert classify batch: 2 labels for 3 sequences", error);
  auto bs = d.span();
  std::vector<std::int32_t> starts{3, 6, 1}, ends{5, 6, 4};
  bs.start_positions = starts;
  bs.end_positions = ends;
  CHECK_THROWS_WITH_AS(qa.evaluate(bs),
                       "bert span batch: answer span [6, 6] of sequence 1 is outside its 6 valid positions", error);
  std::vector<std::int32_t> s2{3, 2, 4}, e2{5, 2, 1};
  bs.start_positions = s2;
  bs.end_positions = e2;
  CHECK_THROWS_WITH_AS(qa.evaluate(bs), "bert span batch: answer of sequence 2 ends (1) before it starts (4)", error);
  CHECK_THROWS_WITH_AS(bert_classifier<>(tiny(), 1), "bert classifier: 1 labels; at least 2", error);
}

TEST_CASE("bert fine-tuning models: a few AdamW steps fit a small batch") {
  toy_data d;
  {
    bert_classifier<> m(tiny(), 3);
    m.init(3);
    const auto b = d.classify();
    trainer<bert_classifier<>> t(m, {}, optim::adamw<>(json{{"weight_decay", 0.01}}),
                                 optim::make_schedule({{"type", "constant"}, {"lr", 5e-3}}));
    const double first = m.evaluate(b).mean_loss();
    for (int k = 0; k < 60; ++k) t.train_step(std::span<const bert_classify_batch>(&b, 1));
    CHECK(m.evaluate(b).mean_loss() < 0.2 * first);
    CHECK(m.evaluate(b).accuracy() == 1.0);
  }
  {
    bert_qa<> m(tiny());
    m.init(3);
    const auto b = d.span();
    trainer<bert_qa<>> t(m, {}, optim::adamw<>(json{{"weight_decay", 0.01}}),
                         optim::make_schedule({{"type", "constant"}, {"lr", 5e-3}}));
    const double first = m.evaluate(b).mean_loss();
    for (int k = 0; k < 60; ++k) t.train_step(std::span<const bert_span_batch>(&b, 1));
    const auto st = m.evaluate(b);
    CHECK(st.mean_loss() < 0.2 * first);
    CHECK(st.accuracy() == 1.0);      // every start found
    CHECK(st.aux_accuracy() == 1.0);  // every end found
  }
}

namespace {
// finetune_job's task over toy_data's classification batch (the same three sequences every step).
struct toy_task {
  using batch_type = bert_classify_batch;
  toy_data d;
  std::size_t size() const { return d.B; }
  bert_classify_batch batch(std::span<const std::size_t>) const { return d.classify(); }
  json loss_json(const loss_stats& s) const { return {{"loss", s.mean_loss()}}; }
  std::string brief(const loss_stats&) const { return {}; }
};
}  // namespace

TEST_CASE("finetune_job with pattern updates: on schedule, from the loaded patterns, block counts kept") {
  namespace fs = std::filesystem;
  const auto cfg = tiny();
  using S = block_sparse<16>;
  bert<float, S> pre(cfg, sparse_plan{.sparsity = 0.5});
  pre.init(5);
  const fs::path dir = fs::path(SPARSELM_TEST_TMPDIR) / "finetune_dynamic_from", out = dir.string() + "_run";
  fs::remove_all(dir);
  fs::remove_all(out);
  io::save_model(dir, pre);

  bert_classifier<float, S> cls(cfg, 3, io::read_checkpoint_sparsity(dir).plan());
  cls.init(9);  // patterns other than pre's, replaced by the job's load
  using trainer_t = trainer<bert_classifier<float, S>>;
  trainer_t t(cls, {}, optim::adamw<>(json{{"weight_decay", 0.01}}),
              optim::make_schedule({{"type", "constant"}, {"lr", 5e-3}}));
  dynamic_sparsity<bert_classifier<float, S>, trainer_t> ds(
      cls, t,
      sparse::update_config::from_json(
          {{"update_period", 2}, {"total_steps", 5}, {"prune_ratio", 0.5}, {"regrow", "rigl"}}),
      7);
  toy_task task;
  const json summary =
      finetune_job({.out = out, .init_from = dir, .program = "test", .steps = 5, .batch_size = 3, .log_every = 10})
          .run(cls, t, task, &ds);
  CHECK(summary["steps"] == 5);
  CHECK(ds.updates() == 2);  // after steps 2 and 4, not after the last (5)

  bool moved = false;
  for (const auto& w : cls.sparse_weights()) {
    const sparse::block_pattern* p0 = nullptr;
    for (const auto& v : pre.sparse_weights())
      if (v.name == w.name) p0 = v.pattern;
    REQUIRE(p0 != nullptr);
    CHECK(w.pattern->nnz() == p0->nnz());
    moved = moved || w.pattern->row != p0->row || w.pattern->col != p0->col;
    // every block of the loaded pattern counts as explored (the maps start from it, not from init's)
    const auto* ex = ds.updater().explored(w.name);
    REQUIRE(ex != nullptr);
    for (std::size_t s = 0; s < p0->nnz(); ++s)
      CHECK_MESSAGE(ex->ever[std::size_t(p0->row[s]) * p0->cols_b + p0->col[s]] == 1,
                    w.name << ": loaded block " << s << " not marked explored");
  }
  CHECK(moved);
  // every update is logged: a training line after steps 2 and 4 although the logging period is 10
  std::size_t logged = 0;
  std::ifstream metrics(fs::path(out) / "metrics.jsonl");
  for (std::string line; std::getline(metrics, line);)
    if (const auto j = json::parse(line); j.contains("sparsity_update")) ++logged;
  CHECK(logged == 2);
}

}  // namespace SPARSELM_UNITY_ID
