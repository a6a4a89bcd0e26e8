#pragma once
// Pipeline staging of a transformer (models/transformer.hpp): a training step whose block stack
// is split into stages that run at the same time (on thread groups of this process, or one stage
// per process of a pipeline over ranks), the evaluation of one rank's stage, and the choice of the
// split (given, balanced from measured part times, or from parameter counts).
//
// pipeline_staging holds what staged steps keep between steps (scratch per stage, the deferred
// embedding gradients, measured part times, the automatic split, the last step's report) and runs
// a model's parts through the model's own primitives; the transformer makes it a friend and calls
// it when its pipeline policy resolves to more than one stage (policies/pipeline.hpp). The
// schedules themselves (1F1B, GPipe) and the balancing are policies/pipeline.hpp's; the threads
// are models/stage_runner.hpp's.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <span>
#include <utility>
#include <vector>

#include "sparselm/core/error.hpp"
#include "sparselm/core/step_context.hpp"
#include "sparselm/core/threads.hpp"
#include "sparselm/layers/lm_head.hpp"
#include "sparselm/layers/visit.hpp"
#include "sparselm/models/stage_runner.hpp"
#include "sparselm/policies/pipeline.hpp"
#include "sparselm/policies/recompute.hpp"

namespace sparselm {

class pipeline_staging {
 public:
  // What the last staged step did (stages == 1 before the first one).
  const pipeline_report& report() const noexcept { return pipe_; }

  // A step over the stages of plan p (policies/pipeline.hpp): stage s runs blocks
  // [first[s], first[s + 1]) on its own thread group, stage 0 also the embedding's forward and the
  // last stage the head. Micro-batch m lives in slot m % in_flight. The embedding's backward runs
  // after the stages, in micro-batch order on every thread: the head may share its tensor (tied
  // weights), and two stages must never add into one gradient at once.
  template <recompute::policy Recompute, class Model, class Batch>
  loss_stats forward_backward(Model& model, const pipeline::pass_context& ctx, std::span<const Batch> micro,
                              std::span<const float> scales, const pipeline::plan& p) {
    using pipeline::direction;
    const std::size_t L = model.stack_.size(), S = p.stages, M = micro.size(), C = model.stack_.channels();
    pipeline::check_split(p.split, S, L);
    std::vector<step_context> bound(M);  // every micro-batch is checked before a stage starts
    std::size_t max_rows = 0;
    for (std::size_t m = 0; m < M; ++m) {
      step_context c = ctx;
      c.micro = ctx.micro + m;
      c.grads_ready = nullptr;  // the gradients are final only after the deferred embedding backward
      bound[m] = model.bind(c, micro[m]);
      max_rows = std::max(max_rows, micro[m].batch * micro[m].seq);
    }
    const std::size_t slots = pipeline::in_flight(p.schedule, S, M);
    model.stack_.template prepare<Recompute>(slots);
    model.stack_.reserve(max_rows);
    if (model.emb_c_.size() < M) model.emb_c_.resize(M);
    if (dx0_.size() < M) dx0_.resize(M);
    for (std::size_t m = 0; m < M; ++m) dx0_[m].get(micro[m].batch * micro[m].seq * C);
    if (stage_tmp_.size() < S) stage_tmp_.resize(S);

    pipeline::stage_link* link = ctx.stage_link;
    SPARSELM_CHECK(!link || (link->stages() == S && link->stage() < S), model.name_, ": a pipeline of ", S,
                   " stages over ", link ? link->stages() : 0, " processes (one stage per process)");
    std::vector<std::size_t> first(S + 1, L);
    const std::vector<std::size_t> split = choose_split(model, p, S, link == nullptr);
    first[0] = 0;
    for (std::size_t s = 1; s < S; ++s) first[s] = split[s - 1];

    std::vector<double> cost(L + 2, 0.0), busy(S, 0.0);
    std::vector<loss_stats> head_st(M);
    using clock = std::chrono::steady_clock;
    // Stage s's work in its schedule's order; before(op, slot, N) gets the op's input ready, after
    // signals or sends its output.
    auto run_stage = [&](std::size_t s, auto&& before, auto&& after) {
      auto timed = [&](std::size_t part, auto&& f) {
        const auto a = clock::now();
        f();
        const double d = std::chrono::duration<double>(clock::now() - a).count();
        cost[part] += d;
        busy[s] += d;
      };
      for (const auto& op : pipeline::stage_schedule(p.schedule, s, S, M)) {
        const std::size_t m = op.micro, slot = m % slots, N = micro[m].batch * micro[m].seq;
        step_context c = bound[m];
        c.tmp = &stage_tmp_[s];
        const Batch& b = micro[m];
        before(op, slot, N);
        if (op.dir == direction::forward) {
          if (s == 0) timed(0, [&] { model.embed_forward(c, b, model.stack_.input(slot, N), model.emb_c_[m]); });
          for (std::size_t l = first[s]; l < first[s + 1]; ++l)
            timed(1 + l, [&] { Recompute::forward(model.stack_, c, l, slot); });
          if (s + 1 == S)
            timed(L + 1, [&] {
              head_st[m] = model.head_.forward_backward(c, model.stack_.output(slot, N), b, scales[m], model.stack_.grad(slot, N), model.head_c_);
            });
        } else {
          for (std::size_t l = first[s + 1]; l-- > first[s];)
            timed(1 + l, [&] { Recompute::backward(model.stack_, c, l, slot); });
          if (s == 0) {
            const auto g = model.stack_.grad(slot, N);
            std::copy(g.data, g.data + N * C, dx0_[m].get(N * C).data());
          }
        }
        after(op, slot, N);
      }
    };
    const auto t0 = clock::now();
    std::size_t threads = std::size_t(num_threads());
    if (!link) {  // every stage on its own thread group of this process
      threads = std::max<std::size_t>(1, threads / S);
      stage_runner runner(S, M);
      runner.run(threads, [&](std::size_t s) {
        run_stage(
            s,
            [&](const pipeline::stage_op& op, std::size_t, std::size_t) {
              if (op.dir == direction::forward && s > 0) runner.wait(direction::forward, s - 1, op.micro);
              if (op.dir == direction::backward && s + 1 < S) runner.wait(direction::backward, s + 1, op.micro);
            },
            [&](const pipeline::stage_op& op, std::size_t, std::size_t) { runner.done(op.dir, s, op.micro); });
      });
    } else {  // this process's stage; the neighbours are other processes
      const std::size_t s = link->stage();
      if (ctx.need_dense_grad)  // RigL scores are summed over the ranks: the layers of other stages give zeros
        visit_tree(model, [](const auto& n) {
          if constexpr (requires { n.reset_pooled(); }) n.reset_pooled();
        });
      auto span_of = [](matrix_view<float> v) { return std::span<float>(v.data, v.rows * v.cols); };
      run_stage(
          s,
          [&](const pipeline::stage_op& op, std::size_t slot, std::size_t N) {
            if (op.dir == direction::forward && s > 0) link->recv(span_of(model.stack_.residual(slot, first[s], N)), s - 1, 2 * op.micro);
            if (op.dir == direction::backward && s + 1 < S) link->recv(span_of(model.stack_.grad(slot, N)), s + 1, 2 * op.micro + 1);
          },
          [&](const pipeline::stage_op& op, std::size_t slot, std::size_t N) {
            if (op.dir == direction::forward && s + 1 < S) link->send(span_of(model.stack_.residual(slot, first[s + 1], N)), s + 1, 2 * op.micro);
            if (op.dir == direction::backward && s > 0) link->send(span_of(model.stack_.grad(slot, N)), s - 1, 2 * op.micro + 1);
          });
      link->flush();
    }
    const double wall = std::chrono::duration<double>(clock::now() - t0).count();
    loss_stats st;
    for (std::size_t m = 0; m < M; ++m) {
      const std::size_t N = micro[m].batch * micro[m].seq;
      if (!link || link->stage() == 0)
        model.embed_backward(bound[m], micro[m], matrix_view<float>{dx0_[m].get(N * C).data(), N, C}, model.emb_c_[m]);
      st += head_st[m];
    }
    if (p.split.empty() && !link) part_cost_ = cost;
    pipe_.record(p, S, M, threads, split, busy, wall, link != nullptr);
    return st;
  }

  // This process's stage of an evaluation over ranks (evaluate): stage 0 embeds, the others receive
  // their input from the previous rank (the steps' split), the last runs the head.
  template <class Model, class Batch>
  loss_stats evaluate(Model& model, const pipeline::pass_context& ctx, const Batch& b, std::span<float> ce) {
    pipeline::stage_link& link = *ctx.stage_link;
    const pipeline::plan p = pipeline::configured::resolve(ctx.pipeline);
    const std::size_t S = link.stages(), s = link.stage(), L = model.stack_.size(), N = b.batch * b.seq;
    SPARSELM_CHECK(p.stages == S && s < S && ce.empty(), model.name_, ": evaluation on a pipeline of ", p.stages,
                   " stages over ", S, " processes (one stage each; no per-position cross-entropy)");
    pipeline::check_split(p.split, S, L);
    const auto split = choose_split(model, p, S, false);
    const std::size_t lo = s == 0 ? 0 : split[s - 1], hi = s + 1 == S ? L : split[s];
    const auto c = model.begin_forward(ctx, b, s == 0);
    if (s > 0) link.recv({model.stack_.residual(0, lo, N).data, N * model.stack_.channels()}, s - 1, pipeline::evaluation_tag);
    for (std::size_t l = lo; l < hi; ++l) model.stack_.forward_block(c, l, 0, 0);
    if (s + 1 == S) return model.head_.forward_backward(c, model.stack_.output(0, N), b, 1.0f, {}, model.head_c_, ce);
    link.send({model.stack_.residual(0, hi, N).data, N * model.stack_.channels()}, s + 1, pipeline::evaluation_tag);
    return {};
  }

  // The split of a staged step: the plan's, else balanced from the part times of the previous
  // staged steps (the first two re-balance, later ones keep the split; stages on threads only:
  // processes measure only their own stage and must agree), else from a cost model (each part's
  // parameter count, a tied head's projection counting its table; the embedding's forward is a
  // gather, counted as nothing).
  template <class Model>
  std::vector<std::size_t> choose_split(Model& model, const pipeline::plan& p, std::size_t S, bool measured) {
    const std::size_t L = model.stack_.size();
    if (!p.split.empty()) return p.split;
    if (auto_stages_ == S && (balanced_steps_ >= 2 || !measured)) return auto_split_;
    std::vector<double> block(L);
    double head = 0;
    if (auto_stages_ == S && part_cost_.size() == L + 2) {
      for (std::size_t l = 0; l < L; ++l) block[l] = part_cost_[1 + l];
      head = part_cost_[L + 1];
      auto_split_ = pipeline::balance(block, part_cost_[0], head, S);
      ++balanced_steps_;
      pipe_.balanced = true;
      return auto_split_;
    }
    for (std::size_t l = 0; l < L; ++l)
      for (const auto& t : parameters_of(model.stack_[l])) block[l] += double((*model.layout_)[t.index].size);
    for (const auto& t : parameters_of(model.head_)) head += double((*model.layout_)[t.index].size);
    if constexpr (requires { model.head_.projection().embedding().index; })  // a tied projection: the embedding's tensor
      head += double((*model.layout_)[model.head_.projection().embedding().index].size);
    auto_stages_ = S;
    balanced_steps_ = 0;
    pipe_.balanced = false;
    auto_split_ = pipeline::balance(block, 0.0, head, S);
    return auto_split_;
  }


 private:
  // Scratch per stage, the embedding's input gradient per micro-batch (its backward is deferred),
  // measured part times and the automatic split.
  std::vector<scratch> stage_tmp_;
  std::vector<buffer> dx0_;
  std::vector<double> part_cost_;
  std::vector<std::size_t> auto_split_;
  std::size_t auto_stages_ = 0, balanced_steps_ = 0;
  pipeline_report pipe_;
};

}  // namespace sparselm
