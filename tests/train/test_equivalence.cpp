// Equivalences of the training stack (trainer, transformer core, policies) on tiny models (2 layers,
// width 32, 16 positions), each through trainer::train_step:
//  (a) gradient accumulation (optim/accumulation.hpp): without dropout, and with every micro-batch
//      holding as many targets as the others (GPT: b·T tokens; BERT: as many masked predictions and
//      NSP labels), a step over k micro-batches of b rows gives, within float rounding (per tensor,
//      1e-5 of its largest entry),
//        mode avg, post-scaled or scale_before:  the gradient and the update of one batch of k·b rows;
//        mode sum:  k times that gradient, hence (SGD, whose update is linear in the gradient) at
//                   learning rate η/k the update of one batch of k·b rows at η;
//      for GPT and BERT (MLM + NSP), dense and block-sparse (B = 4);
//  (b) recompute::blocks gives bit-identical losses, gradients and updated weights to
//      recompute::none (policies/recompute.hpp), with dropout on, for GPT (dense, B = 4), the S1
//      sparse LM, BERT (dense, B = 4) and the fine-tuning models (classification, span);
//  (c) BERT (pre-training, dense and B = 4, and the fine-tuning models) with two pipeline stages
//      on threads (trainer_options pipeline.stages = 2 under pipeline::configured, one thread per
//      stage; the one-stage reference on one thread) gives the losses, gradients and updated
//      weights of one stage, with dropout on: bit for bit, except that the word embedding the MLM
//      decoder is tied to adds its two contributions in another order (within 1e-5), and what
//      follows from that in the next step.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "../common/tiny_bert.hpp"
#include "../common/tiny_gpt.hpp"
#include "sparselm/core/json.hpp"
#include "sparselm/core/threads.hpp"
#include "sparselm/models/bert.hpp"
#include "sparselm/models/bert_finetune.hpp"
#include "sparselm/models/gpt.hpp"
#include "sparselm/models/sparse_lm.hpp"
#include "sparselm/optim/sgd.hpp"
#include "sparselm/train/trainer.hpp"

// Each test file is its own namespace: the area's files are compiled as one unity translation unit
// (tests/CMakeLists.txt), and their helpers must not meet.
namespace SPARSELM_UNITY_ID {

using namespace sparselm;

namespace {

constexpr std::size_t T = 16;  // positions
constexpr std::size_t P = 3;   // BERT's prediction slots per sequence, all labelled

// Rows of every batch type the models take, made from one seed: token ids and next-token targets
// (GPT, S1: vocabulary 61 fits both); BERT's segments, lengths (padding), masked positions and
// labels, NSP labels; class labels and answer spans for the fine-tuning models.
struct rows {
  std::vector<std::int32_t> ids, targets, types, lengths, positions, labels, nsp, classes, starts, ends;
  explicit rows(std::size_t n) {
    std::mt19937 g(17);
    for (std::size_t r = 0; r < n; ++r) {
      const std::size_t len = T - 4 * (r % 2);  // every other sequence padded
      lengths.push_back(std::int32_t(len));
      for (std::size_t t = 0; t < T; ++t) {
        ids.push_back(std::int32_t(g() % 50));
        targets.push_back(std::int32_t(g() % 50));
        types.push_back(t >= len / 2 ? 1 : 0);
      }
      for (std::size_t k = 0; k < P; ++k) {
        positions.push_back(std::int32_t(1 + 4 * k + r % 3));
        labels.push_back(std::int32_t(g() % 50));
      }
      nsp.push_back(std::int32_t(g() % 2));
      classes.push_back(std::int32_t(g() % 3));
      starts.push_back(std::int32_t(1 + g() % (len / 2)));
      ends.push_back(starts.back() + std::int32_t(g() % 3));
    }
  }
  template <class V>
  static std::span<const std::int32_t> part(const V& v, std::size_t lo, std::size_t hi, std::size_t per) {
    return std::span<const std::int32_t>(v).subspan(lo * per, (hi - lo) * per);
  }
  void batch(std::size_t lo, std::size_t hi, token_batch& b) const {
    b = {part(ids, lo, hi, T), part(targets, lo, hi, T), {}, hi - lo, T};
  }
  void batch(std::size_t lo, std::size_t hi, bert_batch& b) const {
    b = {part(ids, lo, hi, T), part(types, lo, hi, T), part(lengths, lo, hi, 1), part(positions, lo, hi, P),
         part(labels, lo, hi, P),  part(nsp, lo, hi, 1),   hi - lo,              T};
  }
  void batch(std::size_t lo, std::size_t hi, bert_classify_batch& b) const {
    b = {part(ids, lo, hi, T), part(types, lo, hi, T), part(lengths, lo, hi, 1), part(classes, lo, hi, 1), hi - lo, T};
  }
  void batch(std::size_t lo, std::size_t hi, bert_span_batch& b) const {
    b = {part(ids, lo, hi, T), part(types, lo, hi, T), part(lengths, lo, hi, 1), part(starts, lo, hi, 1),
         part(ends, lo, hi, 1), hi - lo, T};
  }
  // The micro-batches of `steps` steps of k micro-batches of b rows each, in row order.
  template <class Batch>
  std::vector<std::vector<Batch>> steps(std::size_t steps, std::size_t k, std::size_t b) const {
    std::vector<std::vector<Batch>> r(steps, std::vector<Batch>(k));
    for (std::size_t s = 0; s < steps; ++s)
      for (std::size_t m = 0; m < k; ++m) batch((s * k + m) * b, (s * k + m + 1) * b, r[s][m]);
    return r;
  }
};

gpt_config gpt_cfg(float dropout) {
  gpt_config c = test::small_gpt_config();
  c.embd_pdrop = c.attn_pdrop = c.resid_pdrop = dropout;
  return c;
}
bert_config bert_cfg(float dropout) {
  bert_config c = test::tiny_bert_config();
  c.hidden_dropout_prob = c.attention_probs_dropout_prob = dropout;
  return c;
}
const sparse_plan half{0.5};

// An arena as one vector, padding included (offsets as in its layout).
std::vector<float> flat(const arena<float>& a, float scale = 1.0f) {
  std::vector<float> v(a.all().begin(), a.all().end());
  for (float& x : v) x *= scale;
  return v;
}

// What a run of steps gave: per step the loss, the gradient norm and the gradient as the update
// sees it (the accumulated arena times the accumulation's final scale); the weights at the end.
struct run_result {
  std::vector<double> loss, norm;
  std::vector<std::vector<float>> grad;
  std::vector<float> weights;
};

struct sgd_policies : default_policies {
  using optimizer = optim::sgd<float>;
};
struct recompute_policies : sgd_policies {
  using recompute = sparselm::recompute::blocks;
};

// Trains `model` (initialised with seed 5) one step per entry of `data` with SGD (momentum 0.9,
// learning rate lr, no clipping) under Policies and the options o.
template <class Policies = sgd_policies, class Model, class Batch>
run_result train(Model model, trainer_options o, double lr, const std::vector<std::vector<Batch>>& data) {
  model.init(5);
  o.clip = clip_mode::none;
  trainer<Model, Policies> t(model, o, optim::sgd<float>(json{{"momentum", 0.9}}),
                             optim::schedule(optim::constant_schedule(float(lr))));
  run_result r;
  for (const auto& micro : data) {
    const auto m = t.train_step(std::span<const Batch>(micro));
    REQUIRE_FALSE(m.skipped);
    r.loss.push_back(m.loss.mean_loss());
    r.norm.push_back(m.grad_norm);
    r.grad.push_back(flat(model.grads(), t.options().accumulation.final_scale()));
    if constexpr (requires { model.last_pipeline(); })
      CHECK(model.last_pipeline().stages == std::max<std::size_t>(1, t.options().pipeline.stages));
  }
  r.weights = flat(model.params());
  return r;
}

// Per tensor of the layout (vectors as flat() gives them): max |got − factor·ref| ≤ rel(name) ·
// max |factor·ref| (rel 0: equal bit for bit).
void check_tensors(const arena_layout& L, const std::vector<float>& got, const std::vector<float>& ref,
                          const std::function<double(const std::string&)>& rel, double factor = 1.0) {
  REQUIRE(got.size() == ref.size());
  for (std::size_t i = 0; i < L.count(); ++i) {
    const auto& t = L[i];
    double worst = 0, scale = 0;
    bool same = true;
    for (std::size_t k = t.offset; k < t.offset + t.size; ++k) {
      const double want = factor * double(ref[k]);
      same = same && got[k] == ref[k];
      worst = std::max(worst, std::fabs(double(got[k]) - want));
      scale = std::max(scale, std::fabs(want));
    }
    CAPTURE(t.name);
    const double r = rel(t.name);
    if (r == 0)
      CHECK(same);
    else
      CHECK(worst <= r * scale);
  }
}
double within(const std::string&) { return 1e-5; }
double exact(const std::string&) { return 0.0; }

trainer_options accumulation(std::size_t k, optim::accumulation_mode mode, bool before) {
  trainer_options o;
  o.accumulation = optim::grad_accumulation(k, mode, before);
  return o;
}

// (a) for one model: a reference of 2 steps of one batch of k·b rows, then the same rows as k
// micro-batches of b rows under avg (post-scaled, scale_before) and sum.
template <class Batch, class Make>
void check_accumulation(Make make) {
  constexpr std::size_t k = 4, b = 2, steps = 2;
  constexpr double lr = 0.05;
  const rows d(steps * k * b);
  const auto whole = d.steps<Batch>(steps, 1, k * b);
  const auto micro = d.steps<Batch>(steps, k, b);
  const run_result ref = train(make(), {}, lr, whole);
  auto start = make();  // the initial weights
  start.init(5);
  const arena_layout& L = start.params().layout();
  using optim::accumulation_mode;
  struct mode_case {
    std::string name;
    accumulation_mode mode;
    bool before;
    double grad_factor, lr;
  };
  for (const mode_case& c : {mode_case{"avg", accumulation_mode::avg, false, 1.0, lr},
                             mode_case{"avg, scale_before", accumulation_mode::avg, true, 1.0, lr},
                             mode_case{"sum", accumulation_mode::sum, false, double(k), lr / k}}) {
    CAPTURE(c.name);
    const run_result got = train(make(), accumulation(k, c.mode, c.before), c.lr, micro);
    for (std::size_t s = 0; s < steps; ++s) {
      CAPTURE(s);
      CHECK(got.loss[s] == doctest::Approx(ref.loss[s]).epsilon(1e-6));
      CHECK(got.norm[s] == doctest::Approx(c.grad_factor * ref.norm[s]).epsilon(1e-5));
      check_tensors(L, got.grad[s], ref.grad[s], within, c.grad_factor);
    }
    check_tensors(L, got.weights, ref.weights, within);
  }
  // Not a vacuous comparison: the steps moved the weights and their gradients differ.
  CHECK(ref.weights != flat(start.params()));
  CHECK(ref.grad[0] != ref.grad[1]);
}

// (b) for one model: 2 steps of 2 micro-batches of 2 rows, recompute::none and recompute::blocks.
template <class Batch, class Make>
void check_recompute(Make make) {
  const rows d(8);
  const auto data = d.steps<Batch>(2, 2, 2);
  const auto o = accumulation(2, optim::accumulation_mode::avg, false);
  const run_result none = train(make(), o, 0.05, data);
  const run_result blocks = train<recompute_policies>(make(), o, 0.05, data);
  CHECK(blocks.loss == none.loss);
  CHECK(blocks.grad == none.grad);
  CHECK(blocks.weights == none.weights);
  // Dropout is on: another dropout key changes the gradients, so equal ones were not a given.
  trainer_options other = o;
  other.dropout_seed = 99;
  CHECK(train(make(), other, 0.05, data).grad[0] != none.grad[0]);
}

// (c) for one model: 2 steps of 4 micro-batches of 2 rows, one stage (one thread) and two stages
// on threads (one thread each; the reference must run the kernels on as many threads as a stage);
// `tied`: the tensor whose gradient adds two parts' contributions ("" when none).
template <class Batch, class Make>
void check_stages(Make make, const std::string& tied) {
  const rows d(16);
  const auto data = d.steps<Batch>(2, 4, 2);
  trainer_options one = accumulation(4, optim::accumulation_mode::avg, true);
  trainer_options two = trainer_options::from_json(
      json{{"accumulation", {{"steps", 4}, {"mode", "avg"}, {"scale_before", true}}},
           {"pipeline", {{"stages", 2}, {"schedule", "1f1b"}, {"placement", "threads"}}}});
  set_num_threads(1);
  const run_result ref = train(make(), one, 0.05, data);
  set_num_threads(2);
  const run_result got = train(make(), two, 0.05, data);
  const auto probe = make();
  const arena_layout& L = probe.params().layout();
  auto rel = [&](const std::string& name) { return name == tied ? 1e-5 : 0.0; };
  CHECK(got.loss[0] == ref.loss[0]);
  check_tensors(L, got.grad[0], ref.grad[0], rel);
  // The second step starts from weights that differ by the first step's rounding in the tied tensor.
  if (tied.empty())
    CHECK(got.loss[1] == ref.loss[1]);
  else
    CHECK(got.loss[1] == doctest::Approx(ref.loss[1]).epsilon(1e-6));
  check_tensors(L, got.grad[1], ref.grad[1], tied.empty() ? exact : within);
  check_tensors(L, got.weights, ref.weights, tied.empty() ? exact : within);
}

}  // namespace

TEST_CASE("accumulation: k micro-batches of b rows = one batch of k*b rows (avg, avg scale_before; sum = k times), GPT") {
  check_accumulation<token_batch>([] { return gpt<>(gpt_cfg(0.0f)); });
  check_accumulation<token_batch>([] { return gpt<float, block_sparse<4>>(gpt_cfg(0.0f), half); });
}

TEST_CASE("accumulation: k micro-batches of b rows = one batch of k*b rows (avg, avg scale_before; sum = k times), BERT") {
  check_accumulation<bert_batch>([] { return bert<>(bert_cfg(0.0f)); });
  check_accumulation<bert_batch>([] { return bert<float, block_sparse<4>>(bert_cfg(0.0f), half); });
}

TEST_CASE("recompute::blocks = recompute::none bit for bit, with dropout: GPT, S1, BERT and its fine-tuning models") {
  check_recompute<token_batch>([] { return gpt<>(gpt_cfg(0.1f)); });
  check_recompute<token_batch>([] { return gpt<float, block_sparse<4>>(gpt_cfg(0.1f), half); });
  check_recompute<token_batch>([] {
    json j = read_json_file(SPARSELM_SOURCE_DIR "/configs/s1-tiny.json");
    j["dropout"] = 0.1;
    return sparse_lm<float, block_sparse<4>>(sparse_lm_config::from_json(j, "s1-tiny"));
  });
  check_recompute<bert_batch>([] { return bert<>(bert_cfg(0.1f)); });
  check_recompute<bert_batch>([] { return bert<float, block_sparse<4>>(bert_cfg(0.1f), half); });
  check_recompute<bert_classify_batch>([] { return bert_classifier<>(bert_cfg(0.1f), 3); });
  check_recompute<bert_span_batch>([] { return bert_qa<>(bert_cfg(0.1f)); });
}

TEST_CASE("BERT with two pipeline stages on threads = one stage, with dropout: pre-training, B = 4, fine-tuning") {
  check_stages<bert_batch>([] { return bert<>(bert_cfg(0.1f)); }, "embeddings.word_embeddings.weight");
  check_stages<bert_batch>([] { return bert<float, block_sparse<4>>(bert_cfg(0.1f), half); },
                           "embeddings.word_embeddings.weight");
  check_stages<bert_classify_batch>([] { return bert_classifier<>(bert_cfg(0.1f), 3); }, "");
  check_stages<bert_span_batch>([] { return bert_qa<>(bert_cfg(0.1f)); }, "");
}

}  // namespace SPARSELM_UNITY_ID
