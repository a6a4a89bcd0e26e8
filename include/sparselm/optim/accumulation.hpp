#pragma once
// Gradient accumulation over micro-batches (S1 --grad-accumulation-mode Sum|Avg and
// --scale-grad-pre-acc).
//
// When to use: always when an optimiser step sees more than one micro-batch. Parameter
// gradients accumulate (+=) in the backward passes, so the only question is where the 1/steps
// of Avg is applied:
//
//   mode  scaling  each micro-batch's loss gradient ×   accumulated gradient ×
//   sum   -        1                                    1
//   avg   post     1                                    1/steps   (fold into opt.step's grad_scale)
//   avg   pre      1/steps                              1         (smaller partial sums: fp16-friendly)
//
//   grad_accumulation acc(j["accumulation"]);   // {"steps": 60, "mode": "avg", "scale_before": true}
//   for (m = 0; m < acc.steps; ++m) backward(dloss = acc.micro_batch_scale() * loss_scale);
//   opt.step(params, grads, lr, acc.final_scale() / loss_scale);

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>

#include "sparselm/core/error.hpp"
#include "sparselm/core/json.hpp"

namespace sparselm::optim {

enum class accumulation_mode { sum, avg };

struct grad_accumulation {
  std::size_t steps = 1;  // micro-batches per optimiser step
  accumulation_mode mode = accumulation_mode::avg;
  bool scale_before = false;  // avg only: scale each micro-batch instead of the sum

  grad_accumulation() = default;
  grad_accumulation(std::size_t n, accumulation_mode m, bool before = false) : steps(n), mode(m), scale_before(before) {
    validate();
  }
  // Fields: steps (1), mode ("sum" | "avg", default "avg"), scale_before (false).
  explicit grad_accumulation(const nlohmann::json& j) {
    json_fields f(j, "gradient accumulation config");
    f.read("steps", steps, at_least(1));
    std::string m = "avg";
    f.read("mode", m);
    SPARSELM_CHECK(m == "sum" || m == "avg", "gradient accumulation config: field 'mode' must be \"sum\" or \"avg\", ",
                   "got \"", m, "\"");
    mode = m == "sum" ? accumulation_mode::sum : accumulation_mode::avg;
    f.read("scale_before", scale_before);
    f.finish();
    validate();
  }

  void validate() const {
    SPARSELM_CHECK(steps >= 1, "gradient accumulation config: field 'steps' must be >= 1, got ", steps);
    SPARSELM_CHECK(!(scale_before && mode == accumulation_mode::sum),
                   "gradient accumulation config: field 'scale_before' only applies to mode \"avg\"");
  }

  // Multiplier for each micro-batch's loss gradient (before its backward pass).
  float micro_batch_scale() const noexcept {
    return mode == accumulation_mode::avg && scale_before ? 1.0f / float(steps) : 1.0f;
  }
  // Multiplier for the accumulated gradient (pass to the optimiser as grad_scale, or scale_grads).
  float final_scale() const noexcept {
    return mode == accumulation_mode::avg && !scale_before ? 1.0f / float(steps) : 1.0f;
  }
};

inline void from_json(const nlohmann::json& j, grad_accumulation& a) { a = grad_accumulation(j); }
inline void to_json(nlohmann::json& j, const grad_accumulation& a) {
  j = {
      {"steps", a.steps}, {"mode", a.mode == accumulation_mode::sum ? "sum" : "avg"}, {"scale_before", a.scale_before}};
}

}  // namespace sparselm::optim
