#pragma once
// Checkpoints of a tensor-parallel run (trainer_options::tensor_parallel, train/tensor_grid.hpp):
// ordinary checkpoints of the whole model (io/checkpoint.hpp), so that a split run's checkpoint
// loads in one process, exports to HuggingFace and resumes under another split, and a one-process
// checkpoint resumes split.
//
//   save   (collective over the run's processes) the ranks of the first data replica's tensor group
//          send their slices -- weights, optimiser slots, block patterns -- to rank 0, which
//          assembles the whole model and optimiser state (models/tensor_shards.hpp) and writes
//          them with io::save_model and io::save_training_state; the other replicas hold the same
//          slices and send nothing.
//   resume (every rank) reads the checkpoint into a whole model and optimiser and keeps its slices.
//
//   auto whole = gather_tensor_parallel_state(t);          // every rank; rank 0 gets the whole state
//   if (whole) { io::save_model(dir, whole->model()); io::save_training_state(dir / io::state_file, *whole, run); }
//   nlohmann::json run = load_tensor_parallel_checkpoint(dir, t);   // resume, on every rank
//
// Dynamic sparsity: each rank updates its own slices' patterns (train/dynamic_sparsity.hpp); a
// save also assembles the pattern updater's explored maps, a resume gives each rank its part.
//
// The price: rank 0 holds the whole model and optimiser state for the save, and every rank the
// whole model for a resume, besides its slices. A block-sparse checkpoint resumes split only when
// its patterns put each rank's number of blocks in each slice (a split run's own checkpoints do;
// take_slices names the weight otherwise). Design: docs/design/distribution.md, "Tensor parallelism".

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "sparselm/core/error.hpp"
#include "sparselm/io/checkpoint.hpp"
#include "sparselm/models/tensor_shards.hpp"
#include "sparselm/optim/loss_scaling.hpp"
#include "sparselm/parallel/replica_group.hpp"
#include "sparselm/sparse/block_pattern.hpp"
#include "sparselm/sparse/pattern_io.hpp"
#include "sparselm/sparse/update.hpp"

namespace sparselm {

// The whole model and optimiser of a tensor-parallel run, seen as io's training-state functions
// see a trainer (io::checkpointable_trainer): built from a rank's slice model (whole_plan: the
// slices' blocks together) and a fresh optimiser of the run's config; the loss scaler is the run's.
template <class Model, class Optimizer>
class whole_training_state {
 public:
  using slot_type = typename Optimizer::slot_type;

  whole_training_state(const Model& slice, const Optimizer& opt, optim::loss_scaler& scaler, std::size_t P)
      : model_(unsplit_model(slice, whole_plan(slice, P))), opt_(opt.config()), scaler_(scaler) {
    opt_.attach(model_.layout());
  }

  Model& model() noexcept { return model_; }
  Optimizer& optimizer() noexcept { return opt_; }
  std::size_t step() const noexcept { return step_; }
  void set_step(std::size_t n) noexcept { step_ = n; }
  optim::loss_scaler& scaler() noexcept { return scaler_; }
  bool sharded() const noexcept { return false; }
  optim::optimizer_state<slot_type> checkpoint_state() { return opt_.state(); }
  template <class F>
  bool visit_gathered16(F&&) noexcept {
    return false;
  }
  io::slot_stream* streamed_slots() noexcept { return nullptr; }
  parallel::replica_group& shard_group() noexcept { return single_; }
  void release_gathered_state() noexcept {}

  // The whole model's explored maps (dynamic sparsity): an updater of the run's config, or null.
  sparse::pattern_updater* updater() noexcept { return updater_ ? &*updater_ : nullptr; }
  sparse::pattern_updater& track_updates(const sparse::update_config& c) { return updater_.emplace(c); }

 private:
  Model model_;
  Optimizer opt_;
  optim::loss_scaler& scaler_;
  std::size_t step_ = 0;
  parallel::single_replica single_;
  std::optional<sparse::pattern_updater> updater_;
};

// A trainer whose split model can be checkpointed whole: its model type splits over ranks and
// builds unsplit (models/tensor_shards.hpp, has_unsplit_twin); its optimiser is built from its config.
template <class Trainer>
concept tensor_checkpointable = requires(Trainer& t) {
  t.tensor_ranks().active();
  t.model().tensor_split();
  requires has_unsplit_twin<std::remove_cvref_t<decltype(t.model())>>;
  requires std::is_constructible_v<std::remove_cvref_t<decltype(t.optimizer())>, decltype(t.optimizer().config())>;
};

template <class Trainer>
using whole_state_of =
    whole_training_state<std::remove_cvref_t<decltype(std::declval<Trainer&>().model())>,
                         std::remove_cvref_t<decltype(std::declval<Trainer&>().optimizer())>>;

namespace detail {
// Block (i, j) of rank r's slice of the split block-sparse layer n, in the whole weight's grid.
template <class Linear>
std::pair<std::size_t, std::size_t> whole_block(const Linear& n, std::size_t r, std::size_t i, std::size_t j) {
  const auto sp = n.split();
  const std::size_t B = n.block_size();
  if (sp.kind == parallel::split_kind::columns) return {i, whole_index(j, n.out() / B, sp.parts, r, sp.of.size)};
  return {r * (n.in() / B) + i, j};
}

// The block grid (rows, columns) of the whole weight that the split layer n's slice is one of P of.
template <class Linear>
std::pair<std::size_t, std::size_t> whole_grid(const Linear& n, std::size_t P) {
  const std::size_t B = n.block_size(), rows = n.in() / B, cols = n.out() / B;
  if (n.split().kind == parallel::split_kind::columns) return {rows, cols * P};
  return {rows * P, cols};
}

// Rank 0 of g receives every rank's `mine` (all of one size), rank r's at r * stride (returned;
// a multiple of the transport's unit): the others get an empty buffer. `what` names the data.
inline std::vector<std::byte> gather_equal(parallel::replica_group& g, std::span<const std::byte> mine,
                                           std::size_t& stride, const std::string& what) {
  const std::size_t P = g.size(), unit = parallel::replica_group::gather_unit;
  std::vector<std::uint64_t> sizes(P);
  g.all_gather(mine.size(), sizes);
  for (std::size_t r = 0; r < P; ++r)
    SPARSELM_CHECK(sizes[r] == mine.size(), "tensor-parallel checkpoint: rank ", r, " of the group holds ", sizes[r],
                   " bytes of ", what, ", rank ", g.rank(), " ", mine.size());
  stride = (mine.size() + unit - 1) / unit * unit;
  std::vector<std::byte> padded;
  std::span<const std::byte> send = mine;
  if (stride != mine.size()) {
    padded.assign(stride, std::byte{0});
    if (!mine.empty()) std::memcpy(padded.data(), mine.data(), mine.size());
    send = padded;
  }
  std::vector<std::size_t> bounds(P + 1);
  for (std::size_t r = 0; r <= P; ++r) bounds[r] = r * stride;
  std::vector<std::byte> all(g.rank() == 0 ? P * stride : 0);
  g.gather_bytes(send, all, bounds);
  return all;
}

// Gathers the group's arenas `mine` (over the slice layout) and, on rank 0, assembles them into
// `to` (over the whole layout).
template <class Model, class T>
void gather_slices(parallel::replica_group& g, const Model& slice,
                   std::span<const std::vector<const sparse::block_pattern*>> patterns, const arena<T>& mine,
                   const Model* whole, arena<T>* to, bool set_patterns, const std::string& what) {
  std::size_t stride = 0;
  const auto all = gather_equal(g, std::as_bytes(mine.all()), stride, what);
  if (g.rank() != 0) return;
  std::vector<tensor_source<T>> src(g.size());
  std::vector<const tensor_source<T>*> ptr;
  for (std::size_t r = 0; r < g.size(); ++r) {
    src[r] = {&mine.layout(), reinterpret_cast<const T*>(all.data() + r * stride)};
    ptr.push_back(&src[r]);
  }
  assemble_slices(slice, patterns, std::span<const tensor_source<T>* const>(ptr), *whole, *to, set_patterns);
}
}  // namespace detail

// Collective over t.processes(): the whole model and optimiser state of a tensor-parallel run on
// rank 0 (null on every other rank), at the trainer's step; with `up` (dynamic sparsity), its
// explored maps too (whole_training_state::updater()).
template <tensor_checkpointable Trainer>
std::unique_ptr<whole_state_of<Trainer>> gather_tensor_parallel_state(Trainer& t,
                                                                     const sparse::pattern_updater* up = nullptr) {
  const auto& tg = t.tensor_ranks();
  SPARSELM_CHECK(tg.active(), "gather_tensor_parallel_state: the trainer is not tensor-parallel");
  if (tg.data() && tg.data()->rank() != 0) return nullptr;  // another replica: the same slices as replica 0's
  parallel::replica_group& g = tg.tensor();
  const std::size_t P = g.size();
  auto& model = t.model();
  std::unique_ptr<whole_state_of<Trainer>> w;
  if (g.rank() == 0) w = std::make_unique<whole_state_of<Trainer>>(model, t.optimizer(), t.scaler(), P);

  // The block patterns: every rank's rows and columns of each split block-sparse weight.
  const auto own = split_patterns(model);
  std::vector<std::uint32_t> coords;
  for (const auto* p : own) {
    coords.insert(coords.end(), p->row.begin(), p->row.end());
    coords.insert(coords.end(), p->col.begin(), p->col.end());
  }
  std::size_t stride = 0;
  const auto all = detail::gather_equal(g, std::as_bytes(std::span<const std::uint32_t>(coords)), stride,
                                        "block patterns");
  std::vector<std::vector<sparse::block_pattern>> pats(g.rank() == 0 ? P : 0);
  std::vector<std::vector<const sparse::block_pattern*>> patterns(P);
  for (std::size_t r = 0; r < pats.size(); ++r) {
    const auto* c = reinterpret_cast<const std::uint32_t*>(all.data() + r * stride);
    pats[r].reserve(own.size());
    for (const auto* p : own) {
      sparse::block_pattern q;
      q.block = p->block;
      q.rows_b = p->rows_b;
      q.cols_b = p->cols_b;
      q.row.assign(c, c + p->nnz());
      q.col.assign(c + p->nnz(), c + 2 * p->nnz());
      c += 2 * p->nnz();
      pats[r].push_back(std::move(q));
    }
    for (const auto& q : pats[r]) patterns[r].push_back(&q);
  }
  const std::span<const std::vector<const sparse::block_pattern*>> pat(patterns);
  auto* whole = w ? &w->model() : nullptr;
  detail::gather_slices(g, model, pat, model.params(), whole, w ? &whole->params() : nullptr, true, "weights");

  // The optimiser slots, one at a time (float copies of 16-bit slots, rounded back by restore).
  auto mine = t.optimizer().state();
  optim::optimizer_state<typename whole_state_of<Trainer>::slot_type> to;
  if (w) to = w->optimizer().state();
  for (std::size_t k = 0; k < mine.slots.size(); ++k) {
    SPARSELM_CHECK(!w || (k < to.slots.size() && to.slots[k].name == mine.slots[k].name),
                   "tensor-parallel checkpoint: the whole optimiser has no slot '", mine.slots[k].name, "'");
    detail::gather_slices(g, model, pat, *mine.slots[k].slots, whole, w ? to.slots[k].slots : nullptr, false,
                          "optimiser slot '" + mine.slots[k].name + "'");
  }
  if (w) {
    to.step = t.optimizer().step_count();
    w->optimizer().restore(to);
    w->set_step(t.step());
  }
  if (up) {  // the explored maps: per weight a tracked flag and the slice's grid, one byte a block
    std::vector<std::uint8_t> maps;
    detail::for_sparse_layers(model, true, [&](const auto& n) {
      const std::size_t cells = (n.in() / n.block_size()) * (n.out() / n.block_size());
      const auto* e = up->explored(n.weight().name);
      maps.push_back(e ? 1 : 0);
      if (e) maps.insert(maps.end(), e->ever.begin(), e->ever.end());
      else maps.resize(maps.size() + cells, 0);
    });
    const auto got = detail::gather_equal(g, std::as_bytes(std::span<const std::uint8_t>(maps)), stride,
                                          "explored maps");
    if (w) {
      auto& wu = w->track_updates(up->config());
      std::size_t at = 0;
      detail::for_sparse_layers(model, true, [&](const auto& n) {
        const std::size_t B = n.block_size(), rows = n.in() / B, cols = n.out() / B;
        const auto [W_rows, W_cols] = detail::whole_grid(n, P);
        std::vector<std::int32_t> grid(W_rows * W_cols, 0);
        bool tracked = true;
        for (std::size_t r = 0; r < P; ++r) {
          const auto* c = reinterpret_cast<const std::uint8_t*>(got.data() + r * stride) + at;
          tracked = tracked && c[0] != 0;
          for (std::size_t i = 0; i < rows; ++i)
            for (std::size_t j = 0; j < cols; ++j) {
              const auto [wi, wj] = detail::whole_block(n, r, i, j);
              grid[wi * W_cols + wj] = c[1 + i * cols + j];
            }
        }
        at += 1 + rows * cols;
        if (tracked)
          wu.restore_explored(n.weight().name, sparse::explored_from_i32(n.weight().name, W_rows, W_cols, grid));
      });
      detail::for_sparse_layers(model, false, [&](const auto& n) {  // whole on every rank: rank 0's map
        if (const auto* e = up->explored(n.weight().name)) wu.restore_explored(n.weight().name, *e);
      });
    }
  }
  return w;
}

// Every rank: reads checkpoint directory `dir` (io/checkpoint.hpp: model and training state) into
// the whole model and optimiser, and gives t's model and optimiser their slices, t its step and
// loss scale. Returns the training state's `run` JSON (io::load_training_state).
template <tensor_checkpointable Trainer>
nlohmann::json load_tensor_parallel_checkpoint(const std::filesystem::path& dir, Trainer& t,
                                               sparse::pattern_updater* up = nullptr, bool verify = true) {
  auto& model = t.model();
  const std::size_t P = model.tensor_split().size;
  whole_state_of<Trainer> w(model, t.optimizer(), t.scaler(), P);
  // block-sparse weights get their patterns' sizes from an initialisation (the checkpoint's
  // patterns and values then replace it)
  if constexpr (requires { w.model().init(std::uint64_t{0}); }) w.model().init(0);
  io::load_model(dir, w.model(), {.verify = verify});
  if (up) w.track_updates(up->config());
  nlohmann::json run = io::load_training_state(dir / io::state_file, w, w.updater(), verify);
  take_slices(w.model(), w.model().params(), model, model.params(), true);
  auto from = w.optimizer().state();
  auto mine = t.optimizer().state();
  for (std::size_t k = 0; k < mine.slots.size(); ++k) {
    SPARSELM_CHECK(k < from.slots.size() && from.slots[k].name == mine.slots[k].name, dir.string(),
                   ": the whole optimiser has no slot '", mine.slots[k].name, "'");
    take_slices(w.model(), *from.slots[k].slots, model, *mine.slots[k].slots, false);
  }
  mine.step = from.step;
  t.optimizer().restore(mine);
  t.set_step(w.step());
  if (up) {  // each weight's part of the whole explored map (none saved: the next update starts it)
    const std::size_t r = model.tensor_split().rank;
    detail::for_sparse_layers(model, true, [&](const auto& n) {
      const std::string& name = n.weight().name;
      const auto* e = w.updater()->explored(name);
      if (!e) return up->untrack(name);
      const std::size_t B = n.block_size(), rows = n.in() / B, cols = n.out() / B;
      const std::size_t W_cols = detail::whole_grid(n, P).second;
      std::vector<std::int32_t> grid(rows * cols);
      for (std::size_t i = 0; i < rows; ++i)
        for (std::size_t j = 0; j < cols; ++j) {
          const auto [wi, wj] = detail::whole_block(n, r, i, j);
          grid[i * cols + j] = e->ever.at(wi * W_cols + wj);
        }
      up->restore_explored(name, sparse::explored_from_i32(name, rows, cols, grid));
    });
    detail::for_sparse_layers(model, false, [&](const auto& n) {  // whole on every rank: the whole map
      const std::string& name = n.weight().name;
      if (const auto* e = w.updater()->explored(name)) up->restore_explored(name, *e);
      else up->untrack(name);
    });
  }
  return run;
}

}  // namespace sparselm
