#pragma once
// Data-parallel policies: how gradients are combined across replicas.
//
// When to use: `none` (default) trains one replica in this process. MPI replicas with mean-reduced
// gradients and sharded optimiser state are planned; a trainer instantiated with a
// policy it does not implement fails at compile time.

#include <concepts>

namespace sparselm::data_parallel {

struct none {
  static constexpr bool distributed = false;
};

template <class P>
concept policy = requires {
  { P::distributed } -> std::convertible_to<bool>;
};

}  // namespace sparselm::data_parallel
