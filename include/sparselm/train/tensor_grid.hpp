#pragma once
// The processes of a tensor-parallel run (trainer_options::tensor_parallel, parallel/tensor_parallel.hpp):
// groups of T consecutive ranks each split every block of the model, and with P = R·T ranks, R data
// replicas of that split model. Rank w is slice w % T of replica w / T (with mpirun's default
// mapping the ranks of a group are neighbours on one host: they sum activations twice per block
// each way, while the replicas sum gradients once per step).
//
//   tensor group: the T ranks of one replica, ordered by slice (the sub-layers' sums);
//   data group:   the R ranks holding the same slice, ordered by replica (rows of every global
//                 batch, normalisers, the gradient sums, evaluation, the broadcast of the start).
//
// A program builds its model with tensor_grid::split_of(world, T) before the trainer, whose
// set_replicas then makes the groups.

#include <cstddef>
#include <memory>

#include "sparselm/core/error.hpp"
#include "sparselm/parallel/replica_group.hpp"
#include "sparselm/parallel/tensor_parallel.hpp"

namespace sparselm {

class tensor_grid {
 public:
  tensor_grid() = default;
  // Collective over world: every rank calls it with the same T.
  tensor_grid(parallel::replica_group& world, std::size_t T) : world_(&world), split_(split_of(world, T)) {
    replicas_ = world.size() / T;
    if (replicas_ == 1) return;  // the world is the group: no sub-groups
    const std::size_t w = world.rank();
    tensor_ = world.split(w / T, w % T);
    data_ = world.split(w % T, w / T);
    SPARSELM_CHECK(tensor_->size() == T && data_->size() == replicas_, "trainer: splitting ", world.describe(),
                   " into ", replicas_, " replicas of ", T, " tensor-parallel ranks gave groups of ", tensor_->size(),
                   " and ", data_->size(), " ranks");
  }

  // This rank's slice of a group of T over world's ranks; refuses a T that does not divide them.
  static parallel::tensor_split split_of(const parallel::replica_group& world, std::size_t T) {
    SPARSELM_CHECK(T >= 1 && world.size() % T == 0, "trainer.tensor_parallel (--tensor-parallel) ", T,
                   " must divide the number of processes (tensor-parallel ranks x data replicas); ", world.describe());
    return {world.rank() % T, T};
  }

  bool active() const noexcept { return world_ != nullptr; }
  const parallel::tensor_split& split() const noexcept { return split_; }
  std::size_t replicas() const noexcept { return replicas_; }
  parallel::replica_group& world() const noexcept { return *world_; }
  // This rank's tensor-parallel group.
  parallel::replica_group& tensor() const noexcept { return tensor_ ? *tensor_ : *world_; }
  // The ranks holding the same slice (null with one replica).
  parallel::replica_group* data() const noexcept { return data_.get(); }

 private:
  parallel::replica_group* world_ = nullptr;
  parallel::tensor_split split_{};
  std::size_t replicas_ = 1;
  std::unique_ptr<parallel::replica_group> tensor_, data_;
};

}  // namespace sparselm
