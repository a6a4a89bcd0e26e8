#pragma once
// Counter-based random numbers (Philox4x32-10, Salmon et al., SC'11).
//
// A value is a pure function of (seed, stream, index): no state advances, so dropout masks,
// initialisation and sampling give the same numbers whatever the thread count or the order in
// which threads visit the elements. Streams separate uses (e.g. layer l's dropout at step t is
// stream = mix(l, t)); indices address elements within a stream.
//
//   sparselm::counter_rng rng(1234);                 // the seed
//   float u = rng.uniform(stream, i);                // in [0, 1)
//   std::uint64_t k = rng.below(stream, i, vocab);   // in [0, vocab)

#include <array>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <span>

namespace sparselm {

// Philox4x32 with 10 rounds: 128-bit counter, 64-bit key -> 128 random bits.
constexpr std::array<std::uint32_t, 4> philox4x32(std::array<std::uint32_t, 4> ctr, std::array<std::uint32_t, 2> key) noexcept {
  constexpr std::uint32_t m0 = 0xD2511F53u, m1 = 0xCD9E8D57u;
  constexpr std::uint32_t w0 = 0x9E3779B9u, w1 = 0xBB67AE85u;
  for (int r = 0; r < 10; ++r) {
    std::uint64_t p0 = std::uint64_t(m0) * ctr[0];
    std::uint64_t p1 = std::uint64_t(m1) * ctr[2];
    ctr = {std::uint32_t(p1 >> 32) ^ ctr[1] ^ key[0], std::uint32_t(p1), std::uint32_t(p0 >> 32) ^ ctr[3] ^ key[1],
           std::uint32_t(p0)};
    key[0] += w0;
    key[1] += w1;
  }
  return ctr;
}

// Mixes two 64-bit values into one stream id (splitmix64 finaliser on a combination).
constexpr std::uint64_t mix_stream(std::uint64_t a, std::uint64_t b) noexcept {
  std::uint64_t z = a * 0x9E3779B97F4A7C15ull + b + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// A keyed generator. `bits(stream, i)` is the i-th 32-bit word of a stream; words come in groups
// of four from one Philox block, so filling consecutive indices costs one block per four values.
class counter_rng {
 public:
  constexpr explicit counter_rng(std::uint64_t seed = 0) noexcept : key_{std::uint32_t(seed), std::uint32_t(seed >> 32)} {}

  constexpr std::uint64_t seed() const noexcept { return std::uint64_t(key_[0]) | (std::uint64_t(key_[1]) << 32); }

  constexpr std::array<std::uint32_t, 4> block(std::uint64_t stream, std::uint64_t blk) const noexcept {
    return philox4x32({std::uint32_t(blk), std::uint32_t(blk >> 32), std::uint32_t(stream), std::uint32_t(stream >> 32)},
                      key_);
  }
  constexpr std::uint32_t bits(std::uint64_t stream, std::uint64_t i) const noexcept { return block(stream, i >> 2)[i & 3]; }

  // Uniform in [0, 1) with 24 bits of resolution.
  static constexpr float to_unit(std::uint32_t b) noexcept { return float(b >> 8) * (1.0f / 16777216.0f); }
  constexpr float uniform(std::uint64_t stream, std::uint64_t i) const noexcept { return to_unit(bits(stream, i)); }

  // Standard normal by Box–Muller on the block's first two words (index i uses block i).
  float normal(std::uint64_t stream, std::uint64_t i) const noexcept {
    auto b = block(stream, i);
    float u1 = (float(b[0] >> 8) + 1.0f) * (1.0f / 16777216.0f);  // (0, 1]
    float u2 = to_unit(b[1]);
    return std::sqrt(-2.0f * std::log(u1)) * std::cos(2.0f * std::numbers::pi_v<float> * u2);
  }

  // Uniform integer in [0, n) (n > 0), 64-bit multiply-shift on two words (bias < 2^-32).
  constexpr std::uint64_t below(std::uint64_t stream, std::uint64_t i, std::uint64_t n) const noexcept {
    auto b = block(stream, i);
    std::uint64_t r = std::uint64_t(b[0]) | (std::uint64_t(b[1]) << 32);
    return std::uint64_t((static_cast<unsigned __int128>(r) * n) >> 64);
  }

  // out[j] = uniform(stream, first + j)
  void fill_uniform(std::span<float> out, std::uint64_t stream, std::uint64_t first = 0) const noexcept {
    for (std::size_t j = 0; j < out.size(); ++j) out[j] = uniform(stream, first + j);
  }
  // out[j] = mean + stddev * normal(stream, first + j)
  void fill_normal(std::span<float> out, std::uint64_t stream, float mean, float stddev, std::uint64_t first = 0) const noexcept {
    for (std::size_t j = 0; j < out.size(); ++j) out[j] = mean + stddev * normal(stream, first + j);
  }

 private:
  std::array<std::uint32_t, 2> key_;
};

}  // namespace sparselm
