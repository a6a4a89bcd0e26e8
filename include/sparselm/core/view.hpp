#pragma once
// Non-owning row-major views used by kernels and layers.
//
// A matrix_view is (data, rows, cols, ld) with element (r, c) at data[r*ld + c] and ld >= cols.
// Kernels take views rather than xtensor expressions: the inner loops want raw pointers, and a
// view carries the shape needed for a precise error message.

#include <cstddef>
#include <cstdint>
#include <span>
#include <sstream>
#include <string>
#include <type_traits>

#include "sparselm/core/error.hpp"

namespace sparselm {

template <class T>
struct matrix_view {
  T* data = nullptr;
  std::size_t rows = 0;
  std::size_t cols = 0;
  std::size_t ld = 0;  // leading dimension (row stride, in elements)

  constexpr matrix_view() = default;
  constexpr matrix_view(T* d, std::size_t r, std::size_t c) noexcept : data(d), rows(r), cols(c), ld(c) {}
  constexpr matrix_view(T* d, std::size_t r, std::size_t c, std::size_t l) noexcept
      : data(d), rows(r), cols(c), ld(l) {}

  // A view of const T from a view of T.
  template <class U>
    requires(std::is_same_v<std::remove_const_t<T>, U> && std::is_const_v<T>)
  constexpr matrix_view(const matrix_view<U>& o) noexcept : data(o.data), rows(o.rows), cols(o.cols), ld(o.ld) {}

  constexpr T& operator()(std::size_t r, std::size_t c) const noexcept { return data[r * ld + c]; }
  constexpr T* row(std::size_t r) const noexcept { return data + r * ld; }
  constexpr std::size_t size() const noexcept { return rows * cols; }
  constexpr bool contiguous() const noexcept { return ld == cols || rows <= 1; }

  // Rows [r0, r0+n).
  constexpr matrix_view rows_slice(std::size_t r0, std::size_t n) const noexcept { return {data + r0 * ld, n, cols, ld}; }
  // Columns [c0, c0+n).
  constexpr matrix_view cols_slice(std::size_t c0, std::size_t n) const noexcept { return {data + c0, rows, n, ld}; }
};

template <class T>
using const_matrix_view = matrix_view<const T>;

// "(rows x cols)" or "(rows x cols, ld L)" for messages.
template <class T>
std::string shape_string(const matrix_view<T>& m) {
  std::ostringstream os;
  os << '(' << m.rows << 'x' << m.cols;
  if (m.ld != m.cols) os << ", ld " << m.ld;
  os << ')';
  return os.str();
}

// Checks that a view can be read: non-null when non-empty, naturally aligned, ld >= cols.
// `what` names the argument in the error message, e.g. "gemm: A".
template <class T>
void check_view(const matrix_view<T>& m, const char* what) {
  if (m.rows == 0 || m.cols == 0) return;
  SPARSELM_CHECK(m.data != nullptr, what, ": null data for a ", shape_string(m), " view");
  SPARSELM_CHECK(reinterpret_cast<std::uintptr_t>(m.data) % alignof(std::remove_const_t<T>) == 0, what,
                 ": data pointer is not aligned to ", alignof(std::remove_const_t<T>), " bytes");
  SPARSELM_CHECK(m.ld >= m.cols, what, ": leading dimension ", m.ld, " is smaller than the column count in ",
                 shape_string(m));
}

// A contiguous span viewed as a (rows x cols) matrix; the sizes must match.
template <class T>
matrix_view<T> as_matrix(std::span<T> s, std::size_t rows, std::size_t cols) {
  SPARSELM_CHECK(s.size() == rows * cols, "as_matrix: span of ", s.size(), " elements cannot be viewed as (", rows,
                 'x', cols, ')');
  return {s.data(), rows, cols, cols};
}

}  // namespace sparselm
