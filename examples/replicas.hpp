#pragma once
// The replica group of a training program: the MPI ranks when the program was started by mpirun
// (and built with MPI: CMake defines SPARSELM_HAVE_MPI), the single process otherwise.
//
//   examples::replicas replicas(argc, argv);       // first thing in the program's body
//   t.set_replicas(replicas.group());              // trainer with data_parallel::mpi
//
//   mpirun -np 2 ./build/examples/gpt_train --config ... --threads 1   (docs/distributed.md)

#include "sparselm/parallel/replica_group.hpp"
#if SPARSELM_HAVE_MPI
#include "sparselm/parallel/mpi.hpp"
#endif

namespace examples {

class replicas {
 public:
#if SPARSELM_HAVE_MPI
  replicas(int& argc, char**& argv) : env_(argc, argv) {}
  sparselm::parallel::replica_group& group() noexcept { return env_.group(); }

 private:
  sparselm::parallel::mpi_environment env_;
#else
  replicas(int&, char**&) {}
  sparselm::parallel::replica_group& group() noexcept { return one_; }

 private:
  sparselm::parallel::single_replica one_;
#endif
};

}  // namespace examples
