#pragma once
// Block-sparse matrix products for a weight W (in x out) with B x B blocks (sparse/block_pattern.hpp):
//
//   bsr_matmul        Y (M, out) = beta*Y + X (M, in) · W [+ bias (out)]          forward
//   bsr_matmul_t      dX (M, in) = beta*dX + dY (M, out) · Wᵀ                     backward, data
//   bsr_weight_grad   dvalues (nnz*B*B) += Xᵀ·dY on the active blocks only        backward, weights
//   bsr_backward      both backward products in one pass over the rows where B allows
//   dense_grad_pooled out (in/B, out/B) = pool over each B x B block of |Xᵀ·dY|   RigL regrowth score
//
// `values` holds the blocks in arena-slot order: slot s is block (p.row[s], p.col[s]), B*B floats
// row-major (input index first) at values + s*B*B. The pattern must be finalize()d.
//
// fp32, row-major views; B is a compile-time constant (one of sparselm::block_sizes, sparse/sparsity.hpp)
// that must equal p.block.
// beta == 0 never reads the output (NaN or garbage there does not propagate). Multi-threaded with
// OpenMP; inside a parallel region they run on the calling thread. Results are deterministic for a
// given thread count (bsr_matmul, bsr_matmul_t and dense_grad_pooled for any thread count). After the
// first call of a given shape they allocate nothing (thread-local scratch buffers are reused).
//
// See docs/design/kernels.md ("Block-sparse kernels") for the micro-kernels and measured speed.

#include <cstddef>
#include <cstdint>

#include "sparselm/core/error.hpp"
#include "sparselm/core/simd.hpp"
#include "sparselm/core/threads.hpp"
#include "sparselm/core/view.hpp"
#include "sparselm/kernels/detail/bsr_backward.hpp"
#include "sparselm/kernels/detail/bsr_matmul.hpp"
#include "sparselm/kernels/detail/bsr_pooled.hpp"
#include "sparselm/kernels/detail/bsr_util.hpp"
#include "sparselm/kernels/detail/bsr_wgrad.hpp"
#include "sparselm/sparse/block_pattern.hpp"
#include "sparselm/sparse/sparsity.hpp"

namespace sparselm::kernels {

namespace detail {

template <std::size_t B>
void check_pattern(const char* kernel, const sparse::block_pattern& p, const float* values, bool values_needed = true) {
  SPARSELM_CHECK(p.block == B, kernel, ": the pattern has block size ", p.block, " but the kernel was instantiated for B = ",
                 B);
  SPARSELM_CHECK(p.row.size() == p.col.size() && p.col_ptr.size() == p.cols_b + 1 && p.row_ptr.size() == p.rows_b + 1 &&
                     p.col_slots.size() == p.nnz() && p.row_slots.size() == p.nnz(),
                 kernel, ": the block pattern (", p.rows_b, "x", p.cols_b, " blocks, ", p.nnz(),
                 " slots) is not finalized; call finalize() after changing row/col");
  SPARSELM_CHECK(!values_needed || p.nnz() == 0 || values != nullptr, kernel, ": null values for a pattern with ", p.nnz(),
                 " blocks");
}

inline std::string pattern_string(const sparse::block_pattern& p) {
  return sparselm::detail::concat("W (", p.in(), "x", p.out(), ", ", p.block, "x", p.block, " blocks, ", p.nnz(), " of ",
                        p.rows_b * p.cols_b, " active)");
}

// "in = 10 is not a multiple of B = 4" style check for a matrix dimension.
template <std::size_t B>
void check_multiple(const char* kernel, const char* what, std::size_t n) {
  SPARSELM_CHECK(n % B == 0, kernel, ": ", what, " = ", n, " is not a multiple of the block size B = ", B);
}

}  // namespace detail

// Y (M, out) = beta*Y + X (M, in) · W [+ bias (out)].
template <std::size_t B, class Arch = native_arch>
void bsr_matmul(const_matrix_view<float> X, const sparse::block_pattern& p, const float* values, float beta,
                matrix_view<float> Y, const float* bias = nullptr) {
  static_assert(is_block_size(B), "bsr_matmul<B>: B must be one of sparselm::block_sizes");
  constexpr const char* k = "bsr_matmul";
  check_view(X, "bsr_matmul: X");
  check_view(const_matrix_view<float>(Y), "bsr_matmul: Y");
  detail::check_pattern<B>(k, p, values);
  detail::check_multiple<B>(k, "X columns (in)", X.cols);
  detail::check_multiple<B>(k, "Y columns (out)", Y.cols);
  SPARSELM_CHECK(X.cols == p.in() && Y.cols == p.out() && Y.rows == X.rows, k, ": shapes do not match: X ",
                 shape_string(X), ", ", detail::pattern_string(p), ", Y ", shape_string(Y));
  const detail::bsr_lists L{p.col_ptr.data(), p.col_slots.data(), p.row.data(), p.cols_b};
  detail::bsr_product<B, false, Arch>(X.data, X.ld, X.rows, X.cols, L, values, beta, Y.data, Y.ld, bias);
}

// dX (M, in) = beta*dX + dY (M, out) · Wᵀ.
template <std::size_t B, class Arch = native_arch>
void bsr_matmul_t(const_matrix_view<float> dY, const sparse::block_pattern& p, const float* values, float beta,
                  matrix_view<float> dX) {
  static_assert(is_block_size(B), "bsr_matmul_t<B>: B must be one of sparselm::block_sizes");
  constexpr const char* k = "bsr_matmul_t";
  check_view(dY, "bsr_matmul_t: dY");
  check_view(const_matrix_view<float>(dX), "bsr_matmul_t: dX");
  detail::check_pattern<B>(k, p, values);
  detail::check_multiple<B>(k, "dY columns (out)", dY.cols);
  detail::check_multiple<B>(k, "dX columns (in)", dX.cols);
  SPARSELM_CHECK(dY.cols == p.out() && dX.cols == p.in() && dX.rows == dY.rows, k, ": shapes do not match: dY ",
                 shape_string(dY), ", ", detail::pattern_string(p), ", dX ", shape_string(dX));
  const detail::bsr_lists L{p.row_ptr.data(), p.row_slots.data(), p.col.data(), p.rows_b};
  detail::bsr_product<B, true, Arch>(dY.data, dY.ld, dY.rows, dY.cols, L, values, beta, dX.data, dX.ld, nullptr);
}

// dvalues (nnz*B*B, slot order) += Xᵀ·dY on the active blocks. X (M, in), dY (M, out).
template <std::size_t B, class Arch = native_arch>
void bsr_weight_grad(const_matrix_view<float> X, const_matrix_view<float> dY, const sparse::block_pattern& p,
                     float* dvalues) {
  static_assert(is_block_size(B), "bsr_weight_grad<B>: B must be one of sparselm::block_sizes");
  constexpr const char* k = "bsr_weight_grad";
  check_view(X, "bsr_weight_grad: X");
  check_view(dY, "bsr_weight_grad: dY");
  detail::check_pattern<B>(k, p, dvalues);
  detail::check_multiple<B>(k, "X columns (in)", X.cols);
  detail::check_multiple<B>(k, "dY columns (out)", dY.cols);
  SPARSELM_CHECK(X.cols == p.in() && dY.cols == p.out() && X.rows == dY.rows, k, ": shapes do not match: X ",
                 shape_string(X), ", dY ", shape_string(dY), ", ", detail::pattern_string(p));
  detail::bsr_wgrad<B, Arch>(X.data, X.ld, dY.data, dY.ld, X.rows, p, dvalues);
}

// dX (M, in) = beta*dX + dY (M, out) · Wᵀ and dvalues += Xᵀ·dY: what bsr_matmul_t then
// bsr_weight_grad compute. For B > 1 in one pass over the rows that reads dY once
// (detail/bsr_backward.hpp); dX then equals bsr_matmul_t's bitwise, dvalues agrees with
// bsr_weight_grad's to rounding. B = 1 runs the two products in turn.
template <std::size_t B, class Arch = native_arch>
void bsr_backward(const_matrix_view<float> X, const_matrix_view<float> dY, const sparse::block_pattern& p,
                  const float* values, float beta, matrix_view<float> dX, float* dvalues) {
  static_assert(is_block_size(B), "bsr_backward<B>: B must be one of sparselm::block_sizes");
  if constexpr (!detail::bsr_backward_fuses<B, Arch>) {
    bsr_matmul_t<B, Arch>(dY, p, values, beta, dX);
    bsr_weight_grad<B, Arch>(X, dY, p, dvalues);
  } else {
    constexpr const char* k = "bsr_backward";
    check_view(X, "bsr_backward: X");
    check_view(dY, "bsr_backward: dY");
    check_view(const_matrix_view<float>(dX), "bsr_backward: dX");
    detail::check_pattern<B>(k, p, values);
    SPARSELM_CHECK(p.nnz() == 0 || dvalues != nullptr, k, ": null dvalues for a pattern with ", p.nnz(), " blocks");
    detail::check_multiple<B>(k, "X columns (in)", X.cols);
    detail::check_multiple<B>(k, "dY columns (out)", dY.cols);
    SPARSELM_CHECK(
        X.cols == p.in() && dY.cols == p.out() && dX.rows == X.rows && dX.cols == X.cols && dY.rows == X.rows, k,
        ": shapes do not match: X ", shape_string(X), ", dY ", shape_string(dY), ", dX ", shape_string(dX), ", ",
        detail::pattern_string(p));
    detail::bsr_backward_fused<B, Arch>(X.data, X.ld, dY.data, dY.ld, X.rows, p, values, beta, dX.data, dX.ld, dvalues);
  }
}

// out (in/B, out/B) = per-block sum / mean / max of |Xᵀ·dY| over all blocks, active or not.
template <std::size_t B, class Arch = native_arch>
void dense_grad_pooled(const_matrix_view<float> X, const_matrix_view<float> dY, block_pooling pool,
                       matrix_view<float> out) {
  static_assert(is_block_size(B), "dense_grad_pooled<B>: B must be one of sparselm::block_sizes");
  constexpr const char* k = "dense_grad_pooled";
  check_view(X, "dense_grad_pooled: X");
  check_view(dY, "dense_grad_pooled: dY");
  check_view(const_matrix_view<float>(out), "dense_grad_pooled: out");
  SPARSELM_CHECK(pool == block_pooling::sum || pool == block_pooling::avg || pool == block_pooling::max, k,
                 ": unknown pooling code ", int(pool));
  detail::check_multiple<B>(k, "X columns (in)", X.cols);
  detail::check_multiple<B>(k, "dY columns (out)", dY.cols);
  SPARSELM_CHECK(X.rows == dY.rows && out.rows * B == X.cols && out.cols * B == dY.cols, k,
                 ": shapes do not match: X ", shape_string(X), ", dY ", shape_string(dY), ", out ", shape_string(out),
                 " (expected ", X.cols / B, "x", dY.cols / B, " for B = ", B, ")");
  detail::dense_grad_pooled<B, Arch>(X.data, X.ld, dY.data, dY.ld, X.rows, X.cols, dY.cols, pool, out.data, out.ld);
}

}  // namespace sparselm::kernels

// The fp32 block-sparse products for every block size, for the compiled ISA.
// Precompiled instances (docs/design/architecture.md, "Precompiled kernels"): defined once in sparselm::kernels
// (src/kernels_bsr.cpp), declared extern where that library is linked.
#if defined(SPARSELM_INSTANTIATE_BSR) || defined(SPARSELM_PRECOMPILED_KERNELS)
#ifdef SPARSELM_INSTANTIATE_BSR
#define SPARSELM_INSTANCE template
#else
#define SPARSELM_INSTANCE extern template
#endif
namespace sparselm::kernels {
#define SPARSELM_BSR_INSTANCES(B)                                                       \
  SPARSELM_INSTANCE decltype(bsr_matmul<B, native_arch>) bsr_matmul<B, native_arch>;           \
  SPARSELM_INSTANCE decltype(bsr_matmul_t<B, native_arch>) bsr_matmul_t<B, native_arch>;       \
  SPARSELM_INSTANCE decltype(bsr_weight_grad<B, native_arch>) bsr_weight_grad<B, native_arch>; \
  SPARSELM_INSTANCE decltype(bsr_backward<B, native_arch>) bsr_backward<B, native_arch>;       \
  SPARSELM_INSTANCE decltype(dense_grad_pooled<B, native_arch>) dense_grad_pooled<B, native_arch>;
SPARSELM_FOR_EACH_BLOCK_SIZE(SPARSELM_BSR_INSTANCES)
#undef SPARSELM_BSR_INSTANCES
}  // namespace sparselm::kernels
#undef SPARSELM_INSTANCE
#endif
