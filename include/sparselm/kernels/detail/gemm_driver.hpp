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
// A packed panel of op(A) serves the region's columns of C; when they are few (<= 128: the
// gradient of a narrow projection, dx = dlogits * E of a tied head 128 wide), the copy is hardly
// reused and costs up to a fifth of the product (Zen 5 host, one thread: 1024 x 128 x 50000 at
// 72-74 % of the FMA peak packed, 89 % in place; benchmarks/results/2026-11-25-zen5-performance.md). There, with the fp32
// family, A not transposed is read in place by whole MR-row tiles (rows lda apart, the B panel
// packed as usual); only a last partial tile is packed.
//
// Threads: C is cut into one rectangle per thread (along M or N, whichever packs less), each
// thread packs its own panels, so there is no synchronisation inside the product.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <new>
#include <type_traits>

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
  // n elements of T (float for the fp32 panels, 32-bit bf16 pairs for the bf16 ones).
  template <class T = float>
  T* a(std::size_t n) { return static_cast<T*>(grow(a_, a_cap_, n * sizeof(T))); }
  template <class T = float>
  T* b(std::size_t n) { return static_cast<T*>(grow(b_, b_cap_, n * sizeof(T))); }

  static gemm_workspace& local() {
    static thread_local gemm_workspace ws;
    return ws;
  }

 private:
  static void* grow(void*& p, std::size_t& cap, std::size_t bytes) {
    if (bytes > cap) {
      std::free(p);
      bytes = (bytes + 63) / 64 * 64;
      p = std::aligned_alloc(64, bytes);
      if (!p) {
        cap = 0;
        throw std::bad_alloc();
      }
      cap = bytes;
    }
    return p;
  }
  void* a_ = nullptr;
  void* b_ = nullptr;
  std::size_t a_cap_ = 0, b_cap_ = 0;  // bytes
};

// One product; A and B are float or bf16 (the bf16 GEMM's operands).
template <class SA = float, class SB = float>
struct gemm_problem {
  bool ta, tb;
  std::size_t M, N, K;
  float alpha, beta;
  const SA* A;
  std::size_t lda;
  const SB* B;
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

// A kernel family: blocking, packed element type, packing and micro-kernel. The fp32 family
// below; the bf16 one in gemm_bf16_kernel.hpp. Round: how float A and B are rounded while packed
// (gemm_pack.hpp; the bf16 GEMM's portable path and the fp16 GEMM run the fp32 family that way).
template <class Arch, gemm_round Round = gemm_round::none>
struct gemm_fp32_family {
  using cfg = gemm_config<Arch>;
  using packed = float;
  static constexpr std::size_t MR = cfg::MR, NR = cfg::NR, KC = cfg::KC, MC = cfg::MC, NC = cfg::NC;
  static constexpr std::size_t A_PANEL = cfg::A_PANEL;
  // Packed elements of one kc x NR micro-panel of B.
  static constexpr std::size_t b_panel(std::size_t kc) { return kc * NR; }
  template <class S>
  static void pack_a(bool t, const S* A, std::size_t lda, std::size_t i0, std::size_t mc, std::size_t p0,
                     std::size_t kc, float* dst) {
    gemm_pack_a<Arch, S, Round>(t, A, lda, i0, mc, p0, kc, dst);
  }
  template <class S>
  static void pack_b(bool t, const S* B, std::size_t ldb, std::size_t p0, std::size_t kc, std::size_t j0,
                     std::size_t nc, float* dst) {
    gemm_pack_b<Arch, S, Round>(t, B, ldb, p0, kc, j0, nc, dst);
  }
  using kernel_fn = void (*)(std::size_t, const float*, const float*, float*, std::size_t, std::size_t, std::size_t,
                             const gemm_epilogue&);
  static kernel_fn kernel(bool ta) { return ta ? &gemm_micro_kernel<Arch, true> : &gemm_micro_kernel<Arch, false>; }
  // Whether float A (not transposed) may be read in place (not when packing rounds it).
  static constexpr bool reads_a_in_place = Round == gemm_round::none;
  static void kernel_in_place(std::size_t kc, const float* a, std::size_t lda, const float* b, float* c,
                              std::size_t ldc, std::size_t nr, const gemm_epilogue& ep) {
    gemm_micro_kernel_in_place<Arch>(kc, a, lda, b, c, ldc, nr, ep);
  }
};

// Largest width of a thread's region of C for which A is read in place (see the top of this file).
inline constexpr std::size_t gemm_in_place_max_cols = 128;

template <class F, class SA>
constexpr bool gemm_can_read_a_in_place() {
  if constexpr (requires { F::reads_a_in_place; })
    return F::reads_a_in_place && std::is_same_v<SA, float>;
  else
    return false;
}

// C[m0:m1, n0:n1] on the calling thread.
template <class F, class SA, class SB>
void gemm_region(const gemm_problem<SA, SB>& p, std::size_t m0, std::size_t m1, std::size_t n0, std::size_t n1) {
  using packed = typename F::packed;
  constexpr std::size_t MR = F::MR, NR = F::NR;
  if (m1 <= m0 || n1 <= n0) return;
  const std::size_t kcb = gemm_block(p.K, F::KC, 8);
  const std::size_t mcb = gemm_block(m1 - m0, F::MC, MR);
  const std::size_t ncb = gemm_block(n1 - n0, F::NC, NR);
  auto& ws = gemm_workspace::local();
  packed* bp = ws.b<packed>(F::b_panel(kcb) * gemm_ceil_div(ncb, NR));
  packed* ap = ws.a<packed>(F::A_PANEL * gemm_ceil_div(mcb, MR));
  const auto kernel = F::kernel(p.ta);
  bool in_place = false;  // A read in place by whole MR-row tiles
  if constexpr (gemm_can_read_a_in_place<F, SA>()) in_place = !p.ta && n1 - n0 <= gemm_in_place_max_cols;

  for (std::size_t jc = n0; jc < n1; jc += ncb) {
    const std::size_t nc = std::min(ncb, n1 - jc);
    for (std::size_t pc = 0; pc < p.K; pc += kcb) {
      const std::size_t kc = std::min(kcb, p.K - pc);
      const bool first = pc == 0;
      F::pack_b(p.tb, p.B, p.ldb, pc, kc, jc, nc, bp);
      for (std::size_t ic = m0; ic < m1; ic += mcb) {
        const std::size_t mc = std::min(mcb, m1 - ic);
        const std::size_t direct = in_place ? mc / MR * MR : 0;  // rows read in place; the rest packed
        if (direct < mc) F::pack_a(p.ta, p.A, p.lda, ic + direct, mc - direct, pc, kc, ap);
        for (std::size_t jr = 0; jr < nc; jr += NR) {
          const gemm_epilogue ep{p.alpha, first ? p.beta : 1.0f, first && p.bias ? p.bias + jc + jr : nullptr};
          const packed* b = bp + (jr / NR) * F::b_panel(kc);
          for (std::size_t ir = 0; ir < mc; ir += MR) {
            float* c = p.C + (ic + ir) * p.ldc + jc + jr;
            if constexpr (gemm_can_read_a_in_place<F, SA>()) {
              if (ir < direct) {
                F::kernel_in_place(kc, p.A + (ic + ir) * p.lda + pc, p.lda, b, c, p.ldc, std::min(NR, nc - jr), ep);
                continue;
              }
            }
            kernel(kc, ap + ((ir - direct) / MR) * F::A_PANEL, b, c, p.ldc, std::min(MR, mc - ir),
                   std::min(NR, nc - jr), ep);
          }
        }
      }
    }
  }
}

// K == 0: C = beta * C (+ bias).
template <class SA, class SB>
void gemm_scale(const gemm_problem<SA, SB>& p) {
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

template <class F, class SA, class SB>
gemm_split gemm_choose_split(const gemm_problem<SA, SB>& p, int nt) {
  using cfg = F;
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

// The product on num_threads() threads (one when called inside a parallel region), with kernel
// family F (default: fp32 over float operands).
template <class F, class SA, class SB>
void gemm_run(const gemm_problem<SA, SB>& p) {
  using cfg = F;
  if (p.M == 0 || p.N == 0) return;
  if (p.K == 0) return gemm_scale(p);
  int nt = in_parallel() ? 1 : num_threads();
  // Below ~0.5 MFLOP a fork/join costs more than it saves.
  if (double(p.M) * double(p.N) * double(p.K) < double(1 << 18)) nt = 1;
  const gemm_split s = nt > 1 ? gemm_choose_split<F>(p, nt) : gemm_split{};
  nt = s.pm * s.pn;
  if (nt <= 1) return gemm_region<F>(p, 0, p.M, 0, p.N);
  const std::size_t mt = gemm_ceil_div(p.M, cfg::MR), ntl = gemm_ceil_div(p.N, cfg::NR);
  run_team(nt, [&](int t, int T) {
    if (t < s.pm * s.pn && T == s.pm * s.pn) {
      const std::size_t tm = std::size_t(t / s.pn), tn = std::size_t(t % s.pn);
      const std::size_t m0 = std::min(p.M, mt * tm / s.pm * cfg::MR), m1 = std::min(p.M, mt * (tm + 1) / s.pm * cfg::MR);
      const std::size_t n0 = std::min(p.N, ntl * tn / s.pn * cfg::NR), n1 = std::min(p.N, ntl * (tn + 1) / s.pn * cfg::NR);
      gemm_region<F>(p, m0, m1, n0, n1);
    } else if (t == 0) {
      gemm_region<F>(p, 0, p.M, 0, p.N);  // the runtime gave us fewer threads than asked
    }
  });
}

}  // namespace sparselm::kernels::detail
