#pragma once
// Naive GEMM reference for the tests: double accumulation, plus the magnitude bound used to set
// a K * eps tolerance per element.

#include <cmath>
#include <cstddef>
#include <limits>
#include <string>
#include <vector>

#include "sparselm/core/view.hpp"
#include "sparselm/kernels/gemm.hpp"

namespace sparselm::test {

// One GEMM test case: shapes, epilogue, padding of the leading dimensions, NaN-filled C.
struct gemm_case {
  kernels::trans ta, tb;
  std::size_t M, N, K;
  float alpha = 1.0f, beta = 0.0f;
  bool bias = false;
  std::size_t pad = 0;  // extra leading-dimension elements on A, B and C
  bool nan_c = false;   // fill C with NaN (only meaningful with beta == 0)
};

inline std::string describe(const gemm_case& c) {
  return std::string("op ") + (c.ta == kernels::trans::t ? "T" : "N") + (c.tb == kernels::trans::t ? "T" : "N") +
         " M=" + std::to_string(c.M) + " N=" + std::to_string(c.N) + " K=" + std::to_string(c.K) +
         " alpha=" + std::to_string(c.alpha) + " beta=" + std::to_string(c.beta) + " bias=" + std::to_string(c.bias) +
         " pad=" + std::to_string(c.pad);
}

struct gemm_expected {
  std::vector<double> value;  // alpha * op(A) op(B) + beta * C + bias, row-major M x N
  std::vector<double> scale;  // |alpha| * |op(A)| |op(B)| + |beta * C| + |bias|
};

// Reads C only when beta != 0 (like the kernel under test).
inline gemm_expected gemm_reference(kernels::trans ta, kernels::trans tb, float alpha, const_matrix_view<float> A,
                                    const_matrix_view<float> B, float beta, const_matrix_view<float> C,
                                    const float* bias = nullptr) {
  const bool at = ta == kernels::trans::t, bt = tb == kernels::trans::t;
  const std::size_t M = at ? A.cols : A.rows, K = at ? A.rows : A.cols, N = bt ? B.rows : B.cols;
  gemm_expected e{std::vector<double>(M * N), std::vector<double>(M * N)};
  for (std::size_t i = 0; i < M; ++i)
    for (std::size_t j = 0; j < N; ++j) {
      double s = 0, s_abs = 0;
      for (std::size_t k = 0; k < K; ++k) {
        const double a = at ? A(k, i) : A(i, k), b = bt ? B(j, k) : B(k, j);
        s += a * b;
        s_abs += std::abs(a * b);
      }
      double v = double(alpha) * s, sc = std::abs(double(alpha)) * s_abs;
      if (beta != 0.0f) v += double(beta) * C(i, j), sc += std::abs(double(beta) * C(i, j));
      if (bias) v += bias[j], sc += std::abs(double(bias[j]));
      e.value[i * N + j] = v;
      e.scale[i * N + j] = sc;
    }
  return e;
}

// Largest |got - expected| / bound over C, with bound = (2K + 4) * eps * scale (+ a tiny
// absolute floor): <= 1 passes. Returns +inf on a NaN.
inline double gemm_error_ratio(const gemm_expected& e, const_matrix_view<float> C, std::size_t K) {
  const double eps = std::numeric_limits<float>::epsilon();
  double worst = 0;
  for (std::size_t i = 0; i < C.rows; ++i)
    for (std::size_t j = 0; j < C.cols; ++j) {
      const double got = C(i, j), want = e.value[i * C.cols + j];
      if (std::isnan(got)) return std::numeric_limits<double>::infinity();
      const double bound = (2.0 * double(K) + 4.0) * eps * e.scale[i * C.cols + j] + 1e-30;
      worst = std::max(worst, std::abs(got - want) / bound);
    }
  return worst;
}

}  // namespace sparselm::test
