// Static block-sparse causal attention (kernels/block_sparse_attention.hpp) against the dense
// causal kernel (kernels/attention.hpp): forward + backward of one attention layer's core
// (softmax(s·QKᵀ + mask)·V and its gradients w.r.t. Q, K, V), on all threads. The tile products
// run in fp32, or with --compute bf16 as bf16 products with fp32 sums (gemm_bf16), as under the
// bf16 precision policy; --compute both times the dense kernel in both and prints their ratio.
//
// Shapes: B sequences of T positions, H = 16 heads of width D (the S1 model has 16 heads of 32),
// T = 256 and 1024, D = 32 and 64, attention block 16, density 0.25 and 1.0 (pattern seed 1).
// Each row: the median over --reps runs (after one warm-up run) of forward + backward, for the
// dense kernel and the block kernel on the same inputs, their ratio, and the kept blocks as a
// fraction of the causal blocks (T/16·(T/16 + 1)/2).
//
//   ./build/benchmarks/bench_attention
//   ./build/benchmarks/bench_attention --seq 256,1024 --dims 32,64 --density 0.25,1 --batch 1 --reps 7 --threads 2
//   ./build/benchmarks/bench_attention --seq 128 --dims 64 --heads 12 --batch 8 --density 1 --compute both
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "sparselm/core/rng.hpp"
#include "sparselm/core/threads.hpp"
#include "sparselm/kernels/attention.hpp"
#include "sparselm/kernels/block_sparse_attention.hpp"

namespace {

using namespace sparselm;
using clk = std::chrono::steady_clock;

struct options {
  std::vector<std::size_t> seq{256, 1024}, dims{32, 64};
  std::vector<double> density{0.25, 1.0};
  std::size_t batch = 1, heads = 16, block = 16;
  int reps = 7, threads = 0;
  std::string compute = "fp32";  // fp32, bf16 or both
};

template <class T>
std::vector<T> parse_list(const std::string& s) {
  std::vector<T> v;
  std::size_t b = 0;
  while (b <= s.size()) {
    std::size_t e = s.find(',', b);
    if (e == std::string::npos) e = s.size();
    if (e > b) v.push_back(T(std::stod(s.substr(b, e - b))));
    b = e + 1;
  }
  return v;
}

options parse(int argc, char** argv) {
  options o;
  for (int a = 1; a < argc; ++a) {
    const std::string k = argv[a];
    if (a + 1 >= argc) {
      std::fprintf(stderr,
                   "usage: bench_attention [--seq 256,1024] [--dims 32,64] [--density 0.25,1] [--batch 1] "
                   "[--heads 16] [--block 16] [--reps 7] [--threads 0] [--compute fp32|bf16|both]\n");
      std::exit(2);
    }
    const std::string v = argv[++a];
    if (k == "--seq") o.seq = parse_list<std::size_t>(v);
    else if (k == "--dims") o.dims = parse_list<std::size_t>(v);
    else if (k == "--density") o.density = parse_list<double>(v);
    else if (k == "--batch") o.batch = std::stoul(v);
    else if (k == "--heads") o.heads = std::stoul(v);
    else if (k == "--block") o.block = std::stoul(v);
    else if (k == "--reps") o.reps = std::stoi(v);
    else if (k == "--threads") o.threads = std::stoi(v);
    else if (k == "--compute" && (v == "fp32" || v == "bf16" || v == "both"))
      o.compute = v;
    else {
      std::fprintf(stderr, "bench_attention: unknown option %s\n", k.c_str());
      std::exit(2);
    }
  }
  return o;
}

// Median wall time of f over reps runs, after one warm-up run, in milliseconds.
double median_ms(int reps, const std::function<void()>& f) {
  f();
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = clk::now();
    f();
    t.push_back(std::chrono::duration<double, std::milli>(clk::now() - t0).count());
  }
  std::nth_element(t.begin(), t.begin() + std::ptrdiff_t(t.size() / 2), t.end());
  return t[t.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const options o = parse(argc, argv);
  if (o.threads > 0) set_num_threads(o.threads);
  std::printf("block-sparse causal attention fwd+bwd vs the dense causal kernel: B=%zu H=%zu block=%zu, %d threads, "
              "median of %d\n",
              o.batch, o.heads, o.block, num_threads(), o.reps);
  std::printf("%6s %4s %8s %8s %8s %11s %11s %8s\n", "T", "D", "compute", "density", "kept", "dense_ms", "sparse_ms",
              "speedup");
  std::vector<dtype> computes;
  if (o.compute != "bf16") computes.push_back(dtype::f32);
  if (o.compute != "fp32") computes.push_back(dtype::bf16);
  for (std::size_t T : o.seq)
    for (std::size_t D : o.dims) {
      const std::size_t N = o.batch * T, HD = o.heads * D;
      std::vector<float> qkv(N * 3 * HD), out(N * HD), dout(N * HD), dqkv(N * 3 * HD), lse(o.batch * o.heads * T);
      const counter_rng rng(5);
      rng.fill_uniform(qkv, 1);
      rng.fill_uniform(dout, 2);
      for (auto& x : qkv) x = 4.0f * x - 2.0f;
      const kernels::attention_shape s{o.batch, T, o.heads, D};
      const float scale = 1.0f / std::sqrt(float(D));
      const const_matrix_view<float> Q(qkv.data(), N, 3 * HD), G(dout.data(), N, HD), O(out.data(), N, HD);
      std::vector<double> dense_ms;
      for (dtype c : computes) {
        const double dense = median_ms(o.reps, [&] {
          kernels::attention_forward(Q, {out.data(), N, HD}, lse, s, kernels::attention_mask::causal, scale, {}, {}, c);
          kernels::attention_backward(G, Q, O, lse, {dqkv.data(), N, 3 * HD}, s, kernels::attention_mask::causal, scale,
                                      {}, {}, c);
        });
        dense_ms.push_back(dense);
        for (double density : o.density) {
          const kernels::block_causal_pattern p({.block = o.block, .density = density, .seed = 1}, T);
          const double rows = double(p.block_rows());
          const double kept = double(p.kept_blocks(T)) / (rows * (rows + 1) / 2);
          const double sparse = median_ms(o.reps, [&] {
            kernels::block_sparse_attention_forward(Q, {out.data(), N, HD}, lse, s, p, scale, {}, {}, c);
            kernels::block_sparse_attention_backward(G, Q, O, lse, {dqkv.data(), N, 3 * HD}, s, p, scale, {}, {}, c);
          });
          std::printf("%6zu %4zu %8s %8.2f %8.3f %11.3f %11.3f %7.2fx\n", T, D, c == dtype::f32 ? "fp32" : "bf16",
                      density, kept, dense, sparse, dense / sparse);
          std::fflush(stdout);
        }
      }
      if (dense_ms.size() == 2)
        std::printf("%6zu %4zu dense kernel, fp32 ms / bf16 ms: %.2fx\n", T, D, dense_ms[0] / dense_ms[1]);
    }
  return 0;
}
