#pragma once
// What every layer's forward/backward receives (step_context): the arenas to read and write, the
// step's identity (for counter-based dropout), the compute type, and a scratch pool for backward
// temporaries; with the growable buffers layers keep activations in and param_ref, a layer's
// handle to one of its tensors.
//
// Layers hold arena *indices* (param_ref); the step context says which arenas those index into.
// It names no layer, model or policy type: what a model-level pass needs beyond it (a pipeline's
// plan and stage link) travels in pipeline::pass_context (policies/pipeline.hpp), which layers never see.
// See docs/design/architecture.md, "Parameters live in arenas; layers hold indices".

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
  dtype compute = dtype::f32;            // operand type of the dense GEMMs (trainer_options::precision, kernels::gemm_as)
  // Under bf16 compute, keep the activations that only feed bf16 products in bf16 (the norms'
  // outputs of pre-LN blocks, the feed-forward's pre-activation and activation); false: fp32
  // buffers, as under fp32 (the products are the same; gelu' then sees the fp32 pre-activation).
  bool bf16_activations = true;
  // Data parallelism: a model calls (*grads_ready)(begin, end) once per step for each flat range of
  // the gradient arena as soon as backward has finished it (null: nobody listens).
  const std::function<void(std::size_t, std::size_t)>* grads_ready = nullptr;
  // Tensor parallelism: the in-place sum over the ranks of the tensor-parallel group, which a layer
  // split over them calls once per sub-layer in forward and once in backward (null: no group; a
  // split layer refuses to run without it). parallel/tensor_parallel.hpp.
  const std::function<void(std::span<float>)>* tensor_sum = nullptr;
  // What a step keeps for backward under recompute::configured (policies/recompute.hpp): every
  // block's activations (false) or only each block's input, re-running the block in backward (true).
  bool recompute_blocks = false;
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

}  // namespace sparselm
