#pragma once
// Storage types: float, bfloat16 and IEEE half.
//
// bf16 and half are 16-bit storage types; arithmetic happens in float. Conversions from float
// round to nearest, ties to even (NaN stays NaN, overflow goes to infinity); a stochastic variant
// rounds up with probability equal to the distance from the lower neighbour, given 32 random bits.

#include <bit>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <limits>
#include <string_view>

namespace sparselm {

struct bf16 {
  std::uint16_t bits = 0;

  bf16() = default;
  static constexpr bf16 from_bits(std::uint16_t b) noexcept { bf16 r; r.bits = b; return r; }
  explicit bf16(float f) noexcept : bits(from_float(f)) {}
  explicit operator float() const noexcept { return std::bit_cast<float>(std::uint32_t(bits) << 16); }

  // Round to nearest even.
  static constexpr std::uint16_t from_float(float f) noexcept {
    std::uint32_t u = std::bit_cast<std::uint32_t>(f);
    if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0)
      return std::uint16_t((u >> 16) | 0x0040u);  // quiet NaN, keep sign
    std::uint32_t lsb = (u >> 16) & 1u;
    u += 0x7fffu + lsb;
    return std::uint16_t(u >> 16);
  }
  // Stochastic rounding: adds 16 random bits below the kept mantissa, then truncates.
  static constexpr std::uint16_t from_float_stochastic(float f, std::uint32_t random) noexcept {
    std::uint32_t u = std::bit_cast<std::uint32_t>(f);
    if ((u & 0x7f800000u) == 0x7f800000u)  // inf or NaN: nearest-even handles both
      return from_float(f);
    std::uint32_t r = u + (random & 0xffffu);
    if ((r & 0x7f800000u) == 0x7f800000u && (u & 0x7f800000u) != 0x7f800000u) {
      // rounding up crossed into inf: only allowed where nearest-even would also overflow
      return from_float(f);
    }
    return std::uint16_t(r >> 16);
  }
  friend constexpr bool operator==(bf16 a, bf16 b) noexcept { return a.bits == b.bits; }
};

struct half {
  std::uint16_t bits = 0;

  half() = default;
  static constexpr half from_bits(std::uint16_t b) noexcept { half r; r.bits = b; return r; }
  explicit half(float f) noexcept : bits(from_float(f)) {}
  explicit operator float() const noexcept { return to_float(bits); }

  static constexpr float to_float(std::uint16_t h) noexcept {
    std::uint32_t sign = std::uint32_t(h & 0x8000u) << 16;
    std::uint32_t exp = (h >> 10) & 0x1fu;
    std::uint32_t man = h & 0x3ffu;
    if (exp == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (man << 13));  // inf/NaN
    if (exp == 0) {
      // zero or subnormal: value = man * 2^-24, exact in float
      float v = float(man) * 5.9604644775390625e-08f;
      return sign ? -v : v;
    }
    return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (man << 13));
  }

  // Round to nearest even, with subnormals; overflow to infinity.
  static constexpr std::uint16_t from_float(float f) noexcept {
    std::uint32_t u = std::bit_cast<std::uint32_t>(f);
    std::uint16_t sign = std::uint16_t((u >> 16) & 0x8000u);
    std::uint32_t a = u & 0x7fffffffu;
    if (a >= 0x7f800000u)  // inf or NaN
      return std::uint16_t(sign | 0x7c00u | (a > 0x7f800000u ? 0x200u : 0u));
    if (a >= 0x477ff000u) return std::uint16_t(sign | 0x7c00u);  // >= 65520 rounds to inf
    if (a < 0x38800000u) {
      // result is subnormal (or zero): |f| < 2^-14. Shift the implicit-one mantissa into place.
      if (a < 0x33000000u) return sign;  // < 2^-25 rounds to zero (2^-25 itself ties to even 0)
      std::uint32_t e = a >> 23;               // biased float exponent, 102..112
      std::uint32_t m = (a & 0x7fffffu) | 0x800000u;
      std::uint32_t shift = 126u - e;          // so that result = m >> shift in units of 2^-24
      std::uint32_t q = m >> shift;
      std::uint32_t rem = m & ((1u << shift) - 1u);
      std::uint32_t halfway = 1u << (shift - 1u);
      if (rem > halfway || (rem == halfway && (q & 1u))) ++q;
      return std::uint16_t(sign | q);
    }
    // normal: rebias exponent, round mantissa from 23 to 10 bits
    std::uint32_t r = a - (112u << 23);
    std::uint32_t lsb = (r >> 13) & 1u;
    r += 0xfffu + lsb;
    return std::uint16_t(sign | (r >> 13));
  }

  // Stochastic rounding between the two neighbouring halves (probability ∝ proximity).
  static std::uint16_t from_float_stochastic(float f, std::uint32_t random) noexcept {
    if (!std::isfinite(f)) return from_float(f);
    float a = std::fabs(f);
    if (a >= 65520.0f) return from_float(f);
    std::uint16_t sign = std::signbit(f) ? 0x8000u : 0u;
    // lower neighbour in magnitude: truncate toward zero
    std::uint16_t lo = from_float(a);
    if (to_float(lo) > a) --lo;
    float vlo = to_float(lo);
    if (vlo == a) return std::uint16_t(sign | lo);
    float vhi = to_float(std::uint16_t(lo + 1));
    float p = (a - vlo) / (vhi - vlo);
    float u = float(random >> 8) * (1.0f / 16777216.0f);
    return std::uint16_t(sign | (u < p ? lo + 1 : lo));
  }
  friend constexpr bool operator==(half a, half b) noexcept { return a.bits == b.bits; }
};

// The storage types a tensor may hold.
template <class T>
concept storage_type = std::same_as<T, float> || std::same_as<T, bf16> || std::same_as<T, half>;

enum class dtype : std::uint8_t { f32, bf16, f16 };

template <storage_type T>
constexpr dtype dtype_of() noexcept {
  if constexpr (std::same_as<T, float>) return dtype::f32;
  else if constexpr (std::same_as<T, bf16>) return dtype::bf16;
  else return dtype::f16;
}

// Names as used by safetensors ("F32", "BF16", "F16").
constexpr std::string_view dtype_name(dtype d) noexcept {
  switch (d) {
    case dtype::f32: return "F32";
    case dtype::bf16: return "BF16";
    case dtype::f16: return "F16";
  }
  return "?";
}
constexpr std::size_t dtype_size(dtype d) noexcept { return d == dtype::f32 ? 4 : 2; }

inline float to_float(float x) noexcept { return x; }
inline float to_float(bf16 x) noexcept { return float(x); }
inline float to_float(half x) noexcept { return float(x); }

// Converts a float to storage type T with round-to-nearest-even.
template <storage_type T>
inline T from_float(float x) noexcept {
  if constexpr (std::same_as<T, float>) return x;
  else return T(x);
}

// Converts a float to storage type T with stochastic rounding driven by 32 random bits.
template <storage_type T>
inline T from_float_stochastic(float x, std::uint32_t random) noexcept {
  if constexpr (std::same_as<T, float>) return x;
  else return T::from_bits(T::from_float_stochastic(x, random));
}

}  // namespace sparselm
