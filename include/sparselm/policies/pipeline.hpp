#pragma once
// Pipeline policies: how the layer stack is split across thread groups.
//
// When to use: `none` (default) runs the stack on one thread group; kernels use all threads.
// Stage pipelining (micro-batches flowing through stages concurrently, SPEC §5) pays when one
// model step cannot keep all cores busy; on a 2-core machine it does not, so only `none` is
// implemented. A trainer instantiated with another pipeline type fails at compile time.

#include <concepts>
#include <cstddef>

namespace sparselm::pipeline {

struct none {
  static constexpr std::size_t stages = 1;
};

template <class P>
concept policy = requires {
  { P::stages } -> std::convertible_to<std::size_t>;
};

}  // namespace sparselm::pipeline
