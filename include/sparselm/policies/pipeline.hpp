#pragma once
// Pipeline policies: the order in which a model runs the parts of a training step over its
// micro-batches — the schedule that stage pipelining reorders.
//
// A training step over M micro-batches is a list of schedule_steps (part, index, micro-batch,
// direction): the embedding, each block l of the stack, and the head (whose "forward" computes the
// loss and its own backward). A model executes the list in order (models/transformer.hpp); a
// micro-batch's activations live in slot `micro % in_flight(M)`, so a schedule with several
// micro-batches in flight gets that many residual streams.
//
// When to use: `none` (default) runs each micro-batch forward and backward before the next one
// (one in flight; kernels use all threads). Stage pipelining (stages on their own thread groups or
// MPI ranks, 1F1B order) reorders these steps; it is not implemented yet, and a trainer
// instantiated with another pipeline type fails at compile time.

#include <concepts>
#include <cstddef>
#include <vector>

namespace sparselm::pipeline {

enum class part { embedding, block, head };
enum class direction { forward, backward };

struct schedule_step {
  part what = part::block;
  std::size_t index = 0;  // block index (part::block)
  std::size_t micro = 0;  // micro-batch
  direction dir = direction::forward;
  bool operator==(const schedule_step&) const = default;
};

struct none {
  static constexpr const char* name = "none";
  static constexpr std::size_t stages = 1;
  static constexpr std::size_t in_flight(std::size_t) noexcept { return 1; }
  // Per micro-batch: embedding, blocks 0..L-1, head (loss + its backward), blocks L-1..0 backward,
  // embedding backward.
  static std::vector<schedule_step> schedule(std::size_t layers, std::size_t micro_batches) {
    std::vector<schedule_step> r;
    r.reserve(micro_batches * (2 * layers + 3));
    for (std::size_t m = 0; m < micro_batches; ++m) {
      r.push_back({part::embedding, 0, m, direction::forward});
      for (std::size_t l = 0; l < layers; ++l) r.push_back({part::block, l, m, direction::forward});
      r.push_back({part::head, 0, m, direction::forward});
      for (std::size_t l = layers; l-- > 0;) r.push_back({part::block, l, m, direction::backward});
      r.push_back({part::embedding, 0, m, direction::backward});
    }
    return r;
  }
};

template <class P>
concept policy = requires(std::size_t n) {
  { P::stages } -> std::convertible_to<std::size_t>;
  { P::in_flight(n) } -> std::convertible_to<std::size_t>;
  { P::schedule(n, n) } -> std::convertible_to<std::vector<schedule_step>>;
};

}  // namespace sparselm::pipeline
