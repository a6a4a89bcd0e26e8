#pragma once
// A stack of transformer blocks with the buffers a pass over it needs: the residual stream between
// blocks, the blocks' caches, and the gradient of the residual stream.
//
// Legend: L blocks, N = B·T rows of the micro-batch, C channels, S micro-batches in flight.
//   residual(slot, l)  (N,C)  the input of block l (l = L: the stack's output), per slot
//   grad(slot)         (N,C)  dL/d(residual) while backward walks down the stack, per slot
//   caches             S × Recompute::caches(L) block caches
//
// A slot is used by one micro-batch at a time, and a micro-batch by one pipeline stage at a time,
// so stages on their own threads never share a slot's buffers (models/transformer.hpp).
//
// The stack does not decide what to keep: a recompute policy (policies/recompute.hpp) drives it
// through forward_block / recompute_block / backward_block, and a pipeline policy's schedule
// (policies/pipeline.hpp) says which block runs for which micro-batch when. forward() and
// forward_cached() are the plain inference passes.

#include <cstddef>
#include <utility>
#include <vector>

#include "sparselm/core/error.hpp"
#include "sparselm/layers/context.hpp"
#include "sparselm/layers/kv_cache.hpp"
#include "sparselm/policies/recompute.hpp"

namespace sparselm {

template <layer Block>
class block_stack {
 public:
  using block_type = Block;
  using cache_type = typename Block::cache;

  block_stack() = default;
  explicit block_stack(std::vector<Block> blocks) : blocks_(std::move(blocks)) {
    SPARSELM_CHECK(!blocks_.empty(), "block_stack: no blocks");
    c_ = blocks_.front().channels();
  }

  std::size_t size() const noexcept { return blocks_.size(); }
  std::size_t channels() const noexcept { return c_; }
  const Block& operator[](std::size_t l) const { return blocks_[l]; }
  auto begin() const noexcept { return blocks_.begin(); }
  auto end() const noexcept { return blocks_.end(); }
  template <class F>
  void visit(F&& f) const {
    for (const auto& b : blocks_) f(b);
  }

  // Sizes the per-slot state for `slots` micro-batches in flight under a recompute policy.
  template <recompute::policy Recompute>
  void prepare(std::size_t slots) {
    SPARSELM_CHECK(slots > 0, "block_stack: zero micro-batches in flight");
    const std::size_t k = Recompute::caches(blocks_.size());
    if (slots_.size() < slots) slots_.resize(slots);
    for (auto& st : slots_)
      if (st.caches.size() < k) st.caches.resize(k);
  }

  // Sizes every slot's residual streams, gradient and spare output for N rows, so that passes on
  // other threads never reallocate them (staged steps call this before their stages start).
  void reserve(std::size_t N) {
    for (auto& st : slots_) {
      st.res.get((blocks_.size() + 1) * N * c_);
      st.dres.get(N * c_);
      st.spare.get(N * c_);
    }
  }

  // Block l's input (l = size(): the output) for the micro-batch in `slot`, N rows.
  matrix_view<float> residual(std::size_t slot, std::size_t l, std::size_t N) {
    auto& r = slots_.at(slot).res;
    return {r.get((blocks_.size() + 1) * N * c_).data() + l * N * c_, N, c_};
  }
  matrix_view<float> input(std::size_t slot, std::size_t N) { return residual(slot, 0, N); }
  matrix_view<float> output(std::size_t slot, std::size_t N) { return residual(slot, blocks_.size(), N); }
  matrix_view<float> grad(std::size_t slot, std::size_t N) { return slots_.at(slot).dres.matrix(N, c_); }

  // --- primitives for recompute policies (N = s.batch · s.seq) ---
  void forward_block(const step_context& s, std::size_t l, std::size_t slot, std::size_t k) {
    const std::size_t N = s.batch * s.seq;
    blocks_[l].forward(s, residual(slot, l, N), residual(slot, l + 1, N), cache(slot, k));
  }
  void recompute_block(const step_context& s, std::size_t l, std::size_t slot, std::size_t k) {
    const std::size_t N = s.batch * s.seq;
    blocks_[l].forward(s, residual(slot, l, N), slots_.at(slot).spare.matrix(N, c_), cache(slot, k));
  }
  void backward_block(const step_context& s, std::size_t l, std::size_t slot, std::size_t k) {
    auto g = grad(slot, s.batch * s.seq);
    blocks_[l].backward(s, g, g, cache(slot, k));
  }

  // Inference: every block in order from input(0) to output(0), one shared cache.
  void forward(const step_context& s) {
    prepare<recompute::blocks>(1);
    for (std::size_t l = 0; l < blocks_.size(); ++l) forward_block(s, l, 0, 0);
  }

  // Incremental decoding: x (B·n, C) at positions [past, past + n) through every block, in place;
  // each block's attention writes its keys and values into its layer of kv. c: the caller's block
  // cache, shared by every block (there is no backward), so a const model can decode.
  void forward_cached(const step_context& s, matrix_view<float> x, kv_cache& kv, std::size_t past,
                      cache_type& c) const {
    SPARSELM_CHECK(kv.layers() == blocks_.size(), "block_stack: kv cache has ", kv.layers(), " layers for ",
                   blocks_.size(), " blocks");
    for (std::size_t l = 0; l < blocks_.size(); ++l) blocks_[l].forward_cached(s, x, c, kv, l, past);
  }

  // Bytes held by the residual streams, gradients and spare output (the caches' buffers excluded).
  std::size_t buffer_bytes() const noexcept {
    std::size_t b = 0;
    for (auto& st : slots_) b += st.res.capacity() + st.dres.capacity() + st.spare.capacity();
    return b * sizeof(float);
  }

 private:
  struct slot_state {
    buffer res, dres;
    buffer spare;  // output of a recomputed block (discarded)
    std::vector<cache_type> caches;
  };
  cache_type& cache(std::size_t slot, std::size_t k) { return slots_.at(slot).caches.at(k); }

  std::vector<Block> blocks_;
  std::size_t c_ = 0;
  std::vector<slot_state> slots_;
};

}  // namespace sparselm
