#pragma once
// A transformer model = embedding + block stack + head, over one parameter arena.
//
// transformer<Embedding, Block, Head, Batch> owns the arenas (values and gradients), the three
// parts and their per-micro-batch state, and runs every pass:
//   forward_backward<Recompute, Pipeline>(ctx, micro_batches, scales)   a training step's passes,
//                                                 in the order of the pipeline policy's schedule
//   forward_backward<Recompute>(ctx, batch, scale)   one micro-batch
//   evaluate(batch)                               loss without gradients
//   logits(ids, batch, seq, out), hidden(...)     inference
// GPT (models/gpt.hpp), the S1 sparse LM (models/sparse_lm.hpp) and BERT differ only in the parts
// they plug in and in their configs and initialisation, which derived classes add.
//
// The parts' contracts (Batch has ids, batch, seq and optionally lengths):
//   Embedding: forward(s, ids, x0 (N,C), cache, pos_offset), backward(s, ids, dx0, cache); or, for
//              a Batch with token_types, forward(s, ids, types, x0, cache), backward(s, ids, types, dx0, cache)
//   Block:     transformer_block (layers/block.hpp)
//   Head:      forward_backward(s, xL, batch, grad_scale, dxL, cache[, ce]) -> loss_stats,
//              logits(s, xL, out, cache), loss_normaliser(batch)
// and each is visitable (layers/visit.hpp), so init, parameter lists and sparse weights are derived.

#include <algorithm>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "sparselm/core/arena.hpp"
#include "sparselm/core/error.hpp"
#include "sparselm/layers/context.hpp"
#include "sparselm/layers/linear.hpp"
#include "sparselm/layers/lm_head.hpp"
#include "sparselm/layers/visit.hpp"
#include "sparselm/models/lm_loss.hpp"
#include "sparselm/models/stack.hpp"
#include "sparselm/policies/pipeline.hpp"
#include "sparselm/policies/recompute.hpp"
#include "sparselm/sparse/update.hpp"

namespace sparselm {

template <class Embedding, class Block, class Head, class Batch>
class transformer {
 public:
  using embedding_type = Embedding;
  using block_type = Block;
  using head_type = Head;
  using batch_type = Batch;
  using stack_type = block_stack<Block>;

  transformer(const transformer&) = delete;
  transformer& operator=(const transformer&) = delete;
  transformer(transformer&&) = default;
  transformer& operator=(transformer&&) = default;

  const std::shared_ptr<const arena_layout>& layout() const noexcept { return layout_; }
  std::size_t vocab_size() const noexcept { return vocab_; }
  std::size_t max_positions() const noexcept { return max_seq_; }
  // How many blocks the block-sparse projections got (unused by dense models).
  const sparse_plan& plan() const noexcept { return plan_; }
  arena<float>& params() noexcept { return params_; }
  const arena<float>& params() const noexcept { return params_; }
  arena<float>& grads() noexcept { return grads_; }
  std::size_t num_parameters() const noexcept { return layout_->parameters(); }
  const Embedding& embedding() const noexcept { return emb_; }
  const stack_type& stack() const noexcept { return stack_; }
  stack_type& stack() noexcept { return stack_; }
  const Head& head() const noexcept { return head_; }
  Head& head() noexcept { return head_; }
  template <class F>
  void visit(F&& f) const {
    f(emb_);
    f(stack_);
    f(head_);
  }

  // The block-sparse weights, for a pattern updater (empty when every weight is dense).
  std::vector<sparse::sparse_weight> sparse_weights() {
    std::vector<sparse::sparse_weight> r;
    visit_tree(*this, [&](const auto& n) {
      using N = std::decay_t<decltype(n)>;
      if constexpr (requires { n.updater_view(params_); }) {
        if constexpr (is_linear_v<N>) r.push_back(n.updater_view(params_));
      }
    });
    return r;
  }

  // Denominator of the batch's mean loss (the trainer scales the gradient by its inverse).
  double loss_normaliser(const Batch& b) const { return head_.loss_normaliser(b); }

  // The passes of a training step over micro-batches, in the order of Pipeline's schedule.
  // Gradients accumulate: grads += Σ_m scales[m] · ∂(Σ w·CE of micro-batch m)/∂θ.
  // ctx supplies training (dropout), step and the dropout key; micro-batch m runs with
  // ctx.micro + m (its dropout streams), and the shapes are set here.
  template <recompute::policy Recompute = recompute::none, pipeline::policy Pipeline = pipeline::none>
  loss_stats forward_backward(step_context ctx, std::span<const Batch> micro, std::span<const float> scales) {
    SPARSELM_CHECK(micro.size() == scales.size(), "model: ", micro.size(), " micro-batches and ", scales.size(),
                   " gradient scales");
    const std::size_t slots = Pipeline::in_flight(micro.size());
    stack_.template prepare<Recompute>(slots);
    if (emb_c_.size() < slots) emb_c_.resize(slots);
    loss_stats st;
    const std::uint64_t first = ctx.micro;
    // Data parallelism: a part's gradient range is final after its last micro-batch's backward.
    const bool report = ctx.grads_ready && !grad_ranges_.empty();
    if (report) backward_done_.assign(stack_.size() + 2, 0);
    auto finished = [&](std::size_t part) {  // 0: embedding, 1 + l: block l, L + 1: head
      if (report && ++backward_done_[part] == micro.size())
        (*ctx.grads_ready)(grad_ranges_[part].first, grad_ranges_[part].second);
    };
    for (const auto& step : Pipeline::schedule(stack_.size(), micro.size())) {
      const Batch& b = micro[step.micro];
      ctx.micro = first + step.micro;
      const auto s = bind(ctx, b);
      const std::size_t slot = step.micro % slots, N = b.batch * b.seq;
      const bool fwd = step.dir == pipeline::direction::forward;
      switch (step.what) {
        case pipeline::part::embedding:
          if (fwd) {
            embed_forward(s, b, stack_.input(slot, N), emb_c_[slot]);
          } else {
            embed_backward(s, b, stack_.grad(slot, N), emb_c_[slot]);
            finished(0);
          }
          break;
        case pipeline::part::block:
          if (fwd) {
            Recompute::forward(stack_, s, step.index, slot);
          } else {
            Recompute::backward(stack_, s, step.index, slot);
            finished(1 + step.index);
          }
          break;
        case pipeline::part::head:
          st += head_.forward_backward(s, stack_.output(slot, N), b, scales[step.micro], stack_.grad(slot, N), head_c_);
          finished(stack_.size() + 1);
          break;
      }
    }
    return st;
  }

  // One micro-batch (numbered ctx.micro for its dropout streams).
  template <recompute::policy Recompute = recompute::none>
  loss_stats forward_backward(step_context ctx, const Batch& b, float grad_scale) {
    return forward_backward<Recompute>(ctx, std::span<const Batch>(&b, 1), std::span<const float>(&grad_scale, 1));
  }

  // Loss without gradients (dropout off unless ctx.training). ce (optional, B·T): per-position
  // unweighted cross-entropy.
  loss_stats evaluate(const Batch& b, step_context ctx = {}, std::span<float> ce = {}) {
    const auto s = forward_stack(ctx, b);
    const std::size_t N = b.batch * b.seq;
    return head_.forward_backward(s, stack_.output(0, N), b, 1.0f, {}, head_c_, ce);
  }

  // The stack's output (B·T, C) for a batch: the hidden states before the head (valid until the
  // next pass).
  const_matrix_view<float> hidden(const Batch& b, step_context ctx = {}) {
    forward_stack(ctx, b);
    return stack_.output(0, b.batch * b.seq);
  }

  // Full logits (B·T, V) for a batch, or for ids (B·T) of a token model.
  void logits(const Batch& b, matrix_view<float> out, step_context ctx = {}) {
    const auto s = forward_stack(ctx, b);
    head_.logits(s, stack_.output(0, b.batch * b.seq), out, head_c_);
  }
  void logits(std::span<const std::int32_t> ids, std::size_t batch, std::size_t seq, matrix_view<float> out)
    requires std::is_same_v<Batch, token_batch>
  {
    logits(token_batch{ids, {}, {}, batch, seq}, out);
  }

  // Bytes held by activations and scratch (for memory reports).
  std::size_t activation_bytes() const noexcept { return tmp_.bytes() + stack_.buffer_bytes(); }

 protected:
  transformer() = default;

  // Blocks "<prefix>0" … "<prefix><layers-1>" on a layout (HF GPT-2 names by default; block l's
  // dropout site is 16 + l).
  static std::vector<Block> make_blocks(arena_layout& layout, std::size_t layers, const block_options& o,
                                        const std::string& prefix = "h.") {
    std::vector<Block> blocks;
    blocks.reserve(layers);
    for (std::size_t l = 0; l < layers; ++l) blocks.emplace_back(layout, prefix + std::to_string(l), o, 16 + l);
    return blocks;
  }

  // Derived constructors build the parts on a layout (embedding, blocks, head, in that order),
  // then hand them over; the arenas are allocated here.
  void assemble(std::shared_ptr<arena_layout> layout, Embedding emb, std::vector<Block> blocks, Head head) {
    emb_ = std::move(emb);
    stack_ = stack_type(std::move(blocks));
    head_ = std::move(head);
    layout_ = std::move(layout);
    params_ = arena<float>(layout_);
    grads_ = arena<float>(layout_);
    grad_ranges_ = part_ranges();
  }

  // The model's name, vocabulary and longest sequence (with its config field, for errors).
  void set_limits(std::string name, std::size_t vocab, std::size_t max_seq, std::string max_seq_field) {
    name_ = std::move(name);
    vocab_ = vocab;
    max_seq_ = max_seq;
    max_seq_field_ = std::move(max_seq_field);
  }

  sparse_plan plan_;  // set by derived constructors before they build the parts

 private:
  // Checks a batch against the model and binds the step context to this model's storage.
  step_context bind(step_context s, const Batch& b) {
    SPARSELM_CHECK(b.batch > 0 && b.seq > 0, name_, ": empty batch (", b.batch, " x ", b.seq, ")");
    SPARSELM_CHECK(b.seq <= max_seq_, name_, ": sequence length ", b.seq, " exceeds ", max_seq_field_, " ", max_seq_);
    SPARSELM_CHECK(b.ids.size() == b.batch * b.seq, name_, ": ", b.ids.size(), " token ids for a ", b.batch, " x ",
                   b.seq, " batch");
    if constexpr (requires { b.targets; })
      SPARSELM_CHECK(b.targets.empty() || b.targets.size() == b.ids.size(), name_, ": ", b.targets.size(),
                     " targets for ", b.ids.size(), " token ids");
    s.params = &params_;
    s.grads = &grads_;
    s.tmp = &tmp_;
    s.batch = b.batch;
    s.seq = b.seq;
    if constexpr (requires { b.lengths; }) s.lengths = b.lengths;
    return s;
  }

  // The embedding reads the token ids, and the token types when it takes them (BERT's segments).
  void embed_forward(const step_context& s, const Batch& b, matrix_view<float> x, typename Embedding::cache& c) {
    if constexpr (requires { b.token_types; }) emb_.forward(s, b.ids, b.token_types, x, c);
    else emb_.forward(s, b.ids, x, c);
  }
  void embed_backward(const step_context& s, const Batch& b, matrix_view<float> dx, typename Embedding::cache& c) {
    if constexpr (requires { b.token_types; }) emb_.backward(s, b.ids, b.token_types, dx, c);
    else emb_.backward(s, b.ids, dx, c);
  }

  step_context forward_stack(step_context ctx, const Batch& b) {
    const auto s = bind(ctx, b);
    stack_.template prepare<recompute::blocks>(1);
    if (emb_c_.empty()) emb_c_.resize(1);
    embed_forward(s, b, stack_.input(0, b.batch * b.seq), emb_c_[0]);
    stack_.forward(s);
    return s;
  }

  // The flat gradient range each part finishes: the embedding [0, block 0), block l up to block
  // l + 1, the head from the end of the last block; the ranges tile the arena. A tensor the head
  // shares with the embedding (tied weights) lies in the embedding's range, whose backward comes
  // last. Empty when the layout does not follow that order (the gradients are then combined
  // after the whole backward).
  std::vector<std::pair<std::size_t, std::size_t>> part_ranges() const {
    const arena_layout& L = *layout_;
    auto span_of = [&](const auto& part) {
      std::size_t lo = L.total(), hi = 0;
      for (const auto& p : parameters_of(part)) {
        lo = std::min(lo, L[p.index].offset);
        hi = std::max(hi, L[p.index].offset + L[p.index].size);
      }
      return std::pair{lo, hi};
    };
    const std::size_t n = stack_.size();
    if (n == 0) return {};
    std::vector<std::pair<std::size_t, std::size_t>> r(n + 2);
    std::vector<std::pair<std::size_t, std::size_t>> used(n);
    for (std::size_t l = 0; l < n; ++l) used[l] = span_of(stack_[l]);
    for (std::size_t l = 0; l < n; ++l) {
      r[1 + l] = {used[l].first, l + 1 < n ? used[l + 1].first : used[l].second};
      if (used[l].first > used[l].second || r[1 + l].second < used[l].second) return {};
    }
    r[0] = {0, used[0].first};
    r[n + 1] = {used[n - 1].second, L.total()};
    if (span_of(emb_).second > r[0].second) return {};
    for (const auto& p : parameters_of(head_)) {
      const std::size_t lo = L[p.index].offset, hi = lo + L[p.index].size;
      const bool in_emb = hi <= r[0].second, in_head = lo >= r[n + 1].first;
      if (!in_emb && !in_head) return {};
    }
    return r;
  }

  std::vector<std::pair<std::size_t, std::size_t>> grad_ranges_;
  std::vector<std::size_t> backward_done_;
  std::string name_ = "model", max_seq_field_ = "the maximum sequence length";
  std::size_t vocab_ = 0, max_seq_ = 0;
  std::shared_ptr<const arena_layout> layout_;
  arena<float> params_, grads_;
  Embedding emb_;
  stack_type stack_;
  Head head_;
  std::vector<typename Embedding::cache> emb_c_;
  typename Head::cache head_c_;
  scratch tmp_;
};

}  // namespace sparselm
