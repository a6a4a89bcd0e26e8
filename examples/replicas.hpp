#pragma once
// The replica group of a training program: the MPI ranks when the program was started by mpirun
// (and built with MPI: CMake defines SPARSELM_HAVE_MPI), the single process otherwise. It outlives
// the program's body, so that a failed rank of several ends the whole job (finish):
//
//   int main(int argc, char** argv) {
//     examples::replicas replicas;
//     const int status = sparselm::run_program("gpt_train", [&]() -> int {
//       replicas.start(argc, argv);
//       ... t.set_replicas(replicas.group()); ...          // trainer with data_parallel::mpi
//     });
//     return replicas.finish(status);
//   }
//
//   mpirun -np 2 ./build/examples/gpt_train --config ... --threads 1   (docs/design/distribution.md)

#include "sparselm/parallel/replica_group.hpp"
#if SPARSELM_HAVE_MPI
#include "sparselm/parallel/mpi.hpp"
#endif

namespace examples {

class replicas {
 public:
#if SPARSELM_HAVE_MPI
  void start(int& argc, char**& argv) { env_.init(argc, argv); }
  sparselm::parallel::replica_group& group() noexcept { return env_.group(); }
  int finish(int status) { return env_.finish(status); }

 private:
  sparselm::parallel::mpi_environment env_;
#else
  void start(int&, char**&) {}
  sparselm::parallel::replica_group& group() noexcept { return one_; }
  int finish(int status) { return status; }

 private:
  sparselm::parallel::single_replica one_;
#endif
};

}  // namespace examples
