#pragma once
// Data-parallel replicas over MPI (OpenMPI from Debian): the replica_group of
// parallel/replica_group.hpp on MPI_COMM_WORLD. Only this header includes <mpi.h>; link MPI
// (CMake: find_package(MPI COMPONENTS CXX), target MPI::MPI_CXX) in the programs that include it.
//
//   int main(int argc, char** argv) {
//     sparselm::parallel::mpi_environment mpi;                 // outlives the body (exit status)
//     const int status = sparselm::run_program("gpt_train", [&] {
//       mpi.init(argc, argv);                                   // MPI only when started by mpirun
//       sparselm::parallel::replica_group& group = mpi.group(); // MPI ranks, or the single process
//       ...
//     });
//     return mpi.finish(status);
//   }
//
//   mpirun -np 2 ./gpt_train --config ... --threads 1       (as root: --allow-run-as-root)
//
// mpi_environment initialises MPI (thread level "funneled": only the thread that calls the trainer
// talks to MPI; OpenMP workers never do) when the process was started by an MPI launcher (its
// environment names a world size), and leaves it alone otherwise, so a plain `./gpt_train` needs
// no MPI runtime. An error on one rank ends the whole job: run_program reports it, then
// MPI_Abort stops the other ranks (they may be waiting in a collective that would never finish);
// a rank that ends with another non-zero status (a usage error) does the same in finish().
// Checkpoints are written atomically, so the last one stays intact.
//
// Gradient sums (start_sum) are blocking by default: each part's sum runs as soon as backward
// finishes the part. A float sum of at least split_sum_min elements is split (split_sum): each rank
// adds up 1/P of the range (sum_scatter, below), then MPI_Allgatherv gives every rank the others'
// sums. Measured with benchmarks/mpi_collectives.cpp (docs/design/distribution.md), a 500 MB sum over 2
// ranks on one machine took 0.11 s this way against 1.3-1.5 s in OpenMPI's MPI_Allreduce (Zen 5
// host; 0.19-0.23 s on an Intel Xeon host). Every rank gets the same bits: each part is added up by one rank,
// in rank order. SPARSELM_MPI_ALLREDUCE=1 keeps MPI_Allreduce for every sum (an MPI whose
// all-reduce suits the network better); SPARSELM_MPI_NONBLOCKING=1 selects MPI_Iallreduce
// (progress() then calls MPI_Testall between parts; worth trying where the network or an MPI
// progress thread advances transfers on their own; OpenMPI advances it only inside MPI calls and
// measured slower on one machine).

#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "sparselm/core/error.hpp"
#include "sparselm/core/program.hpp"
#include "sparselm/core/threads.hpp"
#include "sparselm/parallel/replica_group.hpp"

namespace sparselm::parallel {

namespace detail {
inline std::string mpi_error_string(int code) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, buf, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(buf, std::size_t(len));
}
inline void mpi_check(int code, const char* what) {
  if (code != MPI_SUCCESS) fail("MPI: ", what, " failed: ", mpi_error_string(code));
}
// MPI counts are int: long ranges go in pieces of at most this many elements.
inline constexpr std::size_t mpi_chunk = std::size_t(1) << 30;

inline MPI_Op op_of(reduce_op op) { return op == reduce_op::max ? MPI_MAX : MPI_SUM; }
}  // namespace detail

// Whether this process was started by an MPI launcher (mpirun / mpiexec of OpenMPI or MPICH, or
// a Slurm/PMI launch): its environment names the job's size.
inline bool launched_by_mpi() noexcept {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"})
    if (std::getenv(v)) return true;
  return false;
}

// The ranks of MPI_COMM_WORLD as a replica_group.
class mpi_group final : public replica_group {
 public:
  // nonblocking: gradient sums by MPI_Iallreduce (default: the environment's
  // SPARSELM_MPI_NONBLOCKING=1; otherwise blocking sums, see above).
  // split_sums: large float sums by split_sum (default: unless the environment's
  // SPARSELM_MPI_ALLREDUCE=1).
  // owns_comm: the group frees comm when it ends (a communicator made by split()).
  explicit mpi_group(MPI_Comm comm = MPI_COMM_WORLD, std::optional<bool> nonblocking = std::nullopt,
                     std::optional<bool> split_sums = std::nullopt, bool owns_comm = false)
      : comm_(comm),
        owns_comm_(owns_comm),
        nonblocking_(nonblocking.value_or(env_flag("SPARSELM_MPI_NONBLOCKING"))),
        split_sums_(split_sums.value_or(!env_flag("SPARSELM_MPI_ALLREDUCE"))) {
    int r = 0, s = 1;
    detail::mpi_check(MPI_Comm_rank(comm_, &r), "MPI_Comm_rank");
    detail::mpi_check(MPI_Comm_size(comm_, &s), "MPI_Comm_size");
    rank_ = std::size_t(r);
    size_ = std::size_t(s);
    // Errors come back as codes (reported with their text) instead of aborting inside MPI.
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    detail::mpi_check(MPI_Type_contiguous(int(gather_unit), MPI_BYTE, &unit_), "MPI_Type_contiguous");
    detail::mpi_check(MPI_Type_commit(&unit_), "MPI_Type_commit");
  }
  ~mpi_group() override {
    // Sums still in flight: finish them, unless an error unwinds the program (a peer may never
    // take part again; the error hook then aborts the job, and MPI, which advances only inside its
    // own calls, writes nothing more).
    if (std::uncaught_exceptions() == 0) {
      if (!requests_.empty()) MPI_Waitall(int(requests_.size()), requests_.data(), MPI_STATUSES_IGNORE);
      for (auto& o : outbox_)
        if (o.request != MPI_REQUEST_NULL) MPI_Wait(&o.request, MPI_STATUS_IGNORE);
    }
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    MPI_Type_free(&unit_);
    if (owns_comm_) MPI_Comm_free(&comm_);
  }

  // MPI_Comm_split of this group's communicator; the new group takes this one's sum settings.
  std::unique_ptr<replica_group> split(std::size_t color, std::size_t key) override {
    SPARSELM_CHECK(color <= std::size_t(INT32_MAX) && key <= std::size_t(INT32_MAX), "MPI: split colour ", color,
                   " or key ", key, " out of int range");
    MPI_Comm c = MPI_COMM_NULL;
    detail::mpi_check(MPI_Comm_split(comm_, int(color), int(key), &c), "MPI_Comm_split");
    return std::make_unique<mpi_group>(c, nonblocking_, split_sums_, true);
  }

  std::size_t rank() const noexcept override { return rank_; }
  std::size_t size() const noexcept override { return size_; }
  bool nonblocking() const noexcept { return nonblocking_; }
  std::string describe() const override {
    int len = 0;
    char name[MPI_MAX_PROCESSOR_NAME];
    MPI_Get_processor_name(name, &len);
    return "MPI, " + std::to_string(size_) + " ranks (rank " + std::to_string(rank_) + " on " +
           std::string(name, std::size_t(len)) + (nonblocking_ ? "; non-blocking gradient sums" : "") +
           (split_sums_ ? "" : "; MPI_Allreduce for every sum") + ")";
  }

  // Float sums of at least this many elements go through split_sum (unless split sums are off).
  static constexpr std::size_t split_sum_min = std::size_t(1) << 16;

  void all_reduce(std::span<float> x, reduce_op op) override {
    if (op == reduce_op::sum && split_sums_ && size_ > 1 && x.size() >= split_sum_min && x.size() < detail::mpi_chunk)
      return split_sum(x);
    reduce(x.data(), x.size(), MPI_FLOAT, op);
  }
  void all_reduce(std::span<double> x, reduce_op op) override { reduce(x.data(), x.size(), MPI_DOUBLE, op); }

  void broadcast(std::span<float> x) override {
    for (std::size_t at = 0; at < x.size(); at += detail::mpi_chunk)
      detail::mpi_check(MPI_Bcast(x.data() + at, int(std::min(detail::mpi_chunk, x.size() - at)), MPI_FLOAT, 0, comm_),
                        "MPI_Bcast");
  }
  void broadcast(std::string& s) override {
    std::uint64_t n = s.size();
    detail::mpi_check(MPI_Bcast(&n, 1, MPI_UINT64_T, 0, comm_), "MPI_Bcast");
    SPARSELM_CHECK(n < detail::mpi_chunk, "MPI: broadcast of a ", n, "-byte string");
    s.resize(std::size_t(n));
    detail::mpi_check(MPI_Bcast(s.data(), int(n), MPI_CHAR, 0, comm_), "MPI_Bcast");
  }
  bool any(bool flag) override {
    int in = flag ? 1 : 0, out = 0;
    detail::mpi_check(MPI_Allreduce(&in, &out, 1, MPI_INT, MPI_LOR, comm_), "MPI_Allreduce");
    return out != 0;
  }
  void all_gather(std::uint64_t value, std::span<std::uint64_t> out) override {
    SPARSELM_CHECK(out.size() == size_, "MPI: all_gather into ", out.size(), " values for ", size_, " ranks");
    detail::mpi_check(MPI_Allgather(&value, 1, MPI_UINT64_T, out.data(), 1, MPI_UINT64_T, comm_), "MPI_Allgather");
  }
  void barrier() override { detail::mpi_check(MPI_Barrier(comm_), "MPI_Barrier"); }

  void all_gather_bytes(std::span<std::byte> x, std::span<const std::size_t> bounds) override {
    std::vector<int> counts, displs;
    gather_layout(x.size(), bounds, counts, displs);
    detail::mpi_check(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, x.data(), counts.data(), displs.data(), unit_,
                                     comm_),
                      "MPI_Allgatherv");
  }
  void gather_bytes(std::span<const std::byte> mine, std::span<std::byte> all,
                    std::span<const std::size_t> bounds) override {
    std::vector<int> counts, displs;
    gather_layout(rank_ == 0 ? all.size() : bounds.back(), bounds, counts, displs);
    SPARSELM_CHECK(mine.size() == bounds[rank_ + 1] - bounds[rank_], "MPI: rank ", rank_, " gathers ", mine.size(),
                   " bytes into a range of ", bounds[rank_ + 1] - bounds[rank_]);
    int rc;
    if (rank_ == 0) {
      if (!mine.empty() && mine.data() != all.data()) std::memcpy(all.data(), mine.data(), mine.size());
      rc = MPI_Gatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, all.data(), counts.data(), displs.data(), unit_, 0, comm_);
    } else {
      rc = MPI_Gatherv(mine.data(), counts[rank_], unit_, nullptr, nullptr, nullptr, unit_, 0, comm_);
    }
    detail::mpi_check(rc, "MPI_Gatherv");
  }

  void start_sum(std::span<float> x) override {
    if (!nonblocking_) return all_reduce(x, reduce_op::sum);
    for (std::size_t at = 0; at < x.size(); at += detail::mpi_chunk) {
      requests_.emplace_back();
      detail::mpi_check(MPI_Iallreduce(MPI_IN_PLACE, x.data() + at, int(std::min(detail::mpi_chunk, x.size() - at)),
                                       MPI_FLOAT, MPI_SUM, comm_, &requests_.back()),
                        "MPI_Iallreduce");
    }
  }
  void progress() override {
    if (requests_.empty()) return;
    int done = 0;
    detail::mpi_check(MPI_Testall(int(requests_.size()), requests_.data(), &done, MPI_STATUSES_IGNORE),
                      "MPI_Testall");
    if (done) requests_.clear();
  }
  void wait() override {
    if (requests_.empty()) return;
    const int rc = MPI_Waitall(int(requests_.size()), requests_.data(), MPI_STATUSES_IGNORE);
    requests_.clear();
    detail::mpi_check(rc, "MPI_Waitall");
  }

  // Each rank sends every other rank that rank's part of x and receives the others' contributions
  // to its own part (MPI_Isend / MPI_Irecv; OpenMPI's MPI_Reduce_scatter measured 2.2x slower than
  // its all-reduce here, this exchange 0.4x, benchmarks/mpi_collectives.cpp), then adds them in rank
  // order: with 2 ranks the sums are bit-identical to an all-reduce's (a + b = b + a).
  void sum_scatter(std::span<float> x, std::span<const std::size_t> bounds) override {
    SPARSELM_CHECK(bounds.size() == size_ + 1 && bounds.front() == 0 && bounds.back() == x.size(),
                   "sum_scatter: ", bounds.size(), " bounds for ", size_, " ranks over ", x.size(), " elements");
    if (size_ == 1) return;
    std::size_t widest = 0;
    for (std::size_t q = 0; q < size_; ++q) widest = std::max(widest, bounds[q + 1] - bounds[q]);
    if (widest >= detail::mpi_chunk) return all_reduce(x, reduce_op::sum);
    const std::size_t lo = bounds[rank_], n = bounds[rank_ + 1] - lo;
    incoming_.resize((size_ - 1) * n);
    std::vector<MPI_Request> req;
    std::vector<const float*> part(size_);
    constexpr int tag = 7301;  // distinct from the pipeline's activation tags' use of the same comm
    for (std::size_t q = 0, slot = 0; q < size_; ++q) {
      if (q == rank_) {
        part[q] = x.data() + lo;
        continue;
      }
      float* in = incoming_.data() + slot++ * n;
      part[q] = in;
      if (n > 0) {
        req.emplace_back();
        detail::mpi_check(MPI_Irecv(in, int(n), MPI_FLOAT, int(q), tag, comm_, &req.back()), "MPI_Irecv");
      }
      if (const std::size_t m = bounds[q + 1] - bounds[q]; m > 0) {
        req.emplace_back();
        detail::mpi_check(MPI_Isend(x.data() + bounds[q], int(m), MPI_FLOAT, int(q), tag, comm_, &req.back()),
                          "MPI_Isend");
      }
    }
    detail::mpi_check(MPI_Waitall(int(req.size()), req.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
    // x[lo + i] = ((part0[i] + part1[i]) + part2[i]) + ..., in blocks that stay in cache
    constexpr std::size_t block = 2048;
    float* out = x.data() + lo;
    parallel_for(0, (n + block - 1) / block, [&](std::size_t b) {
      const std::size_t i0 = b * block, len = std::min(block, n - i0);
      float acc[block];
      std::memcpy(acc, part[0] + i0, len * sizeof(float));
      for (std::size_t q = 1; q < size_; ++q) {
        const float* p = part[q] + i0;
        for (std::size_t i = 0; i < len; ++i) acc[i] += p[i];
      }
      std::memcpy(out + i0, acc, len * sizeof(float));
    });
  }

  // An in-place sum of x over the ranks in two steps: the whole units of gather_unit bytes are cut
  // into P nearly equal parts, rank r adds up part r (sum_scatter: the other ranks send it their
  // values of that part), then every rank gathers the summed parts (MPI_Allgatherv); the < 8
  // trailing floats go through MPI_Allreduce. Each part is added up by one rank, so every rank
  // holds the same bits; with 2 ranks they equal an all-reduce's (a + b = b + a).
  void split_sum(std::span<float> x) {
    constexpr std::size_t unit = gather_unit / sizeof(float);
    const std::size_t units = x.size() / unit, whole = units * unit;
    std::vector<std::size_t> b(size_ + 1), bytes(size_ + 1);
    for (std::size_t r = 0; r <= size_; ++r) {
      b[r] = (r < size_ ? slice(units, r, size_).first : units) * unit;
      bytes[r] = b[r] * sizeof(float);
    }
    const auto head = x.first(whole);
    sum_scatter(head, b);
    all_gather_bytes(std::as_writable_bytes(head), bytes);
    if (whole < x.size()) reduce(x.data() + whole, x.size() - whole, MPI_FLOAT, reduce_op::sum);
  }

  // Point to point: the data is copied into a send buffer of our own (one per message in flight,
  // reused once its MPI_Isend completed), so send never waits for the receiver and two stages that
  // send to each other at once cannot deadlock.
  void send(std::span<const float> x, std::size_t to, std::uint64_t tag) override {
    SPARSELM_CHECK(to < size_ && x.size() < detail::mpi_chunk && tag <= std::uint64_t(max_tag()), "MPI: send of ",
                   x.size(), " floats to rank ", to, " of ", size_, " with tag ", tag);
    outgoing* box = nullptr;
    for (auto& o : outbox_) {
      if (o.request != MPI_REQUEST_NULL) {
        int done = 0;
        detail::mpi_check(MPI_Test(&o.request, &done, MPI_STATUS_IGNORE), "MPI_Test");
      }
      if (o.request == MPI_REQUEST_NULL) {
        box = &o;
        break;
      }
    }
    if (!box) box = &outbox_.emplace_back();
    box->data.assign(x.begin(), x.end());
    detail::mpi_check(MPI_Isend(box->data.data(), int(x.size()), MPI_FLOAT, int(to), int(tag), comm_, &box->request),
                      "MPI_Isend");
  }
  void recv(std::span<float> x, std::size_t from, std::uint64_t tag) override {
    SPARSELM_CHECK(from < size_ && x.size() < detail::mpi_chunk && tag <= std::uint64_t(max_tag()), "MPI: receive of ",
                   x.size(), " floats from rank ", from, " of ", size_, " with tag ", tag);
    MPI_Status st;
    detail::mpi_check(MPI_Recv(x.data(), int(x.size()), MPI_FLOAT, int(from), int(tag), comm_, &st), "MPI_Recv");
    int got = 0;
    MPI_Get_count(&st, MPI_FLOAT, &got);
    SPARSELM_CHECK(std::size_t(got) == x.size(), "MPI: rank ", rank_, " expected ", x.size(), " floats from rank ",
                   from, " (tag ", tag, ") and received ", got, ": the ranks run different shapes");
  }
  void flush_sends() override {
    for (auto& o : outbox_)
      if (o.request != MPI_REQUEST_NULL) detail::mpi_check(MPI_Wait(&o.request, MPI_STATUS_IGNORE), "MPI_Wait");
  }
  // MPI_Send from the caller's buffer: no copy (GPT-2 small's tied table is 154 MB, which an
  // outbox buffer would keep for the next send).
  void send_now(std::span<const float> x, std::size_t to, std::uint64_t tag) override {
    SPARSELM_CHECK(to < size_ && x.size() < detail::mpi_chunk && tag <= std::uint64_t(max_tag()), "MPI: send of ",
                   x.size(), " floats to rank ", to, " of ", size_, " with tag ", tag);
    detail::mpi_check(MPI_Send(x.data(), int(x.size()), MPI_FLOAT, int(to), int(tag), comm_), "MPI_Send");
  }

 private:
  void reduce(void* p, std::size_t n, MPI_Datatype t, reduce_op op) {
    int bytes = 0;
    MPI_Type_size(t, &bytes);
    for (std::size_t at = 0; at < n; at += detail::mpi_chunk)
      detail::mpi_check(MPI_Allreduce(MPI_IN_PLACE, static_cast<char*>(p) + at * std::size_t(bytes),
                                      int(std::min(detail::mpi_chunk, n - at)), t, detail::op_of(op), comm_),
                        "MPI_Allreduce");
  }

  static bool env_flag(const char* name) {
    const char* v = std::getenv(name);
    return v && std::string(v) == "1";
  }

  // Counts and displacements, in gather units, of every rank's bytes for the *gatherv calls.
  void gather_layout(std::size_t bytes, std::span<const std::size_t> bounds, std::vector<int>& counts,
                     std::vector<int>& displs) const {
    SPARSELM_CHECK(bounds.size() == size_ + 1 && bounds.back() <= bytes, "MPI: gather bounds for ", bounds.size(),
                   " offsets over ", bytes, " bytes (", size_, " ranks)");
    counts.resize(size_);
    displs.resize(size_);
    for (std::size_t r = 0; r < size_; ++r) {
      SPARSELM_CHECK(bounds[r] <= bounds[r + 1] && bounds[r] % gather_unit == 0 && bounds[r + 1] % gather_unit == 0 &&
                         bounds[r + 1] / gather_unit <= std::size_t(std::numeric_limits<int>::max()),
                     "MPI: gather range of rank ", r, " [", bounds[r], ", ", bounds[r + 1], ") is not in whole units of ",
                     gather_unit, " bytes below 2^31 units");
      counts[r] = int((bounds[r + 1] - bounds[r]) / gather_unit);
      displs[r] = int(bounds[r] / gather_unit);
    }
  }

  int max_tag() const {
    int* ub = nullptr;
    int flag = 0;
    MPI_Comm_get_attr(comm_, MPI_TAG_UB, &ub, &flag);
    return flag && ub ? *ub : 32767;
  }

  struct outgoing {
    std::vector<float> data;
    MPI_Request request = MPI_REQUEST_NULL;
  };

  MPI_Comm comm_;
  bool owns_comm_ = false;
  bool nonblocking_ = false;
  bool split_sums_ = true;
  std::deque<outgoing> outbox_;  // deque: growing it never moves a buffer MPI still reads
  MPI_Datatype unit_ = MPI_DATATYPE_NULL;
  std::size_t rank_ = 0, size_ = 1;
  std::vector<MPI_Request> requests_;
  std::vector<float> incoming_;  // sum_scatter: the other ranks' contributions to this rank's part
};

// MPI for the life of a program (see the header comment); group() is the MPI ranks when launched by
// mpirun, the single process otherwise. It outlives the program's body, so that finish() sees the
// exit status:
//
//   int main(int argc, char** argv) {
//     sparselm::parallel::mpi_environment mpi;
//     const int status = sparselm::run_program("gpt_train", [&] { mpi.init(argc, argv); ...; return 0; });
//     return mpi.finish(status);   // MPI_Finalize, or MPI_Abort when a rank of several failed
//   }
class mpi_environment {
 public:
  mpi_environment() = default;
  mpi_environment(int& argc, char**& argv) { init(argc, argv); }
  ~mpi_environment() {
    // Normally finish() ran. Unwinding from an error: the error hook aborts the job after the
    // report; MPI_Finalize would wait for ranks that never arrive.
    if (initialised_ && std::uncaught_exceptions() == 0) finish(0);
  }
  mpi_environment(const mpi_environment&) = delete;
  mpi_environment& operator=(const mpi_environment&) = delete;

  // Initialises MPI when the process was started by an MPI launcher; otherwise nothing.
  void init(int& argc, char**& argv) {
    if (initialised_ || !launched_by_mpi()) return;
    int provided = 0;
    detail::mpi_check(MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
    initialised_ = true;
    mpi_ = std::make_unique<mpi_group>();
    // After an error is reported, stop every rank (the others may wait in a collective for ever).
    if (mpi_->size() > 1) sparselm::detail::error_hook() = [](int status) { MPI_Abort(MPI_COMM_WORLD, status); };
    // Ranks sharing a host share its cores: without OMP_NUM_THREADS each takes its share (a
    // program's --threads still overrides this).
    const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    if (!local) local = std::getenv("MPI_LOCALNRANKS");
    const int local_ranks = local ? std::atoi(local) : 1;
    if (local_ranks > 1 && !std::getenv("OMP_NUM_THREADS"))
      set_num_threads(std::max(1, num_threads() / local_ranks));
    SPARSELM_CHECK(provided >= MPI_THREAD_FUNNELED, "MPI: the library gives thread level ", provided,
                   ", the trainer needs MPI_THREAD_FUNNELED (OpenMP workers beside one MPI thread)");
  }

  // Ends MPI with the program's exit status: a rank of several that failed (status != 0: an error
  // or a usage error) aborts the job, since the other ranks would wait for it for ever; otherwise
  // MPI_Finalize. Returns status.
  int finish(int status) {
    if (!initialised_) return status;
    if (status != 0 && distributed()) {
      std::fflush(stdout);
      std::fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, status);
    }
    mpi_.reset();
    MPI_Finalize();
    initialised_ = false;
    sparselm::detail::error_hook() = nullptr;
    return status;
  }

  bool distributed() const noexcept { return mpi_ && mpi_->size() > 1; }
  replica_group& group() noexcept { return mpi_ ? static_cast<replica_group&>(*mpi_) : single_; }

 private:
  bool initialised_ = false;
  std::unique_ptr<mpi_group> mpi_;
  single_replica single_;
};

}  // namespace sparselm::parallel
