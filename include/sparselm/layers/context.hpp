#pragma once
// What every layer's forward/backward receives: the arenas to read and write, the step's identity
// (for counter-based dropout), and a scratch pool for backward temporaries.
//
// Layers hold arena *indices* (param_ref); the step context says which arenas those index into.
// See docs/design/architecture.md, "Parameters live in arenas; layers hold indices".

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "sparselm/core/arena.hpp"
#include "sparselm/core/dtype.hpp"
#include "sparselm/core/rng.hpp"
#include "sparselm/core/tensor.hpp"
#include "sparselm/core/view.hpp"
#include "sparselm/policies/pipeline.hpp"

namespace sparselm {

// A growable 64-byte aligned buffer: capacity only grows, so steady-state steps never allocate.
template <class T>
class basic_buffer {
 public:
  std::span<T> get(std::size_t n) {
    if (n > data_.size()) data_ = aligned_vector<T>(n);
    return {data_.data(), n};
  }
  matrix_view<T> matrix(std::size_t rows, std::size_t cols) { return {get(rows * cols).data(), rows, cols}; }
  std::size_t capacity() const noexcept { return data_.size(); }

 private:
  aligned_vector<T> data_;
};
using buffer = basic_buffer<float>;
// Activations kept in 16 bits for a backward that rounds them to bf16 anyway (layers/linear.hpp).
using buffer_bf16 = basic_buffer<bf16>;

// Named scratch slots, so nested layers never hand each other the same temporary.
enum scratch_slot : std::size_t {
  slot_block_a,      // block: branch output / branch gradient (N,C)
  slot_block_b,      // block: gradient w.r.t. a norm's output (N,C); forward under bf16 (pre-LN):
                     //   a norm's output, which the branch keeps in bf16 (N,C)
  slot_block_c,      // block (post-LN): gradient w.r.t. a norm's input (N,C)
  slot_ffn_hidden,   // feed-forward: hidden gradient (N,F); forward under bf16: the fp32
                     //   pre-activation, kept in bf16 (N,F)
  slot_attn_out,     // attention: gradient w.r.t. the heads' output (N,HD)
  slot_attn_qkv,     // attention: gradient w.r.t. fused qkv (N,3HD)
  slot_head,         // LM head: logits chunk (rows,V)
  slot_head_x,       // LM head: gradient w.r.t. the final norm output (N,C)
  slot_head_ce,      // LM head: per-row cross-entropy of a chunk (R)
  slot_model_a,      // model-level temporaries
  slot_model_b,
  slot_count
};

// Temporaries shared by all layers of a model (one pass at a time uses them).
class scratch {
 public:
  // Slot k: a buffer of n floats, valid until the next call with the same k.
  std::span<float> get(std::size_t k, std::size_t n) {
    if (k >= slots_.size()) slots_.resize(k + 1);
    return slots_[k].get(n);
  }
  matrix_view<float> matrix(std::size_t k, std::size_t rows, std::size_t cols) {
    return {get(k, rows * cols).data(), rows, cols};
  }
  std::size_t bytes() const noexcept {
    std::size_t b = 0;
    for (auto& s : slots_) b += s.capacity() * sizeof(float);
    return b;
  }

 private:
  std::vector<buffer> slots_;
};

// A layer's handle to one of its tensors in the model's arenas.
struct param_ref {
  std::string name;
  std::size_t index = 0;
};

struct step_context {
  const arena<float>* params = nullptr;  // values read by forward/backward
  arena<float>* grads = nullptr;         // gradients accumulated by backward (+=)
  scratch* tmp = nullptr;                // backward temporaries
  bool training = false;                 // dropout on/off
  std::uint64_t step = 0;                // optimiser step (dropout stream)
  std::uint64_t micro = 0;               // micro-batch within the step (dropout stream)
  counter_rng rng{};                     // dropout key
  std::size_t batch = 0, seq = 0;        // B and T of the current pass (rows = B·T)
  std::span<const std::int32_t> lengths; // padding masks: valid length of each sequence (size B)
  bool need_dense_grad = false;          // sparse layers: compute pooled dense gradients (RigL update step)
  dtype compute = dtype::f32;            // operand type of the dense GEMMs (precision policy, kernels::gemm_as)
  // Under bf16 compute, keep the activations that only feed bf16 products in bf16 (the norms'
  // outputs of pre-LN blocks, the feed-forward's pre-activation and activation); false: fp32
  // buffers, as under fp32 (the products are the same; gelu' then sees the fp32 pre-activation).
  bool bf16_activations = true;
  // Data parallelism: a model calls (*grads_ready)(begin, end) once per step for each flat range of
  // the gradient arena as soon as backward has finished it (null: nobody listens).
  const std::function<void(std::size_t, std::size_t)>* grads_ready = nullptr;
  // What a step keeps for backward under recompute::configured (policies/recompute.hpp): every
  // block's activations (false) or only each block's input, re-running the block in backward (true).
  bool recompute_blocks = false;
  // Stage pipelining under pipeline::configured (policies/pipeline.hpp); null: one stage.
  const pipeline::plan* pipeline = nullptr;
  // A pipeline over ranks: this process's stage and the transport to its neighbours (null: the
  // stages are threads of this process).
  pipeline::stage_link* stage_link = nullptr;
  // Heads whose loss is a sum of per-objective means (BERT: MLM and NSP) divide by each objective's
  // count over the global micro-batch, i.e. summed over the data-parallel replicas:
  // objective_counts[micro · objectives + j] (empty: each divides by its own batch's counts).
  std::span<const double> objective_counts;
  std::size_t objectives = 0;
  // The global count of objective j in the current micro-batch, or `local` when none is given.
  double objective_count(std::size_t j, double local) const noexcept {
    return objectives ? objective_counts[micro * objectives + j] : local;
  }

  std::span<const float> p(std::size_t i) const { return (*params)[i]; }
  std::span<float> g(std::size_t i) const { return (*grads)[i]; }
  matrix_view<const float> pm(std::size_t i) const { return params->matrix(i); }
  matrix_view<float> gm(std::size_t i) const { return grads->matrix(i); }
  // Dropout stream for a call site (e.g. a layer index times a small site number).
  std::uint64_t stream(std::uint64_t site) const noexcept { return mix_stream(mix_stream(site, step), micro); }
};

// A layer mapping a (N, in) matrix to a (N, out) matrix; forward and backward are const (a layer's
// state lives in the arenas and its cache). backward assigns dx (dx may alias dy only
// where the layer documents it) and accumulates parameter gradients. Its tensors are listed by
// parameters() (a leaf) or found by visiting its sub-layers (a composite: visit(f), see
// layers/visit.hpp; parameters_of(l) lists either kind).
template <class L>
concept layer = requires(const L& l, const step_context& s, typename L::cache& c, const_matrix_view<float> x,
                         matrix_view<float> y, const_matrix_view<float> dy, matrix_view<float> dx) {
  l.forward(s, x, y, c);
  l.backward(s, dy, dx, c);
} && (requires(const L& l) {
  { l.parameters() } -> std::convertible_to<std::vector<param_ref>>;
} || requires(const L& l) { l.visit([](const auto&) {}); });

}  // namespace sparselm
