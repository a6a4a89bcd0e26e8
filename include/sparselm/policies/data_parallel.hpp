#pragma once
// Data-parallel policies: how gradients are combined across replicas.
//
// When to use: `none` (default) trains one replica in this process; the trainer has no replica
// group. `mpi` trains one model on P replicas (processes started by mpirun, parallel/mpi.hpp):
// each rank runs the step on its own rows of the global batch, the trainer sums the loss
// normalisers and the gradients over the ranks (one sum per model part, started as backward
// finishes the part), and every rank then applies the same update to the same weights.
// The replica group is given at run time (trainer::set_replicas); a group of one process makes
// `mpi` behave exactly as `none`, so one program serves both launches. docs/design/distribution.md.

#include <concepts>

namespace sparselm::data_parallel {

struct none {
  static constexpr const char* name = "none";
  static constexpr bool distributed = false;
};

struct mpi {
  static constexpr const char* name = "mpi";
  static constexpr bool distributed = true;
};

template <class P>
concept policy = requires {
  { P::distributed } -> std::convertible_to<bool>;
};

}  // namespace sparselm::data_parallel
