#pragma once
// Owning tensors: xtensor containers over 64-byte aligned storage.
//
//   sparselm::tensor<float, 2> x({B * T, C});   // aligned, row-major, fixed rank
//   sparselm::array<float> y;                   // dynamic rank
//   auto v = sparselm::view_of(x);              // matrix_view<float> for the kernels

#include <cstddef>
#include <span>

#include <xtensor/xarray.hpp>
#include <xtensor/xtensor.hpp>
#include <xtensor/xadapt.hpp>

#include "sparselm/core/dtype.hpp"
#include "sparselm/core/error.hpp"
#include "sparselm/core/simd.hpp"
#include "sparselm/core/view.hpp"

namespace sparselm {

inline constexpr std::size_t alignment = 64;  // bytes: one cache line, one AVX-512 register

template <class T>
using aligned_allocator = xsimd::aligned_allocator<T, alignment>;

template <class T>
using aligned_vector = xt::uvector<T, aligned_allocator<T>>;

// Fixed-rank, row-major, 64-byte aligned tensor.
template <class T, std::size_t N>
using tensor = xt::xtensor_container<aligned_vector<T>, N, xt::layout_type::row_major>;

// Dynamic-rank, row-major, 64-byte aligned tensor.
template <class T>
using array = xt::xarray_container<aligned_vector<T>, xt::layout_type::row_major>;

// Matrix view of a rank-2 tensor.
template <class T>
matrix_view<T> view_of(tensor<T, 2>& t) noexcept {
  return {t.data(), t.shape()[0], t.shape()[1], t.shape()[1]};
}
template <class T>
matrix_view<const T> view_of(const tensor<T, 2>& t) noexcept {
  return {t.data(), t.shape()[0], t.shape()[1], t.shape()[1]};
}

// Flat span over any contiguous tensor.
template <class E>
auto span_of(E& t) noexcept {
  return std::span(t.data(), t.size());
}

}  // namespace sparselm
