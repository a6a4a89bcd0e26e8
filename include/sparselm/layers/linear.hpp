#pragma once
// Linear layer y = x·W + b with W stored (in, out) — GPT-2's Conv1D layout.
//
// Legend: N rows (batch × sequence), in / out features.
//   forward:  y (N,out) = x (N,in) · W (in,out) + b (out)          [gemm NN, bias fused]
//   backward: dx (N,in) = dy (N,out) · Wᵀ                           [gemm NT]
//             dW (in,out) += xᵀ · dy ;  db (out) += colsum(dy)      [gemm TN]
// The dense layer's three GEMMs take the step's compute type (step_context::compute: fp32, or
// bf16 / fp16 operands with fp32 accumulation, kernels::gemm_as); W, dW and the bias stay fp32.
//
// Who keeps x for the weight gradient (input_keeper): by default the caller keeps x alive until
// backward and the layer holds a view. With input_keeper::layer the caller may reuse x's storage
// once forward returns: the layer keeps its own copy, in bf16 where its GEMMs round x to bf16
// anyway (dense layer, bf16 compute: compact_input(s), half the memory and the same products),
// else in fp32. A dense layer also takes a bf16 x directly under bf16 compute (the caller keeps
// it). This is how the stack stores activations in 16 bits under bf16 (docs/design/precision.md).
// The sparsity type is a template parameter: `dense` stores W in full; `block_sparse<B>` (see
// layers/sparse_linear.hpp, included at the end of this header) stores only its active blocks.

#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "sparselm/core/arena.hpp"
#include "sparselm/kernels/bsr.hpp"
#include "sparselm/kernels/convert.hpp"
#include "sparselm/kernels/gemm.hpp"
#include "sparselm/kernels/gemm_bf16.hpp"
#include "sparselm/kernels/reduce.hpp"
#include "sparselm/layers/context.hpp"
#include "sparselm/parallel/tensor_parallel.hpp"
#include "sparselm/sparse/init.hpp"
#include "sparselm/sparse/sparsity.hpp"

namespace sparselm {

// How many blocks each block-sparse weight gets (ignored by dense layers).
struct sparse_plan {
  double sparsity = 0.9;  // fraction of blocks that are zero, in [0, 1)
  // Optional per-weight count (e.g. ERK allocation computed by a model over all its weights);
  // without it every weight gets nnz_blocks(sparsity).
  std::function<std::size_t(const std::string& name, std::size_t in, std::size_t out)> count;
  kernels::block_pooling pooling = kernels::block_pooling::avg;  // RigL score pooling
  // The block size of block_sparse<runtime_block> weights (one of block_sizes); a block_sparse<B>
  // weight takes B and accepts 0 or B here.
  std::size_t block = 0;

  std::size_t blocks(const std::string& name, std::size_t in, std::size_t out, std::size_t b) const {
    if (count) return count(name, in, out);
    return sparse::nnz_blocks(name, in, out, b, sparsity);
  }
};

// A plan whose blocks are allocated across all of a model's sparse weights at once (ERK needs
// every shape before any weight is built). `survey(plan)` must build the model's layers with the
// plan it is given (one block per weight); the shapes it asks for are allocated with
// sparse::allocate_blocks and the returned plan gives each weight its count. Uniform: `plan` as is.
//   plan = allocate_plan(plan, 16, sparse::allocation::erk, [&](const sparse_plan& p) { gpt<float, S> probe(cfg, p); });
template <class Survey>
sparse_plan allocate_plan(sparse_plan plan, std::size_t block, sparse::allocation kind, Survey&& survey) {
  if (kind == sparse::allocation::uniform) return plan;
  std::vector<sparse::weight_shape> shapes;
  sparse_plan probe = plan;
  probe.count = [&shapes](const std::string& name, std::size_t in, std::size_t out) {
    shapes.push_back({name, in, out});
    return std::size_t(1);
  };
  survey(probe);
  const auto counts = sparse::allocate_blocks(shapes, block, plan.sparsity, kind);
  auto table = std::make_shared<std::map<std::string, std::size_t>>();
  for (std::size_t i = 0; i < shapes.size(); ++i) (*table)[shapes[i].name] = counts[i];
  plan.count = [table](const std::string& name, std::size_t, std::size_t) { return table->at(name); };
  return plan;
}

// Where a linear layer writes: inside a branch, or back into the residual stream (the output
// projections of attention and feed-forward; GPT-2 scales their initialisation by 1/sqrt(2L)).
enum class linear_role { inner, residual_output };

// Who keeps a layer's forward input alive for its backward (above).
enum class input_keeper { caller, layer };

template <class T = float, sparsity_type Sparsity = dense>
class linear;

namespace detail {
// Shape checks shared by the dense and block-sparse linear layers (w: the weight, for the message).
inline void check_linear_forward(const param_ref& w, std::size_t in, std::size_t out, const_matrix_view<float> x,
                                 const_matrix_view<float> y) {
  SPARSELM_CHECK(x.cols == in && y.cols == out && x.rows == y.rows, "linear '", w.name, "': x ", shape_string(x),
                 " and y ", shape_string(y), " do not fit a ", in, "x", out, " weight");
}
// True when dx is wanted (rows > 0). x_rows: the rows of the forward input.
inline bool check_linear_backward(const param_ref& w, std::size_t in, std::size_t out, std::size_t x_rows,
                                  const_matrix_view<float> dy, const_matrix_view<float> dx) {
  SPARSELM_CHECK(dy.cols == out && dy.rows == x_rows, "linear '", w.name, "': dy ", shape_string(dy),
                 " does not match the forward input's ", x_rows, " rows and out ", out);
  if (!dx.rows) return false;
  SPARSELM_CHECK(dx.rows == dy.rows && dx.cols == in, "linear '", w.name, "': dx ", shape_string(dx), " should be (",
                 dy.rows, "x", in, ")");
  return true;
}
// A linear layer's tensor-parallel split (parallel/tensor_parallel.hpp), shared by the dense and
// block-sparse layers: the owning layer sets it at construction. A row-split layer's output is a
// partial sum: its bias is left out of forward and added once after the group's sum (add_bias).
class linear_split {
 public:
  const parallel::weight_split& split() const noexcept { return split_; }
  void set_split(const parallel::weight_split& s) noexcept { split_ = s; }
  // True when forward leaves the bias to the caller (row-split over more than one rank).
  bool bias_deferred() const noexcept { return split_.kind == parallel::split_kind::rows && split_.of.active(); }
  // The whole weight's (in, out) of a slice of (in, out): a row split's rows and a column split's
  // columns over the group (initialisation scales that depend on the fans).
  std::pair<std::size_t, std::size_t> whole_fans(std::size_t in, std::size_t out) const noexcept {
    if (!split_.active()) return {in, out};
    const std::size_t P = split_.of.size;
    return split_.kind == parallel::split_kind::rows ? std::pair{in * P, out} : std::pair{in, out * P};
  }

 protected:
  parallel::weight_split split_{};
};

// y += b, row by row (a bias added after a tensor-parallel sum).
inline void add_bias(matrix_view<float> y, std::span<const float> b) {
  SPARSELM_CHECK(b.size() == y.cols, "add_bias: ", b.size(), " bias values for ", shape_string(y));
  for (std::size_t i = 0; i < y.rows; ++i) {
    float* r = y.row(i);
    for (std::size_t j = 0; j < y.cols; ++j) r[j] += b[j];
  }
}
}  // namespace detail

template <class T>
class linear<T, dense> : public detail::linear_split {
  static_assert(std::is_same_v<T, float>, "sparselm::linear: only float compute is implemented");

 public:
  using sparsity = dense;
  struct cache {
    const_matrix_view<float> x;  // (N,in) forward input, or
    const_matrix_view<bf16> x16; // its bf16 values (one of the two is set: rows > 0)
    buffer own;                  // the layer's own copy of x (input_keeper::layer, fp32 compute)
    buffer_bf16 own16;           // the same in bf16 (input_keeper::layer, bf16 compute)
  };
  // True when the layer keeps x in bf16 for input_keeper::layer (its GEMMs round x to bf16).
  static bool compact_input(const step_context& s) noexcept { return s.compute == dtype::bf16 && s.bf16_activations; }

  linear() = default;
  linear(arena_layout& layout, const std::string& prefix, std::size_t in, std::size_t out, bool bias = true,
         const sparse_plan* = nullptr, linear_role role = linear_role::inner)
      : in_(in), out_(out), has_bias_(bias), role_(role) {
    SPARSELM_CHECK(in > 0 && out > 0, "linear '", prefix, "': zero size (in ", in, ", out ", out, ")");
    w_ = {prefix + ".weight", layout.add(prefix + ".weight", {in, out})};
    if (bias) b_ = {prefix + ".bias", layout.add(prefix + ".bias", {out}, param_no_decay | param_no_trust)};
  }

  std::size_t in() const noexcept { return in_; }
  std::size_t out() const noexcept { return out_; }
  bool has_bias() const noexcept { return has_bias_; }
  linear_role role() const noexcept { return role_; }
  const param_ref& weight() const noexcept { return w_; }
  const param_ref& bias() const noexcept { return b_; }

  std::vector<param_ref> parameters() const {
    std::vector<param_ref> r{w_};
    if (has_bias_) r.push_back(b_);
    return r;
  }

  // W ~ N(0, std²), b = 0.
  void init(arena<float>& params, const counter_rng& rng, float std) const {
    rng.fill_normal(params[w_.index], w_.index, 0.0f, std);
    if (has_bias_) std::fill(params[b_.index].begin(), params[b_.index].end(), 0.0f);
  }

  void forward(const step_context& s, const_matrix_view<float> x, matrix_view<float> y, cache& c,
               input_keeper keeper = input_keeper::caller) const {
    detail::check_linear_forward(w_, in_, out_, x, y);
    c.x = x;
    c.x16 = {};
    if (keeper == input_keeper::layer) {
      if (compact_input(s)) {
        auto x16 = c.own16.matrix(x.rows, x.cols);
        kernels::to_bf16(std::span<const float>(x.data, x.rows * x.cols), std::span<bf16>(x16.data, x.rows * x.cols));
        return forward(s, const_matrix_view<bf16>(x16), y, c);
      }
      auto copy = c.own.matrix(x.rows, x.cols);
      std::copy_n(x.data, x.rows * x.cols, copy.data);
      c.x = copy;
    }
    kernels::gemm_as(s.compute, kernels::trans::n, kernels::trans::n, 1.0f, c.x, s.pm(w_.index), 0.0f, y, bias_data(s));
  }
  // x in bf16, kept alive by the caller (bf16 compute only: the products are those of x's values).
  void forward(const step_context& s, const_matrix_view<bf16> x, matrix_view<float> y, cache& c) const {
    SPARSELM_CHECK(s.compute == dtype::bf16, "linear '", w_.name, "': a bf16 input needs bf16 compute, not ",
                   dtype_name(s.compute));
    SPARSELM_CHECK(x.cols == in_ && y.cols == out_ && x.rows == y.rows, "linear '", w_.name, "': x (", x.rows, "x",
                   x.cols, ") and y ", shape_string(y), " do not fit a ", in_, "x", out_, " weight");
    c.x = {};
    c.x16 = x;
    kernels::gemm_bf16(kernels::trans::n, kernels::trans::n, 1.0f, x, s.pm(w_.index), 0.0f, y, bias_data(s));
  }

  // dx is assigned (or accumulated when accumulate_dx); pass an empty dx (rows == 0) to skip it.
  void backward(const step_context& s, const_matrix_view<float> dy, matrix_view<float> dx, cache& c,
                bool accumulate_dx = false) const {
    const bool in16 = c.x16.rows > 0;
    if (detail::check_linear_backward(w_, in_, out_, in16 ? c.x16.rows : c.x.rows, dy, dx))
      kernels::gemm_as(s.compute, kernels::trans::n, kernels::trans::t, 1.0f, dy, s.pm(w_.index),
                       accumulate_dx ? 1.0f : 0.0f, dx);
    if (in16) {
      SPARSELM_CHECK(s.compute == dtype::bf16, "linear '", w_.name, "': forward kept x in bf16 but backward runs in ",
                     dtype_name(s.compute));
      kernels::gemm_bf16(kernels::trans::t, kernels::trans::n, 1.0f, c.x16, dy, 1.0f, s.gm(w_.index));
    } else {
      kernels::gemm_as(s.compute, kernels::trans::t, kernels::trans::n, 1.0f, c.x, dy, 1.0f, s.gm(w_.index));
    }
    if (has_bias_) kernels::add_column_sums(dy, s.g(b_.index));
  }

  // The bias the forward adds (null without one, or while it is deferred to the caller).
  const float* bias_data(const step_context& s) const {
    return has_bias_ && !bias_deferred() ? s.p(b_.index).data() : nullptr;
  }

 private:

  std::size_t in_ = 0, out_ = 0;
  bool has_bias_ = false;
  linear_role role_ = linear_role::inner;
  param_ref w_, b_;
};

}  // namespace sparselm

#include "sparselm/layers/sparse_linear.hpp"
