#pragma once
// 64-byte aligned storage for buffers the kernels read (scratch, caches):
//
//   sparselm::aligned_vector<float> x(n);       // zero-initialised, data() 64-byte aligned
//   std::span<float> s = sparselm::span_of(x);
//
// The owning xtensor types over the same storage (sparselm::tensor<T, N>, sparselm::array<T>) are in
// sparselm/interop/xtensor.hpp: xtensor stays at the user's boundary, so a translation unit that
// does not use it does not parse it.

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <limits>
#include <new>
#include <span>
#include <vector>

#include "sparselm/core/dtype.hpp"
#include "sparselm/core/error.hpp"
#include "sparselm/core/huge_pages.hpp"
#include "sparselm/core/simd.hpp"
#include "sparselm/core/view.hpp"

namespace sparselm {

inline constexpr std::size_t alignment = 64;  // bytes: one cache line, one AVX-512 register

// The allocator of aligned_vector: 64-byte aligned blocks; a large one (an activation buffer) is
// advised to use huge pages (core/huge_pages.hpp), as the arenas are.
template <class T>
struct aligned_allocator {
  using value_type = T;
  aligned_allocator() noexcept = default;
  template <class U>
  aligned_allocator(const aligned_allocator<U>&) noexcept {}
  template <class U>
  struct rebind {
    using other = aligned_allocator<U>;
  };
  T* allocate(std::size_t n) {
    if (n > (std::numeric_limits<std::size_t>::max() - alignment) / sizeof(T)) throw std::bad_array_new_length();
    const std::size_t bytes = (std::max<std::size_t>(n * sizeof(T), 1) + alignment - 1) / alignment * alignment;
    void* p = std::aligned_alloc(alignment, bytes);
    if (p == nullptr) throw std::bad_alloc();
    detail::advise_huge_pages(p, bytes);
    return static_cast<T*>(p);
  }
  void deallocate(T* p, std::size_t) noexcept { std::free(p); }
  template <class U>
  bool operator==(const aligned_allocator<U>&) const noexcept {
    return true;
  }
};

template <class T>
using aligned_vector = std::vector<T, aligned_allocator<T>>;

// Flat span over any contiguous tensor.
template <class E>
auto span_of(E& t) noexcept {
  return std::span(t.data(), t.size());
}

}  // namespace sparselm
