#pragma once
// Dense GEMM: C = alpha * op(A) * op(B) + beta * C (+ bias), row-major, fp32.
//
// op(X) is X or X^T. op(A) is (M x K), op(B) is (K x N), C is (M x N). With a bias (length N)
// every row of C gets bias added after the product.
//
// - beta == 0 never reads C (it may hold NaN or garbage). K == 0 gives C = beta * C (+ bias);
//   an empty M or N is a no-op.
// - Threads: OpenMP with num_threads() threads (core/threads.hpp). Called from inside an OpenMP
//   parallel region it runs on the calling thread only, so independent GEMMs (e.g. one per
//   attention head) can run concurrently from a parallel loop.
// - Workspace: packing buffers are thread_local, 64-byte aligned and grow-only (at most
//   ~3 MiB per thread on AVX-512); the steady state allocates nothing.
// - C must not overlap A, B or bias.
//
// Implementation (kernels/detail/gemm_*.hpp): Goto/BLIS-style blocking with packed panels and an
// xsimd register-tiled micro-kernel (14 x 32 on AVX-512, 6 x 2W otherwise); A is read in place
// instead of packed when it serves few columns of C (<= 128); see gemm_driver.hpp.

#include <cstddef>
#include <cstdint>

#include "sparselm/core/error.hpp"
#include "sparselm/core/simd.hpp"
#include "sparselm/core/threads.hpp"
#include "sparselm/core/view.hpp"
#include "sparselm/kernels/detail/gemm_driver.hpp"

namespace sparselm::kernels {

enum class trans : std::uint8_t { n = 0, t = 1 };

namespace detail {
template <class T>
std::size_t op_rows(trans t, const const_matrix_view<T>& m) { return t == trans::n ? m.rows : m.cols; }
template <class T>
std::size_t op_cols(trans t, const const_matrix_view<T>& m) { return t == trans::n ? m.cols : m.rows; }

// Names of a GEMM function and its operands in messages, e.g. {"gemm", "gemm: A", "gemm: B", "gemm: C"}.
struct gemm_names {
  const char *fn, *a, *b, *c;
};

// Checks the arguments of a GEMM and returns the problem.
template <class SA, class SB>
gemm_problem<SA, SB> gemm_check(const gemm_names& names, trans ta, trans tb, float alpha, const_matrix_view<SA> A,
                                const_matrix_view<SB> B, float beta, matrix_view<float> C, const float* bias) {
  const char* what = names.fn;
  SPARSELM_CHECK(ta == trans::n || ta == trans::t, what, ": unsupported transpose code ", int(ta), " for A");
  SPARSELM_CHECK(tb == trans::n || tb == trans::t, what, ": unsupported transpose code ", int(tb), " for B");
  check_view(A, names.a);
  check_view(B, names.b);
  check_view(matrix_view<const float>(C), names.c);
  const std::size_t M = op_rows(ta, A), K = op_cols(ta, A);
  const std::size_t N = op_cols(tb, B);
  SPARSELM_CHECK(op_rows(tb, B) == K && C.rows == M && C.cols == N, what, ": shapes do not match: op(A) ",
                 ta == trans::t ? "= A^T, A " : "= A ", shape_string(A), ", op(B) ", tb == trans::t ? "= B^T, B " : "= B ",
                 shape_string(B), ", C ", shape_string(C));
  SPARSELM_CHECK(!bias || reinterpret_cast<std::uintptr_t>(bias) % alignof(float) == 0, what,
                 ": bias pointer is not aligned to ", alignof(float), " bytes");
  return {ta == trans::t, tb == trans::t, M, N, K, alpha, beta, A.data, A.ld, B.data, B.ld, C.data, C.ld, bias};
}
}  // namespace detail

template <class Arch = native_arch>
void gemm(trans ta, trans tb, float alpha, const_matrix_view<float> A, const_matrix_view<float> B, float beta,
          matrix_view<float> C, const float* bias = nullptr) {
  detail::gemm_run<detail::gemm_fp32_family<Arch>>(detail::gemm_check({"gemm", "gemm: A", "gemm: B", "gemm: C"}, ta, tb, alpha, A, B, beta, C, bias));
}

}  // namespace sparselm::kernels

// The fp32 GEMM for the compiled ISA.
// Precompiled instances (docs/design/architecture.md, "Precompiled kernels"): defined once in sparselm::kernels
// (src/kernels_gemm.cpp), declared extern where that library is linked.
#if defined(SPARSELM_INSTANTIATE_GEMM) || defined(SPARSELM_PRECOMPILED_KERNELS)
#ifdef SPARSELM_INSTANTIATE_GEMM
#define SPARSELM_INSTANCE template
#else
#define SPARSELM_INSTANCE extern template
#endif
namespace sparselm::kernels {
SPARSELM_INSTANCE decltype(gemm<native_arch>) gemm<native_arch>;
}  // namespace sparselm::kernels
#undef SPARSELM_INSTANCE
#endif
