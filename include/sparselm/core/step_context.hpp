#pragma once
// What every layer's forward/backward receives (step_context): the arenas to read and write, the
// step's identity (for counter-based dropout), the compute type, and the pass's scratch pool, where
// each layer type finds its workspace (its temporaries); with the growable buffers layers keep
// activations in and param_ref, a layer's handle to one of its tensors.
//
// Layers hold arena *indices* (param_ref); the step context says which arenas those index into.
// It names no layer, model or policy type: what a model-level pass needs beyond it (a pipeline's
// plan and stage link) travels in pipeline::pass_context (policies/pipeline.hpp), which layers never see.
// See docs/design/architecture.md, "Parameters live in arenas; layers hold indices".

#include <cstddef>
#include <atomic>
#include <concepts>
#include <cstdint>
#include <functional>
#include <memory>
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
  std::size_t bytes() const noexcept { return data_.size() * sizeof(T); }

 private:
  aligned_vector<T> data_;
};
using buffer = basic_buffer<float>;
// Activations kept in 16 bits for a backward that rounds them to bf16 anyway (layers/linear.hpp).
using buffer_bf16 = basic_buffer<bf16>;

// The bytes held by some buffers (a workspace's bytes()).
template <class... Buffers>
std::size_t buffers_bytes(const Buffers&... b) noexcept {
  return (std::size_t(0) + ... + b.bytes());
}

namespace detail {
inline std::size_t next_workspace_id() noexcept {
  static std::atomic<std::size_t> next{0};
  return next.fetch_add(1, std::memory_order_relaxed);
}
// A small number per workspace type, the index of its entry in every scratch pool.
template <class W>
std::size_t workspace_id() noexcept {
  static const std::size_t id = next_workspace_id();
  return id;
}
}  // namespace detail

// A pass's temporaries. A layer that needs temporaries (buffers that live within one forward or
// backward call, unlike its cache, which lives from forward to backward) declares a workspace type
// W -- a struct of buffers with `std::size_t bytes() const` -- and asks the pass's pool for it:
// `auto& w = s.tmp->get<W>();`. A pool holds one W per type, shared by every layer that names W
// (one call at a time): a model keeps one pool (one per pipeline stage on threads), so a stack of
// L blocks holds one block workspace, not L. Two layers that may run nested within each other must
// name different workspace types; no central list of slots is involved.
class scratch {
 public:
  scratch() = default;
  scratch(scratch&&) noexcept = default;
  scratch& operator=(scratch&&) noexcept = default;

  // The pool's W (default-constructed on first use; its buffers keep their capacity).
  template <class W>
  W& get() {
    static_assert(requires(const W& w) { { w.bytes() } -> std::convertible_to<std::size_t>; },
                  "scratch::get<W>: a workspace type needs 'std::size_t bytes() const' (the memory it holds)");
    const std::size_t id = detail::workspace_id<W>();
    if (id >= entries_.size()) entries_.resize(id + 1);
    auto& e = entries_[id];
    if (!e) e = std::make_unique<entry<W>>();
    return static_cast<entry<W>&>(*e).value;
  }
  // Bytes held by every workspace of the pool.
  std::size_t bytes() const noexcept {
    std::size_t b = 0;
    for (const auto& e : entries_)
      if (e) b += e->bytes();
    return b;
  }

 private:
  struct entry_base {
    virtual ~entry_base() = default;
    virtual std::size_t bytes() const noexcept = 0;
  };
  template <class W>
  struct entry final : entry_base {
    W value;
    std::size_t bytes() const noexcept override { return value.bytes(); }
  };
  std::vector<std::unique_ptr<entry_base>> entries_;
};

// A layer's handle to one of its tensors in the model's arenas.
struct param_ref {
  std::string name;
  std::size_t index = 0;
};

struct step_context {
  const arena<float>* params = nullptr;  // values read by forward/backward
  arena<float>* grads = nullptr;         // gradients accumulated by backward (+=)
  scratch* tmp = nullptr;                // the pass's temporaries: each layer's workspace (scratch::get)
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
