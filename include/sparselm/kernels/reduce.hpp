#pragma once
// Small memory-bound helpers the layers need: column sums (bias gradients) and element-wise adds
// (residual connections).
//
// Legend: N rows, C columns.

#include <algorithm>
#include <cstddef>
#include <span>

#include "sparselm/core/error.hpp"
#include "sparselm/core/simd.hpp"
#include "sparselm/core/threads.hpp"
#include "sparselm/core/view.hpp"
#include "sparselm/kernels/detail/simd_math.hpp"

namespace sparselm::kernels {

// Dot product and y += w·x over n contiguous floats (decoding, few-row logits).
namespace detail {

template <class Arch = native_arch>
inline float dot(const float* a, const float* b, std::size_t n) noexcept {
  using F = fvec<Arch>;
  F acc(0.0f);
  for_each_batch<Arch>(0, n, [&](std::size_t j, std::size_t m) {
    acc = xsimd::fma(loadn<Arch>(a + j, m), loadn<Arch>(b + j, m), acc);
  });
  return hsum<Arch>(acc);
}

// y += w · x (n floats).
template <class Arch = native_arch>
inline void axpy(float w, const float* x, float* y, std::size_t n) noexcept {
  using F = fvec<Arch>;
  const F wv(w);
  for_each_batch<Arch>(0, n, [&](std::size_t j, std::size_t m) {
    storen<Arch>(xsimd::fma(wv, loadn<Arch>(x + j, m), loadn<Arch>(y + j, m)), y + j, m);
  });
}

}  // namespace detail

// db[j] += sum_i dy(i, j). Threads own disjoint column ranges and sum rows in order, so the result
// does not depend on the thread count.
template <class Arch = native_arch>
void add_column_sums(const_matrix_view<float> dy, std::span<float> db) {
  check_view(dy, "add_column_sums: dy");
  SPARSELM_CHECK(db.size() == dy.cols, "add_column_sums: db has ", db.size(), " entries for dy ", shape_string(dy));
  constexpr std::size_t W = simd<float, Arch>::size;
  constexpr std::size_t chunk = 4 * W;  // columns per task: 4 registers of accumulators
  const std::size_t tasks = (dy.cols + chunk - 1) / chunk;
  parallel_for(0, tasks, [&](std::size_t t) {
    const std::size_t c0 = t * chunk, c1 = std::min(dy.cols, c0 + chunk);
    if (c1 - c0 == chunk) {
      simd<float, Arch> a0(0.f), a1(0.f), a2(0.f), a3(0.f);
      for (std::size_t i = 0; i < dy.rows; ++i) {
        const float* r = dy.row(i) + c0;
        a0 += simd<float, Arch>::load_unaligned(r);
        a1 += simd<float, Arch>::load_unaligned(r + W);
        a2 += simd<float, Arch>::load_unaligned(r + 2 * W);
        a3 += simd<float, Arch>::load_unaligned(r + 3 * W);
      }
      float* d = db.data() + c0;
      (simd<float, Arch>::load_unaligned(d) + a0).store_unaligned(d);
      (simd<float, Arch>::load_unaligned(d + W) + a1).store_unaligned(d + W);
      (simd<float, Arch>::load_unaligned(d + 2 * W) + a2).store_unaligned(d + 2 * W);
      (simd<float, Arch>::load_unaligned(d + 3 * W) + a3).store_unaligned(d + 3 * W);
    } else {
      for (std::size_t j = c0; j < c1; ++j) {
        float s = 0;
        for (std::size_t i = 0; i < dy.rows; ++i) s += dy(i, j);
        db[j] += s;
      }
    }
  }, 1);
}

// out = a + b (element-wise, same shapes; out may alias a or b).
template <class Arch = native_arch>
void add(const_matrix_view<float> a, const_matrix_view<float> b, matrix_view<float> out) {
  SPARSELM_CHECK(a.rows == b.rows && a.cols == b.cols && a.rows == out.rows && a.cols == out.cols,
                 "add: shapes differ: a ", shape_string(a), ", b ", shape_string(b), ", out ", shape_string(out));
  constexpr std::size_t W = simd<float, Arch>::size;
  parallel_for(0, a.rows, [&](std::size_t i) {
    const float* x = a.row(i);
    const float* y = b.row(i);
    float* z = out.row(i);
    std::size_t j = 0;
    for (; j + W <= a.cols; j += W)
      (simd<float, Arch>::load_unaligned(x + j) + simd<float, Arch>::load_unaligned(y + j)).store_unaligned(z + j);
    for (; j < a.cols; ++j) z[j] = x[j] + y[j];
  }, 16);
}

// y += x (element-wise).
template <class Arch = native_arch>
void add_inplace(const_matrix_view<float> x, matrix_view<float> y) {
  add<Arch>(x, y, y);
}

// Copies a matrix (shapes must match).
inline void copy(const_matrix_view<float> src, matrix_view<float> dst) {
  SPARSELM_CHECK(src.rows == dst.rows && src.cols == dst.cols, "copy: shapes differ: ", shape_string(src), " vs ",
                 shape_string(dst));
  parallel_for(0, src.rows, [&](std::size_t i) { std::copy_n(src.row(i), src.cols, dst.row(i)); }, 64);
}

}  // namespace sparselm::kernels
