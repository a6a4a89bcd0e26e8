#pragma once
// Loss scaling: the loss gradient is multiplied by `scale()` before backward so that
// small fp16 gradients do not flush to zero; gradients are un-scaled (×1/scale, best folded into
// the optimiser's grad_scale) before the update.
//
// When to use: fp16 storage of activations/gradients. Static scaling is S3's (4096 / 512);
// dynamic scaling is the usual addition: ×growth_factor after growth_interval finite steps in a
// row, ×backoff_factor and skip the step when a gradient is inf/NaN.
//
//   loss_scaler ls(j["loss_scaling"]);           // {"type": "dynamic"} or {"type": "static", "scale": 4096}
//   backward(dloss = ls.scale());
//   if (ls.update(grads_finite(grads))) opt.step(params, grads, lr, 1 / scale_used);
//
// update() returns whether to apply the step; it changes scale() afterwards, so read the scale
// used for this step's gradients before calling it.

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "sparselm/core/arena.hpp"
#include "sparselm/core/error.hpp"
#include "sparselm/core/threads.hpp"
#include "sparselm/optim/engine.hpp"
#include "sparselm/core/json.hpp"

namespace sparselm::optim {

// True when every gradient of every non-frozen tensor is finite.
inline bool grads_finite(const arena<float>& grads) {
  SPARSELM_CHECK(!grads.empty(), "grads_finite: empty gradient arena");
  const auto segs = detail::split_segments(grads.layout());
  const float* g = grads.all().data();
  std::vector<unsigned char> ok(segs.size(), 1);
  parallel_for(0, segs.size(), [&](std::size_t k) {
    // inf and NaN have an all-ones exponent; an integer OR-reduction the compiler vectorises.
    std::uint32_t bad = 0;
    const float* p = g + segs[k].begin;
    for (std::size_t i = 0; i < segs[k].size(); ++i)
      bad |= std::uint32_t((std::bit_cast<std::uint32_t>(p[i]) & 0x7f800000u) == 0x7f800000u);
    ok[k] = bad == 0;
  });
  for (auto v : ok)
    if (!v) return false;
  return true;
}

struct loss_scale_config {
  bool dynamic = false;
  float scale = 1.0f;  // static scale, or the initial dynamic scale
  std::size_t growth_interval = 2000;
  float growth_factor = 2.0f;
  float backoff_factor = 0.5f;
  float min_scale = 1.0f;
  float max_scale = 16777216.0f;  // 2^24

  loss_scale_config() = default;
  // {"type": "static", "scale": s} or {"type": "dynamic", "scale" (65536), "growth_interval",
  // "growth_factor", "backoff_factor", "min_scale", "max_scale"}; a bare number is a static scale.
  explicit loss_scale_config(const nlohmann::json& j) {
    if (j.is_number()) {
      dynamic = false;
      scale = j.get<float>();
      validate();
      return;
    }
    json_fields f(j, "loss scaling config");
    std::string type = "static";
    f.read("type", type);
    SPARSELM_CHECK(type == "static" || type == "dynamic", "loss scaling config: field 'type' must be \"static\" or ",
                   "\"dynamic\", got \"", type, "\"");
    dynamic = type == "dynamic";
    if (dynamic) scale = 65536.0f;
    f.read("scale", scale, greater_than(0));
    if (dynamic) {
      f.read("growth_interval", growth_interval, at_least(1));
      f.read("growth_factor", growth_factor, greater_than(0));
      f.read("backoff_factor", backoff_factor, greater_than(0));
      f.read("min_scale", min_scale, greater_than(0));
      f.read("max_scale", max_scale, greater_than(0));
    }
    f.finish();
    validate();
  }

  void validate() const {
    SPARSELM_CHECK(std::isfinite(scale) && scale > 0, "loss scaling config: field 'scale' must be > 0, got ", scale);
    if (!dynamic) return;
    SPARSELM_CHECK(growth_interval >= 1, "loss scaling config: field 'growth_interval' must be >= 1");
    SPARSELM_CHECK(growth_factor > 1, "loss scaling config: field 'growth_factor' must be > 1, got ", growth_factor);
    SPARSELM_CHECK(backoff_factor > 0 && backoff_factor < 1,
                   "loss scaling config: field 'backoff_factor' must be in (0, 1), got ", backoff_factor);
    SPARSELM_CHECK(min_scale <= max_scale, "loss scaling config: field 'min_scale' (", min_scale,
                   ") must not exceed 'max_scale' (", max_scale, ")");
    SPARSELM_CHECK(scale >= min_scale && scale <= max_scale, "loss scaling config: field 'scale' (", scale,
                   ") must be within [min_scale, max_scale] = [", min_scale, ", ", max_scale, "]");
  }
};

class loss_scaler {
 public:
  loss_scaler() = default;  // static scale 1: no scaling
  explicit loss_scaler(const loss_scale_config& c) : cfg_(c), scale_(c.scale) { cfg_.validate(); }
  explicit loss_scaler(const nlohmann::json& j) : loss_scaler(loss_scale_config(j)) {}

  static loss_scaler fixed(float scale) {
    loss_scale_config c;
    c.scale = scale;
    return loss_scaler(c);
  }
  static loss_scaler dynamic(loss_scale_config c = {}) {
    c.dynamic = true;
    if (c.scale == 1.0f) c.scale = 65536.0f;
    return loss_scaler(c);
  }

  float scale() const noexcept { return scale_; }
  float inv_scale() const noexcept { return 1.0f / scale_; }
  bool is_dynamic() const noexcept { return cfg_.dynamic; }
  const loss_scale_config& config() const noexcept { return cfg_; }
  std::size_t skipped_steps() const noexcept { return skipped_; }
  std::size_t good_steps() const noexcept { return good_; }

  // Records whether this step's gradients were finite; returns true when the step should be
  // applied. Non-finite: skip (and with dynamic scaling, scale ×backoff down to min_scale).
  // Finite with dynamic scaling: after growth_interval such steps in a row, scale ×growth up to
  // max_scale.
  bool update(bool finite) {
    if (!finite) {
      ++skipped_;
      good_ = 0;
      if (cfg_.dynamic) scale_ = std::max(cfg_.min_scale, scale_ * cfg_.backoff_factor);
      return false;
    }
    if (cfg_.dynamic && ++good_ >= cfg_.growth_interval) {
      scale_ = std::min(cfg_.max_scale, scale_ * cfg_.growth_factor);
      good_ = 0;
    }
    return true;
  }

  // Checkpoint state: {"scale", "good_steps", "skipped_steps"}.
  nlohmann::json state() const {
    return {{"scale", scale_}, {"good_steps", good_}, {"skipped_steps", skipped_}, {"dynamic", cfg_.dynamic}};
  }
  void restore(const nlohmann::json& j) {
    json_fields f(j, "loss scaler state");
    float s = scale_;
    f.require("scale");
    f.read("scale", s, greater_than(0));
    f.read("good_steps", good_);
    f.read("skipped_steps", skipped_);
    f.ignore({"dynamic"});
    f.finish();
    scale_ = s;
  }

 private:
  loss_scale_config cfg_;
  float scale_ = 1.0f;
  std::size_t good_ = 0;
  std::size_t skipped_ = 0;
};

}  // namespace sparselm::optim
