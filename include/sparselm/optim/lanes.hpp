#pragma once
// The element-wise machinery of the optimisers (namespace detail; the layout-level part, segments
// and slot arenas, is optim/engine.hpp): a SIMD lane driver that runs one generic lambda over
// float streams, deterministic sums of squares, and the conversions of bf16/half slots.
//
// Memory traffic. An update reads params, grads and slots once and writes params and slots
// once. Slots stored as bf16/half are converted to float in blocks of `block_elems` that stay in
// L1, and rounded back to nearest even after the block is done.

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <tuple>
#include <type_traits>
#include <utility>

#include "sparselm/core/dtype.hpp"
#include "sparselm/core/simd.hpp"
#include "sparselm/optim/concepts.hpp"

namespace sparselm::optim::detail {

inline constexpr std::size_t block_elems = 512;  // slot conversion and norm flush unit

// ---- SIMD lanes -------------------------------------------------------------------------------

inline float vsqrt(float x) noexcept { return std::sqrt(x); }
template <class A>
xsimd::batch<float, A> vsqrt(const xsimd::batch<float, A>& x) noexcept {
  return xsimd::sqrt(x);
}

template <class V, class P>
V load_lane(P* p, std::size_t i) noexcept {
  if constexpr (std::is_same_v<V, float>)
    return p[i];
  else
    return V::load_unaligned(p + i);
}
template <class V, class P>
void store_lane(P* p, std::size_t i, const V& v) noexcept {
  if constexpr (!std::is_const_v<P>) {
    if constexpr (std::is_same_v<V, float>)
      p[i] = v;
    else
      v.store_unaligned(p + i);
  }
}
template <class V, class F, class Ptrs, std::size_t... K>
void lane_at(std::size_t i, F& f, const Ptrs& p, std::index_sequence<K...>) {
  std::tuple<decltype(load_lane<V>(std::get<K>(p), i))...> v{load_lane<V>(std::get<K>(p), i)...};
  f(std::get<K>(v)...);
  (store_lane(std::get<K>(p), i, std::get<K>(v)), ...);
}

// Calls f(x0&, x1&, ...) on n lanes: simd<float, Arch>::size at a time, then one float at a time
// for the tail, so f is written once as a generic lambda. Streams passed as `float*` are stored
// back; `const float*` streams are only read.
template <class Arch, class F, class... P>
void lanes(std::size_t n, F&& f, P*... p) {
  using B = simd<float, Arch>;
  constexpr std::size_t W = B::size;
  auto ptrs = std::make_tuple(p...);
  auto seq = std::index_sequence_for<P...>{};
  std::size_t i = 0;
  for (; i + W <= n; i += W) lane_at<B>(i, f, ptrs, seq);
  for (; i < n; ++i) lane_at<float>(i, f, ptrs, seq);
}

// Sum of squares over lanes, flushed to double once per block (call flush() after each block).
template <class Arch>
struct square_sum {
  simd<float, Arch> lanes = simd<float, Arch>(0.0f);  // not {0.0f}: that is the initializer-list constructor
  float tail = 0.0f;
  double total = 0.0;
  void add(const simd<float, Arch>& x) noexcept { lanes = xsimd::fma(x, x, lanes); }
  void add(float x) noexcept { tail += x * x; }
  void flush() noexcept {
    total += double(xsimd::hadd(lanes)) + double(tail);
    lanes = simd<float, Arch>(0.0f);
    tail = 0.0f;
  }
};

// Σ x² over [x, x + n): float lanes per block, double across blocks; a block whose float sum
// overflows is summed again in double. Deterministic for a given n and Arch.
template <class Arch = native_arch>
double sum_squares(const float* x, std::size_t n) {
  double total = 0.0;
  for (std::size_t b = 0; b < n; b += block_elems) {
    std::size_t len = std::min(block_elems, n - b);
    square_sum<Arch> acc;
    lanes<Arch>(
        len, [&](auto& v) { acc.add(v); }, x + b);
    acc.flush();
    if (!std::isfinite(acc.total)) {
      double s = 0.0;
      for (std::size_t i = 0; i < len; ++i) s += double(x[b + i]) * double(x[b + i]);
      acc.total = s;
    }
    total += acc.total;
  }
  return total;
}

// ---- finiteness of what an update writes --------------------------------------------------------

// Watches the values an update writes, inside its lane lambda (no extra pass over memory): ok()
// stays true while every value checked is at most its limit in magnitude (a NaN fails the check).
// The limit is the largest value that its storage keeps finite (storable_limit below).
template <class Arch>
struct finite_watch {
  xsimd::batch_bool<float, Arch> bad = xsimd::batch_bool<float, Arch>(false);
  bool bad_tail = false;
  void check(const simd<float, Arch>& x, float limit) noexcept {
    bad = bad | !(xsimd::abs(x) <= simd<float, Arch>(limit));
  }
  void check(float x, float limit) noexcept { bad_tail = bad_tail || !(std::fabs(x) <= limit); }
  bool ok() const noexcept { return !bad_tail && !xsimd::any(bad); }
};


// Branch-free conversions that the compiler vectorises (the scalar half conversions in
// core/dtype.hpp branch per value, which makes a half-slot update compute bound). Results are
// bit-identical to half::to_float / half::from_float (round to nearest even, subnormals, NaN
// quieted, overflow to infinity); tests/optim check that.
inline float half_to_float_fast(std::uint16_t h) noexcept {
  const std::uint32_t sign = std::uint32_t(h & 0x8000u) << 16;
  const std::uint32_t em = h & 0x7fffu;
  const std::uint32_t normal = (em << 13) + (112u << 23);  // rebias exponent
  const std::uint32_t sub = std::bit_cast<std::uint32_t>(float(std::int32_t(em)) * 5.9604644775390625e-08f);
  const std::uint32_t is_sub = 0u - std::uint32_t(em < 0x0400u);       // all ones or zero
  const std::uint32_t is_special = 0u - std::uint32_t(em >= 0x7c00u);  // inf / NaN
  std::uint32_t r = (sub & is_sub) | (normal & ~is_sub);
  r |= is_special & 0x7f800000u;
  return std::bit_cast<float>(r | sign);
}
inline std::uint16_t float_to_half_fast(float f) noexcept {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  const std::uint32_t sign = (u >> 16) & 0x8000u;
  const std::uint32_t a = u & 0x7fffffffu;
  // normal results: rebias, round the 23-bit mantissa to 10 bits (nearest even)
  const std::uint32_t r = a - (112u << 23);
  const std::uint32_t normal = (r + 0xfffu + ((r >> 13) & 1u)) >> 13;
  // subnormal results (|f| < 2^-14): adding 0.5 aligns the half's last mantissa bit with the
  // float's, so the float addition rounds to nearest even; the low bits are then the result
  const std::uint32_t sub = std::bit_cast<std::uint32_t>(std::bit_cast<float>(a) + 0.5f) - 0x3f000000u;
  std::uint32_t h = a < 0x38800000u ? sub : normal;
  h = a >= 0x477ff000u ? 0x7c00u : h;  // overflow and inf
  h = a > 0x7f800000u ? 0x7e00u : h;   // NaN
  return std::uint16_t(h | sign);
}

// Second-moment slots (Adam/LAMB v) stored as half hold sqrt(v) instead of v: v spans twice
// the exponent range of the gradients, which half (normal range 2^-14 .. 2^16) cannot hold —
// for |g| below ~1e-2, v would be subnormal or zero and m/sqrt(v) garbage. sqrt(v) has the
// range of |g|. The slot is then named "sqrt_v" in the optimiser state. float and bf16 store v.
template <storage_type S>
inline constexpr bool store_sqrt_v = std::is_same_v<S, half>;

// Float values of n slots of type S, and back (nearest even). Sqrt: the slot holds sqrt(value).
template <storage_type S, bool Sqrt = false>
void slots_to_float(const S* src, float* dst, std::size_t n) noexcept {
  if constexpr (std::is_same_v<S, half>)
    for (std::size_t i = 0; i < n; ++i) dst[i] = half_to_float_fast(src[i].bits);
  else
    for (std::size_t i = 0; i < n; ++i) dst[i] = to_float(src[i]);
  if constexpr (Sqrt)
    for (std::size_t i = 0; i < n; ++i) dst[i] *= dst[i];
}
template <storage_type S, bool Sqrt = false>
void float_to_slots(const float* src, S* dst, std::size_t n) noexcept {
  if constexpr (Sqrt) {
    // through a small buffer: std::sqrt's errno path would keep the conversion loop scalar
    alignas(64) float root[64];
    for (std::size_t b = 0; b < n; b += 64) {
      std::size_t len = std::min<std::size_t>(64, n - b);
      lanes<native_arch>(
          len, [](auto& r, auto& x) { r = vsqrt(x); }, root, src + b);
      float_to_slots<S, false>(root, dst + b, len);
    }
  } else if constexpr (std::is_same_v<S, half>) {
    for (std::size_t i = 0; i < n; ++i) dst[i].bits = float_to_half_fast(src[i]);
  } else {
    for (std::size_t i = 0; i < n; ++i) dst[i] = from_float<S>(src[i]);
  }
}

// The largest float value that a slot of type S stores as a finite number (rounded to nearest
// even: bf16 overflows from 0x7f7f8000, half from 65520); for a slot holding the square root of
// its value (Sqrt), the largest value whose square root stores finite.
template <storage_type S, bool Sqrt = false>
float storable_limit() noexcept {
  if constexpr (Sqrt) {
    static const float limit = [] {
      const float root = storable_limit<S, false>();
      float v = float(double(root) * double(root));
      while (std::sqrt(v) > root) v = std::nextafter(v, 0.0f);
      while (std::sqrt(std::nextafter(v, HUGE_VALF)) <= root) v = std::nextafter(v, HUGE_VALF);
      return v;
    }();
    return limit;
  } else if constexpr (std::is_same_v<S, half>) {
    return std::bit_cast<float>(0x477fefffu);
  } else if constexpr (std::is_same_v<S, bf16>) {
    return std::bit_cast<float>(0x7f7f7fffu);
  } else {
    return std::numeric_limits<float>::max();
  }
}

// Bit k of SqrtMask: slot k holds the square root of its value (only used with store_sqrt_v).
template <std::size_t SqrtMask, std::size_t K>
inline constexpr bool sqrt_slot = ((SqrtMask >> K) & 1u) != 0;

// Rounds float slot values to what storing them as S gives back, in place (no-op for float).
template <storage_type S, bool Sqrt = false>
void round_trip(float* p, std::size_t n) noexcept {
  if constexpr (!std::is_same_v<S, float>) {
    S tmp[block_elems];
    for (std::size_t b = 0; b < n; b += block_elems) {
      std::size_t len = std::min(block_elems, n - b);
      float_to_slots<S, Sqrt>(p + b, tmp, len);
      slots_to_float<S, Sqrt>(tmp, p + b, len);
    }
  }
}

// Calls body(off, len, std::array<float*, N> s) over consecutive blocks of [0, n), where s[k]
// points at the float values of slot k for element `off`: the slot memory itself for float
// slots, a converted copy for bf16/half slots that is rounded back (nearest even) afterwards
// unless WriteBack is false. SqrtMask marks slots stored as square roots.
template <storage_type S, std::size_t N, bool WriteBack = true, std::size_t SqrtMask = 0, class Body>
void with_slots(std::size_t n, const std::array<S*, N>& base, Body&& body) {
  for (std::size_t off = 0; off < n; off += block_elems) {
    std::size_t len = std::min(block_elems, n - off);
    if constexpr (std::is_same_v<S, float>) {
      std::array<float*, N> s;
      for (std::size_t k = 0; k < N; ++k) s[k] = base[k] + off;
      body(off, len, s);
    } else {
      alignas(64) float buf[N == 0 ? 1 : N][block_elems];
      std::array<float*, N> s;
      [&]<std::size_t... K>(std::index_sequence<K...>) {
        ((s[K] = buf[K], slots_to_float<S, sqrt_slot<SqrtMask, K>>(base[K] + off, buf[K], len)), ...);
      }
      (std::make_index_sequence<N>{});
      body(off, len, s);
      if constexpr (WriteBack) [&]<std::size_t... K>(std::index_sequence<K...>) {
          (float_to_slots<S, sqrt_slot<SqrtMask, K>>(buf[K], base[K] + off, len), ...);
        }
      (std::make_index_sequence<N>{});
    }
  }
}

}  // namespace sparselm::optim::detail
