// Stage pipelining (policies/pipeline.hpp, models/stage_runner.hpp, transformer's staged step):
// the 1F1B and GPipe schedules (every micro-batch once each way, dependencies respected, the
// bubble they predict reproduced by simulation), the balanced split, and gradients of a staged
// step equal to the sequential accumulation — bit for bit for every tensor but the one the head
// shares with the embedding, whose two contributions are added in another order — for GPT (with
// dropout), the S1 sparse LM (recompute) and BERT; errors in a stage reach the caller.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <tuple>
#include <span>
#include <string>
#include <vector>

#include "../common/tiny_bert.hpp"
#include "../common/tiny_gpt.hpp"
#include "sparselm/core/json.hpp"
#include "sparselm/core/threads.hpp"
#include "sparselm/models/bert.hpp"
#include "sparselm/models/gpt.hpp"
#include "sparselm/models/sparse_lm.hpp"
#include "sparselm/train/trainer.hpp"

// Each test file is its own namespace: the area's files are compiled as one unity translation unit
// (tests/CMakeLists.txt), and their helpers must not meet.
namespace SPARSELM_UNITY_ID {

using namespace sparselm;
using pipeline::direction;
using pipeline::order;

namespace {

// Time of a schedule on S stages when every forward and backward of a stage takes one unit:
// list scheduling in each stage's order, waiting for the neighbour's dependency.
double simulate(order o, std::size_t S, std::size_t M) {
  std::vector<std::vector<double>> fdone(S, std::vector<double>(M, -1)), bdone = fdone;
  std::vector<std::vector<pipeline::stage_op>> ops(S);
  std::vector<std::size_t> next(S, 0);
  std::vector<double> clock(S, 0);
  for (std::size_t s = 0; s < S; ++s) ops[s] = pipeline::stage_schedule(o, s, S, M);
  bool progress = true;
  while (progress) {
    progress = false;
    for (std::size_t s = 0; s < S; ++s) {
      while (next[s] < ops[s].size()) {
        const auto op = ops[s][next[s]];
        double ready = clock[s];
        if (op.dir == direction::forward && s > 0) {
          if (fdone[s - 1][op.micro] < 0) break;
          ready = std::max(ready, fdone[s - 1][op.micro]);
        }
        if (op.dir == direction::backward) {
          if (fdone[s][op.micro] < 0) break;
          if (s + 1 < S) {
            if (bdone[s + 1][op.micro] < 0) break;
            ready = std::max(ready, bdone[s + 1][op.micro]);
          }
        }
        clock[s] = ready + 1;
        (op.dir == direction::forward ? fdone : bdone)[s][op.micro] = clock[s];
        ++next[s];
        progress = true;
      }
    }
  }
  for (std::size_t s = 0; s < S; ++s) REQUIRE_MESSAGE(next[s] == ops[s].size(), "stage ", s, " deadlocked");
  return *std::max_element(clock.begin(), clock.end());
}

// The micro-batches in flight on a stage never exceed in_flight(): slots are reused safely.
std::size_t max_in_flight(order o, std::size_t s, std::size_t S, std::size_t M) {
  std::size_t live = 0, most = 0;
  for (const auto& op : pipeline::stage_schedule(o, s, S, M)) {
    if (op.dir == direction::forward) most = std::max(most, ++live);
    else --live;
  }
  return most;
}

std::vector<float> flat(const arena<float>& a) { return {a.all().begin(), a.all().end()}; }

// Gradients and loss of one step over the micro-batches, sequential (plan == nullptr) or staged,
// with `threads` OpenMP threads on the calling thread.
template <class Recompute = recompute::none, class Model, class Batch>
std::pair<loss_stats, std::vector<float>> step(Model& m, std::span<const Batch> mb, const pipeline::plan* plan,
                                               int threads) {
  set_num_threads(threads);
  pipeline::pass_context ctx;
  ctx.training = true;
  ctx.step = 3;
  ctx.rng = counter_rng(11);
  ctx.pipeline = plan;
  std::vector<float> scales(mb.size());
  for (std::size_t k = 0; k < mb.size(); ++k) scales[k] = 1.0f / float(k + 2);
  m.grads().zero();
  const auto st = m.template forward_backward<Recompute, pipeline::configured>(ctx, mb, scales);
  set_num_threads(2);
  return {st, flat(m.grads())};
}

// Staged gradients equal the sequential ones: exactly, except the tensor the head shares with the
// embedding (`tied`: its gradient sums the two parts in another order), within float rounding.
template <class Recompute = recompute::none, class Model, class Batch>
void check_staged(Model& m, std::span<const Batch> mb, const pipeline::plan& plan, const std::string& tied) {
  CAPTURE(plan.stages);
  CAPTURE(pipeline::name(plan.schedule));
  CAPTURE(plan.split.size());
  // The sequential reference on one thread; each stage gets one thread too (S threads / S stages).
  const auto [ref_st, ref] = step<Recompute>(m, mb, nullptr, 1);
  const auto [st, got] = step<Recompute>(m, mb, &plan, int(plan.stages));
  CHECK(st.loss_sum == ref_st.loss_sum);
  CHECK(st.weight_sum == ref_st.weight_sum);
  CHECK(st.count == ref_st.count);
  CHECK(st.aux_loss_sum == ref_st.aux_loss_sum);
  const auto& L = m.params().layout();
  std::size_t exact = 0, shared = 0, nonzero = 0;
  for (std::size_t i = 0; i < L.count(); ++i) {
    const auto& t = L[i];
    double worst = 0, scale = 0;
    bool same = true;
    for (std::size_t k = t.offset; k < t.offset + t.size; ++k) {
      same = same && got[k] == ref[k];
      worst = std::max(worst, double(std::fabs(got[k] - ref[k])));
      scale = std::max(scale, double(std::fabs(ref[k])));
    }
    CAPTURE(t.name);
    nonzero += scale > 0;
    if (t.name == tied) {
      CHECK(worst <= 1e-5 * scale);
      ++shared;
    } else {
      CHECK(same);
      exact += same;
    }
  }
  CHECK(shared == 1);
  CHECK(exact == L.count() - 1);
  // not a comparison of zeros: an initialised model has a gradient in (nearly) every tensor
  CHECK(nonzero * 10 >= L.count() * 9);
  CHECK(m.last_pipeline().stages == plan.stages);
  CHECK(m.last_pipeline().micro_batches == mb.size());
  CHECK(m.last_pipeline().split.size() == plan.stages - 1);
  if (!plan.split.empty()) CHECK(m.last_pipeline().split == plan.split);
  CHECK(m.last_pipeline().predicted_bubble == doctest::Approx(pipeline::predicted_bubble(plan.stages, mb.size())));
}

struct lm_data {
  std::size_t B = 2, T = 16;
  std::vector<std::vector<std::int32_t>> ids, targets;
  lm_data(std::size_t micro, std::size_t vocab, std::size_t T_ = 16) : T(T_) {
    counter_rng rng(5);
    for (std::size_t m = 0; m < micro; ++m) {
      ids.emplace_back();
      targets.emplace_back();
      for (std::size_t i = 0; i < B * T; ++i) {
        ids.back().push_back(std::int32_t(rng.below(m, 2 * i, vocab)));
        targets.back().push_back(std::int32_t(rng.below(m, 2 * i + 1, vocab)));
      }
    }
  }
  std::vector<token_batch> batches() const {
    std::vector<token_batch> r;
    for (std::size_t m = 0; m < ids.size(); ++m) r.push_back({ids[m], targets[m], {}, B, T});
    return r;
  }
};

gpt_config four_layer_gpt() {
  gpt_config c = test::small_gpt_config();
  c.n_layer = 4;
  c.embd_pdrop = c.attn_pdrop = c.resid_pdrop = 0.1f;  // dropout streams must follow the micro-batch
  return c;
}

// Processes of a pipeline over ranks, played by threads: each has its own model and a link to a
// shared mailbox (messages by sender, receiver and tag, in order).
class mailbox {
 public:
  class link final : public pipeline::stage_link {
   public:
    link(mailbox& box, std::size_t stage, std::size_t stages) : box_(box), s_(stage), n_(stages) {}
    std::size_t stage() const noexcept override { return s_; }
    std::size_t stages() const noexcept override { return n_; }
    void send(std::span<const float> x, std::size_t to, std::uint64_t tag) override {
      std::lock_guard<std::mutex> l(box_.mu_);
      box_.q_[{s_, to, tag}].emplace_back(x.begin(), x.end());
      box_.cv_.notify_all();
      ++sent;
    }
    void recv(std::span<float> x, std::size_t from, std::uint64_t tag) override {
      std::unique_lock<std::mutex> l(box_.mu_);
      auto& q = box_.q_[{from, s_, tag}];
      box_.cv_.wait(l, [&] { return !q.empty(); });
      REQUIRE(q.front().size() == x.size());
      std::copy(q.front().begin(), q.front().end(), x.begin());
      q.pop_front();
    }
    void flush() override {}
    std::size_t sent = 0;

   private:
    mailbox& box_;
    std::size_t s_, n_;
  };

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::tuple<std::size_t, std::size_t, std::uint64_t>, std::deque<std::vector<float>>> q_;
};

}  // namespace

TEST_CASE("1F1B and GPipe: every micro-batch once each way, at most in_flight live, the predicted bubble") {
  for (order o : {order::one_f_one_b, order::gpipe})
    for (std::size_t S : {1u, 2u, 3u, 4u})
      for (std::size_t M : {1u, 2u, 3u, 5u, 8u}) {
        CAPTURE(pipeline::name(o));
        CAPTURE(S);
        CAPTURE(M);
        for (std::size_t s = 0; s < S; ++s) {
          const auto ops = pipeline::stage_schedule(o, s, S, M);
          REQUIRE(ops.size() == 2 * M);
          std::vector<int> fwd(M, 0), bwd(M, 0);
          for (const auto& op : ops) {
            if (op.dir == direction::forward) {
              ++fwd[op.micro];
            } else {
              CHECK(fwd[op.micro] == 1);  // a micro-batch's backward follows its forward
              ++bwd[op.micro];
            }
          }
          CHECK(std::count(fwd.begin(), fwd.end(), 1) == std::ptrdiff_t(M));
          CHECK(std::count(bwd.begin(), bwd.end(), 1) == std::ptrdiff_t(M));
          CHECK(max_in_flight(o, s, S, M) <= pipeline::in_flight(o, S, M));
        }
        // Equal unit costs: 2(M + S - 1) units, so each stage idles (S - 1)/(M + S - 1).
        const double T = simulate(o, S, M);
        CHECK(T == double(2 * (M + S - 1)));
        CHECK(1.0 - double(2 * M) / T == doctest::Approx(pipeline::predicted_bubble(S, M)));
      }
  // 1F1B keeps at most S micro-batches in flight on the first stage; GPipe all of them.
  CHECK(max_in_flight(order::one_f_one_b, 0, 4, 8) == 4);
  CHECK(max_in_flight(order::gpipe, 0, 4, 8) == 8);
  CHECK(pipeline::stage_schedule(order::one_f_one_b, 0, 3, 4) ==
        std::vector<pipeline::stage_op>{{0, direction::forward},
                                        {1, direction::forward},
                                        {2, direction::forward},
                                        {0, direction::backward},
                                        {3, direction::forward},
                                        {1, direction::backward},
                                        {2, direction::backward},
                                        {3, direction::backward}});
}

TEST_CASE("balance: the contiguous split that minimises the slowest stage; bad splits named") {
  const std::vector<double> four{1, 1, 1, 1};
  CHECK(pipeline::balance(four, 0, 0, 2) == std::vector<std::size_t>{2});
  CHECK(pipeline::balance(four, 0, 2, 2) == std::vector<std::size_t>{3});  // the head weighs 2 blocks
  CHECK(pipeline::balance(four, 0, 0, 4) == std::vector<std::size_t>{1, 2, 3});
  const std::vector<double> twelve(12, 1.0);
  CHECK(pipeline::balance(twelve, 0, 5.4, 2) == std::vector<std::size_t>{9});  // GPT-2 small's head ≈ 5.4 blocks
  CHECK_THROWS_WITH_AS(pipeline::balance(four, 0, 0, 5), doctest::Contains("5 stages for 4 blocks"), error);
  CHECK_NOTHROW(pipeline::check_split(std::vector<std::size_t>{1, 3}, 3, 4));
  CHECK_THROWS_WITH_AS(pipeline::check_split(std::vector<std::size_t>{3, 3}, 3, 4),
                       doctest::Contains("split entry 1 (3)"), error);
  CHECK_THROWS_WITH_AS(pipeline::check_split(std::vector<std::size_t>{4}, 2, 4), doctest::Contains("split entry 0 (4)"),
                       error);
  CHECK_THROWS_WITH_AS(pipeline::check_split(std::vector<std::size_t>{1}, 3, 4), doctest::Contains("split has 1 entries"),
                       error);
}

TEST_CASE("GPT with dropout: staged gradients equal the sequential accumulation (1F1B, GPipe, given splits)") {
  gpt<> m(four_layer_gpt());
  m.init(7);
  const lm_data d(5, 64);
  const auto mb = d.batches();
  const std::span<const token_batch> s(mb);
  check_staged(m, s, {2, order::one_f_one_b, {}}, "wte.weight");
  check_staged(m, s, {2, order::one_f_one_b, {}}, "wte.weight");  // second step: balanced from measured times
  check_staged(m, s, {3, order::one_f_one_b, {1, 2}}, "wte.weight");
  check_staged(m, s, {4, order::one_f_one_b, {}}, "wte.weight");
  check_staged(m, s, {2, order::gpipe, {3}}, "wte.weight");
  // More stages than micro-batches, and one micro-batch.
  check_staged(m, s.subspan(0, 2), {4, order::one_f_one_b, {}}, "wte.weight");
  check_staged(m, s.subspan(0, 1), {2, order::one_f_one_b, {}}, "wte.weight");
}

// The first staged step's split comes from a cost model (parameter counts): a head tied to the
// embedding multiplies by the embedding's table, so that tensor counts for the head. With 4 blocks of
// ~12.7 k parameters and a 1024 x 32 table (~2.6 blocks) the last stage takes one block and the head;
// with a 64-entry table (~0.2 blocks) the blocks split evenly.
TEST_CASE("the cost model's split counts a tied head's projection") {
  for (const std::size_t vocab : {std::size_t(1024), std::size_t(64)}) {
    CAPTURE(vocab);
    gpt_config c = four_layer_gpt();
    c.vocab_size = vocab;
    gpt<> m(c);
    m.init(7);
    const lm_data d(2, vocab);
    const auto mb = d.batches();
    const pipeline::plan plan{2, order::one_f_one_b, {}};
    step(m, std::span<const token_batch>(mb), &plan, 2);
    CHECK_FALSE(m.last_pipeline().balanced);
    CHECK(m.last_pipeline().split == std::vector<std::size_t>{vocab == 1024 ? 3u : 2u});
  }
}

TEST_CASE("S1 sparse LM with recompute: staged gradients equal the sequential accumulation") {
  json j = read_json_file(SPARSELM_SOURCE_DIR "/configs/s1-tiny.json");
  j["layers"] = 3;
  sparse_lm<float, block_sparse<4>> m(sparse_lm_config::from_json(j));
  m.init(3);
  const lm_data d(4, 61);
  const auto mb = d.batches();
  check_staged<recompute::blocks>(m, std::span<const token_batch>(mb), {3, order::one_f_one_b, {}}, "embedding.lut");
  check_staged<recompute::none>(m, std::span<const token_batch>(mb), {2, order::gpipe, {}}, "embedding.lut");
}

TEST_CASE("BERT (MLM + NSP, padding): staged gradients equal the sequential accumulation") {
  bert<> m(test::tiny_bert_config());
  m.init(7);
  const std::size_t B = 2, T = 8;
  std::vector<std::vector<std::int32_t>> ids(3), types(3);
  std::vector<std::int32_t> lengths{8, 6}, positions{1, 4, 6, 2, 3, 0}, labels{7, 11, 3, 9, 21, -1}, nsp{0, 1};
  counter_rng rng(9);
  std::vector<bert_batch> mb;
  for (std::size_t k = 0; k < 3; ++k) {
    for (std::size_t i = 0; i < B * T; ++i) {
      ids[k].push_back(std::int32_t(rng.below(k, i, 50)));
      types[k].push_back(i % T >= 4 ? 1 : 0);
    }
  }
  for (std::size_t k = 0; k < 3; ++k) mb.push_back({ids[k], types[k], lengths, positions, labels, nsp, B, T});
  check_staged(m, std::span<const bert_batch>(mb), {2, order::one_f_one_b, {}}, "embeddings.word_embeddings.weight");
}

TEST_CASE("a failing stage: the error reaches the caller, no stage waits for ever; bad plans named") {
  gpt<> m(four_layer_gpt());
  m.init(7);
  lm_data d(4, 64);
  d.ids[2][5] = 64;  // out of the vocabulary: the embedding (stage 0) throws on micro-batch 2
  const auto mb = d.batches();
  const pipeline::plan two{2, order::one_f_one_b, {}};
  CHECK_THROWS_WITH_AS(step(m, std::span<const token_batch>(mb), &two, 2), doctest::Contains("64"), error);
  // The model still works afterwards.
  const lm_data ok(4, 64);
  const auto good = ok.batches();
  check_staged(m, std::span<const token_batch>(good), two, "wte.weight");
  const pipeline::plan five{5, order::one_f_one_b, {}};
  CHECK_THROWS_WITH_AS(step(m, std::span<const token_batch>(good), &five, 2),
                       doctest::Contains("5 stages for 4 blocks"), error);
  const pipeline::plan bad{2, order::one_f_one_b, {0}};
  CHECK_THROWS_WITH_AS(step(m, std::span<const token_batch>(good), &bad, 2), doctest::Contains("split entry 0 (0)"),
                       error);
}

TEST_CASE("trainer: the pipeline from the options (JSON), same losses as one stage; a fixed policy refuses it") {
  const lm_data d(4, 64);
  const auto mb = d.batches();
  auto run = [&](const json& pipe) {
    gpt<> m(four_layer_gpt());
    m.init(5);
    json o{{"accumulation", {{"steps", 4}}}};
    if (!pipe.is_null()) o["pipeline"] = pipe;
    trainer<gpt<>> t(m, trainer_options::from_json(o), optim::adamw<>(json{{"weight_decay", 0.0}}),
                     optim::schedule(optim::constant_schedule(1e-3f)));
    std::vector<double> losses;
    for (int k = 0; k < 3; ++k) losses.push_back(t.train_step(std::span<const token_batch>(mb)).loss.mean_loss());
    return std::pair{losses, test::param_snapshot(m)};
  };
  set_num_threads(2);
  const auto [ref_loss, ref_w] = run(json());
  const auto [loss, w] = run(json{{"stages", 2}, {"schedule", "gpipe"}});
  for (std::size_t k = 0; k < ref_loss.size(); ++k) CHECK(loss[k] == doctest::Approx(ref_loss[k]).epsilon(1e-6));
  double worst = 0;
  for (std::size_t i = 0; i < w.size(); ++i) worst = std::max(worst, double(std::fabs(w[i] - ref_w[i])));
  CHECK(worst < 1e-5);  // AdamW steps of 1e-3 from gradients that differ by rounding in wte only
  auto bad = [](const json& p, const char* msg) {
    CAPTURE(p.dump());
    CHECK_THROWS_WITH_AS(trainer_options::from_json(json{{"pipeline", p}}, "cfg"), doctest::Contains(msg), error);
  };
  bad(json{{"stages", 0}}, "stages");
  bad(json{{"stages", 2}, {"schedule", "zigzag"}}, "zigzag");
  bad(json{{"stages", 3}, {"split", {2}}}, "'split' has 1 entries for 3 stages");
  bad(json{{"stages", 2}, {"split", {-1}}}, "is not a block index");
  bad(json{{"stages", 2}, {"stagez", 2}}, "stagez");
  struct fixed : default_policies {
    using pipeline = sparselm::pipeline::none;
  };
  gpt<> m(four_layer_gpt());
  trainer_options o;
  o.pipeline.stages = 2;
  CHECK_THROWS_WITH_AS((trainer<gpt<>, fixed>(m, o, optim::adamw<>(json::object()),
                                              optim::schedule(optim::constant_schedule(1e-3f)))),
                       doctest::Contains("policy is pipeline::none"), error);
}

TEST_CASE("a pipeline over ranks (threads as processes): the ranks' gradients sum to the sequential ones") {
  const lm_data d(5, 64);
  const auto mb = d.batches();
  const std::span<const token_batch> s(mb);
  for (const pipeline::plan& plan : {pipeline::plan{2, order::one_f_one_b, {}, pipeline::placement::ranks},
                                    pipeline::plan{3, order::gpipe, {}, pipeline::placement::ranks},
                                    pipeline::plan{4, order::one_f_one_b, {}, pipeline::placement::ranks}}) {
    CAPTURE(plan.stages);
    gpt<> ref_model(four_layer_gpt());
    ref_model.init(7);
    const auto [ref_st, ref] = step(ref_model, s, nullptr, 1);
    const std::size_t S = plan.stages;
    std::vector<gpt<>> models;
    for (std::size_t r = 0; r < S; ++r) {
      models.emplace_back(four_layer_gpt());
      models.back().init(7);
    }
    mailbox box;
    std::vector<std::unique_ptr<mailbox::link>> links;
    for (std::size_t r = 0; r < S; ++r) links.push_back(std::make_unique<mailbox::link>(box, r, S));
    std::vector<loss_stats> st(S);
    std::vector<std::thread> ranks;
    for (std::size_t r = 0; r < S; ++r)
      ranks.emplace_back([&, r] {
        set_num_threads(1);
        pipeline::pass_context ctx;
        ctx.training = true;
        ctx.step = 3;
        ctx.rng = counter_rng(11);
        ctx.pipeline = &plan;
        ctx.stage_link = links[r].get();
        std::vector<float> scales(s.size());
        for (std::size_t k = 0; k < s.size(); ++k) scales[k] = 1.0f / float(k + 2);
        models[r].grads().zero();
        st[r] = models[r].forward_backward<recompute::none, pipeline::configured>(ctx, s, scales);
      });
    for (auto& t : ranks) t.join();
    // The head's loss is on the last rank only; the boundaries carried one message per micro-batch
    // each way.
    for (std::size_t r = 0; r + 1 < S; ++r) CHECK(st[r].count == 0);
    CHECK(st[S - 1].loss_sum == ref_st.loss_sum);
    for (std::size_t r = 0; r < S; ++r) CHECK(links[r]->sent == (r == 0 || r + 1 == S ? 1 : 2) * s.size());
    // Every rank split the blocks alike (from the cost model, not from its own measurements).
    for (std::size_t r = 1; r < S; ++r) CHECK(models[r].last_pipeline().split == models[0].last_pipeline().split);
    const auto& L = ref_model.params().layout();
    for (std::size_t i = 0; i < L.count(); ++i) {
      const auto& t = L[i];
      CAPTURE(t.name);
      double worst = 0, scale = 0;
      bool same = true;
      for (std::size_t k = t.offset; k < t.offset + t.size; ++k) {
        float sum = 0;
        for (std::size_t r = 0; r < S; ++r) sum += models[r].grads().all()[k];
        same = same && sum == ref[k];
        worst = std::max(worst, double(std::fabs(sum - ref[k])));
        scale = std::max(scale, double(std::fabs(ref[k])));
      }
      if (t.name == "wte.weight") CHECK(worst <= 1e-5 * scale);
      else CHECK(same);
    }
  }
}

// Evaluation over ranks refuses a link whose stage count is not the plan's, and per-position
// cross-entropy (which needs the whole model in one process), before any message is sent.
TEST_CASE("evaluation over ranks: a plan that does not match the link, and per-position CE, are errors") {
  gpt<> m(four_layer_gpt());
  m.init(7);
  const lm_data d(1, 64);
  const auto mb = d.batches();
  mailbox box;
  mailbox::link link(box, 0, 2);
  const pipeline::plan three{3, order::one_f_one_b, {}, pipeline::placement::ranks};
  const pipeline::plan two{2, order::one_f_one_b, {}, pipeline::placement::ranks};
  pipeline::pass_context ctx;
  ctx.stage_link = &link;
  ctx.pipeline = &three;
  CHECK_THROWS_WITH_AS(m.evaluate(mb[0], ctx),
                       doctest::Contains("evaluation on a pipeline of 3 stages over 2 processes"), error);
  ctx.pipeline = &two;
  std::vector<float> ce(mb[0].batch * mb[0].seq);
  CHECK_THROWS_WITH_AS(m.evaluate(mb[0], ctx, ce), doctest::Contains("no per-position cross-entropy"), error);
  CHECK(link.sent == 0);
  CHECK(m.evaluate(mb[0], ctx).count == 0);  // a valid call: stage 0 of 2 sends its activations on
  CHECK(link.sent == 1);
}

}  // namespace SPARSELM_UNITY_ID
