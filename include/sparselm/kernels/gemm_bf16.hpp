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
//   amx      - Intel AMX (TDPBF16PS on 16 x 32 bf16 tiles: 8192 multiply-adds per instruction,
//              fp32 accumulators in tile registers; kernels/detail/gemm_amx_kernel.hpp).
//              Compiled when the compiler targets AMX-TILE and AMX-BF16 (gemm_bf16_amx; -march=native
//              on a Sapphire Rapids class Xeon), usable when the CPU reports AMX and the OS grants
//              the process the tile state (Linux: arch_prctl ARCH_REQ_XCOMP_PERM, asked once per
//              process; refused -> the path is unavailable, never a SIGILL).
//   native   - AVX512-BF16 (vdpbf16ps: 32 multiply-adds per instruction, twice an fp32 FMA's),
//              operands packed as bf16 k-pairs (kernels/detail/gemm_bf16_kernel.hpp). Available
//              when the program is compiled for a CPU with AVX512-BF16 (gemm_bf16_native).
//   portable - any CPU: the operands are widened (or rounded) to float inside the fp32 GEMM's
//              packing and multiplied by its micro-kernel. bf16 operands still halve the memory
//              read from A and B; the arithmetic runs at the fp32 rate.
//   best     - amx when usable; else native when available and faster than the fp32 FMAs on this
//              CPU, else portable.
//              Not every CPU with AVX512-BF16 runs vdpbf16ps at twice the FMA rate: AMD Zen 4 and
//              Zen 5 do, the Intel Xeon (Sapphire Rapids class) of this project's VM runs it at
//              half (measured: bf16 dot peak 122 vs FMA peak 242 GFLOP/s on one thread), where the
//              native GEMM ran the GPT-2 small step at 0.63x the fp32 step. bf16_native_choice()
//              measures both rates once per process (about a millisecond, one thread) and picks
//              native only when its rate is at least 1.2x the FMA's. SPARSELM_BF16_KERNEL=amx,
//              =native or =portable overrides the choice (amx only where it is usable).
// The paths multiply the same values and differ only in the order of the fp32 additions
// (native adds each k-pair's two products in one instruction; AMX treats bf16 subnormals, below
// 1.2e-38, as zero): results agree within the fp32
// GEMM's tolerance (the tests use (2K + 4) * eps32 * sum|a*b|). Against the fp32 GEMM on the
// unrounded float operands the difference is the bf16 rounding of A and B: at most about
// 2 * 2^-8 * sum|a*b| per element.
//
// gemm_f16 is the same with IEEE half: float operands rounded to the nearest half (overflow to
// infinity, subnormals kept) while packed, products and sums in fp32 (no CPU of the project has
// fp16 arithmetic; F16C converts). gemm_as(dtype, ...) picks gemm, gemm_bf16 or gemm_f16 by the
// compute type a run chose (trainer_options::precision, step_context::compute).

#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "sparselm/core/dtype.hpp"
#include "sparselm/core/error.hpp"
#include "sparselm/core/simd.hpp"
#include "sparselm/core/view.hpp"
#include "sparselm/kernels/detail/gemm_amx_kernel.hpp"
#include "sparselm/kernels/detail/gemm_bf16_kernel.hpp"
#include "sparselm/kernels/gemm.hpp"

namespace sparselm::kernels {

enum class gemm_bf16_path { best, native, portable, amx };

// True when this program was compiled with AVX512-BF16 (and AVX-512 BW/VL) and the native path
// exists.
inline constexpr bool gemm_bf16_native = SPARSELM_GEMM_BF16_NATIVE != 0;

// True when this program was compiled with AMX-TILE and AMX-BF16 (and AVX512-BF16) and the amx
// path exists; gemm_bf16_amx_usable() says whether this CPU and OS run it.
inline constexpr bool gemm_bf16_amx = SPARSELM_GEMM_AMX != 0;
inline bool gemm_bf16_amx_usable() { return detail::amx_status().usable; }
// Why the amx path is or is not usable ("this build has no AMX ...", "the CPU reports no AMX ...",
// "the kernel refused the AMX permission ...", "AMX-BF16 available, ...").
inline const char* gemm_bf16_amx_status() { return detail::amx_status().why; }
// Measured TDPBF16PS throughput (GFLOP/s) on `threads` threads, a few ms; 0 where AMX is unusable.
inline double gemm_bf16_amx_peak_gflops(int threads, int k = 32, int n = 16) {
  return gemm_bf16_amx_usable() ? detail::amx_peak_gflops(threads, k, n) : 0.0;
}

// Which bf16 kernel `best` uses on this CPU, and why (see above).
struct bf16_kernel_choice {
  gemm_bf16_path kernel = gemm_bf16_path::portable;  // amx, native or portable
  bool native = false;      // kernel == native (the vdpbf16ps kernel)
  bool amx = false;         // kernel == amx (AMX tiles)
  double ratio = 0;         // measured bf16 dot-product FLOP rate / fp32 FMA FLOP rate, one thread (0: not measured)
  bool dot_products = false;  // vdpbf16ps pays where no AMX kernel exists (the block-sparse products):
                              // ratio >= 1.2, or SPARSELM_BF16_KERNEL=native
  const char* reason = "";  // "AMX", "measured", "SPARSELM_BF16_KERNEL", "no AVX512-BF16 in this build"
  const char* amx_status = "";  // gemm_bf16_amx_status(): why AMX is (not) used
};

namespace detail {
#if SPARSELM_GEMM_BF16_NATIVE
// Seconds for `iters` rounds of 16 independent vdpbf16ps (or FMA) chains: the throughput bound.
template <bool Dot>
[[gnu::noinline]] inline double bf16_probe_seconds(long iters) {
  __m512 acc[16];
  for (int c = 0; c < 16; ++c) acc[c] = _mm512_set1_ps(1.0f + 0.001f * float(c));
  const __m512bh a = _mm512_cvtne2ps_pbh(_mm512_set1_ps(0x1p-20f), _mm512_set1_ps(0x1p-20f));
  const __m512bh b = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1.0f), _mm512_set1_ps(1.0f));
  const __m512 m = _mm512_set1_ps(0.9999999f), add = _mm512_set1_ps(1e-7f);
  const auto t0 = std::chrono::steady_clock::now();
  for (long i = 0; i < iters; ++i) {
#pragma GCC unroll 16
    for (int c = 0; c < 16; ++c) acc[c] = Dot ? _mm512_dpbf16_ps(acc[c], a, b) : _mm512_fmadd_ps(acc[c], m, add);
  }
  const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  __m512 sum = acc[0];
  for (int c = 1; c < 16; ++c) sum = _mm512_add_ps(sum, acc[c]);
  volatile float sink = _mm512_reduce_add_ps(sum);
  (void)sink;
  return sec;
}
#endif

inline bf16_kernel_choice choose_bf16_kernel() {
  bf16_kernel_choice c;
  c.amx_status = amx_status().why;
  const char* env = std::getenv("SPARSELM_BF16_KERNEL");
  std::string v = env ? env : "";
  if (v != "amx" && v != "native" && v != "portable") v.clear();  // other values: no override
  auto pick = [&c](gemm_bf16_path k, const char* reason) {
    c.kernel = k, c.native = k == gemm_bf16_path::native, c.amx = k == gemm_bf16_path::amx, c.reason = reason;
    return c;
  };
  if (v == "portable") return pick(gemm_bf16_path::portable, "SPARSELM_BF16_KERNEL");
#if SPARSELM_GEMM_BF16_NATIVE
  c.dot_products = v == "native";
  if (v.empty()) {
    // Best of 5 short runs each (the fastest is the least disturbed); a vdpbf16ps does 64 flops, an FMA 32.
    constexpr long iters = 1L << 13;
    double dot = 1e30, fma = 1e30;
    for (int r = 0; r < 5; ++r) {
      dot = std::min(dot, bf16_probe_seconds<true>(iters));
      fma = std::min(fma, bf16_probe_seconds<false>(iters));
    }
    c.ratio = dot > 0 ? 2.0 * fma / dot : 0.0;
    c.dot_products = c.ratio >= 1.2;
  }
#endif
  if (amx_status().usable && (v.empty() || v == "amx"))
    return pick(gemm_bf16_path::amx, v.empty() ? "AMX" : "SPARSELM_BF16_KERNEL");
#if SPARSELM_GEMM_BF16_NATIVE
  if (v == "native") return pick(gemm_bf16_path::native, "SPARSELM_BF16_KERNEL");
  pick(c.dot_products ? gemm_bf16_path::native : gemm_bf16_path::portable, "measured");
#else
  c.reason = "no AVX512-BF16 in this build";
#endif
  return c;
}
}  // namespace detail

// The choice, made once per process (thread-safe).
inline const bf16_kernel_choice& bf16_native_choice() {
  static const bf16_kernel_choice c = detail::choose_bf16_kernel();
  return c;
}

template <class T>
concept gemm_bf16_operand = std::same_as<T, float> || std::same_as<T, bf16>;

template <gemm_bf16_operand SA, gemm_bf16_operand SB, class Arch = native_arch>
void gemm_bf16(trans ta, trans tb, float alpha, const_matrix_view<SA> A, const_matrix_view<SB> B, float beta,
               matrix_view<float> C, const float* bias = nullptr, gemm_bf16_path path = gemm_bf16_path::best) {
  const auto p = detail::gemm_check({"gemm_bf16", "gemm_bf16: A", "gemm_bf16: B", "gemm_bf16: C"}, ta, tb, alpha, A,
                                    B, beta, C, bias);
  constexpr bool native = gemm_bf16_native && simd_width<float, Arch> == 16;
  constexpr bool amx = gemm_bf16_amx && native;
  SPARSELM_CHECK(path != gemm_bf16_path::native || native,
                 "gemm_bf16: the native path needs AVX512-BF16 (compile with -march=native on a CPU that has it); "
                 "this build has only the portable path");
  SPARSELM_CHECK(path != gemm_bf16_path::amx || (amx && gemm_bf16_amx_usable()),
                 "gemm_bf16: the amx path is unavailable: ", amx ? gemm_bf16_amx_status() :
                 "this build has no AMX (compile with -march=native on a CPU with AMX-BF16, AVX-512 architecture)");
#if SPARSELM_GEMM_AMX
  if constexpr (amx) {
    if (path == gemm_bf16_path::amx || (path == gemm_bf16_path::best && bf16_native_choice().amx))
      return detail::gemm_run<detail::gemm_amx_family>(p);
  }
#endif
#if SPARSELM_GEMM_BF16_NATIVE
  if constexpr (native) {
    if (path == gemm_bf16_path::native || (path == gemm_bf16_path::best && bf16_native_choice().native))
      return detail::gemm_run<detail::gemm_bf16_family<Arch>>(p);
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

// What a compute type runs on in this build, for a program's log: "fp32", "bf16 (dense GEMMs on
// AMX tiles ...)", "bf16 (dense GEMMs on AVX512-BF16 dot products ...)", "bf16 (portable path:
// ...)" or "fp16 (...)".
inline std::string describe_compute(dtype d) {
  switch (d) {
    case dtype::f32: return "fp32";
    case dtype::bf16: {
      const auto& c = bf16_native_choice();
      // The block-sparse products (layers/sparse_linear.hpp) use bf16 where its dot products pay, and
      // for B = 16 on AMX (kernels/bsr_bf16.hpp).
      const std::string sparse =
          c.dot_products ? std::string("; block-sparse products (B = 4, 8, 16) on AVX512-BF16 dot products") +
                               (c.amx && SPARSELM_GEMM_AMX ? ", B = 16 on AMX" : "")
          : c.amx && SPARSELM_GEMM_AMX ? "; block-sparse products with B = 16 on AMX tiles, B = 1, 4, 8 in fp32"
                                       : "; block-sparse products in fp32";
      if (c.amx)
        return std::string("bf16 (dense GEMMs on AMX tiles, TDPBF16PS, fp32 accumulation") +
               (c.reason == std::string("SPARSELM_BF16_KERNEL") ? "; SPARSELM_BF16_KERNEL=amx" : "") + sparse + ")";
      char ratio[96] = "";
      if (c.ratio > 0)
        std::snprintf(ratio, sizeof ratio, "; measured: AVX512-BF16 dot products at %.2fx the fp32 FMA rate", c.ratio);
      const bool forced = c.reason == std::string("SPARSELM_BF16_KERNEL");
      // Why not AMX, where the build has it and the CPU or OS does not.
      const std::string no_amx = gemm_bf16_amx && !forced ? std::string("; no AMX: ") + c.amx_status : std::string();
      if (c.native)
        return std::string("bf16 (dense GEMMs on AVX512-BF16 dot products, fp32 accumulation") + ratio +
               (forced ? "; SPARSELM_BF16_KERNEL=native" : "") + no_amx + sparse + ")";
      if (!gemm_bf16_native)
        return "bf16 (portable path: this build has no AVX512-BF16, so the dense GEMMs multiply bf16-rounded operands "
               "at the fp32 rate" + sparse + ")";
      if (forced)
        return "bf16 (portable path: bf16-rounded operands multiplied at the fp32 rate; SPARSELM_BF16_KERNEL=portable" +
               sparse + ")";
      return std::string("bf16 (portable path: bf16-rounded operands multiplied at the fp32 rate, faster on this CPU") +
             ratio + no_amx + sparse + ")";
    }
    case dtype::f16: return "fp16 (dense GEMM operands rounded to IEEE half, fp32 arithmetic; dynamic loss scaling)";
  }
  return "?";
}

}  // namespace sparselm::kernels

// The bf16 / f16 GEMMs for the compiled ISA, every operand pairing.
// Precompiled instances (docs/design/architecture.md, "Precompiled kernels"): defined once in sparselm::kernels
// (src/kernels_gemm.cpp), declared extern where that library is linked.
#if defined(SPARSELM_INSTANTIATE_GEMM) || defined(SPARSELM_PRECOMPILED_KERNELS)
#ifdef SPARSELM_INSTANTIATE_GEMM
#define SPARSELM_INSTANCE template
#else
#define SPARSELM_INSTANCE extern template
#endif
namespace sparselm::kernels {
SPARSELM_INSTANCE decltype(gemm_bf16<float, float, native_arch>) gemm_bf16<float, float, native_arch>;
SPARSELM_INSTANCE decltype(gemm_bf16<float, bf16, native_arch>) gemm_bf16<float, bf16, native_arch>;
SPARSELM_INSTANCE decltype(gemm_bf16<bf16, float, native_arch>) gemm_bf16<bf16, float, native_arch>;
SPARSELM_INSTANCE decltype(gemm_bf16<bf16, bf16, native_arch>) gemm_bf16<bf16, bf16, native_arch>;
SPARSELM_INSTANCE decltype(gemm_f16<native_arch>) gemm_f16<native_arch>;
}  // namespace sparselm::kernels
#undef SPARSELM_INSTANCE
#endif
