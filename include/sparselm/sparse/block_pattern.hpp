#pragma once
// Block pattern of a block-sparse weight W of shape (in, out), blocks of B x B.
//
// Arena slot s holds block (row[s], col[s]): rows in*B.. of the input dimension, columns of the
// output dimension; its values are B*B floats, row-major, at values + s*B*B. Slots never move
// when the pattern changes: a regrown block takes the slot of a pruned one (see
// docs/design/architecture.md), so values and optimiser slots of surviving blocks stay in place.
//
// Kernels walk blocks by output column (Y = X·W) or by input row (dX = dY·Wᵀ); finalize() rebuilds
// both orderings after row/col change and validates the pattern.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <typeindex>
#include <typeinfo>
#include <vector>

#include "sparselm/core/error.hpp"

namespace sparselm::sparse {

// What a kernel derives from a pattern and reuses while the pattern does not change (the B = 1
// weight gradient's slot order): one structure, built on first use for a type and a key (what it
// depends on besides the pattern, e.g. a chunk length), rebuilt when asked for another. Safe to
// use from several threads at once.
class pattern_derived {
 public:
  template <class T, class Make>
  std::shared_ptr<const T> get(std::size_t key, Make&& make) {
    std::lock_guard<std::mutex> lock(m_);
    if (!data_ || type_ != std::type_index(typeid(T)) || key_ != key) {
      data_ = std::make_shared<const T>(make());
      type_ = std::type_index(typeid(T));
      key_ = key;
    }
    return std::static_pointer_cast<const T>(data_);
  }

 private:
  std::mutex m_;
  std::shared_ptr<const void> data_;
  std::type_index type_ = std::type_index(typeid(void));
  std::size_t key_ = 0;
};

struct block_pattern {
  std::size_t block = 0;   // B
  std::size_t rows_b = 0;  // in / B
  std::size_t cols_b = 0;  // out / B
  std::vector<std::uint32_t> row, col;  // per arena slot

  // Derived by finalize(): slots of block column j are col_slots[col_ptr[j] .. col_ptr[j+1]) in
  // increasing block row; slots of block row i are row_slots[row_ptr[i] .. row_ptr[i+1]) in
  // increasing block column.
  std::vector<std::uint32_t> col_ptr, col_slots;
  std::vector<std::uint32_t> row_ptr, row_slots;

  // Kernels' derived structures, replaced (empty) by every finalize(). Copies share them: they hold
  // the same blocks until one of them is changed and finalized again. Null before finalize().
  std::shared_ptr<pattern_derived> derived;

  std::size_t nnz() const noexcept { return row.size(); }
  std::size_t in() const noexcept { return rows_b * block; }
  std::size_t out() const noexcept { return cols_b * block; }
  double density() const noexcept { return (rows_b && cols_b) ? double(nnz()) / double(rows_b * cols_b) : 0.0; }

  // Validates (sizes agree, coordinates in range, no block twice) and rebuilds the orderings.
  // `what` names the weight in error messages.
  void finalize(const std::string& what = "block_pattern") {
    SPARSELM_CHECK(block > 0, what, ": block size is zero");
    SPARSELM_CHECK(row.size() == col.size(), what, ": ", row.size(), " block rows but ", col.size(), " block columns");
    std::vector<std::uint8_t> seen(rows_b * cols_b, 0);
    col_ptr.assign(cols_b + 1, 0);
    row_ptr.assign(rows_b + 1, 0);
    for (std::size_t s = 0; s < nnz(); ++s) {
      SPARSELM_CHECK(row[s] < rows_b && col[s] < cols_b, what, ": slot ", s, " at block (", row[s], ", ", col[s],
                     ") is outside the ", rows_b, "x", cols_b, " block grid");
      auto& f = seen[std::size_t(row[s]) * cols_b + col[s]];
      SPARSELM_CHECK(!f, what, ": block (", row[s], ", ", col[s], ") appears twice");
      f = 1;
      ++col_ptr[col[s] + 1];
      ++row_ptr[row[s] + 1];
    }
    for (std::size_t j = 0; j < cols_b; ++j) col_ptr[j + 1] += col_ptr[j];
    for (std::size_t i = 0; i < rows_b; ++i) row_ptr[i + 1] += row_ptr[i];
    // Fill by scanning the grid in order, so each list comes out sorted.
    col_slots.assign(nnz(), 0);
    row_slots.assign(nnz(), 0);
    std::vector<std::uint32_t> slot_at(rows_b * cols_b, 0);
    for (std::size_t s = 0; s < nnz(); ++s) slot_at[std::size_t(row[s]) * cols_b + col[s]] = std::uint32_t(s);
    std::vector<std::uint32_t> cfill(col_ptr.begin(), col_ptr.end() - 1);
    std::size_t rfill = 0;
    for (std::size_t i = 0; i < rows_b; ++i)
      for (std::size_t j = 0; j < cols_b; ++j)
        if (seen[i * cols_b + j]) {
          std::uint32_t s = slot_at[i * cols_b + j];
          row_slots[rfill++] = s;
          col_slots[cfill[j]++] = s;
        }
    derived = std::make_shared<pattern_derived>();
  }
};

}  // namespace sparselm::sparse
