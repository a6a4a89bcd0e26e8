#pragma once
// Block-sparse linear layer y = x·W + b, W (in, out) stored as its active B×B blocks only.
//
// Storage: the parameter arena holds the values, tensor "<prefix>.weight" of shape {nnz, B, B}
// (flag param_sparse), slot s being block (pattern.row[s], pattern.col[s]); the pattern itself
// (metadata, not a parameter) lives beside the layer in a shared sparse_weight_state, so that a
// pattern updater (sparse/update.hpp) can change it between steps. nnz is fixed for the run.
//
//   forward:  y = x·W + b                 bsr_matmul     (only active blocks are multiplied)
//   backward: dx = dy·Wᵀ                  bsr_backward (both products, one pass for B > 1),
//             dvalues += xᵀ·dy at active blocks only    or bsr_weight_grad alone without dx
//             pooled |xᵀ·dy| per block, all blocks      dense_grad_pooled — only when the step
//             context asks for it (RigL update steps), into state().pooled
//
// Precision: when the step computes in bf16 (step_context::compute) and the CPU's bf16 dot products
// are faster than its FMAs (kernels::bsr_bf16_pays()), B = 4, 8 and 16 run the bf16 products of
// kernels/bsr_bf16.hpp (operands rounded to bf16, fp32 accumulation); where the bf16 GEMM runs on
// AMX tiles (kernels::bsr_bf16_amx_chosen()), B = 16 runs its three products on AMX. Otherwise, and
// for B = 1, fp16 steps and the pooled RigL scores, the products are fp32. Values, gradients, bias
// stay fp32. With the bf16 products and bf16 activations (step_context::bf16_activations), a layer
// that keeps its input (input_keeper::layer) keeps it in bf16, and forward also takes x in bf16
// (the feed-forward's activation): the products round x to bf16 anyway, so the results are those of
// the fp32 input bit for bit. On steps that pool the dense gradient x stays fp32.
//
// The number of blocks comes from a sparse_plan given at construction: uniform sparsity, or a
// per-weight count (e.g. ERK allocation computed by the model over all its weights).
//
// B = runtime_block (sparse/sparsity.hpp): the block size is the plan's `block`, and each product
// dispatches on it (with_block_size) to the kernel instance of that B, the one block_sparse<B> calls.

#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "sparselm/core/arena.hpp"
#include "sparselm/kernels/bsr.hpp"
#include "sparselm/kernels/bsr_bf16.hpp"
#include "sparselm/kernels/reduce.hpp"
#include "sparselm/layers/context.hpp"
#include "sparselm/layers/linear.hpp"
#include "sparselm/sparse/init.hpp"
#include "sparselm/sparse/pattern_io.hpp"
#include "sparselm/sparse/update.hpp"

namespace sparselm {

// The pattern and the RigL score buffer of one sparse weight.
struct sparse_weight_state {
  sparse::block_pattern pattern;
  std::vector<float> pooled;  // (in/B, out/B), filled on dense-gradient steps
  kernels::block_pooling pooling = kernels::block_pooling::avg;
};

template <class T, std::size_t B>
class linear<T, block_sparse<B>> : public detail::linear_split {
  static_assert(std::is_same_v<T, float>, "sparselm::linear: only float compute is implemented");

 public:
  using sparsity = block_sparse<B>;
  struct cache {
    const_matrix_view<float> x;   // (N,in) forward input, or
    const_matrix_view<bf16> x16;  // its bf16 values (one of the two is set: rows > 0)
    buffer own;                   // the layer's own copy of x (input_keeper::layer, fp32)
    buffer_bf16 own16;            // the same in bf16 (input_keeper::layer, compact_input)
  };
  // True when input_keeper::layer keeps x in bf16: the step computes in bf16 with the bf16 products
  // (which round x to bf16 anyway, so the results are bit for bit those of an fp32 copy), keeps its
  // activations in bf16, and does not ask for the pooled dense gradient (which reads x in fp32).
  bool compact_input(const step_context& s) const {
    return s.bf16_activations && !s.need_dense_grad && bf16_products(s);
  }

  linear() = default;
  linear(arena_layout& layout, const std::string& prefix, std::size_t in, std::size_t out, bool bias = true,
         const sparse_plan* plan = nullptr, linear_role role = linear_role::inner)
      : in_(in), out_(out), has_bias_(bias), role_(role), state_(std::make_shared<sparse_weight_state>()) {
    const std::string name = prefix + ".weight";
    SPARSELM_CHECK(plan != nullptr, "linear '", prefix, "': a block-sparse weight needs a sparse_plan (sparsity)");
    if constexpr (B == runtime_block) {
      SPARSELM_CHECK(is_block_size(plan->block), "linear '", prefix,
                     "': block_sparse<runtime_block> takes its block size from the sparse_plan, which says ",
                     plan->block, " (one of 1, 4, 8, 16)");
      block_ = plan->block;
    } else {
      SPARSELM_CHECK(plan->block == 0 || plan->block == B, "linear '", prefix, "': a block_sparse<", B,
                     "> weight with a sparse_plan for blocks of ", plan->block);
    }
    const std::size_t b = block_;
    sparse::check_block_grid(name, in, out, b);
    nnz_ = plan->blocks(name, in, out, b);
    SPARSELM_CHECK(nnz_ >= 1 && nnz_ <= (in / b) * (out / b), "linear '", prefix, "': ", nnz_, " blocks for a ",
                   in / b, "x", out / b, " block grid");
    state_->pooling = plan->pooling;
    w_ = {name, layout.add(name, {nnz_, b, b}, param_sparse)};
    if (bias) b_ = {prefix + ".bias", layout.add(prefix + ".bias", {out}, param_no_decay | param_no_trust)};
  }

  std::size_t in() const noexcept { return in_; }
  std::size_t out() const noexcept { return out_; }
  std::size_t nnz_blocks() const noexcept { return nnz_; }
  std::size_t block_size() const noexcept { return block_; }
  double density() const noexcept { return double(nnz_) / double((in_ / block_) * (out_ / block_)); }
  bool has_bias() const noexcept { return has_bias_; }
  linear_role role() const noexcept { return role_; }
  const param_ref& weight() const noexcept { return w_; }
  const param_ref& bias() const noexcept { return b_; }
  sparse_weight_state& state() const noexcept { return *state_; }
  std::vector<param_ref> parameters() const {
    std::vector<param_ref> r{w_};
    if (has_bias_) r.push_back(b_);
    return r;
  }

  // Random initial pattern (uniform over the block grid) and values N(0, (std/sqrt(density))²), so a
  // unit's input sum has the variance of a dense N(0, std²) layer; b = 0.
  void init(arena<float>& params, const counter_rng& rng, float std) const {
    state_->pattern = sparse::random_pattern(w_.name, in_, out_, block_, nnz_, rng, mix_stream(w_.index, 0x7061));
    rng.fill_normal(params[w_.index], w_.index, 0.0f, std / float(std::sqrt(density())));
    if (has_bias_) std::fill(params[b_.index].begin(), params[b_.index].end(), 0.0f);
  }
  // Random pattern and density-scaled Glorot-uniform values (the S1 sparse LM); a tensor-parallel
  // slice draws its values at the whole weight's scale (whole_fans).
  void init_glorot(arena<float>& params, const counter_rng& rng) const {
    state_->pattern = sparse::random_pattern(w_.name, in_, out_, block_, nnz_, rng, mix_stream(w_.index, 0x7061));
    const auto [fan_in, fan_out] = whole_fans(in_, out_);
    sparse::init_values(w_.name, state_->pattern, params[w_.index], rng, w_.index, fan_in, fan_out);
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
    const float* bias = bias_data(s);
    const bool b16 = bf16_products(s);
    with_block([&]<std::size_t K>() {
      if constexpr (K > 1) {
        if (b16) return kernels::bsr_matmul_bf16<K>(c.x, state_->pattern, s.p(w_.index).data(), 0.0f, y, bias);
      }
      kernels::bsr_matmul<K>(c.x, state_->pattern, s.p(w_.index).data(), 0.0f, y, bias);
    });
  }

  // x in bf16, kept alive by the caller (bf16 compute with the bf16 products, no pooled dense
  // gradient this step: the products are those of x's values).
  void forward(const step_context& s, const_matrix_view<bf16> x, matrix_view<float> y, cache& c) const {
    SPARSELM_CHECK(x.cols == in_ && y.cols == out_ && x.rows == y.rows, "linear '", w_.name, "': x (bf16, ", x.rows,
                   "x", x.cols, ") and y ", shape_string(y), " do not fit a ", in_, "x", out_, " weight");
    SPARSELM_CHECK(s.compute == dtype::bf16, "linear '", w_.name, "': a bf16 input needs bf16 compute, not ",
                   dtype_name(s.compute));
    SPARSELM_CHECK(!s.need_dense_grad, "linear '", w_.name,
                   "': a bf16 input on a step that pools the dense gradient (it reads x in fp32)");
    SPARSELM_CHECK(block_ > 1, "linear '", w_.name, "': a bf16 input needs B = 4, 8 or 16, not ", block_);
    SPARSELM_CHECK(bf16_products(s), "linear '", w_.name,
                   "': a bf16 input needs the bf16 block-sparse products, which this CPU does not run "
                   "(kernels::bsr_bf16_pays() is false)");
    c.x = {};
    c.x16 = x;
    const float* bias = bias_data(s);
    with_block([&]<std::size_t K>() {
      if constexpr (K > 1) kernels::bsr_matmul_bf16<K>(x, state_->pattern, s.p(w_.index).data(), 0.0f, y, bias);
    });
  }

  void backward(const step_context& s, const_matrix_view<float> dy, matrix_view<float> dx, cache& c,
                bool accumulate_dx = false) const {
    const float beta = accumulate_dx ? 1.0f : 0.0f;
    const bool in16 = c.x16.rows > 0;
    const bool need_dx = detail::check_linear_backward(w_, in_, out_, in16 ? c.x16.rows : c.x.rows, dy, dx);
    if (in16) {
      SPARSELM_CHECK(s.compute == dtype::bf16 && !s.need_dense_grad, "linear '", w_.name,
                     "': forward kept x in bf16, but backward runs in ", dtype_name(s.compute),
                     s.need_dense_grad ? " and pools the dense gradient" : "");
      products_backward(s, dy, need_dx, beta, dx, c.x16);
    } else {
      products_backward(s, dy, need_dx, beta, dx, c.x);
    }
    if (has_bias_) kernels::add_column_sums(dy, s.g(b_.index));
    if (s.need_dense_grad) {
      // Scores are pooled per micro-batch and summed over the step's micro-batches (max: maximum).
      // With one micro-batch per step this is exactly the pooled |dense gradient|.
      auto& pooled = state_->pooled;
      const std::size_t n = (in_ / block_) * (out_ / block_);
      if (s.micro == 0 || pooled.size() != n) pooled.assign(n, 0.0f);
      std::vector<float> part(n);
      with_block([&]<std::size_t K>() {
        kernels::dense_grad_pooled<K>(c.x, dy, state_->pooling, matrix_view<float>(part.data(), in_ / K, out_ / K));
      });
      for (std::size_t i = 0; i < n; ++i)
        pooled[i] = state_->pooling == kernels::block_pooling::max ? std::max(pooled[i], part[i]) : pooled[i] + part[i];
    }
  }

  // Zero pooled scores of the right size: a process of a pipeline over ranks whose stage does not
  // run this layer contributes nothing to the scores summed over the ranks.
  void reset_pooled() const { state_->pooled.assign((in_ / block_) * (out_ / block_), 0.0f); }

  // What the pattern updater needs to prune and regrow this weight.
  sparse::sparse_weight updater_view(arena<float>& params) const {
    sparse::sparse_weight w;
    w.name = w_.name;
    w.pattern = &state_->pattern;
    w.values = params[w_.index];
    w.tensor = w_.index;
    w.pooled_grad = state_->pooled;
    w.pooled_by_max = state_->pooling == kernels::block_pooling::max;
    return w;
  }

  // W as a dense (in, out) row-major matrix (zeros outside the active blocks).
  void to_dense(const arena<float>& params, std::span<float> out) const {
    sparse::pattern_to_dense("linear '" + w_.name + "'", state_->pattern, params[w_.index], out);
  }

  // The bias the forward adds (null without one, or while it is deferred to the caller).
  const float* bias_data(const step_context& s) const {
    return has_bias_ && !bias_deferred() ? s.p(b_.index).data() : nullptr;
  }

 private:
  // f.template operator()<K>() with K this layer's block size (B, or the plan's under runtime_block).
  template <class F>
  decltype(auto) with_block(F&& f) const {
    return with_block_of<sparsity>(block_, f);
  }
  // The bf16 products: B = 4, 8 and 16 (B = 1 computes in fp32 under every precision), where
  // vdpbf16ps beats the FMAs, or (B = 16) on AMX tiles.
  bool bf16_products(const step_context& s) const {
    return s.compute == dtype::bf16 && block_ > 1 &&
           (kernels::bsr_bf16_pays() || (block_ == 16 && kernels::bsr_bf16_amx_chosen()));
  }

  // dx = dy·Wᵀ (+ beta·dx) when need_dx, and dW += xᵀ·dy on the active blocks. x in bf16 (kept by a
  // forward that ran the bf16 products) takes the bf16 products.
  template <class TX>
  void products_backward(const step_context& s, const_matrix_view<float> dy, bool need_dx, float beta,
                         matrix_view<float> dx, const_matrix_view<TX> x) const {
    const float* w = s.p(w_.index).data();
    float* dw = s.g(w_.index).data();
    const bool b16 = std::is_same_v<TX, bf16> || bf16_products(s);
    with_block([&]<std::size_t K>() {
      if constexpr (K > 1) {
        if (b16) {
          if (need_dx) return kernels::bsr_backward_bf16<K>(x, dy, state_->pattern, w, beta, dx, dw);
          return kernels::bsr_weight_grad_bf16<K>(x, dy, state_->pattern, dw);
        }
      }
      if constexpr (std::is_same_v<TX, float>) {
        if (need_dx) return kernels::bsr_backward<K>(x, dy, state_->pattern, w, beta, dx, dw);
        kernels::bsr_weight_grad<K>(x, dy, state_->pattern, dw);
      } else {
        SPARSELM_CHECK(false, "linear '", w_.name, "': an input kept in bf16 needs B = 4, 8 or 16, not ", K);
      }
    });
  }

  std::size_t in_ = 0, out_ = 0, nnz_ = 0;
  std::size_t block_ = B;  // B, or the plan's block size (runtime_block)
  bool has_bias_ = false;
  linear_role role_ = linear_role::inner;
  param_ref w_, b_;
  std::shared_ptr<sparse_weight_state> state_;
};

}  // namespace sparselm
