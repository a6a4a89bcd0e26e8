#pragma once
// Replicas as threads of one process over a shared-memory replica_group (parallel/replica_group.hpp):
// blocking collectives (every rank calls them in the same order), a sharded sum that poisons the
// parts a rank does not own, and point-to-point messages for pipelines over ranks.
#include <doctest/doctest.h>

#include <algorithm>
#include <barrier>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <limits>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "sparselm/core/threads.hpp"
#include "sparselm/parallel/replica_group.hpp"
#include "sparselm/policies/pipeline.hpp"

namespace sparselm::test {

// P threads as replicas. Each collective: publish a pointer, wait, compute from all, wait.
class thread_replicas {
 public:
  explicit thread_replicas(std::size_t p) : p_(p), sync_(std::ptrdiff_t(p)), ptr_(p), len_(p) {}

  class member final : public parallel::replica_group {
   public:
    member(thread_replicas& g, std::size_t r) : g_(g), r_(r) {}
    std::size_t rank() const noexcept override { return r_; }
    std::size_t size() const noexcept override { return g_.p_; }
    std::string describe() const override { return "threads"; }
    void all_reduce(std::span<float> x, parallel::reduce_op op) override { reduce(x, op); }
    void all_reduce(std::span<double> x, parallel::reduce_op op) override { reduce(x, op); }
    void broadcast(std::span<float> x) override {
      publish(x.data(), x.size());
      if (r_ != 0) std::memcpy(x.data(), g_.ptr_[0], x.size() * sizeof(float));
      g_.sync_.arrive_and_wait();
    }
    void broadcast(std::string& s) override {
      publish(&s, 0);
      if (r_ != 0) s = *static_cast<std::string*>(g_.ptr_[0]);
      g_.sync_.arrive_and_wait();
    }
    bool any(bool flag) override {
      double v = flag ? 1 : 0;
      reduce(std::span<double>(&v, 1), parallel::reduce_op::max);
      return v > 0;
    }
    void all_gather(std::uint64_t value, std::span<std::uint64_t> out) override {
      publish(&value, 1);
      for (std::size_t q = 0; q < g_.p_; ++q) out[q] = *static_cast<std::uint64_t*>(g_.ptr_[q]);
      g_.sync_.arrive_and_wait();
    }
    void barrier() override { g_.sync_.arrive_and_wait(); }
    void all_gather_bytes(std::span<std::byte> x, std::span<const std::size_t> b) override {
      ++all_gathers;
      publish(x.data(), x.size());
      for (std::size_t q = 0; q < g_.p_; ++q)
        if (q != r_) std::memcpy(x.data() + b[q], static_cast<std::byte*>(g_.ptr_[q]) + b[q], b[q + 1] - b[q]);
      g_.sync_.arrive_and_wait();
    }
    void gather_bytes(std::span<const std::byte> mine, std::span<std::byte> all,
                      std::span<const std::size_t> b) override {
      publish(const_cast<std::byte*>(mine.data()), mine.size());
      if (r_ == 0)
        for (std::size_t q = 0; q < g_.p_; ++q)
          if (b[q + 1] > b[q]) std::memcpy(all.data() + b[q], g_.ptr_[q], b[q + 1] - b[q]);
      g_.sync_.arrive_and_wait();
    }
    void start_sum(std::span<float> x) override {
      ++sums_started;
      reduce(x, parallel::reduce_op::sum);
    }
    // Only this rank's part is summed (in rank order); the rest of x becomes NaN, so a trainer that
    // read another rank's part after a sharded sum would fail the tests.
    void sum_scatter(std::span<float> x, std::span<const std::size_t> b) override {
      ++scatters_started;
      publish(x.data(), x.size());
      std::vector<float> mine(b[r_ + 1] - b[r_]);
      for (std::size_t i = 0; i < mine.size(); ++i) {
        float a = static_cast<float*>(g_.ptr_[0])[b[r_] + i];
        for (std::size_t q = 1; q < g_.p_; ++q) a += static_cast<float*>(g_.ptr_[q])[b[r_] + i];
        mine[i] = a;
      }
      g_.sync_.arrive_and_wait();
      std::fill(x.begin(), x.end(), std::numeric_limits<float>::quiet_NaN());
      std::copy(mine.begin(), mine.end(), x.begin() + std::ptrdiff_t(b[r_]));
    }
    void progress() override {}
    void wait() override {}
    // Point to point (a pipeline whose stages are the ranks): a copy of x queued for (from, to, tag).
    void send(std::span<const float> x, std::size_t to, std::uint64_t tag) override {
      std::lock_guard lock(g_.box_mutex_);
      g_.box_[{r_, to, tag}].emplace_back(x.begin(), x.end());
      if (tag >= 30000) ++tied_messages;  // the trainer's tied-gradient messages (train/replica_sums.hpp)
      if (tag == pipeline::evaluation_tag) ++evaluation_sends;
      g_.box_ready_.notify_all();
    }
    void recv(std::span<float> x, std::size_t from, std::uint64_t tag) override {
      std::unique_lock lock(g_.box_mutex_);
      auto& q = g_.box_[{from, r_, tag}];
      g_.box_ready_.wait(lock, [&] { return !q.empty(); });
      REQUIRE(q.front().size() == x.size());
      std::copy(q.front().begin(), q.front().end(), x.begin());
      q.pop_front();
      if (tag >= 30000) ++tied_messages;
    }
    std::size_t scatters_started = 0;
    std::size_t all_gathers = 0;    // all_gather_bytes calls (the sharded optimiser's parameter exchange)
    std::size_t tied_messages = 0;  // sent or received
    std::size_t evaluation_sends = 0;
    std::size_t sums_started = 0;

   private:
    void publish(void* p, std::size_t n) {
      g_.ptr_[r_] = p;
      g_.len_[r_] = n;
      g_.sync_.arrive_and_wait();
    }
    // Sums (or maxima) in rank order, so every rank computes the same bits.
    template <class T>
    void reduce(std::span<T> x, parallel::reduce_op op) {
      publish(x.data(), x.size());
      for (std::size_t q = 0; q < g_.p_; ++q) REQUIRE(g_.len_[q] == x.size());
      std::vector<T> out(x.size());
      for (std::size_t i = 0; i < x.size(); ++i) {
        T a = static_cast<T*>(g_.ptr_[0])[i];
        for (std::size_t q = 1; q < g_.p_; ++q) {
          const T v = static_cast<T*>(g_.ptr_[q])[i];
          a = op == parallel::reduce_op::max ? std::max(a, v) : a + v;
        }
        out[i] = a;
      }
      g_.sync_.arrive_and_wait();
      std::copy(out.begin(), out.end(), x.begin());
    }
    thread_replicas& g_;
    std::size_t r_;
  };

  // f(rank, group) on P threads.
  template <class F>
  void run(F f) {
    std::vector<std::thread> ts;
    std::vector<std::exception_ptr> errors(p_);
    for (std::size_t r = 0; r < p_; ++r)
      ts.emplace_back([&, r] {
        set_num_threads(1);
        member m(*this, r);
        try {
          f(r, m);
        } catch (...) {
          errors[r] = std::current_exception();
        }
      });
    for (auto& t : ts) t.join();
    for (auto& e : errors)
      if (e) std::rethrow_exception(e);
  }

 private:
  std::size_t p_;
  std::barrier<> sync_;
  std::vector<void*> ptr_;
  std::vector<std::size_t> len_;
  std::mutex box_mutex_;
  std::condition_variable box_ready_;
  std::map<std::tuple<std::size_t, std::size_t, std::uint64_t>, std::deque<std::vector<float>>> box_;
};

}  // namespace sparselm::test
