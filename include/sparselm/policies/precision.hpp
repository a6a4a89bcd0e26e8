#pragma once
// Precision policies: the dtype of compute and of stored weights.
//
// When to use: `fp32` (default) computes and stores in float. Mixed bf16 compute with fp32 master
// weights and fp16 storage with loss scaling are planned; a trainer instantiated with a
// precision it does not implement fails at compile time.

#include <concepts>

#include "sparselm/core/dtype.hpp"

namespace sparselm::precision {

struct fp32 {
  using compute_type = float;
  using master_type = float;
  static constexpr bool loss_scaling = false;
};

template <class P>
concept policy = requires {
  typename P::compute_type;
  typename P::master_type;
  { P::loss_scaling } -> std::convertible_to<bool>;
};

}  // namespace sparselm::precision
