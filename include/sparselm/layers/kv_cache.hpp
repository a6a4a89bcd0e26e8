#pragma once
// Keys and values of every attention layer of a stack, for incremental decoding: B sequences that
// advance together (one shared length).
//
// Legend: L layers, B sequences, Tmax capacity (positions), HD = heads · head width.
//   layer l: keys and values (B, Tmax, HD) each; keys(l, b) is a (Tmax, HD) view whose row t is
//   position t of sequence b (head h at columns h·D..h·D+D); rows [0, length()) are valid.
// The attention layers write the rows of new positions (self_attention::forward_cached); the
// decoder calls advance() once the whole stack has seen them.

#include <cstddef>
#include <vector>

#include "sparselm/core/error.hpp"
#include "sparselm/core/tensor.hpp"
#include "sparselm/core/view.hpp"

namespace sparselm {

class kv_cache {
 public:
  kv_cache() = default;
  kv_cache(std::size_t layers, std::size_t batch, std::size_t capacity, std::size_t width)
      : layers_(layers), batch_(batch), cap_(capacity), width_(width) {
    SPARSELM_CHECK(layers > 0 && batch > 0 && capacity > 0 && width > 0, "kv_cache: zero size (layers ", layers,
                   ", batch ", batch, ", capacity ", capacity, ", width ", width, ")");
    k_.resize(layers);
    v_.resize(layers);
    for (std::size_t l = 0; l < layers; ++l) {
      k_[l] = aligned_vector<float>(batch * capacity * width);
      v_[l] = aligned_vector<float>(batch * capacity * width);
    }
  }

  std::size_t layers() const noexcept { return layers_; }
  std::size_t batch() const noexcept { return batch_; }
  std::size_t capacity() const noexcept { return cap_; }
  std::size_t width() const noexcept { return width_; }
  // Positions filled (per sequence).
  std::size_t length() const noexcept { return len_; }
  std::size_t bytes() const noexcept { return 2 * layers_ * batch_ * cap_ * width_ * sizeof(float); }

  // (Tmax, HD) views of layer l, sequence b.
  matrix_view<float> keys(std::size_t l, std::size_t b) { return {k_[l].data() + b * cap_ * width_, cap_, width_}; }
  matrix_view<float> values(std::size_t l, std::size_t b) { return {v_[l].data() + b * cap_ * width_, cap_, width_}; }
  const_matrix_view<float> keys(std::size_t l, std::size_t b) const {
    return {k_[l].data() + b * cap_ * width_, cap_, width_};
  }
  const_matrix_view<float> values(std::size_t l, std::size_t b) const {
    return {v_[l].data() + b * cap_ * width_, cap_, width_};
  }

  // Marks n more positions as filled (their rows must have been written).
  void advance(std::size_t n) {
    SPARSELM_CHECK(len_ + n <= cap_, "kv_cache: ", n, " new positions after ", len_, " exceed the capacity ", cap_);
    len_ += n;
  }
  // Forgets every position (storage is kept).
  void clear() noexcept { len_ = 0; }

 private:
  std::size_t layers_ = 0, batch_ = 0, cap_ = 0, width_ = 0, len_ = 0;
  std::vector<aligned_vector<float>> k_, v_;
};

}  // namespace sparselm
