#pragma once
// bf16 GEMM internals for Intel AMX (AMX-TILE + AMX-BF16): tile configuration, the Linux
// permission request, packing into tiles and the TDPBF16PS micro-kernel.
//
// TDPBF16PS C, A, B works on tile registers (up to 16 rows of 64 bytes each):
//   C (16 x 16 fp32) += A (16 rows x 16 k-pairs of bf16) . B (16 k-pairs x 16 columns of bf16)
//   C[m][n] += sum_p A[m][2p] * B[p][2n] + A[m][2p+1] * B[p][2n+1]
// i.e. 16 x 16 x 32 = 8192 multiply-adds per instruction (an fp32 zmm FMA does 16). Every
// product of two bf16 values is exact in fp32 and is added to the fp32 accumulator, so the
// result is that of an fp32 dot product over the rounded operands (the fp32 GEMM's tolerance).
// The instruction treats bf16 subnormal inputs as zero and flushes subnormal results; a bf16
// subnormal is below 1.2e-38, so this changes results only by that much in absolute terms.
//
// Micro-kernel: a 32 x 32 tile of C in four accumulator tiles (tmm0-3: rows 0-15 / 16-31 x
// columns 0-15 / 16-31); per step of 32 in k, two A tiles (tmm4-5) and two B tiles (tmm6-7)
// are loaded and four TDPBF16PS issued. All eight tiles are configured as 16 rows x 64 bytes.
//
// Packed layouts, in 32-bit words (two bf16 adjacent in k: low half the even k, high half the
// odd k), zero-padded to whole tiles (32 rows or columns, 32 in k), each tile 1 KiB contiguous:
//   A micro-panel (32 rows): tile (s, u) at word (2s + u) * 256, word r * 16 + q =
//                            (op(A)(16u + r, 32s + 2q), op(A)(16u + r, 32s + 2q + 1))
//   B micro-panel (32 cols): tile (s, v) at word (2s + v) * 256, word q * 16 + j =
//                            (op(B)(32s + 2q, 16v + j), op(B)(32s + 2q + 1, 16v + j))
// Float operands are rounded to bf16 (nearest even, NaN kept) while packed. The family plugs
// into the blocked driver of gemm_driver.hpp (blocking, workspace, threads).
//
// Availability: compiled only when the compiler targets AMX-TILE, AMX-BF16 and AVX512-BF16
// (e.g. -march=native on a Sapphire Rapids class Xeon; SPARSELM_GEMM_AMX); at run time the CPU
// must report AMX (CPUID), the OS must enable the tile state (XCR0) and, on Linux, grant this
// process the tile data (arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA), asked once per
// process). amx_status() says whether all of that holds and why not; nothing runs an AMX
// instruction otherwise.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "sparselm/kernels/detail/gemm_bf16_kernel.hpp"
#include "sparselm/kernels/detail/gemm_kernel.hpp"

// GCC spells the target macros __AMX_TILE__ / __AMX_BF16__, clang __AMXTILE__ / __AMXBF16__.
#if SPARSELM_GEMM_BF16_NATIVE && (defined(__AMX_TILE__) || defined(__AMXTILE__)) && \
    (defined(__AMX_BF16__) || defined(__AMXBF16__)) && defined(__linux__) && defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#define SPARSELM_GEMM_AMX 1
#else
#define SPARSELM_GEMM_AMX 0
#endif

namespace sparselm::kernels::detail {

// Whether this process can run the AMX kernel, and if not, why (a fixed string).
struct amx_availability {
  bool usable = false;
  const char* why = "";
};

#if SPARSELM_GEMM_AMX

inline amx_availability amx_probe() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return {false, "CPUID leaf 7 missing"};
  if (!(d & (1u << 24)) || !(d & (1u << 22))) return {false, "the CPU reports no AMX-TILE / AMX-BF16 (CPUID)"};
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return {false, "the OS has not enabled XSAVE (OSXSAVE)"};
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  if ((lo & (3u << 17)) != (3u << 17)) return {false, "the OS has not enabled the AMX tile state (XCR0 bits 17, 18)"};
  // Linux keeps the 8 KiB tile data state off until a process asks for it (kernel 5.16+).
  constexpr long arch_req_xcomp_perm = 0x1023, xfeature_xtiledata = 18;
  if (syscall(SYS_arch_prctl, arch_req_xcomp_perm, xfeature_xtiledata) != 0)
    return {false, errno == EINVAL || errno == ENOSYS
                       ? "the kernel refused the AMX permission (arch_prctl ARCH_REQ_XCOMP_PERM: unsupported)"
                       : "the kernel refused the AMX permission (arch_prctl ARCH_REQ_XCOMP_PERM failed)"};
  return {true, "AMX-BF16 available, tile data permission granted"};
}

// Once per process (thread-safe); the permission is process-wide.
inline const amx_availability& amx_status() {
  static const amx_availability s = amx_probe();
  return s;
}

// LDTILECFG's 64-byte operand: palette 1, all 8 tiles 16 rows x 64 bytes.
struct alignas(64) amx_tile_config {
  std::uint8_t palette = 1, start_row = 0;
  std::uint8_t reserved[14] = {};
  std::uint16_t colsb[16] = {64, 64, 64, 64, 64, 64, 64, 64};
  std::uint8_t rows[16] = {16, 16, 16, 16, 16, 16, 16, 16};
};
static_assert(sizeof(amx_tile_config) == 64);

// Loads our tile configuration unless the thread already has it. LDTILECFG costs ~45 ns
// (measured on the Xeon host) and zeroes the tiles; STTILECFG and a compare ~5 ns alone, but
// STTILECFG waits for the tile stores in flight: called before every micro-kernel it took a third
// of the kernel's time, so the family calls it once per packed B panel (pack_b runs on the thread
// that then runs the micro-kernels over that panel, before them). Another configuration on this
// thread (or tiles released to their init state, which reads as zeros) is replaced. The tiles
// stay configured after the GEMM (no TILERELEASE: the next call would pay the LDTILECFG again);
// the cost is the 8 KiB tile state saved on a context switch.
// amx_configure(want) does the same for another configuration (the block-sparse kernels').
inline void amx_configure(const amx_tile_config& want) noexcept {
  amx_tile_config cur;
  _tile_storeconfig(&cur);
  if (std::memcmp(&cur, &want, sizeof cur) != 0) _tile_loadconfig(&want);
}
inline void amx_configure() noexcept {
  static const amx_tile_config want{};
  amx_configure(want);
}

// 16 words (pairs) x 16 rows of `tile` (row-major, 64-byte rows) transposed into dst.
inline void amx_transpose_tile(const std::uint32_t* tile, std::uint32_t* dst) noexcept {
  gemm_transpose16_avx512(reinterpret_cast<const float*>(tile), 16, reinterpret_cast<float*>(dst), 16);
}

// 16 k-pairs of 16 consecutive elements (n valid, the rest zero) of stored rows src + 2q * ld
// and src + (2q + 1) * ld (rows at or beyond depth `kc` read as zero), as 16 rows of 16 words.
template <class S>
inline void amx_pair_rows(const S* src, std::size_t ld, std::size_t n, std::size_t kc, std::uint32_t* dst) noexcept {
  for (std::size_t q = 0; q < 16; ++q) {
    const __m256i lo = 2 * q < kc ? gemm_bf16_load16(src + 2 * q * ld, n) : _mm256_setzero_si256();
    const __m256i hi = 2 * q + 1 < kc ? gemm_bf16_load16(src + (2 * q + 1) * ld, n) : _mm256_setzero_si256();
    _mm512_store_si512(dst + q * 16, gemm_bf16_pairs(lo, hi));
  }
}

struct gemm_amx_family {
  using packed = std::uint32_t;
  static constexpr std::size_t MR = 32, NR = 32;
  // KC: a 32-row A micro-panel of KC is 64 KiB, B's too (L2). MC x KC of A: 512 KiB (L2 is
  // 2 MiB per core on Sapphire Rapids); NC as in the other families.
  static constexpr std::size_t KC = 1024, MC = 256, NC = 2048;
  static constexpr std::size_t steps(std::size_t kc) { return (kc + 31) / 32; }
  static constexpr std::size_t A_PANEL = (KC + 31) / 32 * 512;  // words of one A micro-panel
  static constexpr std::size_t b_panel(std::size_t kc) { return steps(kc) * 512; }

  // The tiles (s, h) of a micro-panel (`valid` of its 32 rows or columns hold data): zero where
  // its 16 rows or columns h are all padding, else fill(h, s, n valid, tile).
  template <class F>
  static void for_tiles(std::size_t valid, std::size_t ns, std::uint32_t* dst, F&& fill) {
    for (std::size_t h = 0; h < 2; ++h) {
      const std::size_t n = valid > 16 * h ? std::min<std::size_t>(16, valid - 16 * h) : 0;
      for (std::size_t s = 0; s < ns; ++s) {
        std::uint32_t* d = dst + (2 * s + h) * 256;
        if (n == 0) {
          for (std::size_t q = 0; q < 16; ++q) _mm512_store_si512(d + q * 16, _mm512_setzero_si512());
        } else {
          fill(h, s, n, d);
        }
      }
    }
  }

  template <class S>
  static void pack_a(bool transposed, const S* A, std::size_t lda, std::size_t i0, std::size_t mc, std::size_t p0,
                     std::size_t kc, std::uint32_t* __restrict dst) {
    const std::size_t ns = steps(kc);
    for (std::size_t ip = 0; ip < mc; ip += MR, dst += A_PANEL) {
      const std::size_t mr = std::min(MR, mc - ip);
      if (!transposed) {
        // Row i of op(A) is stored row i: 32 consecutive k are one tile row of 16 pairs.
        for (std::size_t row = 0; row < MR; ++row) {
          std::uint32_t* d = dst + (row / 16) * 256 + (row % 16) * 16;
          if (row < mr) {
            const S* src = A + (i0 + ip + row) * lda + p0;
            for (std::size_t s = 0; s < ns; ++s) _mm512_store_si512(d + s * 512, gemm_bf16_row32(src + 32 * s, kc - 32 * s));
          } else {
            for (std::size_t s = 0; s < ns; ++s) _mm512_store_si512(d + s * 512, _mm512_setzero_si512());
          }
        }
        continue;
      }
      // op(A)(i, k) = A[k * lda + i]: stored rows 2q, 2q + 1 interleaved give pair q of 16 rows
      // (one tile column), transposed into tile rows.
      alignas(64) std::uint32_t tile[256];
      for_tiles(mr, ns, dst, [&](std::size_t u, std::size_t s, std::size_t n, std::uint32_t* d) {
        amx_pair_rows(A + (p0 + 32 * s) * lda + i0 + ip + 16 * u, lda, n, kc - 32 * s, tile);
        amx_transpose_tile(tile, d);
      });
    }
  }

  template <class S>
  static void pack_b(bool transposed, const S* B, std::size_t ldb, std::size_t p0, std::size_t kc, std::size_t j0,
                     std::size_t nc, std::uint32_t* __restrict dst) {
    amx_configure();  // for the micro-kernels that follow on this thread (above)
    const std::size_t ns = steps(kc);
    alignas(64) std::uint32_t tile[256];
    for (std::size_t jp = 0; jp < nc; jp += NR, dst += b_panel(kc)) {
      const std::size_t nr = std::min(NR, nc - jp);
      for_tiles(nr, ns, dst, [&](std::size_t v, std::size_t s, std::size_t n, std::uint32_t* d) {
        if (!transposed) {
          // op(B)(k, j) = B[k * ldb + j]: rows 2q and 2q + 1 interleaved are tile row q.
          amx_pair_rows(B + (p0 + 32 * s) * ldb + j0 + jp + 16 * v, ldb, n, kc - 32 * s, d);
        } else {
          // op(B)(k, j) = B[j * ldb + k]: stored row j converted is column j's 16 pairs.
          const S* src = B + (j0 + jp + 16 * v) * ldb + p0 + 32 * s;
          for (std::size_t j = 0; j < 16; ++j)
            _mm512_store_si512(tile + j * 16, j < n ? gemm_bf16_row32(src + j * ldb, kc - 32 * s) : _mm512_setzero_si512());
          amx_transpose_tile(tile, d);
        }
      });
    }
  }

  // C[0:mr, 0:nr] (through the epilogue) of the 32 x 32 product of an A and a B micro-panel.
  static void micro_kernel(std::size_t kc, const std::uint32_t* __restrict a, const std::uint32_t* __restrict b,
                           float* c, std::size_t ldc, std::size_t mr, std::size_t nr, const gemm_epilogue& ep) {
    // The tiles are configured by pack_b of this panel (the driver packs B on this thread first).
    const std::size_t ns = steps(kc);
    const std::size_t ldc_bytes = ldc * sizeof(float);
    // Whole tiles with alpha = 1 and no bias: the accumulators start from C (beta = 1) or zero
    // (beta = 0, C not read) and are stored straight into C.
    const bool direct = mr == MR && nr == NR && ep.alpha == 1.0f && !ep.bias && (ep.beta == 0.0f || ep.beta == 1.0f);
    // The rows of C this tile writes, for writing (a C much larger than the caches, such as the
    // logits, otherwise stalls the tile stores on 64 cache misses).
    for (std::size_t r = 0; r < mr; ++r) {
      __builtin_prefetch(c + r * ldc, 1, 3);
      __builtin_prefetch(c + r * ldc + 16, 1, 3);
    }
    if (direct && ep.beta == 1.0f) {
      _tile_loadd(0, c, ldc_bytes);
      _tile_loadd(1, c + 16, ldc_bytes);
      _tile_loadd(2, c + 16 * ldc, ldc_bytes);
      _tile_loadd(3, c + 16 * ldc + 16, ldc_bytes);
    } else {
      _tile_zero(0);
      _tile_zero(1);
      _tile_zero(2);
      _tile_zero(3);
    }
    for (std::size_t s = 0; s < ns; ++s, a += 512, b += 512) {
      _tile_loadd(4, a, 64);
      _tile_loadd(6, b, 64);
      _tile_dpbf16ps(0, 4, 6);
      _tile_loadd(7, b + 256, 64);
      _tile_dpbf16ps(1, 4, 7);
      _tile_loadd(5, a + 256, 64);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
    if (direct) {
      _tile_stored(0, c, ldc_bytes);
      _tile_stored(1, c + 16, ldc_bytes);
      _tile_stored(2, c + 16 * ldc, ldc_bytes);
      _tile_stored(3, c + 16 * ldc + 16, ldc_bytes);
      return;
    }
    alignas(64) float acc[MR * NR];
    _tile_stored(0, acc, NR * sizeof(float));
    _tile_stored(1, acc + 16, NR * sizeof(float));
    _tile_stored(2, acc + 16 * NR, NR * sizeof(float));
    _tile_stored(3, acc + 16 * NR + 16, NR * sizeof(float));
    const __m512 alpha = _mm512_set1_ps(ep.alpha), beta = _mm512_set1_ps(ep.beta);
    for (std::size_t v = 0; v < 2; ++v) {
      const std::size_t n = nr > 16 * v ? std::min<std::size_t>(16, nr - 16 * v) : 0;
      if (n == 0) break;
      const __mmask16 m = n == 16 ? __mmask16(0xffff) : __mmask16((1u << n) - 1u);
      const __m512 bias = ep.bias ? _mm512_maskz_loadu_ps(m, ep.bias + 16 * v) : _mm512_setzero_ps();
      for (std::size_t r = 0; r < mr; ++r) {
        float* cr = c + r * ldc + 16 * v;
        __m512 x = _mm512_mul_ps(_mm512_load_ps(acc + r * NR + 16 * v), alpha);
        if (ep.beta != 0.0f) x = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, cr), beta, x);
        _mm512_mask_storeu_ps(cr, m, _mm512_add_ps(x, bias));
      }
    }
  }

  using kernel_fn = void (*)(std::size_t, const std::uint32_t*, const std::uint32_t*, float*, std::size_t,
                             std::size_t, std::size_t, const gemm_epilogue&);
  static kernel_fn kernel(bool) { return &micro_kernel; }
};

// Seconds for `iters` rounds of 4 independent TDPBF16PS on the calling thread, each 16 rows x
// n fp32 columns x depth k bf16 (k even, <= 32; n <= 16; 16 x 16 x 32 the full tile): the AMX
// throughput bound (benchmarks' peak probe; smaller shapes show what a 16 x 8 or 16 x 4 block
// would get from one instruction). Needs amx_status().usable.
[[gnu::noinline]] inline double amx_probe_seconds(long iters, int k = 32, int n = 16) {
  amx_tile_config cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.rows[t] = std::uint8_t(t >= 6 ? k / 2 : 16);
    cfg.colsb[t] = std::uint16_t(t >= 4 && t < 6 ? 2 * k : 4 * n);
  }
  amx_configure(cfg);
  // Ordinary bf16 values (pairs of numbers in [0.5, 1)) rather than zeros, in case a CPU runs
  // zeros faster (the Xeon host does not: 3371 GFLOP/s either way on one thread).
  alignas(64) std::uint32_t data[4][256];
  for (std::uint32_t t = 0; t < 4; ++t)
    for (std::uint32_t i = 0; i < 256; ++i) {
      const std::uint32_t m = (i * 37u + t * 11u) & 0x7fu;  // 7 mantissa bits
      data[t][i] = (0x3f00u | m) | ((0x3f00u | (m ^ 0x55u)) << 16);
    }
  _tile_loadd(4, data[0], 64);
  _tile_loadd(5, data[1], 64);
  _tile_loadd(6, data[2], 64);
  _tile_loadd(7, data[3], 64);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  const auto t0 = std::chrono::steady_clock::now();
  for (long i = 0; i < iters; ++i) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  alignas(64) float out[4][256];
  _tile_stored(0, out[0], 64);  // waits for the chains
  _tile_stored(1, out[1], 64);
  _tile_stored(2, out[2], 64);
  _tile_stored(3, out[3], 64);
  const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  volatile float sink = out[0][0] + out[1][0] + out[2][0] + out[3][0];
  (void)sink;
  return sec;
}

// TDPBF16PS throughput in GFLOP/s on `threads` threads (each a 16 x n x k multiply-add, by default
// 16 x 16 x 32 = 16384 flops): the best of 5 timed runs of about 1 ms per thread. Needs
// amx_status().usable.
inline double amx_peak_gflops(int threads, int k = 32, int n = 16) {
#if !defined(_OPENMP)
  threads = 1;
#endif
  constexpr long iters = 1L << 14;
  double best = 1e30;
  for (int r = 0; r < 6; ++r) {
    double slowest = 0;
#if defined(_OPENMP)
#pragma omp parallel num_threads(threads) reduction(max : slowest)
#endif
    slowest = std::max(slowest, amx_probe_seconds(iters, k, n));
    if (r > 0) best = std::min(best, slowest);  // the first run warms up the unit
  }
  return double(threads) * double(iters) * 4.0 * 2.0 * 16.0 * double(k) * double(n) / best * 1e-9;
}

#else  // !SPARSELM_GEMM_AMX

inline const amx_availability& amx_status() {
  static const amx_availability s{false, "this build has no AMX (compile with -march=native on a CPU with AMX-BF16)"};
  return s;
}

inline double amx_peak_gflops(int, int = 32, int = 16) { return 0.0; }

#endif  // SPARSELM_GEMM_AMX

}  // namespace sparselm::kernels::detail
