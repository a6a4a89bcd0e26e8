// The collectives a data-parallel GPT-2 small step uses, timed alone over MPI (docs/design/distribution.md):
// a sum of the 124.4 M fp32 gradients (497.8 MB) as one blocking MPI_Allreduce, as one
// MPI_Iallreduce, as 13 pieces (the trainer's per-part sums) blocking and non-blocking, and the
// sharded optimiser's collectives: a reduce-scatter of the gradients (whole and in 13 parts) and
// the all-gather of the updated parameters; and ours (parallel/mpi.hpp): sum_scatter, which the
// trainer uses instead of a reduce-scatter, and split_sum (sum_scatter, then MPI_Allgatherv), which
// it uses instead of MPI_Allreduce (whole and in 13 parts).
//
//   mpirun -np 2 --bind-to none ./build/benchmarks/mpi_collectives [elements=124439808] [reps=5]
//
// Prints one JSON line per collective on rank 0: the median seconds over the repetitions.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "sparselm/parallel/mpi.hpp"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const std::size_t n = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 124439808;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 5;
  const int parts = 13;  // GPT-2 small: embedding, 12 blocks (the head's tensors join the last)
  std::vector<float> x(n, 1.0f);
  const std::size_t per = n / parts;
  auto piece = [&](int k) { return k + 1 < parts ? per : n - per * (parts - 1); };
  auto group = std::make_unique<sparselm::parallel::mpi_group>();  // released before MPI_Finalize
  std::vector<std::size_t> bounds(std::size_t(size) + 1);
  for (int r = 0; r <= size; ++r) bounds[std::size_t(r)] = n * std::size_t(r) / std::size_t(size);
  const std::vector<std::pair<std::string, std::function<void()>>> cases = {
      {"allreduce", [&] { MPI_Allreduce(MPI_IN_PLACE, x.data(), int(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); }},
      {"iallreduce",
       [&] {
         MPI_Request q;
         MPI_Iallreduce(MPI_IN_PLACE, x.data(), int(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &q);
         MPI_Wait(&q, MPI_STATUS_IGNORE);
       }},
      {"allreduce_13_parts",
       [&] {
         for (int k = 0; k < parts; ++k)
           MPI_Allreduce(MPI_IN_PLACE, x.data() + k * per, int(piece(k)), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
       }},
      {"iallreduce_13_parts",
       [&] {
         std::vector<MPI_Request> q(parts);
         for (int k = 0; k < parts; ++k)
           MPI_Iallreduce(MPI_IN_PLACE, x.data() + k * per, int(piece(k)), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &q[k]);
         MPI_Waitall(parts, q.data(), MPI_STATUSES_IGNORE);
       }},
      {"reduce_scatter",  // the sharded optimiser's gradient sum: each rank gets the sum of its 1/P
       [&] {
         std::vector<int> counts(std::size_t(size), int(n / std::size_t(size)));
         counts.back() += int(n % std::size_t(size));
         MPI_Reduce_scatter(MPI_IN_PLACE, x.data(), counts.data(), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
       }},
      {"reduce_scatter_13_parts",
       [&] {
         for (int k = 0; k < parts; ++k) {
           std::vector<int> counts(std::size_t(size), int(piece(k) / std::size_t(size)));
           counts.back() += int(piece(k) % std::size_t(size));
           MPI_Reduce_scatter(MPI_IN_PLACE, x.data() + k * per, counts.data(), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
         }
       }},
      {"sum_scatter",  // ours (parallel/mpi.hpp): point-to-point exchange of the parts, then the sums
       [&] { group->sum_scatter(x, bounds); }},
      {"split_sum",  // ours: what the trainer's gradient sums run (sum_scatter, then MPI_Allgatherv)
       [&] { group->all_reduce(std::span<float>(x), sparselm::parallel::reduce_op::sum); }},
      {"split_sum_13_parts",
       [&] {
         for (int k = 0; k < parts; ++k)
           group->all_reduce(std::span<float>(x.data() + k * per, piece(k)), sparselm::parallel::reduce_op::sum);
       }},
      {"allgather_params",
       [&] {
         const int each = int(n / std::size_t(size));
         MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, x.data(), each, MPI_FLOAT, MPI_COMM_WORLD);
       }},
  };
  for (const auto& [name, f] : cases) {
    std::vector<double> t;
    for (int r = 0; r < reps; ++r) {
      MPI_Barrier(MPI_COMM_WORLD);
      const auto a = std::chrono::steady_clock::now();
      f();
      t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count());
    }
    std::sort(t.begin(), t.end());
    if (rank == 0)
      std::printf("{\"collective\": \"%s\", \"ranks\": %d, \"bytes\": %zu, \"median_s\": %.4f, \"min_s\": %.4f}\n",
                  name.c_str(), size, n * sizeof(float), t[t.size() / 2], t[0]);
  }
  group.reset();
  MPI_Finalize();
  return 0;
}
