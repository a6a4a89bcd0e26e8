#pragma once
// The processes of a run placed on a pipeline over ranks (policies/pipeline.hpp): S stages, and
// with P = R·S ranks, R data replicas of that pipeline (a 2-D grid). Rank w runs stage w % S of
// replica w / S, so a replica's stages are consecutive ranks (with mpirun's default mapping,
// neighbours on one host: the activations travel between them every micro-batch, the gradients
// between replicas once per step).
//
//   pipeline group: the S ranks of one replica, ordered by stage (point-to-point activations and
//                   gradients, then the sum of the stages' gradients, zeros outside each stage);
//   data group:     the R ranks of one stage, ordered by replica (rows of every global batch,
//                   normalisers, the sum of the replicas' gradients, evaluation).
//
// The sum over the data group, then over the pipeline group, is the sum over every rank: every
// process ends with the same gradient and applies the same update (as one process would on the
// global batch, up to the order of the additions).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "sparselm/core/error.hpp"
#include "sparselm/parallel/replica_group.hpp"
#include "sparselm/policies/pipeline.hpp"

namespace sparselm {

namespace detail {
// A replica group's ranks as the stages of a pipeline (rank = stage), over its point-to-point calls.
class group_stage_link final : public pipeline::stage_link {
 public:
  explicit group_stage_link(parallel::replica_group* g = nullptr) : g_(g) {}
  std::size_t stage() const noexcept override { return g_ ? g_->rank() : 0; }
  std::size_t stages() const noexcept override { return g_ ? g_->size() : 1; }
  void send(std::span<const float> x, std::size_t to, std::uint64_t tag) override { g_->send(x, to, tag); }
  void recv(std::span<float> x, std::size_t from, std::uint64_t tag) override { g_->recv(x, from, tag); }
  void flush() override { g_->flush_sends(); }

 private:
  parallel::replica_group* g_;
};
}  // namespace detail

class rank_grid {
 public:
  rank_grid() = default;
  // The grid of `world`'s ranks for a pipeline of `stages` stages: world.size() must be a multiple
  // of it. A world of exactly `stages` ranks is one replica (no sub-groups are made).
  rank_grid(parallel::replica_group& world, std::size_t stages) : world_(&world) {
    const std::size_t P = world.size();
    SPARSELM_CHECK(stages >= 2 && P >= stages && P % stages == 0, "trainer: a pipeline of ", stages,
                   " stages placed on ranks needs as many ranks or a multiple of them (stages x data replicas); ",
                   world.describe());
    replicas_ = P / stages;
    replica_ = world.rank() / stages;
    if (replicas_ == 1) return;
    const std::size_t w = world.rank();
    // Collective on every rank of world, in the same order everywhere.
    pipeline_ = world.split(w / stages, w % stages);
    data_ = world.split(w % stages, w / stages);
    SPARSELM_CHECK(pipeline_->size() == stages && data_->size() == replicas_, "trainer: splitting ", world.describe(),
                   " into ", replicas_, " replicas of ", stages, " stages gave groups of ", pipeline_->size(), " and ",
                   data_->size(), " ranks");
  }

  bool active() const noexcept { return world_ != nullptr; }
  std::size_t replicas() const noexcept { return replicas_; }
  // This rank's replica (0 without a grid).
  std::size_t replica() const noexcept { return replica_; }
  // Every process of the run.
  parallel::replica_group& world() const noexcept { return *world_; }
  // This rank's pipeline: its replica's stages.
  parallel::replica_group& pipeline() const noexcept { return pipeline_ ? *pipeline_ : *world_; }
  // This rank's data replicas (null with one replica: the caller's single process).
  parallel::replica_group* data() const noexcept { return data_.get(); }

 private:
  parallel::replica_group* world_ = nullptr;
  std::size_t replicas_ = 1, replica_ = 0;
  std::unique_ptr<parallel::replica_group> pipeline_, data_;
};

}  // namespace sparselm
