// Where the B = 16 block-sparse products spend the time that does not shrink with density: an
// experiment, not a benchmark target (benchmarks/results/2026-11-27-zen5-sparsity.md, "What moving X and Y costs"). It times
// variants of the lanes-N forward driver of kernels/detail/bsr_matmul.hpp, a data gradient fused
// with the weight gradient per chunk of rows, and this core's memory bandwidth. Variants that skip
// work compute wrong results on purpose: they are timings only. Not built by CMake:
//
//   g++ -std=c++20 -O3 -march=native -fopenmp -DNDEBUG -Iinclude -Ibenchmarks \
//       benchmarks/experiments/bsr_memory_parts.cpp -o bsr_memory_parts
//   ./bsr_memory_parts forward 4096 768 768 1     # M in out threads
//   ./bsr_memory_parts backward 4096 768 3072 2
//   ./bsr_memory_parts bandwidth
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "common/random_pattern.hpp"
#include "sparselm/kernels/bsr.hpp"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

using namespace sparselm;
using namespace sparselm::kernels::detail;
using Arch = native_arch;
constexpr std::size_t B = 16;

namespace {

sparse::block_pattern random_pattern(std::size_t in, std::size_t out, double sparsity) {
  return bench::random_pattern(B, in, out, sparsity, 7);
}

template <class F>
double median_ms(F&& f, int reps = 7) {
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const auto a = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

enum class fwd {
  full, y_in_l2, no_packing, packing_only, stores_only, interleaved, prepacked_in_place, prepacked_copied, row_panels,
  x_in_place
};
const char* name(fwd v) {
  static const char* n[] = {"full",         "Y to an L2 scratch", "no packing (one panel reused)", "packing only (Y to L2)",
                            "stores only",  "next panel packed between block columns", "pre-packed panels read in place",
                            "pre-packed panels copied (memcpy)", "row-major panels (memcpy, no transpose)",
                            "X read in place (no panel)"};
  return n[int(v)];
}

// The lanes-N tile reading its MR rows of X in place (row r at X + r*lda), no panel: the
// broadcasts come straight from X's rows.
template <std::size_t MR>
void tile_in_place(const float* X, std::size_t lda, std::size_t n, const std::uint32_t* kb, const float* V, float* C,
                   std::size_t ldc, std::size_t mvalid) {
  using vec = xsimd::batch<float, Arch>;
  vec acc[MR];
  for (std::size_t r = 0; r < MR; ++r) acc[r] = vec(0.0f);
  for (std::size_t t = 0; t < n; ++t) {
    const float* a = X + std::size_t(kb[t]) * B;
    for (std::size_t k = 0; k < B; ++k) {
      const vec w = vec::load_unaligned(V + t * B * B + k * B);
#pragma GCC unroll 32
      for (std::size_t r = 0; r < MR; ++r) acc[r] = xsimd::fma(vec(a[r * lda + k]), w, acc[r]);
    }
  }
  for (std::size_t r = 0; r < mvalid; ++r) acc[r].store_unaligned(C + r * ldc);
}

// The lanes-N forward C = A·S over row panels of MR rows (one column group), in variant v.
void forward(fwd v, const float* A, std::size_t M, std::size_t K, const bsr_lists& L, const packed_blocks& pb, float* C,
             std::size_t N, const float* prepacked) {
  constexpr std::size_t MR = bsr_tiling<B, Arch>::MR;
  const std::size_t npan = (M + MR - 1) / MR;
  const bool products = v != fwd::packing_only && v != fwd::stores_only;
  if (v == fwd::interleaved) {
    parallel_chunks(npan, [&](int, std::size_t p0, std::size_t p1) {
      float* buf = bsr_scratch(2 * K * MR, 0);
      const std::size_t nk = K / 16, nj = L.n_out_blocks;
      auto pack = [&](std::size_t p, float* P, std::size_t c0, std::size_t c1) {
        if (c0 < c1) pack_transpose<Arch>(A + p * MR * K + c0, K, std::min(MR, M - p * MR), MR, c1 - c0, P + c0 * MR, MR);
      };
      pack(p0, buf, 0, K);
      for (std::size_t p = p0; p < p1; ++p) {
        float* P = buf + ((p - p0) & 1) * K * MR;
        float* Pn = buf + ((p - p0 + 1) & 1) * K * MR;
        for (std::size_t j = 0; j < nj; ++j) {
          const std::size_t t0 = L.ptr[j];
          tile_lanes_n<B, MR, Arch>(P, L.ptr[j + 1] - t0, pb.kb + t0, pb.values + t0 * B * B, C + p * MR * N + j * B, N,
                                    std::min(MR, M - p * MR), 0.0f, nullptr);
          if (p + 1 < p1) pack(p + 1, Pn, j * nk / nj * 16, (j + 1) * nk / nj * 16);
        }
      }
    });
    return;
  }
  parallel_for(0, npan, [&](std::size_t p) {
    const std::size_t m0 = p * MR, mv = std::min(MR, M - m0);
    float* Cp = v == fwd::y_in_l2 || v == fwd::packing_only ? bsr_scratch(MR * N, 2) : C + m0 * N;
    float* P = bsr_scratch(K * MR, 0);
    if (v == fwd::row_panels || v == fwd::x_in_place) {
      if (v == fwd::row_panels) pack_row_panel<B, MR>(A + m0 * K, K, mv, K, P);
      for (std::size_t j = 0; j < L.n_out_blocks; ++j) {
        const std::size_t t0 = L.ptr[j], n = L.ptr[j + 1] - t0;
        if (v == fwd::row_panels)
          tile_lanes_n<B, MR, Arch, false>(P, n, pb.kb + t0, pb.values + t0 * B * B, Cp + j * B, N, mv, 0.0f, nullptr);
        else
          tile_in_place<MR>(A + m0 * K, K, n, pb.kb + t0, pb.values + t0 * B * B, Cp + j * B, N, mv);
      }
      return;
    }
    if (v == fwd::prepacked_in_place)
      P = const_cast<float*>(prepacked) + p * K * MR;
    else if (v == fwd::prepacked_copied)
      std::memcpy(P, prepacked + p * K * MR, K * MR * sizeof(float));
    else if ((v != fwd::no_packing && v != fwd::stores_only) || p < 2)
      pack_transpose<Arch>(A + m0 * K, K, mv, MR, K, P, MR);
    for (std::size_t j = 0; j < L.n_out_blocks; ++j) {
      const std::size_t t0 = L.ptr[j];
      tile_lanes_n<B, MR, Arch>(P, products ? L.ptr[j + 1] - t0 : 0, pb.kb + t0, pb.values + t0 * B * B, Cp + j * B, N, mv,
                                0.0f, nullptr);
    }
  });
}

// dX = dY·Wᵀ and dvalues += Xᵀ·dY with each thread's rows in chunks of mc rows: the chunk's data
// gradient, then its weight gradient while the chunk of dY is still in cache (split: all of the
// thread's data gradient first, then the weight gradient in chunks of mc rows).
void backward(std::size_t mc, bool split, const float* X, const float* dY, std::size_t M, std::size_t in,
              std::size_t out, const sparse::block_pattern& p, const float* V, float* dX, float* dvalues) {
  constexpr std::size_t MR = bsr_tiling<B, Arch>::MR;
  const bsr_lists L{p.row_ptr.data(), p.row_slots.data(), p.col.data(), p.rows_b};
  const packed_blocks pb = pack_blocks<B, true, Arch>(L, V);
  const std::size_t nnz = p.nnz(), npan = (M + MR - 1) / MR;
  const int nt = team_size();
  static std::vector<float> partials;
  partials.resize(std::size_t(nt) * nnz * B * B);
  run_team(nt, [&](int t, int T) {
    const std::size_t mb = npan * t / T * MR, me = std::min(M, npan * (t + 1) / T * MR);
    float* dv = partials.data() + std::size_t(t) * nnz * B * B;
    std::memset(dv, 0, nnz * B * B * sizeof(float));
    float* P = bsr_scratch(out * MR, 0);
    float* Xs = bsr_scratch(strip_stride<B>(mc) * (in / B), 1);
    float* dYs = bsr_scratch(strip_stride<B>(mc) * (out / B), 2);
    auto data_grad = [&](std::size_t r0, std::size_t r1) {
      for (std::size_t m0 = r0; m0 < r1; m0 += MR) {
        const std::size_t mv = std::min(MR, M - m0);
        pack_transpose<Arch>(dY + m0 * out, out, mv, MR, out, P, MR);
        for (std::size_t j = 0; j < L.n_out_blocks; ++j) {
          const std::size_t t0 = L.ptr[j];
          tile_lanes_n<B, MR, Arch>(P, L.ptr[j + 1] - t0, pb.kb + t0, pb.values + t0 * B * B, dX + m0 * in + j * B, in, mv,
                                    0.0f, nullptr);
        }
      }
    };
    if (split) data_grad(mb, me);
    for (std::size_t c0 = mb; c0 < me; c0 += mc) {
      const std::size_t c1 = std::min(me, c0 + mc), mv = c1 - c0;
      if (!split) data_grad(c0, c1);
      pack_strips<B>(X + c0 * in, in, mv, in, Xs);
      pack_strips<B>(dY + c0 * out, out, mv, out, dYs);
      const std::size_t strip = strip_stride<B>(mv);
      for (std::size_t q = 0; q < nnz; ++q) {
        const std::uint32_t s = p.row_slots[q];
        wgrad_block_n<B, Arch>(Xs + p.row[s] * strip, dYs + p.col[s] * strip, mv, dv + q * B * B);
      }
    }
    team_barrier(T);
    for (std::size_t q = nnz * t / T; q < nnz * (t + 1) / T; ++q) {
      float* o = dvalues + std::size_t(p.row_slots[q]) * B * B;
      for (int u = 0; u < T; ++u)
        for (std::size_t e = 0; e < B * B; ++e) o[e] += partials[(std::size_t(u) * nnz + q) * B * B + e];
    }
  });
}

void bandwidth() {
#if defined(__AVX512F__)
  for (std::size_t mb : {3, 12, 48, 256}) {
    const std::size_t n = mb << 18;  // floats
    std::vector<float> a(n, 1.0f), b(n, 2.0f);
    volatile float sink = 0;
    const double read = median_ms([&] {
      __m512 s0 = _mm512_setzero_ps(), s1 = s0;
      for (std::size_t i = 0; i < n; i += 32) {
        s0 = _mm512_add_ps(s0, _mm512_loadu_ps(&a[i]));
        s1 = _mm512_add_ps(s1, _mm512_loadu_ps(&a[i + 16]));
      }
      sink = _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
    }, 9);
    const double copy = median_ms([&] { std::memcpy(b.data(), a.data(), n * sizeof(float)); }, 9);
    const double write = median_ms([&] {
      for (std::size_t i = 0; i < n; i += 16) _mm512_storeu_ps(&a[i], _mm512_set1_ps(float(i & 7)));
    }, 9);
    const double gb = double(n) * sizeof(float) / 1e6;  // per ms: GB/s
    std::printf("%4zu MB: read %.1f GB/s, write %.1f GB/s, memcpy %.1f GB/s (bytes copied)\n", mb, gb / read, gb / write,
                gb / copy);
  }
#else
  std::printf("bandwidth: needs AVX-512\n");
#endif
}

}  // namespace

int main(int argc, char** argv) {
  const std::string what = argc > 1 ? argv[1] : "";
  if (what == "bandwidth") return bandwidth(), 0;
  if (argc != 6 || (what != "forward" && what != "backward")) {
    std::fprintf(stderr, "usage: %s forward|backward M in out threads | bandwidth\n", argv[0]);
    return 2;
  }
  const std::size_t M = std::strtoul(argv[2], nullptr, 10), K = std::strtoul(argv[3], nullptr, 10),
                    N = std::strtoul(argv[4], nullptr, 10);
  set_num_threads(std::atoi(argv[5]));
  const auto p = random_pattern(K, N, 0.9), dense = random_pattern(K, N, 0.0);
  std::vector<float> X(M * K), Y(M * N), V(dense.nnz() * B * B), dX(M * K), dV(dense.nnz() * B * B);
  std::mt19937 r(1);
  std::uniform_real_distribution<float> u(-1, 1);
  for (auto* v : {&X, &Y, &V}) std::generate(v->begin(), v->end(), [&] { return u(r); });
  if (what == "backward") {
    const const_matrix_view<float> xv{X.data(), M, K, K}, dyv{Y.data(), M, N, N};
    const matrix_view<float> dxv{dX.data(), M, K, K};
    for (int round = 0; round < 3; ++round) {
      std::printf("round %d: library (bsr_matmul_t + bsr_weight_grad) %.3f ms", round, median_ms([&] {
                    kernels::bsr_matmul_t<B>(dyv, p, V.data(), 0.0f, dxv);
                    kernels::bsr_weight_grad<B>(xv, dyv, p, dV.data());
                  }));
      for (std::size_t mc : {96, 192, 384})
        for (bool split : {false, true})
          std::printf("; %s %zu rows %.3f", split ? "split" : "fused", mc, median_ms([&] {
                        backward(mc, split, X.data(), Y.data(), M, K, N, p, V.data(), dX.data(), dV.data());
                      }));
      std::printf(" ms\n");
    }
    return 0;
  }
  constexpr std::size_t MR = bsr_tiling<B, Arch>::MR;
  std::vector<float> prepacked((M + MR - 1) / MR * MR * K);
  for (std::size_t q = 0; q < (M + MR - 1) / MR; ++q)
    pack_transpose<Arch>(X.data() + q * MR * K, K, std::min(MR, M - q * MR), MR, K, prepacked.data() + q * K * MR, MR);
  for (int round = 0; round < 3; ++round) {
    for (const auto* pat : {&dense, &p}) {
      const bsr_lists L{pat->col_ptr.data(), pat->col_slots.data(), pat->row.data(), pat->cols_b};
      const packed_blocks pb = pack_blocks<B, false, Arch>(L, V.data());
      for (int v = 0; v <= int(fwd::x_in_place); ++v) {
        if (pat == &dense && v > 0) continue;
        const double ms = median_ms([&] { forward(fwd(v), X.data(), M, K, L, pb, Y.data(), N, prepacked.data()); });
        std::printf("round %d, density %.3f, %s: %.3f ms\n", round, double(pat->nnz()) / double(dense.nnz()),
                    name(fwd(v)), ms);
      }
    }
  }
  return 0;
}
