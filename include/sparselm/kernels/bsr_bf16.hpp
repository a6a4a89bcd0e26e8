#pragma once
// bf16 block-sparse products: the products of kernels/bsr.hpp with the block values and the
// activation operands rounded to bf16 (nearest even, NaN kept) and fp32 accumulation.
//
//   bsr_matmul_bf16       Y (M, out) = beta*Y + bf16(X) · bf16(W) [+ bias]      forward
//   bsr_matmul_t_bf16     dX (M, in) = beta*dX + bf16(dY) · bf16(W)ᵀ            backward, data
//   bsr_weight_grad_bf16  dvalues (nnz*B*B) += bf16(X)ᵀ · bf16(dY), active blocks  backward, weights
//   bsr_backward_bf16     both backward products (one pass on the native path)
//
// bsr_matmul_bf16, bsr_weight_grad_bf16 and bsr_backward_bf16 also take X as bf16 values
// (activations a layer kept in bf16): the result is that of a float X which rounds to them, bit
// for bit.
//
// Arguments, layouts, checks, beta == 0 not reading the output, threads and determinism are those
// of bsr_matmul / bsr_matmul_t / bsr_weight_grad. B is a block size above 1 (4, 8, 16): the products pair their
// operands along K inside a block, the weight gradient along M. The products of bf16 values are
// exact in fp32, so results differ from fp32 arithmetic on the rounded operands only in the order
// of the fp32 additions.
//
// Paths (bsr_bf16_path):
//   native   - AVX512-BF16 (vdpbf16ps, detail/bsr_bf16.hpp); needs a build for a CPU that has it
//              (bsr_bf16_native) and an AVX-512 Arch.
//   portable - any CPU: the operands are rounded to bf16 values held in float and the fp32 kernels
//              multiply them (fp32 speed).
//   amx      - B = 16: Intel AMX tiles (TDPBF16PS; detail/bsr_amx.hpp, detail/bsr_amx_wgrad.hpp);
//              needs a build with AMX (kernels/gemm_bf16.hpp) and a CPU and OS that run it.
//   best     - amx for B = 16 where the bf16 GEMM runs on AMX (bf16_native_choice(), which
//              SPARSELM_BF16_KERNEL overrides); else native when available; else portable.
//
// bsr_bf16_pays(): whether the native path is faster than the fp32 kernels on this CPU (vdpbf16ps
// measured at >= 1.2x the FMA rate, the probe of kernels/gemm_bf16.hpp); bsr_bf16_amx_chosen():
// whether the B = 16 products run on AMX. The block_sparse<B> layers use these products under
// bf16 compute only where one of them holds: on the Intel Xeon (Sapphire Rapids class) of the
// project's VM vdpbf16ps runs at half the FMA rate and the native kernels at 0.64-0.89x the fp32
// ones (docs/design/precision.md), so there B = 16 runs on AMX and B = 4, 8 in fp32; the portable path
// only adds rounding passes.

#include <cstddef>
#include <span>
#include <type_traits>
#include <vector>

#include "sparselm/core/error.hpp"
#include "sparselm/core/simd.hpp"
#include "sparselm/core/view.hpp"
#include "sparselm/kernels/bsr.hpp"
#include "sparselm/kernels/convert.hpp"
#include "sparselm/kernels/detail/bsr_amx.hpp"
#include "sparselm/kernels/detail/bsr_amx_wgrad.hpp"
#include "sparselm/kernels/detail/bsr_bf16.hpp"
#include "sparselm/kernels/detail/bsr_bf16_wgrad.hpp"
#include "sparselm/kernels/gemm_bf16.hpp"
#include "sparselm/sparse/block_pattern.hpp"

namespace sparselm::kernels {

enum class bsr_bf16_path { best, native, portable, amx };

// True when this program was compiled with AVX512-BF16 (and AVX-512 BW/VL): the native path exists
// for AVX-512 architectures.
inline constexpr bool bsr_bf16_native = SPARSELM_GEMM_BF16_NATIVE != 0;

// Whether the native path exists in this build and pays on this CPU (measured once per process;
// SPARSELM_BF16_KERNEL=native forces yes, =portable no).
inline bool bsr_bf16_pays() { return bsr_bf16_native && bf16_native_choice().dot_products; }
// True when this build has the AMX block-sparse products (B = 16) and the process runs the bf16
// GEMM on AMX (bf16_native_choice(): the CPU and OS allow it and SPARSELM_BF16_KERNEL does not
// override it).
inline constexpr bool bsr_bf16_amx = SPARSELM_GEMM_AMX != 0;
inline bool bsr_bf16_amx_chosen() { return bsr_bf16_amx && bf16_native_choice().amx; }

namespace detail {

// Whether a call runs the native path; throws when `native` is asked for and not available.
template <class Arch>
bool bsr_bf16_use_native(const char* kernel, bsr_bf16_path path) {
  constexpr bool available = bsr_bf16_native && arch_is_avx512<Arch>;
  SPARSELM_CHECK(path == bsr_bf16_path::best || path == bsr_bf16_path::native || path == bsr_bf16_path::portable ||
                     path == bsr_bf16_path::amx,
                 kernel, ": unknown path code ", int(path));
  SPARSELM_CHECK(path != bsr_bf16_path::native || available, kernel,
                 ": path native needs AVX512-BF16 and an AVX-512 architecture (compile with -march=native on a CPU "
                 "that has it); this build has only the portable path");
  return available && path != bsr_bf16_path::portable;
}

// The path a product runs: amx (B = 16), native or portable; throws when amx or native is asked
// for and not available.
template <std::size_t B, class Arch>
bsr_bf16_path bsr_bf16_route(const char* kernel, bsr_bf16_path path) {
  const bool amx_here = B == 16 && arch_is_avx512<Arch> && bsr_bf16_amx && gemm_bf16_amx_usable();
  if (path == bsr_bf16_path::amx) {
    SPARSELM_CHECK(amx_here, kernel, ": path amx needs B = 16, a build with AMX and a CPU and OS that run it (",
                   B != 16 ? "B is not 16" : gemm_bf16_amx_status(), ")");
    return path;
  }
  if (path == bsr_bf16_path::best && amx_here && bsr_bf16_amx_chosen()) return bsr_bf16_path::amx;
  return bsr_bf16_use_native<Arch>(kernel, path) ? bsr_bf16_path::native : bsr_bf16_path::portable;
}

// C = beta*C + A · S [+ bias] on the chosen path (TransV as in bsr_product).
template <std::size_t B, bool TransV, class Arch>
void bsr_product_bf16_path(bsr_bf16_path path, const float* A, std::size_t lda, std::size_t M, std::size_t K,
                           const bsr_lists& L, const float* V, float beta, float* C, std::size_t ldc,
                           const float* bias) {
#if SPARSELM_GEMM_AMX
  if constexpr (arch_is_avx512<Arch> && B == 16) {
    if (path == bsr_bf16_path::amx) return bsr_product_amx<TransV, Arch>(A, lda, M, K, L, V, beta, C, ldc, bias);
  }
#endif
#if SPARSELM_GEMM_BF16_NATIVE
  if constexpr (arch_is_avx512<Arch>) {
    if (path == bsr_bf16_path::native) return bsr_product_bf16<B, TransV, Arch>(A, lda, M, K, L, V, beta, C, ldc, bias);
  }
#endif
  (void)path;
  bsr_product_bf16_portable<B, TransV, Arch>(A, lda, M, K, L, V, beta, C, ldc, bias);
}

// X widened to float, contiguous, in a thread-local buffer (grow-only): what the paths without a
// bf16 source read. bf16 values are exact in float, so rounding them again changes nothing.
template <class Arch>
const_matrix_view<float> widened(const_matrix_view<bf16> X) {
  thread_local std::vector<float> buf;
  if (buf.size() < X.rows * X.cols) buf.resize(X.rows * X.cols);
  if (X.ld == X.cols) {
    to_float<Arch>(std::span<const bf16>(X.data, X.rows * X.cols), std::span<float>(buf.data(), X.rows * X.cols));
  } else {
    for (std::size_t r = 0; r < X.rows; ++r)
      to_float<Arch>(std::span<const bf16>(X.data + r * X.ld, X.cols), std::span<float>(buf.data() + r * X.cols, X.cols));
  }
  return {buf.data(), X.rows, X.cols, X.cols};
}

// The forward's argument checks, for X in float or bf16 (named "X (bf16)" in the messages).
template <std::size_t B, class TX>
void check_forward_bf16(const char* k, const_matrix_view<TX> X, const sparse::block_pattern& p, const float* values,
                        matrix_view<float> Y) {
  const char* xname = std::is_same_v<TX, bf16> ? "X (bf16)" : "X";
  check_view(X, sparselm::detail::concat(k, ": ", xname).c_str());
  check_view(const_matrix_view<float>(Y), sparselm::detail::concat(k, ": Y").c_str());
  check_pattern<B>(k, p, values);
  check_multiple<B>(k, "X columns (in)", X.cols);
  check_multiple<B>(k, "Y columns (out)", Y.cols);
  SPARSELM_CHECK(X.cols == p.in() && Y.cols == p.out() && Y.rows == X.rows, k, ": shapes do not match: ", xname, " ",
                 shape_string(X), ", ", pattern_string(p), ", Y ", shape_string(Y));
}

// The weight gradient's argument checks, likewise.
template <std::size_t B, class TX>
void check_wgrad_bf16(const char* k, const_matrix_view<TX> X, const_matrix_view<float> dY,
                      const sparse::block_pattern& p, const float* dvalues) {
  const char* xname = std::is_same_v<TX, bf16> ? "X (bf16)" : "X";
  check_view(X, sparselm::detail::concat(k, ": ", xname).c_str());
  check_view(dY, sparselm::detail::concat(k, ": dY").c_str());
  check_pattern<B>(k, p, dvalues);
  check_multiple<B>(k, "X columns (in)", X.cols);
  check_multiple<B>(k, "dY columns (out)", dY.cols);
  SPARSELM_CHECK(X.cols == p.in() && dY.cols == p.out() && X.rows == dY.rows, k, ": shapes do not match: ", xname,
                 " ", shape_string(X), ", dY ", shape_string(dY), ", ", pattern_string(p));
}

}  // namespace detail

// Y (M, out) = beta*Y + bf16(X) (M, in) · bf16(W) [+ bias (out)].
template <std::size_t B, class Arch = native_arch>
void bsr_matmul_bf16(const_matrix_view<float> X, const sparse::block_pattern& p, const float* values, float beta,
                     matrix_view<float> Y, const float* bias = nullptr, bsr_bf16_path path = bsr_bf16_path::best) {
  static_assert(is_block_size(B) && B > 1, "bsr_matmul_bf16<B>: B must be one of sparselm::block_sizes above 1");
  constexpr const char* k = "bsr_matmul_bf16";
  detail::check_forward_bf16<B>(k, X, p, values, Y);
  const bsr_bf16_path route = detail::bsr_bf16_route<B, Arch>(k, path);
  const detail::bsr_lists L{p.col_ptr.data(), p.col_slots.data(), p.row.data(), p.cols_b};
  detail::bsr_product_bf16_path<B, false, Arch>(route, X.data, X.ld, X.rows, X.cols, L, values, beta, Y.data, Y.ld,
                                                bias);
}

// The same with X in bf16 (activations a layer keeps in bf16): the result of the float X whose
// rounding X holds, bit for bit. The native path packs X as it is; the others widen it first.
template <std::size_t B, class Arch = native_arch>
void bsr_matmul_bf16(const_matrix_view<bf16> X, const sparse::block_pattern& p, const float* values, float beta,
                     matrix_view<float> Y, const float* bias = nullptr, bsr_bf16_path path = bsr_bf16_path::best) {
  static_assert(is_block_size(B) && B > 1, "bsr_matmul_bf16<B>: B must be one of sparselm::block_sizes above 1");
  constexpr const char* k = "bsr_matmul_bf16";
  detail::check_forward_bf16<B>(k, X, p, values, Y);
  const bsr_bf16_path route = detail::bsr_bf16_route<B, Arch>(k, path);
#if SPARSELM_GEMM_BF16_NATIVE
  if constexpr (detail::arch_is_avx512<Arch>) {
    if (route == bsr_bf16_path::native) {
      const detail::bsr_lists L{p.col_ptr.data(), p.col_slots.data(), p.row.data(), p.cols_b};
      return detail::bsr_product_bf16<B, false, Arch>(X.data, X.ld, X.rows, X.cols, L, values, beta, Y.data, Y.ld,
                                                      bias);
    }
  }
#endif
  bsr_matmul_bf16<B, Arch>(detail::widened<Arch>(X), p, values, beta, Y, bias, route);
}

// dX (M, in) = beta*dX + bf16(dY) (M, out) · bf16(W)ᵀ.
template <std::size_t B, class Arch = native_arch>
void bsr_matmul_t_bf16(const_matrix_view<float> dY, const sparse::block_pattern& p, const float* values, float beta,
                       matrix_view<float> dX, bsr_bf16_path path = bsr_bf16_path::best) {
  static_assert(is_block_size(B) && B > 1, "bsr_matmul_t_bf16<B>: B must be one of sparselm::block_sizes above 1");
  constexpr const char* k = "bsr_matmul_t_bf16";
  check_view(dY, "bsr_matmul_t_bf16: dY");
  check_view(const_matrix_view<float>(dX), "bsr_matmul_t_bf16: dX");
  detail::check_pattern<B>(k, p, values);
  detail::check_multiple<B>(k, "dY columns (out)", dY.cols);
  detail::check_multiple<B>(k, "dX columns (in)", dX.cols);
  SPARSELM_CHECK(dY.cols == p.out() && dX.cols == p.in() && dX.rows == dY.rows, k, ": shapes do not match: dY ",
                 shape_string(dY), ", ", detail::pattern_string(p), ", dX ", shape_string(dX));
  const bsr_bf16_path route = detail::bsr_bf16_route<B, Arch>(k, path);
  const detail::bsr_lists L{p.row_ptr.data(), p.row_slots.data(), p.col.data(), p.rows_b};
  detail::bsr_product_bf16_path<B, true, Arch>(route, dY.data, dY.ld, dY.rows, dY.cols, L, values, beta, dX.data,
                                               dX.ld, nullptr);
}

// dvalues (nnz*B*B, slot order) += bf16(X)ᵀ · bf16(dY) on the active blocks. X (M, in), dY (M, out).
template <std::size_t B, class Arch = native_arch>
void bsr_weight_grad_bf16(const_matrix_view<float> X, const_matrix_view<float> dY, const sparse::block_pattern& p,
                          float* dvalues, bsr_bf16_path path = bsr_bf16_path::best) {
  static_assert(is_block_size(B) && B > 1, "bsr_weight_grad_bf16<B>: B must be one of sparselm::block_sizes above 1");
  constexpr const char* k = "bsr_weight_grad_bf16";
  detail::check_wgrad_bf16<B>(k, X, dY, p, dvalues);
  const bsr_bf16_path route = detail::bsr_bf16_route<B, Arch>(k, path);
#if SPARSELM_GEMM_AMX
  if constexpr (B == 16 && detail::arch_is_avx512<Arch>) {
    if (route == bsr_bf16_path::amx) return detail::bsr_wgrad_amx(X.data, X.ld, dY.data, dY.ld, X.rows, p, dvalues);
  }
#endif
  const bool native = route == bsr_bf16_path::native;
#if SPARSELM_GEMM_BF16_NATIVE
  if constexpr (detail::arch_is_avx512<Arch>) {
    if (native) return detail::bsr_wgrad_bf16<B, Arch>(X.data, X.ld, dY.data, dY.ld, X.rows, p, dvalues);
  }
#endif
  (void)native;
  detail::bsr_wgrad_bf16_portable<B, Arch>(X.data, X.ld, dY.data, dY.ld, X.rows, p, dvalues);
}

// The same with X in bf16 (kept by a layer in bf16): the result of the float X whose rounding X
// holds, bit for bit. The native path packs X as it is; the others widen it first.
template <std::size_t B, class Arch = native_arch>
void bsr_weight_grad_bf16(const_matrix_view<bf16> X, const_matrix_view<float> dY, const sparse::block_pattern& p,
                          float* dvalues, bsr_bf16_path path = bsr_bf16_path::best) {
  static_assert(is_block_size(B) && B > 1, "bsr_weight_grad_bf16<B>: B must be one of sparselm::block_sizes above 1");
  constexpr const char* k = "bsr_weight_grad_bf16";
  detail::check_wgrad_bf16<B>(k, X, dY, p, dvalues);
  const bsr_bf16_path route = detail::bsr_bf16_route<B, Arch>(k, path);
#if SPARSELM_GEMM_BF16_NATIVE
  if constexpr (detail::arch_is_avx512<Arch>) {
    if (route == bsr_bf16_path::native)
      return detail::bsr_wgrad_bf16<B, Arch>(X.data, X.ld, dY.data, dY.ld, X.rows, p, dvalues);
  }
#endif
  bsr_weight_grad_bf16<B, Arch>(detail::widened<Arch>(X), dY, p, dvalues, route);
}

// Both backward products: dX (M, in) = beta*dX + bf16(dY) · bf16(W)ᵀ and dvalues += bf16(X)ᵀ ·
// bf16(dY), X float or bf16. On the native path in one pass over the rows that reads dY from memory
// once (detail/bsr_bf16_wgrad.hpp): dX bitwise bsr_matmul_t_bf16's, dvalues bsr_weight_grad_bf16's
// to rounding. Other paths: the two products in turn.
template <std::size_t B, class Arch = native_arch, class TX>
void bsr_backward_bf16(const_matrix_view<TX> X, const_matrix_view<float> dY, const sparse::block_pattern& p,
                       const float* values, float beta, matrix_view<float> dX, float* dvalues,
                       bsr_bf16_path path = bsr_bf16_path::best) {
  static_assert(is_block_size(B) && B > 1, "bsr_backward_bf16<B>: B must be one of sparselm::block_sizes above 1");
  static_assert(std::is_same_v<TX, float> || std::is_same_v<TX, bf16>, "bsr_backward_bf16: X is float or bf16");
  constexpr const char* k = "bsr_backward_bf16";
  detail::check_wgrad_bf16<B>(k, X, dY, p, dvalues);
  check_view(const_matrix_view<float>(dX), "bsr_backward_bf16: dX");
  SPARSELM_CHECK(p.nnz() == 0 || values != nullptr, k, ": null values for a pattern with ", p.nnz(), " blocks");
  SPARSELM_CHECK(dX.rows == dY.rows && dX.cols == p.in(), k, ": shapes do not match: dY ", shape_string(dY), ", ",
                 detail::pattern_string(p), ", dX ", shape_string(dX));
  const bsr_bf16_path route = detail::bsr_bf16_route<B, Arch>(k, path);
#if SPARSELM_GEMM_BF16_NATIVE
  if constexpr (detail::arch_is_avx512<Arch>) {
    if (route == bsr_bf16_path::native)
      return detail::bsr_backward_bf16<B, Arch>(X.data, X.ld, dY.data, dY.ld, X.rows, p, values, beta, dX.data, dX.ld,
                                                dvalues);
  }
#endif
  bsr_matmul_t_bf16<B, Arch>(dY, p, values, beta, dX, route);
  bsr_weight_grad_bf16<B, Arch>(X, dY, p, dvalues, route);
}

}  // namespace sparselm::kernels

// The bf16 block-sparse products for every block size, X in fp32 or bf16, for the compiled ISA.
// Precompiled instances (docs/design/architecture.md, "Precompiled kernels"): defined once in sparselm::kernels
// (src/kernels_bsr_bf16.cpp), declared extern where that library is linked.
#if defined(SPARSELM_INSTANTIATE_BSR_BF16) || defined(SPARSELM_PRECOMPILED_KERNELS)
#ifdef SPARSELM_INSTANTIATE_BSR_BF16
#define SPARSELM_INSTANCE template
#else
#define SPARSELM_INSTANCE extern template
#endif
namespace sparselm::kernels {
using bsr_matmul_bf16_x = void(const_matrix_view<float>, const sparse::block_pattern&, const float*, float,
                               matrix_view<float>, const float*, bsr_bf16_path);
using bsr_matmul_bf16_xb = void(const_matrix_view<bf16>, const sparse::block_pattern&, const float*, float,
                                matrix_view<float>, const float*, bsr_bf16_path);
using bsr_weight_grad_bf16_x = void(const_matrix_view<float>, const_matrix_view<float>, const sparse::block_pattern&,
                                    float*, bsr_bf16_path);
using bsr_weight_grad_bf16_xb = void(const_matrix_view<bf16>, const_matrix_view<float>, const sparse::block_pattern&,
                                     float*, bsr_bf16_path);
#define SPARSELM_BSR_BF16_INSTANCES(B)                                                                      \
  SPARSELM_INSTANCE bsr_matmul_bf16_x bsr_matmul_bf16<B, native_arch>;                                      \
  SPARSELM_INSTANCE bsr_matmul_bf16_xb bsr_matmul_bf16<B, native_arch>;                                     \
  SPARSELM_INSTANCE decltype(bsr_matmul_t_bf16<B, native_arch>) bsr_matmul_t_bf16<B, native_arch>;          \
  SPARSELM_INSTANCE bsr_weight_grad_bf16_x bsr_weight_grad_bf16<B, native_arch>;                            \
  SPARSELM_INSTANCE bsr_weight_grad_bf16_xb bsr_weight_grad_bf16<B, native_arch>;                           \
  SPARSELM_INSTANCE decltype(bsr_backward_bf16<B, native_arch, float>) bsr_backward_bf16<B, native_arch, float>; \
  SPARSELM_INSTANCE decltype(bsr_backward_bf16<B, native_arch, bf16>) bsr_backward_bf16<B, native_arch, bf16>;
SPARSELM_FOR_EACH_BLOCK_SIZE_ABOVE_1(SPARSELM_BSR_BF16_INSTANCES)
#undef SPARSELM_BSR_BF16_INSTANCES
}  // namespace sparselm::kernels
#undef SPARSELM_INSTANCE
#endif
