#pragma once
// Precision: the names of the compute types a run may choose ("fp32", "bf16", "fp16") and their
// parsing. Precision is a run-time choice (trainer_options::precision, the run config's
// "trainer.precision", --precision), not a policy type: see docs/design/architecture.md, "Precision
// is chosen at run time".
//
// Under every precision the model's parameters, gradients and optimiser state stay fp32 (master
// weights: what the optimiser updates and checkpoints hold, so checkpoints load under any
// precision); what changes is the type the dense projections and the LM head multiply in
// (step_context::compute, read by layers/linear.hpp and layers/sparse_linear.hpp):
//
//   fp32  float everywhere (default).
//   bf16  the GEMMs of linear layers and of the LM head take bf16 operands (weights and
//         activations rounded to bf16 while they are packed for the kernel: the "bf16 copy" of a
//         weight is made panel by panel and never stored whole) and accumulate in fp32
//         (kernels::gemm_bf16: vdpbf16ps on AVX512-BF16, the portable path elsewhere); the
//         activations that only feed such products are kept in bf16. No loss scaling: bf16 has
//         fp32's range.
//   fp16  the same with IEEE half operands (kernels::gemm_f16) and dynamic loss scaling (the
//         trainer turns it on when the options leave loss scaling at its default).
//
// Softmax statistics, the loss, layer norms, attention, the block-sparse kernels and the
// optimiser run in fp32 under every precision (docs/design/precision.md says where each acts).

#include <string>
#include <string_view>

#include "sparselm/core/dtype.hpp"
#include "sparselm/core/error.hpp"

namespace sparselm::precision {

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
