#pragma once
// Pipeline policies: the order in which a model runs the parts of a training step over its
// micro-batches, and whether the block stack is split into stages that run at the same time.
//
// A training step over M micro-batches runs, for each micro-batch, the embedding, the blocks
// 0..L-1, the head (which computes the loss and its own backward), the blocks L-1..0 backward and
// the embedding backward.
//
// A plan of N stages runs each contiguous range of blocks on its own thread group (threads / N
// threads each); stage 0 also runs the embedding, the last the head. Micro-batch m's forward passes
// stage s to s + 1, its backward s + 1 to s. The plan's order is how each stage takes its work:
//   one_f_one_b  stage s runs N - 1 - s forwards, then alternates one forward and one backward,
//                then drains the backwards ("1F1B"; at most N micro-batches in flight, so N
//                residual streams)
//   gpipe        every forward, then every backward (M in flight)
// Both leave (N - 1) / (M + N - 1) of each stage's time idle when the stages cost the same (the
// "bubble"); more micro-batches per step shrink it.
//
// The policies say where a step's plan comes from:
//   none            one stage: each micro-batch forward and backward before the next one (one in
//                   flight; every kernel uses all threads).
//   configured      the plan of the run config (trainer_options::pipeline), one stage when unset;
//                   the trainer's default. A plan is a run-time choice (stages, order, split and
//                   placement come from configs and flags), so there is no policy type per plan.
//
// Placement: the stages run as threads of one process (plan::placement threads), or one stage per
// process (ranks: under mpirun with as many ranks as stages; each process holds the whole model,
// runs its stage's parts and exchanges the boundary activations and their gradients with its
// neighbours through a stage_link; the trainer then sums the gradients over the ranks, so every
// rank applies the same update). With a multiple of the stages, the ranks form data replicas of
// the pipeline, each on its rows of every global batch (train/rank_grid.hpp).
//
// The stages' split is given (plan::split) or balanced (balance(): the split that minimises the
// slowest stage): the first staged step weighs each part by its parameter count (a head tied to
// the embedding counting the table it multiplies by), the next two by the part times measured in
// the step before, and later steps keep that split (ranks keep the parameter-count split: each
// measures only its own stage, and all must agree). The gradients are those of the sequential
// order: each tensor's gradient accumulates the micro-batches in the same order, except a tensor
// the head shares with the embedding (tied weights), whose two contributions are added in another
// order (rounding only).

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "sparselm/core/error.hpp"
#include "sparselm/core/step_context.hpp"

namespace sparselm::pipeline {

enum class part { embedding, block, head };
enum class direction { forward, backward };
enum class order { one_f_one_b, gpipe };
enum class placement { threads, ranks };

inline const char* name(order o) noexcept { return o == order::gpipe ? "gpipe" : "1f1b"; }
inline order parse_order(const std::string& s, const std::string& what) {
  if (s == "1f1b") return order::one_f_one_b;
  if (s == "gpipe") return order::gpipe;
  throw error(what + ": unknown pipeline schedule '" + s + "' (expected 1f1b or gpipe)");
}

inline const char* name(placement p) noexcept { return p == placement::ranks ? "ranks" : "threads"; }

// How a step is split over stages (stages == 1: not at all).
struct plan {
  std::size_t stages = 1;
  order schedule = order::one_f_one_b;
  std::vector<std::size_t> split;  // first block of stages 1..stages-1 (empty: balanced by measured cost)
  placement where = placement::threads;
  bool operator==(const plan&) const = default;
};

// One step of the sequential (one-stage) order.
struct schedule_step {
  part what = part::block;
  std::size_t index = 0;  // block index (part::block)
  std::size_t micro = 0;  // micro-batch
  direction dir = direction::forward;
  bool operator==(const schedule_step&) const = default;
};

// The sequential order: per micro-batch, embedding, blocks 0..L-1, head (loss + its backward),
// blocks L-1..0 backward, embedding backward.
inline std::vector<schedule_step> sequential_schedule(std::size_t layers, std::size_t micro_batches) {
  std::vector<schedule_step> r;
  r.reserve(micro_batches * (2 * layers + 3));
  for (std::size_t m = 0; m < micro_batches; ++m) {
    r.push_back({part::embedding, 0, m, direction::forward});
    for (std::size_t l = 0; l < layers; ++l) r.push_back({part::block, l, m, direction::forward});
    r.push_back({part::head, 0, m, direction::forward});
    for (std::size_t l = layers; l-- > 0;) r.push_back({part::block, l, m, direction::backward});
    r.push_back({part::embedding, 0, m, direction::backward});
  }
  return r;
}

// One unit of a stage's work: micro-batch `micro` through the stage's parts, one way.
struct stage_op {
  std::size_t micro = 0;
  direction dir = direction::forward;
  bool operator==(const stage_op&) const = default;
};

// The work of stage s (of S) over M micro-batches, in the order it runs it.
inline std::vector<stage_op> stage_schedule(order o, std::size_t s, std::size_t S, std::size_t M) {
  SPARSELM_CHECK(S > 0 && s < S, "pipeline: stage ", s, " of ", S);
  std::vector<stage_op> r;
  r.reserve(2 * M);
  if (o == order::gpipe) {
    for (std::size_t m = 0; m < M; ++m) r.push_back({m, direction::forward});
    for (std::size_t m = 0; m < M; ++m) r.push_back({m, direction::backward});
    return r;
  }
  const std::size_t warm = std::min(S - 1 - s, M);
  std::size_t f = 0, b = 0;
  for (; f < warm; ++f) r.push_back({f, direction::forward});
  while (f < M) {
    r.push_back({f++, direction::forward});
    r.push_back({b++, direction::backward});
  }
  while (b < M) r.push_back({b++, direction::backward});
  return r;
}

// Micro-batches in flight at once (residual streams a staged step needs).
inline std::size_t in_flight(order o, std::size_t S, std::size_t M) noexcept {
  return std::max<std::size_t>(1, o == order::gpipe ? M : std::min(S, M));
}

// Idle fraction of each stage the schedule predicts for equal stage costs: (S - 1) / (M + S - 1).
inline double predicted_bubble(std::size_t S, std::size_t M) noexcept {
  return S <= 1 ? 0.0 : double(S - 1) / double(M + S - 1);
}

// The contiguous split of blocks (cost block[l] each) into S stages, stage 0 also paying `first`
// (the embedding) and the last `last` (the head), that minimises the slowest stage. Returns the
// first block of stages 1..S-1. Every stage gets at least one block.
inline std::vector<std::size_t> balance(std::span<const double> block, double first, double last, std::size_t S) {
  const std::size_t L = block.size();
  SPARSELM_CHECK(S >= 1 && S <= L, "pipeline: ", S, " stages for ", L, " blocks (each stage needs at least one block)");
  std::vector<double> pre(L + 1, 0.0);
  for (std::size_t l = 0; l < L; ++l) pre[l + 1] = pre[l] + block[l];
  const double inf = std::numeric_limits<double>::infinity();
  // best[s][e]: slowest stage when stages 0..s cover blocks [0, e); from[s][e]: start of stage s.
  std::vector<std::vector<double>> best(S, std::vector<double>(L + 1, inf));
  std::vector<std::vector<std::size_t>> from(S, std::vector<std::size_t>(L + 1, 0));
  for (std::size_t e = 1; e <= L; ++e) best[0][e] = first + pre[e] + (S == 1 ? last : 0.0);
  for (std::size_t s = 1; s < S; ++s)
    for (std::size_t e = s + 1; e <= L; ++e)
      for (std::size_t b = s; b < e; ++b) {
        const double cost = pre[e] - pre[b] + (s + 1 == S ? last : 0.0);
        const double v = std::max(best[s - 1][b], cost);
        if (v < best[s][e]) {
          best[s][e] = v;
          from[s][e] = b;
        }
      }
  std::vector<std::size_t> split(S - 1);
  std::size_t e = L;
  for (std::size_t s = S; s-- > 1;) {
    split[s - 1] = from[s][e];
    e = split[s - 1];
  }
  return split;
}

// Checks a given split (first block of stages 1..S-1) against L blocks; names the culprit.
inline void check_split(std::span<const std::size_t> split, std::size_t S, std::size_t L) {
  SPARSELM_CHECK(S >= 1 && S <= L, "pipeline: ", S, " stages for ", L, " blocks (each stage needs at least one block)");
  SPARSELM_CHECK(split.empty() || split.size() == S - 1, "pipeline: split has ", split.size(),
                 " entries (the first block of each stage after the first) for ", S, " stages; expected ", S - 1);
  std::size_t prev = 0;
  for (std::size_t i = 0; i < split.size(); ++i) {
    SPARSELM_CHECK(split[i] > prev && split[i] < L, "pipeline: split entry ", i, " (", split[i],
                   ") must be greater than ", prev, " and less than the ", L, " blocks: each stage needs a block");
    prev = split[i];
  }
}

// Moves a stage boundary's tensors between the processes of a pipeline over ranks: micro-batch m's
// activations to the next stage (tag 2m), their gradient back to the previous one (tag 2m + 1).
// The tag of an evaluation's activations (transformer::evaluate over ranks): below the tied
// gradients' (30000 + k, train/replica_sums.hpp); a step's own tags (2 per micro-batch) are all
// received before the step returns, so an evaluation between steps never meets one.
inline constexpr std::uint64_t evaluation_tag = 29000;

class stage_link {
 public:
  virtual ~stage_link() = default;
  virtual std::size_t stage() const noexcept = 0;   // the stage this process runs
  virtual std::size_t stages() const noexcept = 0;  // stages = processes
  // Starts sending x to stage `to`; x may be reused as soon as send returns.
  virtual void send(std::span<const float> x, std::size_t to, std::uint64_t tag) = 0;
  // Receives message `tag` from stage `from` into x (blocking).
  virtual void recv(std::span<float> x, std::size_t from, std::uint64_t tag) = 0;
  // Completes every send started (end of a step).
  virtual void flush() = 0;
};

// What a model's training or evaluation pass receives: the step context its layers see, plus the
// run's pipeline plan (read by pipeline::configured; null: one stage) and, for a pipeline over
// ranks, this process's stage link (null: the stages are threads of this process). Layers take the
// step_context part only, so they never depend on pipelining.
struct pass_context : step_context {
  const plan* pipeline = nullptr;
  pipeline::stage_link* stage_link = nullptr;
  pass_context() = default;
  pass_context(const step_context& s) : step_context(s) {}  // NOLINT(google-explicit-constructor): no plan
};

struct none {
  static constexpr const char* name = "none";
  static plan resolve(const plan*) { return {}; }
};

// The run config's plan (trainer_options::pipeline), one stage when there is none.
struct configured {
  static constexpr const char* name = "configured";
  static plan resolve(const plan* p) { return p ? *p : plan{}; }
};

template <class P>
concept policy = requires(const plan* p) {
  { P::name } -> std::convertible_to<const char*>;
  { P::resolve(p) } -> std::same_as<plan>;
};

}  // namespace sparselm::pipeline
