#pragma once
// Runs the stages of a pipelined training step on their own threads (policies/pipeline.hpp).
//
//   stage_runner r(S, M);
//   r.run(threads_per_stage, [&](std::size_t s) {      // on S threads, joined before run returns
//     for (auto op : pipeline::stage_schedule(order, s, S, M)) {
//       if (forward && s > 0) r.wait(direction::forward, s - 1, op.micro);
//       ... stage s's part of micro-batch op.micro ...
//       r.done(op.dir, s, op.micro);
//     }
//   });
//
// Each stage thread sets its own OpenMP thread count (threads_per_stage), so the kernels a stage
// calls use its thread group only. The first exception a stage throws is rethrown by run() after
// every stage has stopped: the others are woken from their waits and give up (no stage waits for
// ever on one that failed).

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "sparselm/core/error.hpp"
#include "sparselm/core/threads.hpp"
#include "sparselm/policies/pipeline.hpp"

namespace sparselm {

// What a staged training step did (transformer::last_pipeline; stages == 1 before the first one).
struct pipeline_report {
  std::size_t stages = 1, micro_batches = 0, threads_per_stage = 0;
  pipeline::order schedule = pipeline::order::one_f_one_b;
  std::vector<std::size_t> split;     // first block of stages 1..S-1
  bool balanced = false;              // split chosen from measured part times (else given or initial)
  std::vector<double> stage_seconds;  // busy time of each stage (over ranks: this process's only)
  double seconds = 0;                 // wall time of the stages (the deferred embedding backward excluded)
  double predicted_bubble = 0;        // (S - 1) / (M + S - 1)
  double measured_bubble = 0;         // 1 - Σ busy / (S · seconds)

  // A step of plan p over S stages and M micro-batches; remote: a process of a pipeline over ranks,
  // which times its own stage only (busy has one non-zero entry).
  void record(const pipeline::plan& p, std::size_t S, std::size_t M, std::size_t threads,
              const std::vector<std::size_t>& chosen, const std::vector<double>& busy, double wall, bool remote) {
    stages = S;
    micro_batches = M;
    threads_per_stage = threads;
    schedule = p.schedule;
    split = chosen;
    if (!p.split.empty()) balanced = false;
    stage_seconds = busy;
    seconds = wall;
    predicted_bubble = pipeline::predicted_bubble(S, M);
    double total = 0;
    for (double b : busy) total += b;
    const double here = remote ? 1.0 : double(S);
    measured_bubble = wall > 0 ? std::max(0.0, 1.0 - total / (here * wall)) : 0.0;
  }
};

class stage_runner {
 public:
  stage_runner(std::size_t stages, std::size_t micro)
      : S_(stages), M_(micro), flags_(std::make_unique<std::atomic<int>[]>(2 * stages * micro)) {
    for (std::size_t i = 0; i < 2 * S_ * M_; ++i) flags_[i].store(0, std::memory_order_relaxed);
  }

  // Stage s has finished micro-batch m in direction d.
  void done(pipeline::direction d, std::size_t s, std::size_t m) {
    auto& f = flag(d, s, m);
    f.store(1, std::memory_order_release);
    f.notify_all();
  }

  // Blocks until stage s has finished micro-batch m in direction d; throws when a stage failed.
  void wait(pipeline::direction d, std::size_t s, std::size_t m) {
    auto& f = flag(d, s, m);
    f.wait(0, std::memory_order_acquire);
    if (f.load(std::memory_order_acquire) != 1) throw aborted{};
  }

  // Runs work(s) for every stage s on its own thread with `threads` OpenMP threads each.
  template <class Work>
  void run(std::size_t threads, Work&& work) {
    std::vector<std::thread> pool;
    pool.reserve(S_);
    try {
      for (std::size_t s = 0; s < S_; ++s)
        pool.emplace_back([this, s, threads, &work] {
          try {
            set_num_threads(int(threads));
            work(s);
          } catch (const aborted&) {
          } catch (...) {
            fail(std::current_exception());
          }
        });
    } catch (...) {  // a thread could not start: stop the ones that did
      fail(std::current_exception());
    }
    for (auto& t : pool) t.join();
    if (error_) std::rethrow_exception(error_);
  }

 private:
  struct aborted {};  // a stage gives up because another one failed

  std::atomic<int>& flag(pipeline::direction d, std::size_t s, std::size_t m) {
    SPARSELM_CHECK(s < S_ && m < M_, "stage_runner: stage ", s, " micro-batch ", m, " out of ", S_, " x ", M_);
    return flags_[(d == pipeline::direction::forward ? 0 : S_ * M_) + s * M_ + m];
  }

  // Records the first failure and wakes every waiter (their flags read 2: give up).
  void fail(std::exception_ptr e) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!error_) error_ = e;
    }
    for (std::size_t i = 0; i < 2 * S_ * M_; ++i) {
      int expected = 0;
      flags_[i].compare_exchange_strong(expected, 2, std::memory_order_acq_rel);
      flags_[i].notify_all();
    }
  }

  std::size_t S_, M_;
  std::unique_ptr<std::atomic<int>[]> flags_;
  std::mutex mu_;
  std::exception_ptr error_;
};

}  // namespace sparselm
