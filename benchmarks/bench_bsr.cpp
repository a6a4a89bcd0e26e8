// Block-sparse fwd+bwd (bsr_matmul + bsr_backward) against the dense equivalent
// (GEMM NN + NT + TN) on the shapes of the dense GEMM benchmark, M = 4096 tokens.
//
//   build/benchmarks/bench_bsr [--threads 2,1] [--sparsity 0.9,0.8] [--blocks 16,8,4,1] [--reps 5]
//                              [--shapes 768x768,768x3072,3072x768,768x2304] [--m 4096] [--no-blas] [--bf16] [--bf16-x]
//                              [--paired]
//
// Prints per thread count a markdown table: median times (ms) of the forward, the two backward
// products run separately (bsr_matmul_t, bsr_weight_grad) and together (bsr_backward, what the
// block_sparse<B> layers run: one pass over the rows for every B > 1), the sparse step
// (forward + bsr_backward) and the step with the separate products; the dense step with our own
// kernels::gemm (the baseline, measured in the same run) and with OpenBLAS (cblas_sgemm, a second
// reference; --no-blas skips it); speed-ups against both; "effective GFLOP/s" = sparse FLOPs /
// sparse time, also as a share of the machine's FMA peak (a register-only probe); and the time of
// dense_grad_pooled (sum pooling, the RigL score, run on pattern-update steps only); "step GB/s" =
// the bytes the sparse step has to move (X read twice, Y, dY and dX once, the blocks) / its time,
// beside a copy-bandwidth probe (common/bandwidth.hpp: src -> dst, each M x (in + out) floats, so
// the probe streams as many bytes as X, Y, dY and dX together; same thread count) and as a share
// of it: how much of the memory's rate the step uses on average. Then a table
// of the dense baselines, per GEMM.
//
// --bf16 adds per thread count a table of the bf16 block-sparse kernels (kernels/bsr_bf16.hpp, best
// path: AVX512-BF16 when the build has it) beside the fp32 ones of the same run, for B = 4, 8, 16:
// median times of each kernel, of the step (forward + bsr_backward / bsr_backward_bf16) and of the
// step with the separate backward products, and fp32 time / bf16 time. --bf16-x (implies --bf16)
// gives the bf16 forward and weight gradient X as bf16 values, as the block_sparse<B> layers do
// when they keep their input in bf16 (docs/design/precision.md).
//
// --paired adds a last column, "paired speed-up": the sparse step and our GEMM step timed in turn,
// call after call (--reps pairs after one warm-up pair), and the median of the per-pair ratios
// gemm / sparse. Each ratio then compares two calls a few milliseconds apart, so the drift of a
// shared host over the seconds between the separately timed medians (up to a fifth on the Zen 5
// host's VM) does not enter it; "speed-up vs gemm" stays the ratio of the two medians.
//
// --ffn CxF[,...] (e.g. 768x3072,1600x6400) instead times the block-sparse feed-forward
// gelu(X·W1 + b1)·W2 + b2 (W1 C x F, W2 F x C, the same pattern density) per block size that
// kernels/bsr_ffn.hpp fuses: unfused (bsr_matmul, gelu_forward, bsr_matmul; bsr_backward,
// gelu_backward, bsr_backward and the bias sums, H and gelu(H) in memory, what feed_forward runs
// with ffn_fusion() off) against fused (bsr_ffn_forward, bsr_ffn_backward; H kept in the tiles'
// layout, ffn_fusion_mode::keep, or recomputed per tile, ::recompute): medians of forward, backward
// and the step, and the paired speed-ups unfused step / fused step.
// --ffn-tile R sets the fused kernel's rows per tile (0: its default).
//
// All operands are 64-byte aligned, as the library's tensors are (see `fbuf` below).

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "common/bandwidth.hpp"
#include "common/peak.hpp"
#include "common/random_pattern.hpp"
#include "common/results.hpp"
#include "sparselm/core/simd.hpp"
#include "sparselm/core/tensor.hpp"
#include "sparselm/core/threads.hpp"
#include "sparselm/kernels/bsr.hpp"
#include "sparselm/kernels/bsr_bf16.hpp"
#include "sparselm/kernels/bsr_ffn.hpp"
#include "sparselm/kernels/reduce.hpp"
#include "sparselm/kernels/gemm.hpp"
#include "sparselm/sparse/block_pattern.hpp"

extern "C" void openblas_set_num_threads(int);

namespace {

using namespace sparselm;
using clock_type = std::chrono::steady_clock;
// Operands 64-byte aligned, as the library's tensors are (arenas, scratch buffers): with
// std::vector's 16-byte alignment every 16-float row segment a tile stores straddles two cache
// lines, which cost the stores of Y and dX up to a fifth on the Zen 5 host (docs/design/kernels.md).
using fbuf = std::vector<float, aligned_allocator<float>>;
using hbuf = std::vector<bf16, aligned_allocator<bf16>>;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

// Median wall time of `reps` calls after one warm-up call.
double median_time(int reps, const std::function<void()>& f) {
  f();
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    auto t0 = clock_type::now();
    f();
    t.push_back(seconds_since(t0));
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// Median over `reps` pairs (after one warm-up pair) of time(b) / time(a), a and b called in turn.
double paired_ratio(int reps, const std::function<void()>& a, const std::function<void()>& b) {
  a();
  b();
  std::vector<double> r;
  for (int i = 0; i < reps; ++i) {
    auto t0 = clock_type::now();
    a();
    const double ta = seconds_since(t0);
    t0 = clock_type::now();
    b();
    r.push_back(seconds_since(t0) / ta);
  }
  std::sort(r.begin(), r.end());
  return r[r.size() / 2];
}

struct shape {
  std::size_t in, out;
};

struct options {
  std::vector<int> threads{2, 1};
  std::vector<double> sparsity{0.9, 0.8};
  std::vector<std::size_t> blocks{16, 8, 4, 1};
  std::vector<shape> shapes{{768, 768}, {768, 3072}, {3072, 768}, {768, 2304}};
  std::size_t M = 4096;
  int reps = 5;
  bool blas = true;
  bool bf16 = false;
  bool bf16_x = false;
  bool paired = false;
  std::vector<shape> ffn;  // --ffn: C x F shapes of the feed-forward comparison
  std::size_t ffn_tile = 0;
};

template <class T>
std::vector<T> parse_list(const std::string& s, T (*conv)(const std::string&)) {
  std::vector<T> v;
  std::size_t b = 0;
  while (b <= s.size()) {
    std::size_t e = s.find(',', b);
    if (e == std::string::npos) e = s.size();
    if (e > b) v.push_back(conv(s.substr(b, e - b)));
    b = e + 1;
  }
  return v;
}

options parse(int argc, char** argv) {
  options o;
  for (int a = 1; a < argc; ++a) {
    std::string k = argv[a];
    auto next = [&]() -> std::string {
      if (a + 1 >= argc) {
        std::fprintf(stderr, "bench_bsr: %s needs a value\n", k.c_str());
        std::exit(2);
      }
      return argv[++a];
    };
    if (k == "--threads") o.threads = parse_list<int>(next(), [](const std::string& s) { return std::stoi(s); });
    else if (k == "--sparsity") o.sparsity = parse_list<double>(next(), [](const std::string& s) { return std::stod(s); });
    else if (k == "--blocks")
      o.blocks = parse_list<std::size_t>(next(), [](const std::string& s) { return std::size_t(std::stoul(s)); });
    else if (k == "--shapes")
      o.shapes = parse_list<shape>(next(), [](const std::string& s) {
        const auto x = s.find('x');
        return shape{std::stoul(s.substr(0, x)), std::stoul(s.substr(x + 1))};
      });
    else if (k == "--m") o.M = std::stoul(next());
    else if (k == "--reps") o.reps = std::stoi(next());
    else if (k == "--no-blas") o.blas = false;
    else if (k == "--bf16") o.bf16 = true;
    else if (k == "--bf16-x") o.bf16 = o.bf16_x = true;
    else if (k == "--paired")
      o.paired = true;
    else if (k == "--ffn")
      o.ffn = parse_list<shape>(next(), [](const std::string& s) {
        const auto x = s.find('x');
        return shape{std::stoul(s.substr(0, x)), std::stoul(s.substr(x + 1))};
      });
    else if (k == "--ffn-tile")
      o.ffn_tile = std::stoul(next());
    else {
      std::fprintf(stderr,
                   "usage: bench_bsr [--threads 2,1] [--sparsity 0.9,0.8] [--blocks 16,8,4,1] [--reps 5]\n"
                   "                 [--shapes 768x768,...] [--m 4096] [--no-blas] [--bf16] [--bf16-x]\n"
                   "                 [--paired] [--ffn 768x3072,...] [--ffn-tile 0]\n");
      std::exit(2);
    }
  }
  return o;
}

struct sparse_times {
  double fwd, bwd_data, bwd_weights, bwd, step, step_separate;
  double paired = 0;  // with a GEMM step to pair with: median of gemm / sparse step (--paired)
};

// Bf16: the bf16 kernels (kernels/bsr_bf16.hpp) on the same operands; with X16, X as its bf16
// values in the forward and the weight gradient (what a layer keeping its input in bf16 runs).
// With gemm_step, also the paired speed-up of the step against it (paired_ratio).
template <std::size_t B, bool Bf16 = false>
sparse_times time_sparse(const sparse::block_pattern& p, const fbuf& X, const fbuf& dY, fbuf& Y, fbuf& dX,
                         const fbuf& values, fbuf& dvalues, const fbuf& bias, std::size_t M, int reps,
                         const hbuf* X16 = nullptr, const std::function<void()>* gemm_step = nullptr) {
  const std::size_t in = p.in(), out = p.out();
  const_matrix_view<float> x{X.data(), M, in}, dy{dY.data(), M, out};
  const const_matrix_view<bf16> x16{X16 ? X16->data() : nullptr, M, in};
  matrix_view<float> y{Y.data(), M, out}, dx{dX.data(), M, in};
  auto fwd = [&] {
    if constexpr (Bf16) {
      if (X16) kernels::bsr_matmul_bf16<B>(x16, p, values.data(), 0.0f, y, bias.data());
      else kernels::bsr_matmul_bf16<B>(x, p, values.data(), 0.0f, y, bias.data());
    } else {
      kernels::bsr_matmul<B>(x, p, values.data(), 0.0f, y, bias.data());
    }
  };
  auto bwd_d = [&] {
    if constexpr (Bf16) kernels::bsr_matmul_t_bf16<B>(dy, p, values.data(), 0.0f, dx);
    else kernels::bsr_matmul_t<B>(dy, p, values.data(), 0.0f, dx);
  };
  auto bwd_w = [&] {
    if constexpr (Bf16) {
      if (X16) kernels::bsr_weight_grad_bf16<B>(x16, dy, p, dvalues.data());
      else kernels::bsr_weight_grad_bf16<B>(x, dy, p, dvalues.data());
    } else {
      kernels::bsr_weight_grad<B>(x, dy, p, dvalues.data());
    }
  };
  // The layers' backward: fused where the block size allows (fp32), else the two products.
  auto bwd = [&] {
    if constexpr (Bf16) {
      if (X16)
        kernels::bsr_backward_bf16<B>(x16, dy, p, values.data(), 0.0f, dx, dvalues.data());
      else
        kernels::bsr_backward_bf16<B>(x, dy, p, values.data(), 0.0f, dx, dvalues.data());
    } else {
      kernels::bsr_backward<B>(x, dy, p, values.data(), 0.0f, dx, dvalues.data());
    }
  };
  const auto step = [&] {
    fwd();
    bwd();
  };
  sparse_times t{};
  t.fwd = median_time(reps, fwd);
  t.bwd_data = median_time(reps, bwd_d);
  t.bwd_weights = median_time(reps, bwd_w);
  t.bwd = median_time(reps, bwd);
  t.step = median_time(reps, step);
  t.step_separate = median_time(reps, [&] {
    fwd();
    bwd_d();
    bwd_w();
  });
  if (gemm_step) t.paired = paired_ratio(reps, step, *gemm_step);
  return t;
}

sparse_times time_sparse_b(bool use_bf16, std::size_t B, const sparse::block_pattern& p, const fbuf& X, const fbuf& dY,
                           fbuf& Y, fbuf& dX, const fbuf& values, fbuf& dvalues, const fbuf& bias, std::size_t M,
                           int reps, const hbuf* X16 = nullptr, const std::function<void()>* gemm_step = nullptr) {
  switch (B) {
    case 1:
      return time_sparse<1>(p, X, dY, Y, dX, values, dvalues, bias, M, reps, nullptr, gemm_step);
    case 4:
      return use_bf16 ? time_sparse<4, true>(p, X, dY, Y, dX, values, dvalues, bias, M, reps, X16, gemm_step)
                      : time_sparse<4>(p, X, dY, Y, dX, values, dvalues, bias, M, reps, X16, gemm_step);
    case 8:
      return use_bf16 ? time_sparse<8, true>(p, X, dY, Y, dX, values, dvalues, bias, M, reps, X16, gemm_step)
                      : time_sparse<8>(p, X, dY, Y, dX, values, dvalues, bias, M, reps, X16, gemm_step);
    case 16:
      return use_bf16 ? time_sparse<16, true>(p, X, dY, Y, dX, values, dvalues, bias, M, reps, X16, gemm_step)
                      : time_sparse<16>(p, X, dY, Y, dX, values, dvalues, bias, M, reps, X16, gemm_step);
    default: std::fprintf(stderr, "bench_bsr: block size %zu is not one of 1, 4, 8, 16\n", B); std::exit(2);
  }
}

// "| fp32 | bf16 | ratio |" cells of one kernel.
std::string ratio_cells(double fp32, double bf16) {
  char c[96];
  std::snprintf(c, sizeof c, " %.2f | %.2f | %.2f |", fp32 * 1e3, bf16 * 1e3, fp32 / bf16);
  return c;
}

void time_pooled(std::size_t B, const fbuf& X, const fbuf& dY, std::size_t M, std::size_t in, std::size_t out,
                 fbuf& res) {
  const const_matrix_view<float> x{X.data(), M, in}, dy{dY.data(), M, out};
  const matrix_view<float> r{res.data(), in / B, out / B};
  switch (B) {
    case 1: kernels::dense_grad_pooled<1>(x, dy, kernels::block_pooling::sum, r); break;
    case 4: kernels::dense_grad_pooled<4>(x, dy, kernels::block_pooling::sum, r); break;
    case 8: kernels::dense_grad_pooled<8>(x, dy, kernels::block_pooling::sum, r); break;
    default: kernels::dense_grad_pooled<16>(x, dy, kernels::block_pooling::sum, r); break;
  }
}

}  // namespace

// --ffn: the fused feed-forward against the unfused products, block size B (one the kernel fuses).
template <std::size_t B>
void time_ffn(const options& o, int T, std::size_t C, std::size_t F, double s, std::mt19937& rng) {
  using kernels::gelu_kind;
  const std::size_t M = o.M;
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  auto rand_vec = [&](std::size_t n) {
    fbuf v(n);
    for (auto& x : v) x = u(rng);
    return v;
  };
  const auto p1 = bench::random_pattern(B, C, F, s, 7), p2 = bench::random_pattern(B, F, C, s, 8);
  const auto V1 = rand_vec(p1.nnz() * B * B), V2 = rand_vec(p2.nnz() * B * B), b1 = rand_vec(F), b2 = rand_vec(C);
  const auto X = rand_vec(M * C), dY = rand_vec(M * C);
  fbuf Y(M * C), dX(M * C), H(M * F), A(M * F), dA(M * F), dV1(V1.size()), dV2(V2.size()), db1(F);
  fbuf Hk(kernels::bsr_ffn_hidden_size<B>(M, F, o.ffn_tile));
  const std::function<void()> u_fwd = [&] {
    kernels::bsr_matmul<B>({X.data(), M, C}, p1, V1.data(), 0.0f, {H.data(), M, F}, b1.data());
    kernels::gelu_forward<gelu_kind::tanh>(std::span<const float>(H.data(), M * F), std::span<float>(A.data(), M * F));
    kernels::bsr_matmul<B>({A.data(), M, F}, p2, V2.data(), 0.0f, {Y.data(), M, C}, b2.data());
  };
  const std::function<void()> u_bwd = [&] {
    kernels::bsr_backward<B>({A.data(), M, F}, {dY.data(), M, C}, p2, V2.data(), 0.0f, {dA.data(), M, F}, dV2.data());
    std::span<float> d(dA.data(), M * F);
    kernels::gelu_backward<gelu_kind::tanh>(std::span<const float>(H.data(), M * F), d, d);
    kernels::bsr_backward<B>({X.data(), M, C}, {dA.data(), M, F}, p1, V1.data(), 0.0f, {dX.data(), M, C}, dV1.data());
    kernels::add_column_sums({dA.data(), M, F}, db1);
  };
  // keep: H kept in Hk; recompute: nothing kept.
  const auto f_fwd = [&](float* hk) {
    kernels::bsr_ffn_forward<B, gelu_kind::tanh>({X.data(), M, C}, p1, V1.data(), b1.data(), p2, V2.data(), b2.data(),
                                                 {Y.data(), M, C}, hk, o.ffn_tile);
  };
  const auto f_bwd = [&](const float* hk) {
    kernels::bsr_ffn_backward<B, gelu_kind::tanh>({X.data(), M, C}, {dY.data(), M, C}, p1, V1.data(), b1.data(), p2,
                                                  V2.data(), 0.0f, {dX.data(), M, C}, dV1.data(), db1.data(),
                                                  dV2.data(), hk, o.ffn_tile);
  };
  const std::function<void()> u_step = [&] { u_fwd(), u_bwd(); };
  const std::function<void()> k_step = [&] { f_fwd(Hk.data()), f_bwd(Hk.data()); };
  const std::function<void()> r_step = [&] { f_fwd(nullptr), f_bwd(nullptr); };
  const double tuf = median_time(o.reps, u_fwd), tff = median_time(o.reps, [&] { f_fwd(Hk.data()); });
  const double tub = median_time(o.reps, u_bwd), tfb = median_time(o.reps, [&] { f_bwd(Hk.data()); });
  const double tus = median_time(o.reps, u_step), tfs = median_time(o.reps, k_step), trs = median_time(o.reps, r_step);
  const double paired = paired_ratio(o.reps, k_step, u_step), paired_r = paired_ratio(o.reps, r_step, u_step);
  // Step FLOPs: 6 products of M x nnz·B² (forward 2, backward 4); recompute adds one more.
  const double flops = 2.0 * double(M) * double((p1.nnz() + p2.nnz()) * B * B) * 3.0;
  std::printf("| %zux%zu | %.2f | %zu | %d | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.0f | %.0f |\n",
              C, F, s, B, T, tuf * 1e3, tff * 1e3, tub * 1e3, tfb * 1e3, tus * 1e3, tfs * 1e3, trs * 1e3, tus / tfs,
              paired, paired_r, flops / tus * 1e-9, flops / tfs * 1e-9);
  std::fflush(stdout);
}

int run_ffn(const options& o) {
  std::mt19937 rng(1);
  std::printf("# bench_bsr --ffn: M = %zu, SIMD %s, median of %d, tile rows %zu (0: default)\n\n", o.M,
              native_arch::name(), o.reps, o.ffn_tile);
  std::printf("| C x F | sparsity | B | threads | unfused fwd ms | fused fwd ms | unfused bwd ms | fused bwd ms | "
              "unfused step ms | fused step ms | fused recompute step ms | speed-up | paired speed-up | "
              "paired speed-up, recompute | unfused GFLOP/s | fused GFLOP/s |\n"
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (int T : o.threads) {
    set_num_threads(T);
    for (const auto& sh : o.ffn)
      for (std::size_t B : o.blocks)
        for (double s : o.sparsity) {
          if (sh.in % B || sh.out % B) continue;
          const auto run = [&]<std::size_t Bc>() {
            if constexpr (kernels::bsr_ffn_fuses<Bc>) time_ffn<Bc>(o, T, sh.in, sh.out, s, rng);
          };
          if (B == 16) run.template operator()<16>();
          if (B == 8) run.template operator()<8>();
          if (B == 4) run.template operator()<4>();
        }
  }
  std::printf("\nfused: H kept (ffn_fusion_mode::keep); recompute: H recomputed in backward. GFLOP/s: the 6 "
              "products of the step (M x active blocks, forward 2 and backward 4) over the step time.\n");
  return 0;
}

int main(int argc, char** argv) {
  const bench::results json_out("bench_bsr", argc, argv);  // --json FILE: results lines (common/results.hpp)
  const options o = parse(argc, argv);
  if (!o.ffn.empty()) return run_ffn(o);
  const std::size_t M = o.M;
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  auto rand_vec = [&](std::size_t n) {
    fbuf v(n);
    for (auto& x : v) x = u(rng);
    return v;
  };
  std::printf("# bench_bsr: M = %zu, SIMD %s (%zu floats), median of %d\n", M, native_arch::name(), simd_width<float>,
              o.reps);
  for (int T : o.threads) {
    set_num_threads(T);
    openblas_set_num_threads(T);
    const double peak = settled_fma_peak_gflops(T);
    std::printf("\n## %d thread%s, FMA peak %.0f GFLOP/s\n\n", T, T > 1 ? "s" : "", peak);
    std::printf(
        "| in x out | sparsity | B | fwd ms | bwd-data ms | bwd-w ms | bwd ms | sparse step ms | "
        "separate step ms | gemm step ms | speed-up vs gemm |%s effective GFLOP/s | %% of peak | "
        "dense_grad_pooled ms | step GB/s | copy GB/s | %% of copy |%s\n",
        o.blas ? " OpenBLAS step ms | speed-up vs OpenBLAS |" : "", o.paired ? " paired speed-up |" : "");
    std::printf("|---|---|---|---|---|---|---|---|---|---|---|%s---|---|---|---|---|---|%s\n", o.blas ? "---|---|" : "",
                o.paired ? "---|" : "");
    std::vector<std::string> dense_rows, bf16_rows;
    for (const auto& sh : o.shapes) {
      const auto X = rand_vec(M * sh.in), dY = rand_vec(M * sh.out), bias = rand_vec(sh.out);
      fbuf Y(M * sh.out), dX(M * sh.in);
      // Dense step: Y = X·W (NN), dX = dY·Wᵀ (NT), dW += Xᵀ·dY (TN).
      auto Wd = rand_vec(sh.in * sh.out);
      fbuf dWd(sh.in * sh.out);
      using kernels::trans;
      auto g_nn = [&] {
        kernels::gemm(trans::n, trans::n, 1.0f, {X.data(), M, sh.in}, {Wd.data(), sh.in, sh.out}, 0.0f,
                      {Y.data(), M, sh.out}, bias.data());
      };
      auto g_nt = [&] {
        kernels::gemm(trans::n, trans::t, 1.0f, {dY.data(), M, sh.out}, {Wd.data(), sh.in, sh.out}, 0.0f,
                      {dX.data(), M, sh.in});
      };
      auto g_tn = [&] {
        kernels::gemm(trans::t, trans::n, 1.0f, {X.data(), M, sh.in}, {dY.data(), M, sh.out}, 1.0f,
                      {dWd.data(), sh.in, sh.out});
      };
      const double t_nn = median_time(o.reps, g_nn), t_nt = median_time(o.reps, g_nt),
                   t_tn = median_time(o.reps, g_tn);
      const std::function<void()> g_step = [&] {
        g_nn();
        g_nt();
        g_tn();
      };
      const double t_gemm = median_time(o.reps, g_step);
      const int in = int(sh.in), out = int(sh.out), m = int(M);
      double t_blas = 0;
      if (o.blas)
        t_blas = median_time(o.reps, [&] {
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, out, in, 1.0f, X.data(), in, Wd.data(), out, 0.0f,
                      Y.data(), out);
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, in, out, 1.0f, dY.data(), out, Wd.data(), out, 0.0f,
                      dX.data(), in);
          cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, in, out, m, 1.0f, X.data(), in, dY.data(), out, 1.0f,
                      dWd.data(), out);
        });
      const double dflops = 3.0 * 2.0 * double(M) * double(sh.in * sh.out);
      char row[512];
      int n = std::snprintf(row, sizeof row, "| %zux%zu | %.2f | %.2f | %.2f | %.2f | %.0f | %.0f %% |", sh.in, sh.out,
                            t_nn * 1e3, t_nt * 1e3, t_tn * 1e3, t_gemm * 1e3, dflops / t_gemm * 1e-9,
                            100.0 * dflops / t_gemm * 1e-9 / peak);
      if (o.blas)
        std::snprintf(row + n, sizeof row - std::size_t(n), " %.2f | %.0f | %.0f %% |", t_blas * 1e3,
                      dflops / t_blas * 1e-9, 100.0 * dflops / t_blas * 1e-9 / peak);
      dense_rows.push_back(std::string(row) + "\n");
      // The copy probe on as many bytes as X, Y, dY and dX (once per shape and thread count).
      const double copy = bench::copy_gbs(M * (sh.in + sh.out), T);
      for (std::size_t B : o.blocks) {
        if (sh.in % B || sh.out % B) continue;
        fbuf pooled((sh.in / B) * (sh.out / B));
        const double t_pool = median_time(o.reps, [&] { time_pooled(B, X, dY, M, sh.in, sh.out, pooled); });
        for (double s : o.sparsity) {
          const auto p = bench::random_pattern(B, sh.in, sh.out, s, 7);
          const auto values = rand_vec(p.nnz() * B * B);
          fbuf dvalues(p.nnz() * B * B);
          const auto t = time_sparse_b(false, B, p, X, dY, Y, dX, values, dvalues, bias, M, o.reps, nullptr,
                                       o.paired ? &g_step : nullptr);
          const double flops = 3.0 * 2.0 * double(M) * double(p.nnz() * B * B);
          const double gf = flops / t.step * 1e-9;
          std::printf("| %zux%zu | %.2f | %zu | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |", sh.in, sh.out,
                      s, B, t.fwd * 1e3, t.bwd_data * 1e3, t.bwd_weights * 1e3, t.bwd * 1e3, t.step * 1e3,
                      t.step_separate * 1e3, t_gemm * 1e3, t_gemm / t.step);
          if (o.blas) std::printf(" %.2f | %.2f |", t_blas * 1e3, t_blas / t.step);
          // The bytes the step has to move: the forward reads X and writes Y, the one-pass backward
          // reads X and dY and writes dX; the blocks are read twice, dvalues read and written.
          const double bytes =
              sizeof(float) * (double(M) * double(3 * sh.in + 2 * sh.out) + 4.0 * double(p.nnz() * B * B));
          const double gbs = bytes / t.step * 1e-9;
          std::printf(" %.0f | %.0f | %.1f | %.1f | %.0f | %.0f %% |", gf, 100.0 * gf / peak, t_pool * 1e3, gbs, copy,
                      100.0 * gbs / copy);
          if (o.paired) std::printf(" %.2f |", t.paired);
          std::printf("\n");
          json_out.add({{"in", sh.in}, {"out", sh.out}, {"M", M}, {"block", B}, {"sparsity", s}, {"reps", o.reps}},
                       {{"speedup_vs_gemm", t_gemm / t.step}, {"sparse_step_ms", t.step * 1e3},
                        {"gemm_step_ms", t_gemm * 1e3}, {"effective_gflops", gf}, {"of_peak", gf / peak},
                        {"paired_speedup", o.paired ? nlohmann::json(t.paired) : nlohmann::json()},
                        {"speedup_vs_openblas", o.blas ? nlohmann::json(t_blas / t.step) : nlohmann::json()}},
                       T, peak);
          std::fflush(stdout);
          if (o.bf16 && B != 1) {
            hbuf X16;
            if (o.bf16_x) {
              X16.resize(X.size());
              for (std::size_t i = 0; i < X.size(); ++i) X16[i] = bf16(X[i]);
            }
            const auto b = time_sparse_b(true, B, p, X, dY, Y, dX, values, dvalues, bias, M, o.reps,
                                         o.bf16_x ? &X16 : nullptr);
            char head[64];
            std::snprintf(head, sizeof head, "| %zux%zu | %.2f | %zu |", sh.in, sh.out, s, B);
            bf16_rows.push_back(std::string(head) + ratio_cells(t.fwd, b.fwd) + ratio_cells(t.bwd_data, b.bwd_data) +
                                ratio_cells(t.bwd_weights, b.bwd_weights) + ratio_cells(t.step, b.step) +
                                ratio_cells(t.step_separate, b.step_separate) + "\n");
          }
        }
      }
    }
    std::printf("\nDense fwd+bwd, %d thread%s:\n\n| in x out | gemm NN ms | gemm NT ms | gemm TN ms | gemm step ms | "
                "gemm GFLOP/s | %% of peak |%s\n|---|---|---|---|---|---|---|%s\n",
                T, T > 1 ? "s" : "", o.blas ? " OpenBLAS step ms | OpenBLAS GFLOP/s | % of peak |" : "",
                o.blas ? "---|---|---|" : "");
    for (const auto& r : dense_rows) std::printf("%s", r.c_str());
    if (o.bf16) {
      std::printf(
          "\nbf16 block-sparse kernels (%s) against fp32, %d thread%s (ms; ratio = fp32 / bf16):\n\n"
          "| in x out | sparsity | B | fp32 fwd | bf16 fwd | ratio | fp32 bwd-data | bf16 bwd-data | ratio | "
          "fp32 bwd-w | bf16 bwd-w | ratio | fp32 step | bf16 step | ratio | fp32 separate step | "
          "bf16 separate step | ratio |\n"
          "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
          kernels::bsr_bf16_native ? "AVX512-BF16" : "portable path", T, T > 1 ? "s" : "");
      for (const auto& r : bf16_rows) std::printf("%s", r.c_str());
    }
    std::fflush(stdout);
  }
  return 0;
}
