#pragma once
// trainer<Model, Policies>: one optimiser step = zero grads, forward+backward over the micro-batches
// (gradient accumulation), global-norm or per-tensor clipping, the scheduled learning rate, the
// optimiser update, and the hooks a dynamic-sparsity updater needs.
//
// The policy bundle fixes at compile time what a step does (docs/design/architecture.md, "Policies"):
//
//   struct my_policies : sparselm::default_policies {
//     using recompute = sparselm::recompute::blocks;   // trade ~1/3 more compute for memory
//   };
//   sparselm::trainer<sparselm::gpt<>, my_policies> t(model, options, optimizer, schedule);
//   auto m = t.train_step(micro_batches);             // step_metrics: loss, lr, grad norm, tokens/s
//
// A Model provides: batch_type, forward_backward<Recompute, Pipeline>(step_context, micro-batches,
// grad scales) -> loss_stats (grads +=; models/transformer.hpp runs the pipeline policy's schedule
// with the recompute policy), evaluate(batch) -> loss_stats, params(), grads(), layout()
// (trainable_model). The policy bundle, that concept and step_metrics: train/trainer_types.hpp; the
// step itself: train/trainer_step.hpp.

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "sparselm/core/error.hpp"
#include "sparselm/core/offload_stats.hpp"
#include "sparselm/core/rng.hpp"
#include "sparselm/layers/context.hpp"
#include "sparselm/layers/lm_head.hpp"
#include "sparselm/core/json.hpp"
#include "sparselm/optim/accumulation.hpp"
#include "sparselm/optim/adam.hpp"
#include "sparselm/optim/sgd.hpp"
#include "sparselm/optim/clipping.hpp"
#include "sparselm/optim/concepts.hpp"
#include "sparselm/optim/loss_scaling.hpp"
#include "sparselm/optim/schedules.hpp"
#include "sparselm/optim/shard.hpp"
#include "sparselm/io/crc32c.hpp"
#include "sparselm/models/tensor_shards.hpp"
#include "sparselm/parallel/replica_group.hpp"
#include "sparselm/policies/data_parallel.hpp"
#include "sparselm/policies/pipeline.hpp"
#include "sparselm/policies/precision.hpp"
#include "sparselm/policies/recompute.hpp"
#include "sparselm/train/gathered_slots.hpp"
#include "sparselm/train/rank_grid.hpp"
#include "sparselm/train/replica_checks.hpp"
#include "sparselm/train/replica_sums.hpp"
#include "sparselm/train/tensor_group_checks.hpp"
#include "sparselm/io/slot_stream.hpp"
#include "sparselm/train/stage_params.hpp"
#include "sparselm/train/tensor_grid.hpp"
#include "sparselm/train/trainer_options.hpp"
#include "sparselm/train/trainer_types.hpp"

namespace sparselm {

template <class Model, class Policies = default_policies>
class trainer {
  static_assert(recompute::policy<typename Policies::recompute>, "trainer: Policies::recompute is not a recompute policy");
  static_assert(pipeline::policy<typename Policies::pipeline>, "trainer: Policies::pipeline is not a pipeline policy");
  static_assert(data_parallel::policy<typename Policies::data_parallel>,
                "trainer: Policies::data_parallel is not a data-parallel policy (policies/data_parallel.hpp)");
  static_assert(!requires { typename Policies::precision; },
                "trainer: precision is a run-time option (trainer_options::precision), not a policy: "
                "remove Policies::precision and set the options' precision");
  static_assert(optim::optimizer<typename Policies::optimizer>, "trainer: Policies::optimizer is not an optimiser");
  static_assert(trainable_model<Model>, "trainer: Model does not provide forward_backward/evaluate/params/grads");

 public:
  using model_type = Model;
  using batch_type = typename Model::batch_type;
  using optimizer_type = typename Policies::optimizer;
  using recompute_policy = typename Policies::recompute;
  using pipeline_policy = typename Policies::pipeline;
  using data_parallel_policy = typename Policies::data_parallel;
  // Whether gradients are combined over a replica group (data_parallel::mpi).
  static constexpr bool distributed = data_parallel_policy::distributed;

  // Hooks for a dynamic-sparsity updater (or anything else that acts around the update).
  struct hooks {
    // Both receive t, the number of optimiser steps completed once this step's update is applied
    // (1 for the first step), the step counting of sparse::prune_schedule.
    std::function<bool(std::size_t t)> needs_dense_grad;  // before the step's backward passes
    std::function<void(std::size_t t)> after_update;      // after the optimiser update
  };

  trainer(Model& model, trainer_options o, optimizer_type opt, optim::schedule sched)
      : model_(model), opt_(std::move(opt)), sched_(std::move(sched)), o_(resolve_options<Policies>(std::move(o))),
        scaler_(o_.loss_scaling) {
    if (!o_.offload.empty()) {
      if constexpr (requires { opt_.offload_to(std::filesystem::path()); })
        opt_.offload_to(o_.offload);
      else
        fail("trainer: offload '", o_.offload, "': optimiser ", optim::name_of(opt_), " cannot keep its state in files");
      // the weights and gradients too (a model that offloaded them before its init keeps them)
      if constexpr (requires { model_.offload_to(std::filesystem::path()); }) model_.offload_to(o_.offload);
    }
    opt_.attach(model_.layout());
    if (o_.tensor_parallel > 1) check_tensor_parallel();
  }

  // The operand type of the dense GEMMs (trainer_options::precision; fp32 when unset).
  dtype compute() const noexcept { return *o_.precision; }

  Model& model() noexcept { return model_; }
  optimizer_type& optimizer() noexcept { return opt_; }
  const optim::schedule& schedule() const noexcept { return sched_; }
  const trainer_options& options() const noexcept { return o_; }
  std::size_t step() const noexcept { return step_; }
  // Whether the parameters and the optimiser state the last update wrote are all finite (Adam's
  // v = g² can overflow while the gradient norm is finite): the optimiser's own check, fused into
  // its update (state_finite() of optim/engine.hpp's optimisers), so no pass over the state. With
  // sharded optimiser state, or under tensor parallelism, a collective over the processes that share
  // it (or its slices). An optimiser without that check: its parameters are scanned (its slots are not).
  bool state_finite() {
    bool ok = true;
    if constexpr (requires(const optimizer_type& o) {
                    { o.state_finite() } -> std::convertible_to<bool>;
                  }) {
      ok = opt_.state_finite();
    } else {
      float s = 0;  // NaN and infinities survive the multiplication by zero; finite values give 0
      for (float x : model_.params().all()) s += x * 0.0f;
      ok = s == 0.0f;
    }
    // sharded state, or a tensor-parallel rank's slices: every rank of the group decides alike
    parallel::replica_group* g = sharded() ? &shard_group() : tgrid_.active() ? &tgrid_.tensor() : nullptr;
    if (g) {
      float bad = ok ? 0.0f : 1.0f;
      g->all_reduce(std::span<float>(&bad, 1), parallel::reduce_op::max);
      ok = bad == 0.0f;
    }
    return ok;
  }
  void set_hooks(hooks h) {  // before sync_parameters() (stage-local ranks have no other stage's weights)
    SPARSELM_CHECK(!stage_local(), "trainer: set_hooks after sync_parameters() made the ranks keep only their stages");
    hooks_ = std::move(h);
  }
  // The replicas this trainer combines gradients with (data_parallel::mpi; set before the first
  // step, together with sync_parameters()). Without one, and under data_parallel::none, the
  // group of one process.
  void set_replicas(parallel::replica_group& g)
    requires distributed
  {
    SPARSELM_CHECK(step_ == 0 && opt_.step_count() == 0, "trainer: set_replicas after training began");
    if (o_.tensor_parallel > 1) {
      // Groups of tensor_parallel ranks split the model; the ranks holding the same slice are the
      // data replicas (train/tensor_grid.hpp).
      tgrid_ = tensor_grid(g, o_.tensor_parallel);
      if constexpr (requires { model_.tensor_split(); })  // (the constructor refused other models)
        SPARSELM_CHECK(model_.tensor_split().rank == tgrid_.split().rank, "trainer: this rank holds slice ",
                       tgrid_.split().rank, " of the tensor-parallel group, but the model was built with slice ",
                       model_.tensor_split().rank, " (tensor_grid::split_of)");
      tsum_ = parallel::tensor_sum_over(tgrid_.tensor());
      group_ = tgrid_.data() ? tgrid_.data() : &single_;
      // per-tensor norms (LAMB's trust ratios) of the whole tensors: the slices' sums over the group
      if constexpr (requires { opt_.set_norm_sum(optim::norm_sum_fn{}); })
        opt_.set_norm_sum(optim::norm_sum_fn(
            [this](std::span<double> w2, std::span<double> u2) { sum_sliced_squares(w2, u2); }));
      return;
    }
    if (o_.pipeline.where == pipeline::placement::ranks && g.size() > 1) {
      // The processes are the stages of a pipeline (policies/pipeline.hpp), or with a multiple of
      // the stages, data replicas of that pipeline (train/rank_grid.hpp).
      grid_ = rank_grid(g, o_.pipeline.stages);
      group_ = grid_.data();
      link_ = detail::group_stage_link(stage_group());
      if (o_.shard_optimizer) {  // each stage keeps the optimiser state of its own tensors (on a grid, each replica)
        std::vector<optim::tensor_range> parts;
        if constexpr (requires { model_.stage_tensors(o_.pipeline); model_.tied_tensors(); }) {
          for (const auto& [b, e] : model_.stage_tensors(o_.pipeline)) parts.push_back({b, e});
          tied_.assign(model_.tied_tensors());
        }
        parallel::replica_group& stages = grid_.pipeline();
        SPARSELM_CHECK(parts.size() == stages.size(), "trainer: shard_optimizer over a pipeline's ranks needs the ",
                       "model's stage tensors (embedding, blocks, head in layout order)");
        shard_by(parts, stages);
        if (grid_.replicas() > 1)
          stage_sums_.assign(*model_.layout(), shards_.bounds(), stages.rank(), stages.size(), tied_.tensors());
      }
      return;
    }
    group_ = &g;
    if (!o_.shard_optimizer || g.size() == 1) return;
    shard_by(optim::partition_tensors(*model_.layout(), g.size()), g);
  }
  // Whether this process keeps only its shard of the optimiser state (trainer_options::shard_optimizer):
  // a data replica its 1/P of the tensors, a rank of a pipeline over ranks its stage's.
  bool sharded() const noexcept { return shards_.active(); }
  // Bytes of optimiser slots this replica holds (all of them unless sharded).
  std::size_t optimizer_state_bytes() {
    if constexpr (requires { opt_.slot_bytes(); }) {
      return opt_.slot_bytes();
    } else {
      std::size_t n = 0;
      for (const auto& s : opt_.state().slots) n += s.slots->all().size() * sizeof(typename optimizer_type::slot_type);
      return n;
    }
  }

  using slot_type = typename optimizer_type::slot_type;
  // The optimiser state for a checkpoint, over the whole layout. Sharded, call
  // gather_optimizer_state() on every rank first (collective): rank 0 then gets the gathered
  // state (the other ranks an empty one); release_gathered_state() frees it after the save.
  optim::optimizer_state<slot_type> checkpoint_state() {
    if (!sharded()) return opt_.state();
    optim::optimizer_state<slot_type> st;
    st.step = opt_.step_count();
    const auto own = opt_.state();
    if (full_slots_.empty()) full16_.widen(full_slots_, model_.layout());  // after a 16-bit gather
    SPARSELM_CHECK(processes().rank() != 0 || full_slots_.size() == own.slots.size(),
                   "trainer: checkpoint_state() of a sharded optimiser before gather_optimizer_state()");
    for (std::size_t k = 0; k < own.slots.size() && k < full_slots_.size(); ++k)
      st.slots.push_back({own.slots[k].name, &full_slots_[k]});
    return st;
  }
  void gather_optimizer_state() {
    if (!sharded() || !gathers_state()) return;
    auto& g = shard_group();
    gather_parameters();
    // 16-bit slots of a run-time slot choice travel and are kept in their own type (half the
    // bytes of the float copies state() would make): visit_gathered16() hands them to a save
    if (full16_.gather(opt_, g, model_.layout(), [&](std::size_t e) { return shards_.byte_bounds(e); })) {
      full_slots_.clear();
      return;
    }
    const auto own = opt_.state();
    full_slots_.clear();
    full_slots_.reserve(own.slots.size());
    const auto bytes = shards_.byte_bounds(sizeof(slot_type));
    for (std::size_t k = 0; k < own.slots.size(); ++k) {
      full_slots_.push_back(g.rank() == 0 ? arena<slot_type>(model_.layout()) : arena<slot_type>());
      const auto mine = std::as_bytes(own.slots[k].slots->all());
      g.gather_bytes(mine, std::as_writable_bytes(full_slots_.back().all()), bytes);
    }
  }
  void release_gathered_state() {
    if (stage_local()) stage_.release_gathered(model_.params());
    full_slots_.clear();
    full16_.clear();
    if (stream_.armed()) stream_.drain(shard_group());  // a save that did not take the streamed slots
  }
  // Sharded, on every process before a save (instead of gather_optimizer_state()): the other
  // ranks send their slots to rank 0 in chunks as it writes them (io/slot_stream.hpp), so it
  // never holds their whole state; io::save_training_state takes them from streamed_slots().
  // Then release_gathered_state() on every rank.
  void stream_optimizer_state() {
    if (!sharded() || !gathers_state()) return;
    gather_parameters();
    stream_.prepare(shard_group(), *model_.layout(), shards_.bounds(), io::own_slots_of(opt_));
    stream_.send_own(shard_group());
  }
  // Rank 0 between stream_optimizer_state() and the save; null otherwise.
  io::slot_stream* streamed_slots() noexcept { return stream_.armed() && processes().rank() == 0 ? &stream_ : nullptr; }
  // The ranks the optimiser state is sharded over, whose slots a save streams: a replica's pipeline
  // on a grid (its replicas hold the same shards), or every process.
  parallel::replica_group& shard_group() noexcept { return sharded_by_stage() ? *stage_group() : processes(); }
  // After gather_optimizer_state() on a sharded trainer whose slots are bf16 or half (a run-time
  // slot choice): calls f(optimizer_state<bf16 or half>) with the gathered whole-layout slots in
  // their own type and returns true (rank 0; the other ranks hold empty arenas). False otherwise.
  template <class F>
  bool visit_gathered16(F&& f) {
    return full16_.visit(opt_.step_count(), std::forward<F>(f));
  }
  parallel::replica_group& replicas() noexcept { return group_ ? *group_ : single_; }
  // Every process of the run: the data replicas, or the ranks of a pipeline over ranks (and of its
  // replicas, train/rank_grid.hpp). Rank 0 writes; checks and stop requests span them all.
  parallel::replica_group& processes() noexcept {
    return grid_.active() ? grid_.world() : tgrid_.active() ? tgrid_.world() : replicas();
  }
  // The tensor-parallel ranks (trainer_options::tensor_parallel) this rank splits the model with
  // (inactive without).
  const tensor_grid& tensor_ranks() const noexcept { return tgrid_; }

  // Every replica takes rank 0's parameters (after initialisation or a resume), so all ranks train
  // the same model; then checks that they hold the same bytes. Once, before training. A rank of a
  // pipeline over ranks with the optimiser state sharded by stage then keeps only its stage's weights
  // and gradients (stage_local()) unless hooks (pattern updates) need every layer's.
  void sync_parameters() {
    auto& g = tgrid_.active() ? replicas() : processes();  // tensor-parallel: each slice over its replicas
    if (g.size() == 1) {
      if (tgrid_.active()) check_replicas_agree("before the first step");  // the group's whole tensors
      return;
    }
    SPARSELM_CHECK(!stage_local(), "trainer: sync_parameters() again after the ranks kept only their stages");
    g.broadcast(model_.params().all());
    check_replicas_agree("after the broadcast of rank 0's parameters");
    if (tgrid_.active()) return;
    if (!sharded_by_stage() || hooks_.after_update || hooks_.needs_dense_grad) return;
    stage_.assign(*model_.layout(), shards_.bounds(), stage_group()->rank(), stage_group()->size(), tied_.tensors());
    stage_.release_others(model_.params());
    stage_.release_others(model_.grads());
  }
  // Whether this rank keeps only its pipeline stage's parameters and gradients (train/stage_params.hpp;
  // the rest reads as zero). A save, or gather_parameters(), gives rank 0 the whole model then.
  bool stage_local() const noexcept { return stage_.active(); }
  const stage_params& stage_memory() const noexcept { return stage_; }
  // Collective over a pipeline's ranks when stage_local(): its rank 0 (on a grid, the first
  // replica's) receives every stage's parameters, until release_gathered_state(). Saves call it
  // through gather_optimizer_state() or stream_optimizer_state().
  void gather_parameters() {
    if (stage_local() && gathers_state()) stage_.gather(*stage_group(), model_.params());
  }
  // Fails, naming the ranks, unless every replica holds bit-identical parameters (a CRC-32C of the
  // arena gathered from every rank; stage-local ranks compare their own stage's parameters with
  // the stage's other replicas). `when` says at which point, for the message.
  // Tensor-parallel: the ranks holding the same slice, and within each group the tensors every
  // rank holds whole (train/tensor_group_checks.hpp).
  void check_replicas_agree(const std::string& when) {
    auto& g = tgrid_.active() ? replicas() : processes();
    if (g.size() > 1) check_same_parameters(g, stage_.fingerprint(model_.params()), when);
    if constexpr (requires { model_.tensor_split(); })
      if (tgrid_.active()) check_group_replicated(tgrid_.tensor(), model_, when);
  }

  // Loss statistics of a batch without gradients (fp32, no dropout). On a pipeline over ranks this
  // process runs only its stage (transformer::evaluate): every rank evaluates the same batches, and
  // finish_evaluation then sums the stages' statistics (only the last stage's are non-zero).
  loss_stats evaluate(const batch_type& b);
  void finish_evaluation(loss_stats& st) {
    if (!stage_group()) return;
    link_.flush();
    sum_over_replicas(*stage_group(), st);
  }
  // The context of an inference pass through the trainer's model outside train_step and evaluate
  // (a fine-tuned model's predictions: model.predict(batch, out, t.inference_context())): fp32, no
  // dropout, and under tensor parallelism the group's sum, so every rank of the group must run the
  // same passes. A pipeline over ranks has no such pass (evaluate instead).
  step_context inference_context() {
    SPARSELM_CHECK(!stage_group(), "trainer: inference_context: not on a pipeline over ranks");
    step_context c;
    if (tgrid_.active()) c.tensor_sum = &tsum_;
    return c;
  }

  // The loss scaler (its state is checkpointed with the training state).
  optim::loss_scaler& scaler() noexcept { return scaler_; }
  const optim::loss_scaler& scaler() const noexcept { return scaler_; }

  // One optimiser step over the given micro-batches (exactly accumulation.steps of them).
  // (Defined in train/trainer_step.hpp, after the class: not inline, so that a precompiled instance
  // -- train/precompiled.hpp -- spares a translation unit the whole step.)
  step_metrics train_step(std::span<const batch_type> micro);

  // Sets the step counter (resume); the optimiser's own counter is restored with its state.
  void set_step(std::size_t s) noexcept { step_ = s; }

 private:
  // After backward on P > 1 replicas: completes the gradient sums (all of the arena when the model
  // did not report its parts), sums the pooled dense gradients of a RigL step (max for max
  // pooling) and the loss statistics, so every rank holds the global step's numbers (sharded: the
  // sums of its own tensors' gradients).
  void reduce_over_replicas(parallel::replica_group& g, std::size_t started, bool dense_grad, loss_stats& loss) {
    auto all = model_.grads().all();
    if (started == 0)
      sum_gradients(g, 0, all.size());
    else
      SPARSELM_CHECK(started == all.size(), "trainer: the model reported ", started, " of ", all.size(),
                     " gradient elements as finished (a part reported twice or not at all)");
    g.wait();
    if constexpr (requires { model_.sparse_weights(); }) {
      if (dense_grad)
        for (auto& w : model_.sparse_weights())
          g.all_reduce(w.pooled_grad, w.pooled_by_max ? parallel::reduce_op::max : parallel::reduce_op::sum);
    }
    sum_over_replicas(g, loss);
  }

  // Starts the sum over the replicas of gradient elements [begin, end). Sharded optimiser state:
  // each rank needs the sum of its own tensors only (train/replica_sums.hpp).
  void sum_gradients(parallel::replica_group& g, std::size_t begin, std::size_t end) {
    if (stage_sums_.active()) return stage_sums_.start_sum(g, model_.grads().all(), begin, end);
    if (!sharded()) return g.start_sum(model_.grads().all().subspan(begin, end - begin));
    shards_.start_sum(g, model_.grads().all(), begin, end);
  }

  // The global gradient norm (sharded: from each rank's own tensors, bit-identical).
  double gradient_norm() {
    if (tgrid_.active()) return tensor_parallel_norm();
    return sharded() ? shards_.norm(shard_group(), model_.grads()) : optim::global_norm(model_.grads());
  }
  // Tensor-parallel: the whole model's norm from the whole tensors' sums of squares (the slices'
  // summed over the group; a replicated tensor's gradient is the same on every rank of it), added
  // up in the same order on every rank.
  double tensor_parallel_norm() {
    auto sq = optim::tensor_sum_squares(model_.grads());
    sum_sliced_squares(sq);
    double s = 0.0;
    for (double x : sq) s += x;
    return std::sqrt(s);
  }
  // Per-tensor sums of squares (index = tensor) of the whole tensors: the sliced tensors' entries
  // summed over the tensor-parallel group (the replicated ones are whole on every rank already).
  void sum_sliced_squares(std::span<double> a, std::span<double> b = {}) {
    std::vector<double> x;
    for (std::size_t i = 0; i < sliced_.size(); ++i)
      if (sliced_[i]) {
        x.push_back(a[i]);
        if (!b.empty()) x.push_back(b[i]);
      }
    tgrid_.tensor().all_reduce(std::span<double>(x));
    for (std::size_t i = 0, k = 0; i < sliced_.size(); ++i)
      if (sliced_[i]) {
        a[i] = x[k++];
        if (!b.empty()) b[i] = x[k++];
      }
  }
  // What this trainer does not do under tensor parallelism yet, refused before any work.
  void check_tensor_parallel() {
    const std::string what = detail::concat("trainer: tensor_parallel ", o_.tensor_parallel, ": ");
    if constexpr (!distributed) {
      fail(what, "needs the data_parallel::mpi policy (the groups are MPI ranks)");
    } else if constexpr (!requires { model_.tensor_split(); }) {
      fail(what, "the model does not split over ranks (tensor parallelism splits GPT, S1, BERT and LLaMA models)");
    } else {
      SPARSELM_CHECK(model_.tensor_split().size == o_.tensor_parallel, what, "the model was built split over ",
                     model_.tensor_split().size, " ranks");
      SPARSELM_CHECK(o_.pipeline.stages <= 1, what, "not with pipeline stages (", o_.pipeline.stages, ") yet");
      SPARSELM_CHECK(!o_.shard_optimizer, what, "not with shard_optimizer yet");
      sliced_ = sliced_tensors(model_, model_.params().layout().count());
    }
  }

  // This rank's pipeline when the stages are ranks (null otherwise).
  parallel::replica_group* stage_group() const noexcept { return grid_.active() ? &grid_.pipeline() : nullptr; }
  // Optimiser state sharded over a pipeline's ranks, each keeping its own stage's tensors.
  bool sharded_by_stage() const noexcept { return stage_group() && sharded(); }
  // On a grid only the first replica's ranks gather a save's optimiser state (the others' is the same).
  bool gathers_state() const noexcept { return grid_.replica() == 0; }

  template <class Parts>
  void shard_by(const Parts& parts, parallel::replica_group& g) {
    if constexpr (optim::sharded_optimizer<optimizer_type>) {
      opt_.attach(model_.layout(), parts[g.rank()]);
      shards_.assign(*model_.layout(), parts);
    } else {
      fail("trainer: shard_optimizer: the optimiser '", optim::name_of(opt_), "' cannot shard its state");
    }
  }

  Model& model_;
  optimizer_type opt_;
  optim::schedule sched_;
  trainer_options o_;
  hooks hooks_;
  optim::loss_scaler scaler_;
  std::vector<float> scales_;  // per micro-batch gradient scale
  using step_sums_type = step_sums<Model, batch_type>;
  step_sums_type sums_;        // normalisers, tokens, samples and objective counts over the replicas
  parallel::replica_group* group_ = nullptr;
  tensor_grid tgrid_;               // tensor-parallel: its group and the data replicas of the split model
  parallel::tensor_sum_fn tsum_;     // the sum over tgrid_'s group (step_context::tensor_sum)
  std::vector<bool> sliced_;         // tensor-parallel: the tensors that are this rank's slices
  rank_grid grid_;  // a pipeline over ranks (policies/pipeline.hpp): its ranks, with data replicas of it their groups
  detail::group_stage_link link_;
  gradient_shards shards_;                       // sharded: each rank's flat range
  std::vector<arena<slot_type>> full_slots_;     // sharded: whole-layout slots of a checkpoint
  gathered_slots16 full16_;  // sharded 16-bit slots gathered in their own type (gather_optimizer_state)
  io::slot_stream stream_;              // sharded: a save's slots streamed to rank 0 (stream_optimizer_state)
  tied_gradient_sum tied_;        // by stage: the head's tensors stage 0 owns (train/replica_sums.hpp)
  stage_range_sums stage_sums_;   // by stage on a grid: the ranges a stage's replicas sum
  stage_params stage_;            // stage-local: the parts of the arenas this rank keeps
  parallel::single_replica single_;
  std::size_t step_ = 0;
  std::size_t skipped_in_row_ = 0;  // consecutive steps skipped for a non-finite loss or gradient
};

}  // namespace sparselm

// train_step and evaluate
#include "sparselm/train/trainer_step.hpp"
