#pragma once
// Thread control. Kernels use OpenMP; this header is the one switch for how many threads they use,
// and the only place that forks a team of threads for them.
//
//   sparselm::set_num_threads(2);
//   sparselm::parallel_for(0, n, [&](std::size_t i) { ... });   // static schedule
//   sparselm::run_team(2, [&](int t, int T) { ...; team_barrier(T); ... });
//
// Built with SPARSELM_STD_THREADS (and without -fopenmp), the teams are std::threads joined by a
// std::barrier instead: ThreadSanitizer sees their synchronisation, which it cannot see in an
// OpenMP runtime not built for it (CMake option SPARSELM_STD_THREADS, on under SPARSELM_TSAN;
// docs/reliability.md).

#include <algorithm>
#include <cstddef>

#if defined(SPARSELM_STD_THREADS) && defined(_OPENMP)
#error "SPARSELM_STD_THREADS replaces OpenMP: build without -fopenmp"
#endif
#if defined(_OPENMP)
#include <omp.h>
#elif defined(SPARSELM_STD_THREADS)
#include <atomic>
#include <barrier>
#include <exception>
#include <thread>
#include <vector>
#endif

#include "sparselm/core/error.hpp"

namespace sparselm {

#if defined(SPARSELM_STD_THREADS)
namespace detail {
inline std::atomic<int>& std_thread_count() noexcept {
  static std::atomic<int> n{int(std::max(1u, std::thread::hardware_concurrency()))};
  return n;
}
// The team the calling thread belongs to (id 0 of a team of 1 outside any).
struct std_team {
  int id = 0, size = 1;
  std::barrier<>* barrier = nullptr;
};
inline std_team& current_std_team() noexcept {
  thread_local std_team team;
  return team;
}
}  // namespace detail
#endif

inline int num_threads() noexcept {
#if defined(_OPENMP)
  return omp_get_max_threads();
#elif defined(SPARSELM_STD_THREADS)
  return detail::std_thread_count().load(std::memory_order_relaxed);
#else
  return 1;
#endif
}

// Sets the number of threads kernels use (>= 1).
inline void set_num_threads(int n) {
  SPARSELM_CHECK(n >= 1, "set_num_threads: thread count must be >= 1, got ", n);
#if defined(_OPENMP)
  omp_set_num_threads(n);
#elif defined(SPARSELM_STD_THREADS)
  detail::std_thread_count().store(n, std::memory_order_relaxed);
#endif
}

inline int thread_id() noexcept {
#if defined(_OPENMP)
  return omp_get_thread_num();
#elif defined(SPARSELM_STD_THREADS)
  return detail::current_std_team().id;
#else
  return 0;
#endif
}

inline bool in_parallel() noexcept {
#if defined(_OPENMP)
  return omp_in_parallel() != 0;
#elif defined(SPARSELM_STD_THREADS)
  return detail::current_std_team().size > 1;
#else
  return false;
#endif
}

// Runs f(t, T) on a team of up to nt threads (serially, f(0, 1), when nt == 1 or when already
// inside a parallel region). Threads of a team meet at team_barrier(T).
template <class F>
void run_team([[maybe_unused]] int nt, F&& f) {
#if defined(_OPENMP)
  if (nt > 1 && !in_parallel()) {
#pragma omp parallel num_threads(nt)
    f(omp_get_thread_num(), omp_get_num_threads());
    return;
  }
#elif defined(SPARSELM_STD_THREADS)
  if (nt > 1 && !in_parallel()) {
    std::barrier<> barrier(nt);
    std::vector<std::exception_ptr> errors(static_cast<std::size_t>(nt));
    auto member = [&](int t) {
      detail::current_std_team() = {t, nt, &barrier};
      try {
        f(t, nt);
      } catch (...) {
        errors[std::size_t(t)] = std::current_exception();
      }
      detail::current_std_team() = {};
    };
    {
      std::vector<std::jthread> others;
      others.reserve(std::size_t(nt - 1));
      for (int t = 1; t < nt; ++t) others.emplace_back(member, t);
      member(0);
    }  // joined
    for (auto& e : errors)
      if (e) std::rethrow_exception(e);
    return;
  }
#endif
  f(0, 1);
}

// Barrier of a run_team team of T threads (nothing for one thread).
inline void team_barrier([[maybe_unused]] int T) {
#if defined(_OPENMP)
  if (T > 1) {
#pragma omp barrier
  }
#elif defined(SPARSELM_STD_THREADS)
  if (T > 1) detail::current_std_team().barrier->arrive_and_wait();
#endif
}

// Calls f(i) for i in [begin, end) across threads, static contiguous chunks. Runs serially when
// already inside a parallel region or when the range is smaller than `min_per_thread` per thread.
template <class F>
void parallel_for(std::size_t begin, std::size_t end, F&& f, std::size_t min_per_thread = 1) {
  if (end <= begin) return;
  std::size_t n = end - begin;
  int nt = std::max(1, std::min<int>(num_threads(), int(n / std::max<std::size_t>(min_per_thread, 1))));
#if defined(_OPENMP)
  if (nt > 1 && !in_parallel()) {
#pragma omp parallel for schedule(static) num_threads(nt)
    for (std::ptrdiff_t i = std::ptrdiff_t(begin); i < std::ptrdiff_t(end); ++i) f(std::size_t(i));
    return;
  }
#elif defined(SPARSELM_STD_THREADS)
  if (nt > 1 && !in_parallel()) {
    run_team(nt, [&](int t, int T) {
      const std::size_t b = begin + n * std::size_t(t) / std::size_t(T), e = begin + n * std::size_t(t + 1) / std::size_t(T);
      for (std::size_t i = b; i < e; ++i) f(i);
    });
    return;
  }
#endif
  for (std::size_t i = begin; i < end; ++i) f(i);
}

// Calls f(thread, begin, end) once per thread on contiguous chunks of [0, n).
template <class F>
void parallel_chunks(std::size_t n, F&& f, std::size_t min_per_thread = 1) {
  if (n == 0) return;
  int nt = std::max(1, std::min<int>(num_threads(), int(n / std::max<std::size_t>(min_per_thread, 1))));
  run_team(nt, [&](int t, int T) {
    const std::size_t b = n * std::size_t(t) / std::size_t(T), e = n * std::size_t(t + 1) / std::size_t(T);
    f(t, b, e);
  });
}

}  // namespace sparselm
