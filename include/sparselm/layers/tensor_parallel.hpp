#pragma once
// The two sums of a sub-layer split over a tensor-parallel group (parallel/tensor_parallel.hpp),
// shared by self_attention and feed_forward:
//   forward:  after the row-split output projection, y = Σ_ranks y_r, then its bias, once;
//   backward: after the column-split first projection, dx = Σ_ranks dx_r.
// Both call the step's tensor_sum and refuse to run without one.

#include <span>
#include <string>

#include "sparselm/kernels/reduce.hpp"
#include "sparselm/layers/context.hpp"
#include "sparselm/layers/linear.hpp"
#include "sparselm/parallel/tensor_parallel.hpp"

namespace sparselm::detail {

inline void tensor_sum(const step_context& s, matrix_view<float> x, const std::string& who) {
  SPARSELM_CHECK(s.tensor_sum && *s.tensor_sum, who,
                 ": split over a tensor-parallel group, but the step has no tensor_sum (step_context::tensor_sum)");
  SPARSELM_CHECK(x.contiguous(), who, ": a tensor-parallel sum over a strided matrix ", shape_string(x));
  (*s.tensor_sum)(std::span<float>(x.data, x.rows * x.cols));
}

// y (the row-split projection `proj`'s partial output) summed over the group, then proj's bias.
template <class Linear>
void reduce_output(const step_context& s, const Linear& proj, matrix_view<float> y) {
  if (!proj.split().active()) return;
  tensor_sum(s, y, "linear '" + proj.weight().name + "'");
  if (proj.has_bias()) add_bias(y, s.p(proj.bias().index));
}

// dx of a column-split first projection: backward(d, accumulate) writes this rank's part of dx into
// d; the parts are summed over the group (into a temporary first when dx is accumulated into).
template <class Linear, class Backward>
void reduce_input_grad(const step_context& s, const Linear& first, matrix_view<float> dx, bool accumulate_dx,
                       buffer& tmp, Backward&& backward) {
  if (!first.split().active()) return backward(dx, accumulate_dx);
  const std::string who = "linear '" + first.weight().name + "'";
  if (!accumulate_dx) {
    backward(dx, false);
    return tensor_sum(s, dx, who);
  }
  auto part = tmp.matrix(dx.rows, dx.cols);
  backward(part, false);
  tensor_sum(s, part, who);
  kernels::add_inplace(const_matrix_view<float>(part), dx);
}

}  // namespace sparselm::detail
