// The bf16 GEMM's micro-kernel alone (kernels/detail/gemm_bf16_kernel.hpp), on packed panels that
// stay in L1 / L2: 12 A micro-panels x 4 B micro-panels at depth 768 (one GEMM block of
// 168 x 128), called repeatedly on one thread, against the one-thread bf16 dot-product peak. An
// experiment, not a benchmark target (benchmarks/results/2026-11-25-zen5-precision.md, "bf16 GEMM against our fp32 GEMM"). Needs
// AVX512-BF16. Not built by CMake:
//
//   g++ -std=c++20 -O3 -march=native -fopenmp -DNDEBUG -Iinclude -Ibenchmarks \
//       benchmarks/experiments/gemm_bf16_kernel_only.cpp -o gemm_bf16_kernel_only
//   ./gemm_bf16_kernel_only
#include <chrono>
#include <cstdio>
#include <vector>

#include "common/peak.hpp"
#include "sparselm/kernels/gemm_bf16.hpp"

int main() {
#if SPARSELM_GEMM_BF16_NATIVE
  using F = sparselm::kernels::detail::gemm_bf16_family<sparselm::native_arch>;
  constexpr std::size_t kc = 768, panels_a = 12, panels_b = 4, ldc = F::NR * panels_b;
  // Every word the bf16 pair (1, 1): the values do not change the timing.
  std::vector<std::uint32_t, xsimd::aligned_allocator<std::uint32_t, 64>> a(F::A_PANEL * panels_a, 0x3f803f80u),
      b(F::b_panel(kc) * panels_b, 0x3f803f80u);
  std::vector<float> c(F::MR * panels_a * ldc, 0.0f);
  const sparselm::kernels::detail::gemm_epilogue ep{1.0f, 1.0f, nullptr};
  std::printf("bf16 dot-product peak, one thread: %.1f GFLOP/s\n", sparselm::measure_bf16_dot_peak_gflops(1));
  for (int ta = 0; ta < 2; ++ta) {
    const auto kernel = F::kernel(ta);
    for (int rep = 0; rep < 3; ++rep) {
      constexpr int iters = 2000;
      const auto t0 = std::chrono::steady_clock::now();
      for (int it = 0; it < iters; ++it)
        for (std::size_t jr = 0; jr < panels_b; ++jr)
          for (std::size_t ir = 0; ir < panels_a; ++ir)
            kernel(kc, a.data() + ir * F::A_PANEL, b.data() + jr * F::b_panel(kc),
                   c.data() + ir * F::MR * ldc + jr * F::NR, ldc, F::MR, F::NR, ep);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::printf("%s A panels: micro-kernel %.1f GFLOP/s\n", ta ? "k-major" : "row-major",
                  2.0 * F::MR * F::NR * kc * panels_a * panels_b * iters / s * 1e-9);
    }
  }
#else
  std::printf("gemm_bf16_kernel_only: needs AVX512-BF16 (-march=native on such a CPU)\n");
#endif
  return 0;
}
