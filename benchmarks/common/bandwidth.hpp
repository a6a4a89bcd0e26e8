#pragma once
// A copy-bandwidth probe for the benchmarks that report GB/s beside the machine's own: dst = src
// over n floats with SIMD loads and stores (no streaming stores), chunks split between threads as
// parallel_chunks does. GB/s counts the bytes read plus the bytes written (10^9 bytes); the
// write-allocate reads of dst are not counted, as the kernels compared with it do not count them.
// The value is the median of 9 repetitions of ~0.2 GB each, cached per (n, threads).

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <map>
#include <utility>
#include <vector>

#include "sparselm/core/simd.hpp"
#include "sparselm/core/threads.hpp"

namespace sparselm::bench {

inline void copy_floats(const float* __restrict src, float* __restrict dst, std::size_t n) {
  using F = simd<float>;
  constexpr std::size_t W = F::size;
  parallel_chunks(
      n,
      [&](int, std::size_t b, std::size_t e) {
        std::size_t i = b;
        for (; i + 4 * W <= e; i += 4 * W) {
          F a0 = F::load_unaligned(src + i), a1 = F::load_unaligned(src + i + W);
          F a2 = F::load_unaligned(src + i + 2 * W), a3 = F::load_unaligned(src + i + 3 * W);
          a0.store_unaligned(dst + i);
          a1.store_unaligned(dst + i + W);
          a2.store_unaligned(dst + i + 2 * W);
          a3.store_unaligned(dst + i + 3 * W);
        }
        std::copy(src + i, src + e, dst + i);  // the tail
      },
      16384);
}

// Median copy bandwidth (GB/s, read + write bytes) of an n-float array on `threads` threads (sets
// the thread count).
inline double copy_gbs(std::size_t n, int threads) {
  static std::map<std::pair<std::size_t, int>, double> cache;
  const auto key = std::make_pair(n, threads);
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  set_num_threads(threads);
  const std::size_t bytes = (std::max<std::size_t>(n, 1) * sizeof(float) + 63) / 64 * 64;
  float* src = static_cast<float*>(std::aligned_alloc(64, bytes));
  float* dst = static_cast<float*>(std::aligned_alloc(64, bytes));
  for (std::size_t i = 0; i < n; ++i) src[i] = float(i % 251) * 0.01f, dst[i] = 0.0f;
  const int reps = std::max(3, int(2e8 / double(8 * std::max<std::size_t>(n, 1))));
  std::vector<double> r;
  copy_floats(src, dst, n);  // warm-up (threads, page faults)
  for (int k = 0; k < 9; ++k) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) copy_floats(i % 2 ? dst : src, i % 2 ? src : dst, n);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    r.push_back(8.0 * double(n) * reps / s * 1e-9);
  }
  std::free(src);
  std::free(dst);
  std::sort(r.begin(), r.end());
  return cache[key] = r[r.size() / 2];
}

}  // namespace sparselm::bench
