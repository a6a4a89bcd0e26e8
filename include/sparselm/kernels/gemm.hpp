#pragma once
// Dense GEMM: C = alpha * op(A) * op(B) + beta * C (+ bias), row-major, fp32.
//
// op(X) is X or X^T. op(A) is (M x K), op(B) is (K x N), C is (M x N). With a bias (length N)
// every row of C gets bias added after the product. Callable from inside an OpenMP parallel
// region (it then runs on the calling thread only).
//
// PLACEHOLDER IMPLEMENTATION: correct, simple loops. The packed, register-tiled kernel replaces
// the body of detail::gemm_impl; the public signature below is stable.

#include <cstddef>
#include <cstdint>

#include "sparselm/core/error.hpp"
#include "sparselm/core/simd.hpp"
#include "sparselm/core/threads.hpp"
#include "sparselm/core/view.hpp"

namespace sparselm::kernels {

enum class trans : std::uint8_t { n = 0, t = 1 };

namespace detail {
inline std::size_t op_rows(trans t, const const_matrix_view<float>& m) { return t == trans::n ? m.rows : m.cols; }
inline std::size_t op_cols(trans t, const const_matrix_view<float>& m) { return t == trans::n ? m.cols : m.rows; }
}  // namespace detail

template <class Arch = native_arch>
void gemm(trans ta, trans tb, float alpha, const_matrix_view<float> A, const_matrix_view<float> B, float beta,
          matrix_view<float> C, const float* bias = nullptr) {
  SPARSELM_CHECK(ta == trans::n || ta == trans::t, "gemm: unsupported transpose code ", int(ta), " for A");
  SPARSELM_CHECK(tb == trans::n || tb == trans::t, "gemm: unsupported transpose code ", int(tb), " for B");
  check_view(A, "gemm: A");
  check_view(B, "gemm: B");
  check_view(matrix_view<const float>(C), "gemm: C");
  const std::size_t M = detail::op_rows(ta, A), K = detail::op_cols(ta, A);
  const std::size_t N = detail::op_cols(tb, B);
  SPARSELM_CHECK(detail::op_rows(tb, B) == K && C.rows == M && C.cols == N, "gemm: shapes do not match: op(A) ",
                 ta == trans::t ? "= A^T, A " : "= A ", shape_string(A), ", op(B) ", tb == trans::t ? "= B^T, B " : "= B ",
                 shape_string(B), ", C ", shape_string(C));
  auto a = [&](std::size_t i, std::size_t k) { return ta == trans::n ? A(i, k) : A(k, i); };
  auto b = [&](std::size_t k, std::size_t j) { return tb == trans::n ? B(k, j) : B(j, k); };
  parallel_for(0, M, [&](std::size_t i) {
    for (std::size_t j = 0; j < N; ++j) {
      float s = 0;
      for (std::size_t k = 0; k < K; ++k) s += a(i, k) * b(k, j);
      float c = beta == 0.0f ? 0.0f : beta * C(i, j);
      C(i, j) = alpha * s + c + (bias ? bias[j] : 0.0f);
    }
  });
}

}  // namespace sparselm::kernels
