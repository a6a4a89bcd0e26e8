// The MPI group's collectives under mpirun (ctest mpi.sums runs it on 2 and 3 ranks): float sums
// split into sum_scatter + all-gather (mpi_group::split_sum, the gradient sums' path) against
// MPI_Allreduce and against the exact sum, for lengths around the split threshold and the gather
// unit; sum_scatter and all_gather_bytes on uneven bounds; that every rank holds the same bits
// afterwards; and split sub-groups (their sizes, order, sums and messages). Values are small
// integers times a power of two, so every order of addition gives the exact sum, and the
// comparison can ask for equality. Exits 1 naming the first failure.
#include <mpi.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "sparselm/io/crc32c.hpp"
#include "sparselm/parallel/mpi.hpp"

namespace {

using sparselm::parallel::mpi_group;
using sparselm::parallel::reduce_op;

int failures = 0;
void expect(bool ok, const std::string& what, int rank) {
  if (ok) return;
  ++failures;
  std::fprintf(stderr, "mpi_sums: rank %d: FAIL: %s\n", rank, what.c_str());
}

// Rank r's value at i: exact in float, and so is any sum of P of them.
float value(std::size_t r, std::size_t i) { return float(int((i * 7 + r * 13) % 61) - 30) * 0.125f; }

// Whether every rank holds the same bytes in x (a CRC-32C of each, gathered).
bool same_everywhere(mpi_group& g, std::span<const float> x) {
  const std::uint64_t crc = sparselm::io::crc32c(x.data(), x.size_bytes());
  std::vector<std::uint64_t> all(g.size());
  g.all_gather(crc, all);
  for (auto c : all)
    if (c != all[0]) return false;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  {
    auto split = std::make_unique<mpi_group>(MPI_COMM_WORLD, false, true);
    auto plain = std::make_unique<mpi_group>(MPI_COMM_WORLD, false, false);
    const std::size_t P = split->size(), r = split->rank();
    const int rank = int(r);
    expect(P >= 2, "run me under mpirun with at least 2 ranks", rank);
    const std::size_t m = mpi_group::split_sum_min;
    for (std::size_t n : {std::size_t(1), std::size_t(9), m - 1, m, m + 1, m + 7, m + 8, 3 * m + 5, std::size_t(1) << 20}) {
      std::vector<float> a(n), b(n), exact(n);
      for (std::size_t i = 0; i < n; ++i) {
        a[i] = b[i] = value(r, i);
        float s = 0;
        for (std::size_t q = 0; q < P; ++q) s += value(q, i);
        exact[i] = s;
      }
      split->all_reduce(std::span<float>(a), reduce_op::sum);
      plain->all_reduce(std::span<float>(b), reduce_op::sum);
      const std::string at = " (n = " + std::to_string(n) + ")";
      expect(std::memcmp(a.data(), exact.data(), n * sizeof(float)) == 0, "split sum is not the exact sum" + at, rank);
      expect(std::memcmp(b.data(), exact.data(), n * sizeof(float)) == 0, "MPI_Allreduce is not the exact sum" + at, rank);
      expect(same_everywhere(*split, a), "ranks hold different split sums" + at, rank);
      // start_sum (the trainer's per-part call) takes the same path
      for (std::size_t i = 0; i < n; ++i) a[i] = value(r, i);
      split->start_sum(a);
      split->wait();
      expect(std::memcmp(a.data(), exact.data(), n * sizeof(float)) == 0, "start_sum is not the exact sum" + at, rank);
    }
    // max stays an MPI_Allreduce, and is right
    {
      std::vector<float> x(m + 3);
      for (std::size_t i = 0; i < x.size(); ++i) x[i] = float((i + r) % P);
      split->all_reduce(std::span<float>(x), reduce_op::max);
      bool ok = true;
      for (float v : x) ok = ok && v == float(P - 1);
      expect(ok, "max over the ranks", rank);
    }
    // sum_scatter on uneven bounds (one empty): rank q's part holds the sum
    {
      const std::size_t n = 1000;
      std::vector<std::size_t> bounds(P + 1);
      for (std::size_t q = 0; q <= P; ++q) bounds[q] = q == 0 ? 0 : (q == 1 ? 0 : (q == P ? n : 100 * q + 3));
      std::vector<float> x(n);
      for (std::size_t i = 0; i < n; ++i) x[i] = value(r, i);
      split->sum_scatter(x, bounds);
      bool ok = true;
      for (std::size_t i = bounds[r]; i < bounds[r + 1]; ++i) {
        float s = 0;
        for (std::size_t q = 0; q < P; ++q) s += value(q, i);
        ok = ok && x[i] == s;
      }
      expect(ok, "sum_scatter: this rank's part is not the sum", rank);
    }
    // all_gather_bytes: every rank ends with every rank's part
    {
      const std::size_t unit = sparselm::parallel::replica_group::gather_unit;
      std::vector<std::size_t> bounds(P + 1);
      for (std::size_t q = 0; q <= P; ++q) bounds[q] = q * 5 * unit;
      std::vector<std::byte> x(bounds[P], std::byte{0});
      for (std::size_t i = bounds[r]; i < bounds[r + 1]; ++i) x[i] = std::byte(r * 31 + i % 7);
      split->all_gather_bytes(x, bounds);
      bool ok = true;
      for (std::size_t q = 0; q < P; ++q)
        for (std::size_t i = bounds[q]; i < bounds[q + 1]; ++i) ok = ok && x[i] == std::byte(q * 31 + i % 7);
      expect(ok, "all_gather_bytes: a rank's part did not arrive", rank);
    }
    // split: the ranks of one colour as a group of their own, ordered by key (train/rank_grid.hpp
    // makes its pipeline and data groups so), with working sums and point-to-point messages
    {
      const std::size_t colour = r % 2, key = P - r;  // keys reverse the order inside a colour
      auto sub = split->split(colour, key);
      std::size_t members = 0, before = 0;  // ranks of my colour, and those of them with a larger world rank
      for (std::size_t q = 0; q < P; ++q)
        if (q % 2 == colour) {
          ++members;
          if (q > r) ++before;
        }
      expect(sub->size() == members && sub->rank() == before,
             "split: group of " + std::to_string(sub->size()) + " ranks, rank " + std::to_string(sub->rank()) +
                 "; expected " + std::to_string(members) + " and " + std::to_string(before),
             rank);
      std::vector<float> x(mpi_group::split_sum_min + 5, float(r + 1));
      sub->all_reduce(std::span<float>(x), reduce_op::sum);
      float want = 0;
      for (std::size_t q = colour; q < P; q += 2) want += float(q + 1);
      bool ok = true;
      for (float v : x) ok = ok && v == want;
      expect(ok, "split: the sum covers other ranks than the group's", rank);
      if (sub->size() > 1) {  // a ring inside the group
        const std::size_t n = sub->size(), me = sub->rank();
        std::vector<float> out(3, float(me)), in(3, -1.0f);
        sub->send(out, (me + 1) % n, 7);
        sub->recv(in, (me + n - 1) % n, 7);
        sub->flush_sends();
        expect(in[0] == float((me + n - 1) % n) && in[2] == in[0], "split: point-to-point inside the group", rank);
      }
    }
    int local = failures, total = 0;
    MPI_Allreduce(&local, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    failures = total;
    if (rank == 0) std::printf("mpi_sums: %zu ranks, %s\n", P, total ? "FAILED" : "all checks passed");
  }
  MPI_Finalize();
  return failures ? 1 : 0;
}
