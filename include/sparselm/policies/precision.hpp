#pragma once
// Precision policies: the dtype of the compute, the master weights and the loss scaling.
//
// In every policy the model's parameters, gradients and optimiser state stay fp32 (master
// weights: what the optimiser updates and checkpoints hold, so checkpoints load under any
// precision); what changes is the type the dense projections and the LM head multiply in:
//
//   fp32        - float everywhere (default).
//   bf16_mixed  - the GEMMs of linear layers and of the LM head take bf16 operands (weights and
//                 activations rounded to bf16 while they are packed for the kernel: the "bf16 copy"
//                 of a weight is made panel by panel and never stored whole) and accumulate in
//                 fp32 (kernels::gemm_bf16: vdpbf16ps on AVX512-BF16, the portable path elsewhere).
//                 No loss scaling: bf16 has fp32's range.
//   fp16_mixed  - the same with IEEE half operands (kernels::gemm_f16) and dynamic loss scaling
//                 (the trainer turns it on when the options leave loss scaling at its default).
//   configured  - the compute type is read from trainer_options::precision at run time (what the
//                 programs use: one instantiation serves every precision, see docs/design/precision.md).
//
// Softmax statistics, the loss, layer norms, attention, the block-sparse kernels and the
// optimiser run in fp32 under every policy (docs/design/precision.md says where each precision acts).

#include <concepts>
#include <optional>
#include <string>
#include <string_view>

#include "sparselm/core/dtype.hpp"
#include "sparselm/core/error.hpp"

namespace sparselm::precision {

struct fp32 {
  using master_type = float;
  static constexpr std::optional<dtype> compute = dtype::f32;
  static constexpr bool loss_scaling = false;
};

struct bf16_mixed {
  using master_type = float;
  static constexpr std::optional<dtype> compute = dtype::bf16;
  static constexpr bool loss_scaling = false;
};

struct fp16_mixed {
  using master_type = float;
  static constexpr std::optional<dtype> compute = dtype::f16;
  static constexpr bool loss_scaling = true;
};

// The compute type comes from the trainer's options (run config "trainer.precision", --precision).
struct configured {
  using master_type = float;
  static constexpr std::optional<dtype> compute = std::nullopt;
  static constexpr bool loss_scaling = false;  // fp16 turns it on at run time
};

template <class P>
concept policy = requires {
  typename P::master_type;
  { P::compute } -> std::convertible_to<std::optional<dtype>>;
  { P::loss_scaling } -> std::convertible_to<bool>;
} && std::same_as<typename P::master_type, float>;

// The names used by configs and flags: "fp32", "bf16", "fp16".
inline constexpr std::string_view name(dtype d) noexcept {
  return d == dtype::bf16 ? "bf16" : d == dtype::f16 ? "fp16" : "fp32";
}
inline dtype parse(const std::string& s, const std::string& context) {
  if (s == "fp32") return dtype::f32;
  if (s == "bf16") return dtype::bf16;
  if (s == "fp16") return dtype::f16;
  fail(context, ": precision '", s, "' is not one of: fp32, bf16, fp16");
}

}  // namespace sparselm::precision
