// How fast the B = 16 forward's panel packing can read X, by the order of its reads: every 24-row
// panel of a 4096-row X (K floats a row, rows contiguous) copied into one 24 x K scratch panel in
// the row-major block-row layout of `pack_row_panel` (kernels/detail/bsr_matmul.hpp), X evicted
// from the caches before each pass (a 64 MiB memset). Orders:
//   block-row  per block row, the 24 rows' 16 floats (24 read streams; pack_row_panel until 30 Nov 2026)
//   row        per row, its K floats in order (one read stream, writes 24*16 floats apart; pack_row_panel now)
//   row+pfN    row order with a software prefetch N floats ahead of each read
//   memcpy     the panel's 24*K contiguous floats copied as they are (the lower bound)
// Median of 7 passes, one thread; GB/s = bytes of X read / time. An experiment, not a benchmark
// target (benchmarks/results/2026-11-30-zen5-sparsity.md, "Zen 5 host, 30 Nov 2026 late morning"). Not built by CMake:
//
//   g++ -std=c++20 -O3 -march=native -DNDEBUG benchmarks/experiments/panel_pack_order.cpp -o panel_pack_order
//   ./panel_pack_order [K = 768] [rounds = 3]
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

constexpr std::size_t MR = 24, B = 16, M = 4096;

float* aligned_floats(std::size_t n) {
  return static_cast<float*>(std::aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64));
}

void pack_block_rows(const float* src, std::size_t K, float* dst) {
  for (std::size_t kb = 0; kb < K / B; ++kb, dst += MR * B)
    for (std::size_t r = 0; r < MR; ++r) std::memcpy(dst + r * B, src + r * K + kb * B, B * sizeof(float));
}

template <std::size_t Ahead>
void pack_rows(const float* src, std::size_t K, float* dst) {
  for (std::size_t r = 0; r < MR; ++r)
    for (std::size_t kb = 0; kb < K / B; ++kb) {
      // Past the last panel the address is outside X: a prefetch does not fault, and the address is
      // formed as an integer so that no pointer leaves its array.
      if constexpr (Ahead > 0)
        __builtin_prefetch(reinterpret_cast<const void*>(reinterpret_cast<std::uintptr_t>(src + r * K + kb * B) +
                                                         Ahead * sizeof(float)),
                           0, 3);
      std::memcpy(dst + kb * MR * B + r * B, src + r * K + kb * B, B * sizeof(float));
    }
}

void pack_memcpy(const float* src, std::size_t K, float* dst) { std::memcpy(dst, src, MR * K * sizeof(float)); }

}  // namespace

int main(int argc, char** argv) {
  const std::size_t K = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 768;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 3;
  if (K == 0 || K % B != 0 || rounds < 1) {
    std::fprintf(stderr, "panel_pack_order: K must be a positive multiple of %zu, rounds >= 1\n", B);
    return 2;
  }
  float* X = aligned_floats(M * K);
  for (std::size_t i = 0; i < M * K; ++i) X[i] = float(i % 1000) * 1e-3f;
  float* P = aligned_floats(MR * K);
  const std::size_t flush_bytes = std::size_t(64) << 20;
  char* flush = static_cast<char*>(std::aligned_alloc(64, flush_bytes));
  struct variant {
    const char* name;
    void (*pack)(const float*, std::size_t, float*);
  };
  const variant variants[] = {{"block-row", pack_block_rows},
                              {"row", pack_rows<0>},
                              {"row+pf256", pack_rows<256>},
                              {"row+pf1024", pack_rows<1024>},
                              {"memcpy", pack_memcpy}};
  const std::size_t npan = M / MR;
  double check = 0;
  std::printf("K = %zu, %zu panels of %zu rows, one thread, median of 7 passes\n", K, npan, MR);
  for (int round = 0; round < rounds; ++round)
    for (const variant& v : variants) {
      std::vector<double> t;
      for (int rep = 0; rep < 7; ++rep) {
        std::memset(flush, rep + 1, flush_bytes);
        const auto t0 = std::chrono::steady_clock::now();
        for (std::size_t p = 0; p < npan; ++p) {
          v.pack(X + p * MR * K, K, P);
          asm volatile("" : : "r"(P) : "memory");
        }
        t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        check += P[(rep * 97) % (MR * K)];
      }
      std::sort(t.begin(), t.end());
      const double s = t[t.size() / 2];
      std::printf("round %d  %-11s %7.3f ms  %5.1f GB/s\n", round + 1, v.name, s * 1e3,
                  double(npan * MR * K * sizeof(float)) / s / 1e9);
    }
  std::printf("(checksum %.3f)\n", check);
  std::free(flush);
  std::free(P);
  std::free(X);
}
