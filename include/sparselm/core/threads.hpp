#pragma once
// Thread control. Kernels use OpenMP; this header is the one switch for how many threads they use.
//
//   sparselm::set_num_threads(2);
//   sparselm::parallel_for(0, n, [&](std::size_t i) { ... });   // static schedule

#include <algorithm>
#include <cstddef>

#if defined(_OPENMP)
#include <omp.h>
#endif

#include "sparselm/core/error.hpp"

namespace sparselm {

inline int num_threads() noexcept {
#if defined(_OPENMP)
  return omp_get_max_threads();
#else
  return 1;
#endif
}

// Sets the number of threads kernels use (>= 1).
inline void set_num_threads(int n) {
  SPARSELM_CHECK(n >= 1, "set_num_threads: thread count must be >= 1, got ", n);
#if defined(_OPENMP)
  omp_set_num_threads(n);
#endif
}

inline int thread_id() noexcept {
#if defined(_OPENMP)
  return omp_get_thread_num();
#else
  return 0;
#endif
}

inline bool in_parallel() noexcept {
#if defined(_OPENMP)
  return omp_in_parallel() != 0;
#else
  return false;
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
#endif
  for (std::size_t i = begin; i < end; ++i) f(i);
}

// Calls f(thread, begin, end) once per thread on contiguous chunks of [0, n).
template <class F>
void parallel_chunks(std::size_t n, F&& f, std::size_t min_per_thread = 1) {
  if (n == 0) return;
  int nt = std::max(1, std::min<int>(num_threads(), int(n / std::max<std::size_t>(min_per_thread, 1))));
#if defined(_OPENMP)
  if (nt > 1 && !in_parallel()) {
#pragma omp parallel num_threads(nt)
    {
      int t = omp_get_thread_num();
      int T = omp_get_num_threads();
      std::size_t b = n * std::size_t(t) / std::size_t(T), e = n * std::size_t(t + 1) / std::size_t(T);
      f(t, b, e);
    }
    return;
  }
#endif
  f(0, std::size_t(0), n);
}

}  // namespace sparselm
