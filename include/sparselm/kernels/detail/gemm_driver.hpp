#pragma once
// Dense GEMM internals: the blocked loop nest over packed panels, the per-thread workspace and
// the split of C between threads.
//
// Loop nest for one thread's region of C (Goto/BLIS order):
//   jc: NC columns    -> pack op(B)[pc:pc+kc, jc:jc+nc]   (L2/L3)
//    pc: KC depth
//     ic: MC rows     -> pack op(A)[ic:ic+mc, pc:pc+kc]   (L2)
//      jr: NR columns    (B micro-panel stays in L1)
//       ir: MR rows      micro-kernel
// The first depth block applies beta and the bias; later ones accumulate into C.
//
// Threads: C is cut into one rectangle per thread (along M or N, whichever packs less), each
// thread packs its own panels, so there is no synchronisation inside the product.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <new>

#include "sparselm/core/threads.hpp"
#include "sparselm/kernels/detail/gemm_kernel.hpp"
#include "sparselm/kernels/detail/gemm_pack.hpp"

namespace sparselm::kernels::detail {

// Grow-only, 64-byte aligned packing buffers, one set per thread (thread_local), reused across
// calls: no allocation in the steady state.
class gemm_workspace {
 public:
  gemm_workspace() = default;
  gemm_workspace(const gemm_workspace&) = delete;
  gemm_workspace& operator=(const gemm_workspace&) = delete;
  ~gemm_workspace() {
    std::free(a_);
    std::free(b_);
  }
  float* a(std::size_t n) { return grow(a_, a_cap_, n); }
  float* b(std::size_t n) { return grow(b_, b_cap_, n); }

  static gemm_workspace& local() {
    static thread_local gemm_workspace ws;
    return ws;
  }

 private:
  static float* grow(float*& p, std::size_t& cap, std::size_t n) {
    if (n > cap) {
      std::free(p);
      const std::size_t bytes = (n * sizeof(float) + 63) / 64 * 64;
      p = static_cast<float*>(std::aligned_alloc(64, bytes));
      if (!p) {
        cap = 0;
        throw std::bad_alloc();
      }
      cap = n;
    }
    return p;
  }
  float* a_ = nullptr;
  float* b_ = nullptr;
  std::size_t a_cap_ = 0, b_cap_ = 0;
};

struct gemm_problem {
  bool ta, tb;
  std::size_t M, N, K;
  float alpha, beta;
  const float* A;
  std::size_t lda;
  const float* B;
  std::size_t ldb;
  float* C;
  std::size_t ldc;
  const float* bias;
};

inline std::size_t gemm_ceil_div(std::size_t a, std::size_t b) { return (a + b - 1) / b; }

// Splits n into ceil(n / max_block) nearly equal blocks, each a multiple of `unit` (<= max_block
// when max_block is a multiple of unit).
inline std::size_t gemm_block(std::size_t n, std::size_t max_block, std::size_t unit) {
  const std::size_t blocks = gemm_ceil_div(n, max_block);
  return std::min(max_block, gemm_ceil_div(gemm_ceil_div(n, blocks), unit) * unit);
}

// C[m0:m1, n0:n1] on the calling thread.
template <class Arch>
void gemm_region(const gemm_problem& p, std::size_t m0, std::size_t m1, std::size_t n0, std::size_t n1) {
  using cfg = gemm_config<Arch>;
  constexpr std::size_t MR = cfg::MR, NR = cfg::NR;
  if (m1 <= m0 || n1 <= n0) return;
  const std::size_t kcb = gemm_block(p.K, cfg::KC, 8);
  const std::size_t mcb = gemm_block(m1 - m0, cfg::MC, MR);
  const std::size_t ncb = gemm_block(n1 - n0, cfg::NC, NR);
  auto& ws = gemm_workspace::local();
  float* bp = ws.b(kcb * gemm_ceil_div(ncb, NR) * NR);
  float* ap = ws.a(cfg::A_PANEL * gemm_ceil_div(mcb, MR));
  auto kernel = p.ta ? &gemm_micro_kernel<Arch, true> : &gemm_micro_kernel<Arch, false>;

  for (std::size_t jc = n0; jc < n1; jc += ncb) {
    const std::size_t nc = std::min(ncb, n1 - jc);
    for (std::size_t pc = 0; pc < p.K; pc += kcb) {
      const std::size_t kc = std::min(kcb, p.K - pc);
      const bool first = pc == 0;
      gemm_pack_b<Arch>(p.tb, p.B, p.ldb, pc, kc, jc, nc, bp);
      for (std::size_t ic = m0; ic < m1; ic += mcb) {
        const std::size_t mc = std::min(mcb, m1 - ic);
        gemm_pack_a<Arch>(p.ta, p.A, p.lda, ic, mc, pc, kc, ap);
        for (std::size_t jr = 0; jr < nc; jr += NR) {
          const gemm_epilogue ep{p.alpha, first ? p.beta : 1.0f, first && p.bias ? p.bias + jc + jr : nullptr};
          const float* b = bp + (jr / NR) * kc * NR;
          for (std::size_t ir = 0; ir < mc; ir += MR)
            kernel(kc, ap + (ir / MR) * cfg::A_PANEL, b, p.C + (ic + ir) * p.ldc + jc + jr, p.ldc,
                   std::min(MR, mc - ir), std::min(NR, nc - jr), ep);
        }
      }
    }
  }
}

// K == 0: C = beta * C (+ bias).
inline void gemm_scale(const gemm_problem& p) {
  for (std::size_t i = 0; i < p.M; ++i) {
    float* c = p.C + i * p.ldc;
    for (std::size_t j = 0; j < p.N; ++j) {
      float x = p.beta == 0.0f ? 0.0f : p.beta * c[j];
      c[j] = p.bias ? x + p.bias[j] : x;
    }
  }
}

// How C is cut between threads: pm x pn rectangles, aligned to tiles.
struct gemm_split {
  int pm = 1, pn = 1;
};

template <class Arch>
gemm_split gemm_choose_split(const gemm_problem& p, int nt) {
  using cfg = gemm_config<Arch>;
  const std::size_t mt = gemm_ceil_div(p.M, cfg::MR), ntl = gemm_ceil_div(p.N, cfg::NR);
  gemm_split best;
  double best_cost = -1;
  for (int pm = 1; pm <= nt; ++pm) {
    if (nt % pm) continue;
    const int pn = nt / pm;
    if (std::size_t(pm) > mt || std::size_t(pn) > ntl) continue;
    // Largest rectangle (in whole tiles), then the work on it: multiply-adds / 32 per cycle,
    // packing at ~2 floats per cycle.
    const double m = double(gemm_ceil_div(mt, std::size_t(pm)) * cfg::MR);
    const double n = double(gemm_ceil_div(ntl, std::size_t(pn)) * cfg::NR);
    const double k = double(p.K);
    const double cost = m * n * k / 32.0 + 0.5 * (k * n + m * k * std::ceil(n / double(cfg::NC)));
    if (best_cost < 0 || cost < best_cost) best_cost = cost, best = {pm, pn};
  }
  return best;
}

template <class Arch>
void gemm_run(const gemm_problem& p) {
  using cfg = gemm_config<Arch>;
  if (p.M == 0 || p.N == 0) return;
  if (p.K == 0) return gemm_scale(p);
  int nt = in_parallel() ? 1 : num_threads();
  // Below ~0.5 MFLOP a fork/join costs more than it saves.
  if (double(p.M) * double(p.N) * double(p.K) < double(1 << 18)) nt = 1;
  const gemm_split s = nt > 1 ? gemm_choose_split<Arch>(p, nt) : gemm_split{};
  nt = s.pm * s.pn;
  if (nt <= 1) return gemm_region<Arch>(p, 0, p.M, 0, p.N);
#if defined(_OPENMP)
  const std::size_t mt = gemm_ceil_div(p.M, cfg::MR), ntl = gemm_ceil_div(p.N, cfg::NR);
#pragma omp parallel num_threads(nt)
  {
    const int t = omp_get_thread_num();
    if (t < s.pm * s.pn && omp_get_num_threads() == s.pm * s.pn) {
      const std::size_t tm = std::size_t(t / s.pn), tn = std::size_t(t % s.pn);
      const std::size_t m0 = std::min(p.M, mt * tm / s.pm * cfg::MR), m1 = std::min(p.M, mt * (tm + 1) / s.pm * cfg::MR);
      const std::size_t n0 = std::min(p.N, ntl * tn / s.pn * cfg::NR), n1 = std::min(p.N, ntl * (tn + 1) / s.pn * cfg::NR);
      gemm_region<Arch>(p, m0, m1, n0, n1);
    } else if (t == 0) {
      gemm_region<Arch>(p, 0, p.M, 0, p.N);  // the runtime gave us fewer threads than asked
    }
  }
#endif
}

}  // namespace sparselm::kernels::detail
