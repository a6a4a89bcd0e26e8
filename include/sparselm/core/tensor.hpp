#pragma once
// 64-byte aligned storage for buffers the kernels read (scratch, caches):
//
//   sparselm::aligned_vector<float> x(n);       // zero-initialised, data() 64-byte aligned
//   std::span<float> s = sparselm::span_of(x);
//
// The owning xtensor types over the same storage (sparselm::tensor<T, N>, sparselm::array<T>) are in
// sparselm/interop/xtensor.hpp: xtensor stays at the user's boundary, so a translation unit that
// does not use it does not parse it.

#include <cstddef>
#include <span>
#include <vector>

#include "sparselm/core/dtype.hpp"
#include "sparselm/core/error.hpp"
#include "sparselm/core/simd.hpp"
#include "sparselm/core/view.hpp"

namespace sparselm {

inline constexpr std::size_t alignment = 64;  // bytes: one cache line, one AVX-512 register

template <class T>
using aligned_allocator = xsimd::aligned_allocator<T, alignment>;

template <class T>
using aligned_vector = std::vector<T, aligned_allocator<T>>;

// Flat span over any contiguous tensor.
template <class E>
auto span_of(E& t) noexcept {
  return std::span(t.data(), t.size());
}

}  // namespace sparselm
