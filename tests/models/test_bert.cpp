// BERT pre-training model: config validation, whole-model gradients (MLM + NSP, padding, token
// types) by finite differences, dense and block-sparse, the head's bad-batch errors, and that a
// few trainer steps fit a small batch.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "../common/tiny_bert.hpp"
#include "sparselm/models/bert.hpp"
#include "sparselm/optim/lamb.hpp"
#include "sparselm/testing/layer_check.hpp"
#include "sparselm/train/trainer.hpp"

// Each test file is its own namespace: the area's files are compiled as one unity translation unit
// (tests/CMakeLists.txt), and their helpers must not meet.
namespace SPARSELM_UNITY_ID {

using namespace sparselm;

namespace {
struct lamb_policies : default_policies {
  using optimizer = optim::lamb<>;
};
bert_config tiny() { return test::tiny_bert_config(); }

// Two sequences of 8: the second padded after 6 tokens; segments A/B; 3 prediction slots each
// (one unused); NSP labels 0 and 1.
struct toy_data {
  std::size_t B = 2, T = 8;
  std::vector<std::int32_t> ids, types, lengths{8, 6}, positions{1, 4, 6, 2, 3, 0}, labels{7, 11, 3, 9, 21, -1},
      nsp{0, 1};
  explicit toy_data(std::size_t vocab, std::uint64_t seed = 3) {
    counter_rng rng(seed);
    for (std::size_t i = 0; i < B * T; ++i) ids.push_back(std::int32_t(rng.below(1, i, vocab)));
    for (std::size_t b = 0; b < B; ++b)
      for (std::size_t t = 0; t < T; ++t) types.push_back(t >= 4 ? 1 : 0);
  }
  bert_batch batch() const { return {ids, types, lengths, positions, labels, nsp, B, T}; }
};
}  // namespace

TEST_CASE("bert config: HF keys, bad values named") {
  auto c = tiny();
  CHECK(c.head_dim() == 16);
  CHECK(bert_config::from_json(c.to_json(), "round trip").to_json() == c.to_json());
  CHECK_THROWS_WITH_AS(bert_config::from_json(json{{"hidden_size", 30}, {"num_attention_heads", 4}}, "cfg"),
                       "cfg: field 'hidden_size' (30) is not divisible by 'num_attention_heads' (4)", error);
  CHECK_THROWS_WITH_AS(bert_config::from_json(json{{"hidden_act", "relu"}}, "cfg"),
                       "cfg: field 'hidden_act' must be one of gelu, got 'relu'", error);
  CHECK_THROWS_WITH_AS(bert_config::from_json(json{{"num_layers", 2}}, "cfg"), doctest::Contains("unknown field 'num_layers'"),
                       error);
  for (const char* name : {"bert-tiny", "bert-mini", "bert-small", "bert-base", "bert-large"}) {
    const std::string path = std::string(SPARSELM_SOURCE_DIR "/configs/") + name + ".json";
    CHECK_NOTHROW(bert_config::from_json(read_json_file(path), path));
  }
}

TEST_CASE_TEMPLATE("bert: MLM + NSP loss gradients match finite differences", S, dense, block_sparse<16>) {
  bert<float, S> m(tiny(), {.sparsity = 0.5});
  m.init(11);
  toy_data d(50);
  const auto b = d.batch();
  const auto st = m.evaluate(b);
  CHECK(st.count == 5);      // masked predictions used
  CHECK(st.aux_count == 2);  // NSP labels
  CHECK(st.mean_loss() == doctest::Approx(st.ce_sum / 5 + st.aux_loss_sum / 2).epsilon(1e-6));
  auto r = testing::check_model(m, b, {.max_checks = 300});
  CHECK_MESSAGE(r.ok, r.message);
  CHECK(r.checked >= 300);
}

TEST_CASE("bert: padded positions do not change the valid rows; token types matter") {
  bert<> m(tiny());
  m.init(5);
  toy_data d(50);
  auto b = d.batch();
  const double l0 = m.evaluate(b).mean_loss();
  auto ids = d.ids;
  ids[8 + 7] = 1;  // sequence 1 is 6 long: position 7 is padding
  b.ids = ids;
  CHECK(m.evaluate(b).mean_loss() == l0);
  auto types = d.types;
  types[2] = 1;
  b.ids = d.ids;
  b.token_types = types;
  CHECK(m.evaluate(b).mean_loss() != l0);
}

TEST_CASE("bert: bad batches are errors naming the culprit") {
  bert<> m(tiny());
  m.init(5);
  toy_data d(50);
  auto b = d.batch();
  auto pos = d.positions;
  pos[0] = 8;
  b.masked_positions = pos;
  CHECK_THROWS_WITH_AS(m.evaluate(b), "bert batch: masked position 8 of sequence 0 is outside [0, 8)", error);
  b = d.batch();
  auto labels = d.labels;
  labels[1] = 50;
  b.masked_labels = labels;
  CHECK_THROWS_WITH_AS(m.evaluate(b), "bert batch: masked label 50 of sequence 0 is outside the vocabulary of 50", error);
  b = d.batch();
  std::vector<std::int32_t> nsp{0, 2};
  b.nsp_labels = nsp;
  CHECK_THROWS_WITH_AS(m.evaluate(b), "bert batch: next-sentence label 2 of sequence 1 is not 0 or 1", error);
  b = d.batch();
  auto types = d.types;
  types[3] = 2;
  b.token_types = types;
  CHECK_THROWS_WITH_AS(m.evaluate(b), "bert embedding: token type 2 at position 3 is outside [0, 2)", error);
  b = d.batch();
  b.masked_labels = std::span<const std::int32_t>(d.labels).first(5);
  CHECK_THROWS_WITH_AS(m.evaluate(b), "bert batch: 6 masked positions but 5 masked labels", error);
}

TEST_CASE("bert: a few LAMB steps fit a small batch") {
  bert<> m(tiny());
  m.init(3);
  toy_data d(50);
  const auto b = d.batch();
  trainer<bert<>, lamb_policies> t(m, {}, optim::lamb<>(json{{"weight_decay", 0.01}}),
                                      optim::make_schedule({{"type", "constant"}, {"lr", 1e-2}}));
  const double first = m.evaluate(b).mean_loss();
  double last = first;
  for (int k = 0; k < 30; ++k) last = t.train_step(std::span<const bert_batch>(&b, 1)).loss.mean_loss();
  CHECK(last < 0.5 * first);
  CHECK(m.evaluate(b).accuracy() == 1.0);
  CHECK(m.evaluate(b).aux_accuracy() == 1.0);
}

}  // namespace SPARSELM_UNITY_ID
