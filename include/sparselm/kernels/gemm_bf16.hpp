#pragma once
// Mixed-precision GEMM: C = alpha * bf16(op(A)) * bf16(op(B)) + beta * C (+ bias), fp32 C.
//
// A and B are float or bf16 matrices (any mix). Float operands are rounded to bf16 (nearest even,
// NaN kept) while they are packed, so the product is that of the bf16 values; every product is
// exact in fp32 and accumulated in fp32. Everything else (transposes, alpha/beta/bias, beta == 0
// not reading C, K == 0, threads, workspace, calls inside a parallel region) is as in gemm()
// (kernels/gemm.hpp).
//
// Paths (gemm_bf16_path):
//   native   - AVX512-BF16 (vdpbf16ps: 32 multiply-adds per instruction, twice an fp32 FMA's),
//              operands packed as bf16 k-pairs (kernels/detail/gemm_bf16_kernel.hpp). Available
//              when the program is compiled for a CPU with AVX512-BF16 (gemm_bf16_native).
//   portable - any CPU: the operands are widened (or rounded) to float inside the fp32 GEMM's
//              packing and multiplied by its micro-kernel. bf16 operands still halve the memory
//              read from A and B; the arithmetic runs at the fp32 rate.
//   best     - native when available, else portable.
// The two paths multiply the same values and differ only in the order of the fp32 additions
// (native adds each k-pair's two products in one instruction): results agree within the fp32
// GEMM's tolerance (the tests use (2K + 4) * eps32 * sum|a*b|). Against the fp32 GEMM on the
// unrounded float operands the difference is the bf16 rounding of A and B: at most about
// 2 * 2^-8 * sum|a*b| per element.
//
// gemm_f16 is the same with IEEE half: float operands rounded to the nearest half (overflow to
// infinity, subnormals kept) while packed, products and sums in fp32 (no CPU of the project has
// fp16 arithmetic; F16C converts). gemm_as(dtype, ...) picks gemm, gemm_bf16 or gemm_f16 by the
// compute type a precision policy names.

#include <cstddef>
#include <string>

#include "sparselm/core/dtype.hpp"
#include "sparselm/core/error.hpp"
#include "sparselm/core/simd.hpp"
#include "sparselm/core/view.hpp"
#include "sparselm/kernels/detail/gemm_bf16_kernel.hpp"
#include "sparselm/kernels/gemm.hpp"

namespace sparselm::kernels {

enum class gemm_bf16_path { best, native, portable };

// True when this program was compiled with AVX512-BF16 (and AVX-512 BW/VL) and the native path
// exists.
inline constexpr bool gemm_bf16_native = SPARSELM_GEMM_BF16_NATIVE != 0;

template <class T>
concept gemm_bf16_operand = std::same_as<T, float> || std::same_as<T, bf16>;

template <gemm_bf16_operand SA, gemm_bf16_operand SB, class Arch = native_arch>
void gemm_bf16(trans ta, trans tb, float alpha, const_matrix_view<SA> A, const_matrix_view<SB> B, float beta,
               matrix_view<float> C, const float* bias = nullptr, gemm_bf16_path path = gemm_bf16_path::best) {
  const auto p = detail::gemm_check({"gemm_bf16", "gemm_bf16: A", "gemm_bf16: B", "gemm_bf16: C"}, ta, tb, alpha, A,
                                    B, beta, C, bias);
  constexpr bool native = gemm_bf16_native && simd_width<float, Arch> == 16;
  SPARSELM_CHECK(path != gemm_bf16_path::native || native,
                 "gemm_bf16: the native path needs AVX512-BF16 (compile with -march=native on a CPU that has it); "
                 "this build has only the portable path");
#if SPARSELM_GEMM_BF16_NATIVE
  if constexpr (native) {
    if (path != gemm_bf16_path::portable) return detail::gemm_run<detail::gemm_bf16_family<Arch>>(p);
  }
#endif
  detail::gemm_run<detail::gemm_fp32_family<Arch, detail::gemm_round::bf16>>(p);
}

// C = alpha * f16(op(A)) * f16(op(B)) + beta * C (+ bias): operands rounded to IEEE half while
// packed, fp32 products and sums.
template <class Arch = native_arch>
void gemm_f16(trans ta, trans tb, float alpha, const_matrix_view<float> A, const_matrix_view<float> B, float beta,
              matrix_view<float> C, const float* bias = nullptr) {
  detail::gemm_run<detail::gemm_fp32_family<Arch, detail::gemm_round::f16>>(
      detail::gemm_check({"gemm_f16", "gemm_f16: A", "gemm_f16: B", "gemm_f16: C"}, ta, tb, alpha, A, B, beta, C, bias));
}

// The GEMM of a compute type: f32 -> gemm, bf16 -> gemm_bf16 (best path), f16 -> gemm_f16.
inline void gemm_as(dtype compute, trans ta, trans tb, float alpha, const_matrix_view<float> A,
                    const_matrix_view<float> B, float beta, matrix_view<float> C, const float* bias = nullptr) {
  switch (compute) {
    case dtype::f32: return gemm(ta, tb, alpha, A, B, beta, C, bias);
    case dtype::bf16: return gemm_bf16<float, float>(ta, tb, alpha, A, B, beta, C, bias);
    case dtype::f16: return gemm_f16(ta, tb, alpha, A, B, beta, C, bias);
  }
  fail("gemm_as: unknown compute type ", int(compute));
}

// What a compute type runs on in this build, for a program's log: "fp32", "bf16 (AVX512-BF16
// kernels)", "bf16 (portable path: ...)" or "fp16 (...)".
inline std::string describe_compute(dtype d) {
  switch (d) {
    case dtype::f32: return "fp32";
    case dtype::bf16:
      return gemm_bf16_native ? "bf16 (dense GEMMs on AVX512-BF16 dot products, fp32 accumulation)"
                              : "bf16 (portable path: this build has no AVX512-BF16, so the dense GEMMs multiply "
                                "bf16-rounded operands at the fp32 rate)";
    case dtype::f16: return "fp16 (dense GEMM operands rounded to IEEE half, fp32 arithmetic; dynamic loss scaling)";
  }
  return "?";
}

}  // namespace sparselm::kernels
