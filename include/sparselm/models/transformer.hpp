#pragma once
// A transformer model = embedding + block stack + head, over one parameter arena.
//
// transformer<Embedding, Block, Head, Batch> owns the arenas (values and gradients), the three
// parts and their per-micro-batch state, and runs every pass:
//   forward_backward<Recompute, Pipeline>(ctx, micro_batches, scales)   a training step's passes,
//                                                 in sequence or over the pipeline policy's stages
//   forward_backward<Recompute>(ctx, batch, scale)   one micro-batch
//   evaluate(batch)                               loss without gradients (over ranks: this one's stage)
// Staged steps (more than one pipeline stage) run in pipeline_staging (models/pipeline_staging.hpp).
//   logits(ids, batch, seq, out), hidden(...)     inference
// GPT (models/gpt.hpp), the S1 sparse LM (models/sparse_lm.hpp) and BERT differ only in the parts
// they plug in and in their configs and initialisation, which derived classes add.
//
// The parts' contracts (Batch has ids, batch, seq and optionally lengths):
//   Embedding: forward(s, ids, x0 (N,C), cache, pos_offset), backward(s, ids, dx0, cache); or, for
//              a Batch with token_types, forward(s, ids, types, x0, cache), backward(s, ids, types, dx0, cache)
//   Block:     transformer_block (layers/block.hpp)
//   Head:      forward_backward(s, xL, batch, grad_scale, dxL, cache[, ce]) -> loss_stats,
//              logits(s, xL, out, cache), loss_normaliser(batch); a head whose projection is tied
//              to the embedding also projection() -> tied_lm_head (layers/lm_head.hpp)
// and each is visitable (layers/visit.hpp), so init, parameter lists and sparse weights are derived.

#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "sparselm/core/arena.hpp"
#include "sparselm/core/error.hpp"
#include "sparselm/core/threads.hpp"
#include "sparselm/layers/context.hpp"
#include "sparselm/layers/linear.hpp"
#include "sparselm/layers/lm_head.hpp"
#include "sparselm/layers/visit.hpp"
#include "sparselm/models/grad_parts.hpp"
#include "sparselm/models/lm_loss.hpp"
#include "sparselm/models/offload_stream.hpp"
#include "sparselm/models/pipeline_staging.hpp"
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

  // Offloaded weights and gradients (trainer_options::offload): both arenas move into unnamed
  // files in `dir` (core/arena.hpp, file_backing; their values copied, a chunk at a time), and the
  // passes then stream them block by block (models/offload_stream.hpp). Best before init(), which
  // then writes the weights straight into their file. Nothing when they are offloaded already.
  void offload_to(const std::filesystem::path& dir) {
    if (params_.file_backed()) return;
    params_ = offloaded_copy(params_, dir, name_ + " weights");
    grads_ = offloaded_copy(grads_, dir, name_ + " gradients");
  }
  bool offloaded() const noexcept { return params_.file_backed(); }
  // The flat element ranges the embedding, each block and the head own (models/grad_parts.hpp).
  const std::vector<std::pair<std::size_t, std::size_t>>& part_ranges() const noexcept { return grad_ranges_; }
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
  // Target counts of the head's objectives when its loss is a sum of means (step_context::objective_counts).
  auto objective_counts(const Batch& b) const
    requires requires(const Head& h) { h.objective_counts(b); }
  {
    return head_.objective_counts(b);
  }

  // The passes of a training step over micro-batches: in sequence, or over the stages of
  // Pipeline's plan (policies/pipeline.hpp) on their own threads.
  // Gradients accumulate: grads += Σ_m scales[m] · ∂(Σ w·CE of micro-batch m)/∂θ.
  // ctx supplies training (dropout), step and the dropout key; micro-batch m runs with
  // ctx.micro + m (its dropout streams), and the shapes are set here.
  template <recompute::policy Recompute = recompute::none, pipeline::policy Pipeline = pipeline::none>
  loss_stats forward_backward(pipeline::pass_context ctx, std::span<const Batch> micro, std::span<const float> scales) {
    SPARSELM_CHECK(micro.size() == scales.size(), "model: ", micro.size(), " micro-batches and ", scales.size(),
                   " gradient scales");
    const pipeline::plan p = Pipeline::resolve(ctx.pipeline);
    if (p.stages > 1) return staging_.template forward_backward<Recompute>(*this, ctx, micro, scales, p);
    stack_.template prepare<Recompute>(1);
    if (emb_c_.empty()) emb_c_.resize(1);
    loss_stats st;
    const std::uint64_t first = ctx.micro;
    // Data parallelism: a part's gradient range is final after its last micro-batch's backward.
    const bool report = ctx.grads_ready && !grad_ranges_.empty();
    if (report) backward_done_.assign(stack_.size() + 2, 0);
    auto finished = [&](std::size_t part) {  // 0: embedding, 1 + l: block l, L + 1: head
      if (report && ++backward_done_[part] == micro.size())
        (*ctx.grads_ready)(grad_ranges_[part].first, grad_ranges_[part].second);
    };
    for (const auto& step : pipeline::sequential_schedule(stack_.size(), micro.size())) {
      const Batch& b = micro[step.micro];
      ctx.micro = first + step.micro;
      const auto s = bind(ctx, b);
      const std::size_t N = b.batch * b.seq;
      const bool fwd = step.dir == pipeline::direction::forward;
      switch (step.what) {
        case pipeline::part::embedding:
          if (fwd) {
            embed_forward(s, b, stack_.input(0, N), emb_c_[0]);
          } else {
            embed_backward(s, b, stack_.grad(0, N), emb_c_[0]);
            finished(0);
          }
          break;
        case pipeline::part::block:
          if (fwd) {
            stream_.before_forward(params_, step.index);
            Recompute::forward(stack_, s, step.index, 0);
            stream_.after_forward(params_, step.index);
          } else {
            stream_.before_backward(params_, grads_, step.index);
            Recompute::backward(stack_, s, step.index, 0);
            stream_.after_backward(params_, grads_, step.index);
            finished(1 + step.index);
          }
          break;
        case pipeline::part::head:
          st += head_.forward_backward(s, stack_.output(0, N), b, scales[step.micro], stack_.grad(0, N), head_c_);
          finished(stack_.size() + 1);
          break;
      }
    }
    return st;
  }

  // What the last staged step did (stages == 1 before the first one; models/stage_runner.hpp).
  using pipeline_report = sparselm::pipeline_report;
  const pipeline_report& last_pipeline() const noexcept { return staging_.report(); }

  // The tensor index ranges the stages of plan p own (stage_tensor_ranges, models/grad_parts.hpp),
  // over the split a pipeline over ranks runs (the plan's, else the cost model's); empty when the
  // layout is not in embedding, blocks, head order.
  std::vector<std::pair<std::size_t, std::size_t>> stage_tensors(const pipeline::plan& p) {
    pipeline::check_split(p.split, p.stages, stack_.size());
    const auto split = p.stages > 1 ? staging_.choose_split(*this, p, p.stages, false) : std::vector<std::size_t>{};
    return stage_tensor_ranges(*layout_, grad_ranges_, split);
  }
  // The head's tensors stage 0 owns (tied to the embedding; tied_head_tensors, models/grad_parts.hpp).
  std::vector<std::size_t> tied_tensors() const { return tied_head_tensors(*layout_, grad_ranges_, head_); }

  // One micro-batch (numbered ctx.micro for its dropout streams).
  template <recompute::policy Recompute = recompute::none>
  loss_stats forward_backward(const pipeline::pass_context& ctx, const Batch& b, float grad_scale) {
    return forward_backward<Recompute>(ctx, std::span<const Batch>(&b, 1), std::span<const float>(&grad_scale, 1));
  }

  // Loss without gradients (dropout off unless ctx.training). ce (optional, B·T): per-position
  // unweighted cross-entropy.
  // With ctx.stage_link (a pipeline over ranks, ctx.pipeline its plan) only this process's stage:
  // non-zero statistics on the last stage; every rank must evaluate the same batches in order.
  loss_stats evaluate(const Batch& b, const pipeline::pass_context& ctx = {}, std::span<float> ce = {}) {
    if (ctx.stage_link) return staging_.evaluate(*this, ctx, b, ce);
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

  // Bytes held by the scratch pool and the stack's residual streams (for memory reports; the
  // blocks' caches, which hold most activations, are not counted).
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
    grad_ranges_ = gradient_part_ranges(*layout_, emb_, stack_, head_);
    stream_ = block_stream(grad_ranges_);
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
  friend class pipeline_staging;  // runs staged steps through the primitives below

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

  // An inference pass in slot 0: binds ctx to the batch and, when embed, embeds it into block 0's input.
  step_context begin_forward(step_context ctx, const Batch& b, bool embed) {
    const auto s = bind(ctx, b);
    stack_.template prepare<recompute::blocks>(1);
    if (emb_c_.empty()) emb_c_.resize(1);
    if (embed) embed_forward(s, b, stack_.input(0, b.batch * b.seq), emb_c_[0]);
    return s;
  }
  step_context forward_stack(step_context ctx, const Batch& b) {
    const auto s = begin_forward(ctx, b, true);
    for (std::size_t l = 0; l < stack_.size(); ++l) {  // stack_.forward(s), offloaded weights streamed
      stream_.before_forward(params_, l);
      stack_.forward_block(s, l, 0, 0);
      stream_.after_forward(params_, l);
    }
    return s;
  }

  // A file-backed copy of `a` in dir, written a chunk at a time and paged out behind; chunks never
  // touched or whose bits are all zero (a model not yet initialised, gradients) are neither read in
  // nor written (the new file reads as zero).
  arena<float> offloaded_copy(const arena<float>& a, const std::filesystem::path& dir, const std::string& what) {
    arena<float> r(layout_, file_backing{dir, what});
    const auto from = a.all();
    auto to = r.all();
    constexpr std::size_t chunk = std::size_t(4) << 20;  // elements
    for (std::size_t b = 0; b < from.size(); b += chunk) {
      const auto part = from.subspan(b, std::min(chunk, from.size() - b));
      if (!a.any_resident(b, b + part.size()) || std::all_of(part.begin(), part.end(), [](float x) { return std::bit_cast<std::uint32_t>(x) == 0; }))
        continue;
      std::copy(part.begin(), part.end(), to.begin() + std::ptrdiff_t(b));
      r.write_behind(b, b + part.size());
    }
    return r;
  }

  std::vector<std::pair<std::size_t, std::size_t>> grad_ranges_;  // gradient_part_ranges (models/grad_parts.hpp)
  std::vector<std::size_t> backward_done_;
  block_stream stream_;  // offloaded weights and gradients: moved block by block around the passes
  std::string name_ = "model", max_seq_field_ = "the maximum sequence length";
  std::size_t vocab_ = 0, max_seq_ = 0;
  std::shared_ptr<const arena_layout> layout_;
  arena<float> params_, grads_;
  Embedding emb_;
  stack_type stack_;
  Head head_;
  std::vector<typename Embedding::cache> emb_c_;  // per slot (sequential) or per micro-batch (staged)
  typename Head::cache head_c_;
  scratch tmp_;
  pipeline_staging staging_;  // what staged steps keep between steps
};

}  // namespace sparselm
