// Dense fp32 GEMM: sparselm::kernels::gemm vs OpenBLAS cblas_sgemm, beside the measured FMA peak;
// and the mixed-precision kernels::gemm_bf16 beside them (impl "bf16": bf16 operands, "bf16f": float
// operands rounded to bf16 while packed), on its best path (kernels::describe_compute says which);
// "amx" and "portable" are gemm_bf16 on float operands on those two paths (amx: skipped where
// AMX is unavailable).
//
// Shapes: the GPT-2 small linear layers, M = 4096 / 1024 / 256 rows (tokens) and (K, N) in
// {(768,768), (768,3072), (3072,768), (768,2304), (768,50304), (768,50257)}, in NN (forward), NT
// (dX) and TN (dW) form, at 2 and 1 threads. Counters: GFLOP/s and peak = fraction of the measured
// FMA peak for that thread count (benchmarks/common/peak.hpp); for bf16 and bf16f the fraction of
// the measured bf16 dot-product peak when the build has AVX512-BF16 (else of the FMA peak); for
// amx the fraction of the measured TDPBF16PS peak.
//
// After the runs, a table per shape that ran "ours" and a bf16 impl: median GFLOP/s of each and
// the bf16 ones over fp32, e.g. AMX vs fp32 vs portable bf16 at M = 1024, 2 threads:
//   flock /tmp/sparselm-cpu.lock ./build/benchmarks/bench_gemm
//     --benchmark_filter='gemm/(ours|amx|portable)/.*/1024/.*threads:2' --benchmark_repetitions=3
//
// Names: gemm/<impl>/<op>/M/K/N/threads:<t>, impl in ours | openblas | bf16 | bf16f | amx | portable, e.g.
//   ./build/benchmarks/bench_gemm --benchmark_filter='gemm/ours/NN/4096/.*/threads:2'
//   ./build/benchmarks/bench_gemm --benchmark_filter='/4096/768/768/'
// Every benchmark runs a fixed number of calls worth ~0.4 s at 300 GFLOP/s (at least one).
// pack_a/<fp32|bf16f>/<N|T>/K times the packing of A alone (bm_pack_a below).
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "common/peak.hpp"
#include "common/results_reporter.hpp"
#include "sparselm/core/threads.hpp"
#include "sparselm/kernels/gemm.hpp"
#include "sparselm/kernels/gemm_bf16.hpp"

namespace {

using sparselm::kernels::trans;

enum class impl { ours, openblas, bf16, bf16f, amx, portable };
constexpr impl impls[] = {impl::ours, impl::openblas, impl::bf16, impl::bf16f, impl::amx, impl::portable};
const char* impl_name(impl i) {
  switch (i) {
    case impl::ours: return "ours";
    case impl::openblas: return "openblas";
    case impl::bf16: return "bf16";
    case impl::bf16f: return "bf16f";
    case impl::amx: return "amx";
    case impl::portable: return "portable";
  }
  return "?";
}
struct op_form {
  const char* name;
  trans ta, tb;
};
constexpr op_form ops[] = {{"NN", trans::n, trans::n}, {"NT", trans::n, trans::t}, {"TN", trans::t, trans::n}};

// One pool of aligned buffers sized for the largest shape, filled once.
struct pool {
  float* a = nullptr;
  float* b = nullptr;
  float* c = nullptr;
  std::vector<sparselm::bf16> ah, bh;  // a and b rounded to bf16
  std::size_t na = 0, nb = 0, nc = 0;
  static float* make(std::size_t n, std::uint32_t seed) {
    auto* p = static_cast<float*>(std::aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64));
    for (std::size_t i = 0; i < n; ++i) {
      seed = seed * 1664525u + 1013904223u;
      p[i] = float(seed >> 9) * (1.0f / 8388608.0f) - 1.0f;
    }
    return p;
  }
  static std::vector<sparselm::bf16> rounded(const float* p, std::size_t n) {
    std::vector<sparselm::bf16> r(n);
    for (std::size_t i = 0; i < n; ++i) r[i] = sparselm::bf16(p[i]);
    return r;
  }
  void reserve(std::size_t ma, std::size_t mb, std::size_t mc) {
    if (ma > na) std::free(a), a = make(ma, 1), na = ma, ah = rounded(a, ma);
    if (mb > nb) std::free(b), b = make(mb, 2), nb = mb, bh = rounded(b, mb);
    if (mc > nc) std::free(c), c = make(mc, 3), nc = mc;
  }
};
pool buffers;

void run_gemm(impl which, const op_form& op, std::size_t M, std::size_t K, std::size_t N) {
  const bool at = op.ta == trans::t, bt = op.tb == trans::t;
  const std::size_t ar = at ? K : M, ac = at ? M : K, br = bt ? N : K, bc = bt ? K : N;
  if (which == impl::ours) {
    sparselm::kernels::gemm(op.ta, op.tb, 1.0f, {buffers.a, ar, ac}, {buffers.b, br, bc}, 0.0f, {buffers.c, M, N});
  } else if (which == impl::bf16) {
    sparselm::kernels::gemm_bf16<sparselm::bf16, sparselm::bf16>(op.ta, op.tb, 1.0f, {buffers.ah.data(), ar, ac},
                                                                 {buffers.bh.data(), br, bc}, 0.0f, {buffers.c, M, N});
  } else if (which == impl::bf16f || which == impl::amx || which == impl::portable) {
    const auto path = which == impl::amx        ? sparselm::kernels::gemm_bf16_path::amx
                      : which == impl::portable ? sparselm::kernels::gemm_bf16_path::portable
                                                : sparselm::kernels::gemm_bf16_path::best;
    sparselm::kernels::gemm_bf16<float, float>(op.ta, op.tb, 1.0f, {buffers.a, ar, ac}, {buffers.b, br, bc}, 0.0f,
                                               {buffers.c, M, N}, nullptr, path);
  } else {
    cblas_sgemm(CblasRowMajor, at ? CblasTrans : CblasNoTrans, bt ? CblasTrans : CblasNoTrans, int(M), int(N), int(K),
                1.0f, buffers.a, int(ac), buffers.b, int(bc), 0.0f, buffers.c, int(N));
  }
}

// The bf16 dot-product peak per thread count, measured once.
double bf16_peak(int threads) {
  static std::map<int, double> p;
  if (!p.count(threads)) p[threads] = sparselm::measure_bf16_dot_peak_gflops(threads);
  return p[threads];
}

// The TDPBF16PS peak per thread count, measured once (0 without AMX).
double amx_peak(int threads) {
  static std::map<int, double> p;
  if (!p.count(threads)) p[threads] = sparselm::kernels::gemm_bf16_amx_peak_gflops(threads);
  return p[threads];
}

// GFLOP/s of every run (one per repetition), by (op, M, K, N, threads) and impl, for the summary.
using shape_key = std::tuple<std::string, std::size_t, std::size_t, std::size_t, int>;
std::map<shape_key, std::map<impl, std::vector<double>>> results;

void bm_gemm(benchmark::State& state, impl which, op_form op, std::size_t M, std::size_t K, std::size_t N, int threads) {
  if (which == impl::amx && !sparselm::kernels::gemm_bf16_amx_usable()) {
    state.SkipWithError(sparselm::kernels::gemm_bf16_amx_status());
    return;
  }
  buffers.reserve(M * K, K * N, M * N);
  sparselm::set_num_threads(threads);
  openblas_set_num_threads(threads);
  const double flops = 2.0 * double(M) * double(N) * double(K);
  if (flops < 2e10) run_gemm(which, op, M, K, N);  // warm-up: threads, workspace, caches
  double seconds = 0;
  for (auto _ : state) {
    auto t0 = std::chrono::steady_clock::now();
    run_gemm(which, op, M, K, N);
    auto t1 = std::chrono::steady_clock::now();
    seconds += std::chrono::duration<double>(t1 - t0).count();
    state.SetIterationTime(std::chrono::duration<double>(t1 - t0).count());
  }
  const double gflops = flops * double(state.iterations()) / seconds * 1e-9;
  state.counters["GFLOP/s"] = gflops;
  const bool bf16 = which == impl::bf16 || which == impl::bf16f;
  state.counters["peak"] = gflops / (which == impl::amx                        ? amx_peak(threads)
                                     : bf16 && sparselm::has_bf16_dot_peak ? bf16_peak(threads)
                                                                           : sparselm::settled_fma_peak_gflops(threads));
  results[{op.name, M, K, N, threads}][which].push_back(gflops);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

// The summary table: median GFLOP/s per impl that ran, and each bf16 impl over "ours" (fp32).
void print_summary() {
  std::vector<impl> cols;
  for (impl i : impls)
    for (const auto& [key, by_impl] : results)
      if (by_impl.count(i) && std::find(cols.begin(), cols.end(), i) == cols.end()) cols.push_back(i);
  if (cols.size() < 2 || cols[0] != impl::ours) return;
  std::printf("\nmedian GFLOP/s over the repetitions; x = over ours (fp32)\n| op | M | K | N | threads |");
  for (impl i : cols) std::printf(" %s |%s", impl_name(i), i == impl::ours || i == impl::openblas ? "" : " x |");
  std::printf("\n|---|---:|---:|---:|---:|");
  for (impl i : cols) std::printf("---:|%s", i == impl::ours || i == impl::openblas ? "" : "---:|");
  std::printf("\n");
  for (const auto& [key, by_impl] : results) {
    const auto& [op, M, K, N, threads] = key;
    if (!by_impl.count(impl::ours)) continue;
    const double fp32 = median(by_impl.at(impl::ours));
    std::printf("| %s | %zu | %zu | %zu | %d |", op.c_str(), M, K, N, threads);
    for (impl i : cols) {
      const double g = by_impl.count(i) ? median(by_impl.at(i)) : 0.0;
      std::printf(" %.0f |", g);
      if (i != impl::ours && i != impl::openblas) std::printf(" %.2fx |", g / fp32);
    }
    std::printf("\n");
  }
}

// Packing alone: one thread's share of A at M = 4096 on 2 threads (2048 rows x K, all of K as
// gemm_region packs it, in MC-row blocks) into one A block, for the fp32 family ("fp32") or the
// AVX512-BF16 one ("bf16f": rounded while packed); transposed = the TN product's A (stored K x 4096).
// Elements/s in the "Gelem/s" counter. pack_a/<family>/<N|T>/K.
template <class F>
void bm_pack_a(benchmark::State& state, bool transposed, std::size_t K) {
  constexpr std::size_t rows = 2048, M = 4096;
  std::vector<float> A(M * K);
  for (std::size_t i = 0; i < A.size(); ++i) A[i] = float(i % 1013) * 1e-3f;
  const std::size_t kc = std::min(K, F::KC), mc = F::MC;
  std::vector<typename F::packed, xsimd::aligned_allocator<typename F::packed, 64>> dst(
      F::A_PANEL * ((mc + F::MR - 1) / F::MR));
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    for (std::size_t pc = 0; pc < K; pc += kc)
      for (std::size_t ic = 0; ic < rows; ic += mc)
        F::pack_a(transposed, A.data(), transposed ? M : K, ic, std::min(mc, rows - ic), pc, std::min(kc, K - pc),
                  dst.data());
    benchmark::DoNotOptimize(dst.data());
    state.SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  state.counters["Gelem/s"] =
      benchmark::Counter(double(rows * K) * double(state.iterations()) * 1e-9, benchmark::Counter::kIsRate);
}

}  // namespace

int main(int argc, char** argv) {
  const std::size_t Ms[] = {4096, 1024, 256};
  const std::pair<std::size_t, std::size_t> KNs[] = {{768, 768},  {768, 3072},  {3072, 768},
                                                      {768, 2304}, {768, 50304}, {768, 50257}};
  for (impl which : impls)
    for (int threads : {2, 1})
      for (std::size_t M : Ms)
        for (auto [K, N] : KNs)
          for (const op_form& op : ops) {
            const std::string name = std::string("gemm/") + impl_name(which) + "/" + op.name + "/" +
                                     std::to_string(M) + "/" + std::to_string(K) + "/" + std::to_string(N) +
                                     "/threads:" + std::to_string(threads);
            const double flops = 2.0 * double(M) * double(N) * double(K);
            const auto iters = std::max<benchmark::IterationCount>(1, benchmark::IterationCount(0.4 * 300e9 / flops));
            benchmark::RegisterBenchmark(name.c_str(), bm_gemm, which, op, M, K, N, threads)
                ->Iterations(iters)
                ->UseManualTime()
                ->Unit(benchmark::kMillisecond);
          }
  for (std::size_t K : {std::size_t(768), std::size_t(3072)})
    for (bool t : {false, true}) {
      const std::string tail = std::string(t ? "/T/" : "/N/") + std::to_string(K);
      using fp32 = sparselm::kernels::detail::gemm_fp32_family<sparselm::native_arch>;
      benchmark::RegisterBenchmark(("pack_a/fp32" + tail).c_str(), bm_pack_a<fp32>, t, K)
          ->UseManualTime()->Unit(benchmark::kMicrosecond);
#if SPARSELM_GEMM_BF16_NATIVE
      using bf16f = sparselm::kernels::detail::gemm_bf16_family<sparselm::native_arch>;
      benchmark::RegisterBenchmark(("pack_a/bf16f" + tail).c_str(), bm_pack_a<bf16f>, t, K)
          ->UseManualTime()->Unit(benchmark::kMicrosecond);
#endif
    }
  const sparselm::bench::results out("bench_gemm", argc, argv);  // --json FILE (common/results.hpp)
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("peak GFLOP/s (1 thread, 2 threads)",
                              std::to_string(sparselm::settled_fma_peak_gflops(1)) + ", " +
                                  std::to_string(sparselm::settled_fma_peak_gflops(2)));
  if (sparselm::has_bf16_dot_peak)
    benchmark::AddCustomContext("bf16 dot peak GFLOP/s (1 thread, 2 threads)",
                                std::to_string(bf16_peak(1)) + ", " + std::to_string(bf16_peak(2)));
  if (sparselm::kernels::gemm_bf16_amx_usable())
    benchmark::AddCustomContext("AMX TDPBF16PS peak GFLOP/s (1 thread, 2 threads)",
                                std::to_string(amx_peak(1)) + ", " + std::to_string(amx_peak(2)));
  benchmark::AddCustomContext("gemm_bf16 path (best)", sparselm::kernels::describe_compute(sparselm::dtype::bf16));
  sparselm::bench::run_benchmarks(out, [](int t) { return sparselm::settled_fma_peak_gflops(t); });
  print_summary();
  benchmark::Shutdown();
  return 0;
}
