#pragma once
// The replicas of a data-parallel run, as the trainer and the training loop see them: P processes
// that each hold the whole model, train on their own rows of every global batch and combine their
// gradients. The interface is what a step needs (sums, a broadcast, a logical OR, non-blocking sums
// of gradient ranges); parallel/mpi.hpp implements it over MPI, `single_replica` is the group of one
// process (every operation is the identity), so code written against a replica_group runs
// unchanged without MPI.
//
//   sparselm::parallel::single_replica one;           // or parallel::mpi_group (parallel/mpi.hpp)
//   t.set_replicas(one);                              // trainer<Model, P> with P::data_parallel = mpi
//   if (group.rank() == 0) log.write(...);            // only rank 0 writes files
//
// Gradient sums: start_sum(range) begins an in-place sum over the replicas of a gradient range; an
// implementation may finish it at once (blocking) or return and finish it in wait() (progress()
// lets the transport advance between pieces of work). The trainer starts one sum per model part
// as backward finishes the part's gradients, so a non-blocking transport overlaps the rest of
// backward.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <utility>

#include "sparselm/core/error.hpp"

namespace sparselm::parallel {

enum class reduce_op { sum, max };

class replica_group {
 public:
  virtual ~replica_group() = default;
  virtual std::size_t rank() const noexcept = 0;
  virtual std::size_t size() const noexcept = 0;
  // What the group runs on, for logs ("1 process", "MPI, 2 ranks on 1 host", ...).
  virtual std::string describe() const = 0;

  // In-place reductions over the replicas (every rank gets the result).
  virtual void all_reduce(std::span<float> x, reduce_op op = reduce_op::sum) = 0;
  virtual void all_reduce(std::span<double> x, reduce_op op = reduce_op::sum) = 0;
  // Rank 0's values to every rank.
  virtual void broadcast(std::span<float> x) = 0;
  virtual void broadcast(std::string& s) = 0;
  // Whether `flag` is true on any rank (a stop request, an error on one rank).
  virtual bool any(bool flag) = 0;
  // Every rank's 64-bit value (e.g. a checksum), in rank order, in `out` (size() values).
  virtual void all_gather(std::uint64_t value, std::span<std::uint64_t> out) = 0;
  virtual void barrier() = 0;
  // Sharded optimiser state (ZeRO-1). Rank r owns bytes [bounds[r], bounds[r+1]) of a buffer
  // (bounds: size() + 1 offsets, multiples of gather_unit).
  // all_gather_bytes: every rank holds the whole buffer x afterwards (the updated parameters).
  // gather_bytes: rank 0 receives every rank's `mine` into `all` (its own included); the other
  // ranks only send (their `all` is ignored): slots for a checkpoint.
  static constexpr std::size_t gather_unit = 32;
  virtual void all_gather_bytes(std::span<std::byte> x, std::span<const std::size_t> bounds) = 0;
  virtual void gather_bytes(std::span<const std::byte> mine, std::span<std::byte> all,
                            std::span<const std::size_t> bounds) = 0;

  // Non-blocking in-place sums (see above). Ranges must stay valid and untouched until wait().
  virtual void start_sum(std::span<float> x) = 0;
  // Sharded optimiser state: an in-place sum of x over the replicas that each rank needs only for
  // its own part, elements [bounds[r], bounds[r+1]) of x (bounds: size() + 1 offsets into x, from
  // 0 to x.size()). On return rank r's part holds the sum; the rest of x is unspecified. Blocking.
  // Summing everywhere is a correct implementation (the default); a transport can send each rank
  // only its part, half the traffic of an all-reduce.
  virtual void sum_scatter(std::span<float> x, std::span<const std::size_t> bounds) {
    SPARSELM_CHECK(bounds.size() == size() + 1 && bounds.front() == 0 && bounds.back() == x.size(),
                   "sum_scatter: ", bounds.size(), " bounds for ", size(), " ranks over ", x.size(), " elements");
    all_reduce(x, reduce_op::sum);
  }
  virtual void progress() = 0;
  virtual void wait() = 0;

  // Point to point, for a pipeline whose stages are the ranks (policies/pipeline.hpp): send starts
  // sending x to rank `to` (x may be reused once it returns), recv receives message `tag` from
  // `from` (blocking), flush_sends completes every send started. A group without a transport
  // refuses them.
  virtual void send(std::span<const float>, std::size_t to, std::uint64_t) {
    throw error(detail::concat(describe(), ": no point-to-point transport (send to rank ", to, ")"));
  }
  virtual void recv(std::span<float>, std::size_t from, std::uint64_t) {
    throw error(detail::concat(describe(), ": no point-to-point transport (receive from rank ", from, ")"));
  }
  virtual void flush_sends() {}
  // Sends x to rank `to` and returns once it is sent (blocking, and without send's copy of x): for
  // large messages whose receiver is on its way to the matching recv (the tied tensors of a
  // pipeline over ranks, train/replica_sums.hpp). By default send, then flush_sends.
  virtual void send_now(std::span<const float> x, std::size_t to, std::uint64_t tag) {
    send(x, to, tag);
    flush_sends();
  }

  // The ranks that pass the same `color` as a group of their own, ordered by `key` (a 2-D grid of
  // pipeline stages and data replicas, train/rank_grid.hpp). Collective: every rank of this group
  // calls it. A group of one process splits into itself; a transport without sub-groups refuses.
  virtual std::unique_ptr<replica_group> split(std::size_t color, std::size_t key);

  // Rank r's slice [lo, hi) of n items split as evenly as possible (the first n % P ranks get one
  // more).
  static std::pair<std::size_t, std::size_t> slice(std::size_t n, std::size_t r, std::size_t p) noexcept {
    const std::size_t q = n / p, extra = n % p;
    const std::size_t lo = r * q + (r < extra ? r : extra);
    return {lo, lo + q + (r < extra ? 1 : 0)};
  }
};

// The group of one process: nothing to combine.
class single_replica final : public replica_group {
 public:
  std::size_t rank() const noexcept override { return 0; }
  std::size_t size() const noexcept override { return 1; }
  std::string describe() const override { return "1 process"; }
  void all_reduce(std::span<float>, reduce_op) override {}
  void all_reduce(std::span<double>, reduce_op) override {}
  void broadcast(std::span<float>) override {}
  void broadcast(std::string&) override {}
  bool any(bool flag) override { return flag; }
  void all_gather(std::uint64_t value, std::span<std::uint64_t> out) override {
    if (!out.empty()) out[0] = value;
  }
  void barrier() override {}
  void all_gather_bytes(std::span<std::byte>, std::span<const std::size_t>) override {}
  void gather_bytes(std::span<const std::byte> mine, std::span<std::byte> all,
                    std::span<const std::size_t> bounds) override {
    if (!mine.empty() && mine.data() != all.data() + bounds[0])
      std::memcpy(all.data() + bounds[0], mine.data(), mine.size());
  }
  void start_sum(std::span<float>) override {}
  void progress() override {}
  void wait() override {}
};

inline std::unique_ptr<replica_group> replica_group::split(std::size_t, std::size_t) {
  SPARSELM_CHECK(size() == 1, describe(), ": no sub-groups (splitting the ranks into a grid)");
  return std::make_unique<single_replica>();
}

}  // namespace sparselm::parallel
