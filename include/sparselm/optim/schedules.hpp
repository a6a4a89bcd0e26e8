#pragma once
// Learning-rate schedules: small value types with `float operator()(std::size_t step)`,
// and make_schedule(json) for configs. `step` counts optimiser steps from 0. Formulas are
// evaluated in double.
//
//   type            fields (default)                                          formula
//   constant        lr                                                        lr
//   warmup_cosine   max_lr, total_steps, warmup_steps (0), min_lr (0)         linear 0 → max over warmup, then
//                                                                             min + (max−min)·½(1 + cos(π·p))
//   linear          max_lr, total_steps, warmup_proportion (0), min_lr (1e-7) S2/S4: min → max over
//                                                                             int(total·prop) steps, then → min at
//                                                                             total
//   up_down         max_lr, total_steps, warmup_frac (0), min_lr (1e-7)       S3: warm = int(frac·total);
//                                                                             step/warm·max, then
//                                                                             max·(total − step − 1)/(total − warm);
//                                                                             floored at min_lr
//   bert_power      peak_lr, cooldown_steps, warmup_steps (0), min_lr (0),    S1 BertSchedule: step/warmup·peak, then
//                   power (0.5)                                               (peak−min)·(1 − min(step−warmup,
//                                                                             cooldown)/cooldown)^power + min
//
//   any type        sparse_lr_rescale (absent): s in [0, 1); every rate × exp(1.969 s² + 0.2905 s)
//
//   auto lr = sparselm::optim::make_schedule(j["schedule"]).scaled(sparse_lr_scale(0.9));
//   opt.step(params, grads, lr(step));

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <numbers>
#include <string>
#include <type_traits>
#include <utility>

#include "sparselm/core/error.hpp"
#include "sparselm/core/json.hpp"
#include "sparselm/sparse/schedule.hpp"

namespace sparselm::optim {

// The sparse learning-rate multiplier η(s)/η₀ = exp(1.969 s² + 0.2905 s) (docs/design/sparsity-algorithm.md);
// a schedule JSON may ask for it with "sparse_lr_rescale": s.
using sparse::sparse_lr_scale;

namespace detail {
inline void check_lr(const char* schedule, const char* field, double v) {
  SPARSELM_CHECK(std::isfinite(v) && v >= 0, "schedule '", schedule, "': field '", field, "' must be >= 0, got ", v);
}
inline void check_steps(const char* schedule, const char* field, std::size_t v) {
  SPARSELM_CHECK(v >= 1, "schedule '", schedule, "': field '", field, "' must be >= 1, got ", v);
}
}  // namespace detail

struct constant_schedule {
  static constexpr const char* name = "constant";
  float lr = 0.0f;

  explicit constant_schedule(float lr_) : lr(lr_) { validate(); }
  // Fields: type, lr.
  explicit constant_schedule(const nlohmann::json& j) {
    json_fields f(j, "schedule 'constant'");
    f.type_tag(name);
    f.require("lr");
    f.read("lr", lr, at_least(0));
    f.finish();
  }
  void validate() const { detail::check_lr(name, "lr", lr); }
  float operator()(std::size_t) const noexcept { return lr; }
};

struct warmup_cosine_schedule {
  static constexpr const char* name = "warmup_cosine";
  float max_lr = 0.0f;
  std::size_t total_steps = 1;
  std::size_t warmup_steps = 0;
  float min_lr = 0.0f;

  warmup_cosine_schedule(float max, std::size_t total, std::size_t warmup = 0, float min = 0.0f)
      : max_lr(max), total_steps(total), warmup_steps(warmup), min_lr(min) {
    validate();
  }
  // Fields: type, max_lr, total_steps, warmup_steps, min_lr.
  explicit warmup_cosine_schedule(const nlohmann::json& j) {
    json_fields f(j, "schedule 'warmup_cosine'");
    f.type_tag(name);
    f.require("max_lr");
    f.read("max_lr", max_lr, at_least(0));
    f.require("total_steps");
    f.read("total_steps", total_steps, at_least(1));
    f.read("warmup_steps", warmup_steps);
    f.read("min_lr", min_lr, at_least(0));
    f.finish();
    validate();
  }
  void validate() const {
    detail::check_lr(name, "max_lr", max_lr);
    detail::check_lr(name, "min_lr", min_lr);
    detail::check_steps(name, "total_steps", total_steps);
    SPARSELM_CHECK(warmup_steps <= total_steps, "schedule 'warmup_cosine': field 'warmup_steps' (", warmup_steps,
                   ") must not exceed 'total_steps' (", total_steps, ")");
  }
  float operator()(std::size_t step) const noexcept {
    if (step < warmup_steps) return float(double(max_lr) * double(step) / double(warmup_steps));
    double p = double(step - warmup_steps) / double(std::max<std::size_t>(1, total_steps - warmup_steps));
    p = std::min(p, 1.0);
    return float(min_lr + (double(max_lr) - min_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * p)));
  }
};

namespace detail {
// max_lr, total_steps, a warm-up fraction of total_steps and min_lr: the fields of linear and
// up_down (JSON calls the fraction `fraction_key`).
// The warmup fraction's admissible range (json.hpp's in_range or in_closed).
using fraction_check = std::function<std::string(double)>;

struct fraction_warmup {
  float max_lr = 0.0f;
  std::size_t total_steps = 1;
  float warmup_fraction = 0.0f;
  float min_lr = 1e-7f;

  fraction_warmup(float max, std::size_t total, float fraction, float min)
      : max_lr(max), total_steps(total), warmup_fraction(fraction), min_lr(min) {}
  fraction_warmup(const nlohmann::json& j, const char* name, const char* fraction_key, fraction_check fraction_range) {
    json_fields f(j, std::string("schedule '") + name + "'");
    f.type_tag(name);
    f.require("max_lr");
    f.read("max_lr", max_lr, at_least(0));
    f.require("total_steps");
    f.read("total_steps", total_steps, at_least(1));
    f.read(fraction_key, warmup_fraction, fraction_range);
    f.read("min_lr", min_lr, at_least(0));
    f.finish();
  }
  void validate(const char* name, const char* fraction_key, const fraction_check& fraction_range) const {
    check_lr(name, "max_lr", max_lr);
    check_lr(name, "min_lr", min_lr);
    check_steps(name, "total_steps", total_steps);
    const std::string msg = fraction_range(warmup_fraction);
    SPARSELM_CHECK(msg.empty(), "schedule '", name, "': field '", fraction_key, "' ", msg);
  }
  std::size_t warmup_steps() const noexcept { return std::size_t(double(total_steps) * double(warmup_fraction)); }
};
}  // namespace detail

// S2/S4: JSON fields type, max_lr, total_steps, warmup_proportion (0, in [0, 1]), min_lr (1e-7).
struct linear_schedule : detail::fraction_warmup {
  static constexpr const char* name = "linear";

  linear_schedule(float max, std::size_t total, float warmup_proportion = 0.0f, float min = 1e-7f)
      : fraction_warmup(max, total, warmup_proportion, min) {
    validate(name, "warmup_proportion", in_closed(0.0, 1.0));
  }
  explicit linear_schedule(const nlohmann::json& j)
      : fraction_warmup(j, name, "warmup_proportion", in_closed(0.0, 1.0)) {}

  float operator()(std::size_t step) const noexcept {
    const std::size_t warm = warmup_steps();
    const double lo = min_lr, hi = max_lr;
    if (warm > 0 && step <= warm) return float(lo + (hi - lo) * double(step) / double(warm));
    if (step >= total_steps) return min_lr;
    return float(hi + (lo - hi) * double(step - warm) / double(total_steps - warm));
  }
};

// S3: JSON fields type, max_lr, total_steps, warmup_frac (0, in [0, 1)), min_lr (1e-7).
struct up_down_schedule : detail::fraction_warmup {
  static constexpr const char* name = "up_down";

  up_down_schedule(float max, std::size_t total, float warmup_frac = 0.0f, float min = 1e-7f)
      : fraction_warmup(max, total, warmup_frac, min) {
    validate(name, "warmup_frac", in_range(0.0, 1.0));
  }
  explicit up_down_schedule(const nlohmann::json& j) : fraction_warmup(j, name, "warmup_frac", in_range(0.0, 1.0)) {}

  float operator()(std::size_t step) const noexcept {
    const std::size_t warm = warmup_steps();
    double lr = step < warm ? double(step) / double(warm) * max_lr
                            : double(max_lr) * (double(total_steps) - double(step) - 1.0) / double(total_steps - warm);
    return float(std::max(lr, double(min_lr)));
  }
};

struct bert_power_schedule {
  static constexpr const char* name = "bert_power";
  float peak_lr = 0.0f;
  std::size_t cooldown_steps = 1;
  std::size_t warmup_steps = 0;
  float min_lr = 0.0f;
  float power = 0.5f;

  bert_power_schedule(float peak, std::size_t cooldown, std::size_t warmup = 0, float min = 0.0f, float pow = 0.5f)
      : peak_lr(peak), cooldown_steps(cooldown), warmup_steps(warmup), min_lr(min), power(pow) {
    validate();
  }
  // Fields: type, peak_lr, cooldown_steps, warmup_steps, min_lr, power.
  explicit bert_power_schedule(const nlohmann::json& j) {
    json_fields f(j, "schedule 'bert_power'");
    f.type_tag(name);
    f.require("peak_lr");
    f.read("peak_lr", peak_lr, at_least(0));
    f.require("cooldown_steps");
    f.read("cooldown_steps", cooldown_steps, at_least(1));
    f.read("warmup_steps", warmup_steps);
    f.read("min_lr", min_lr, at_least(0));
    f.read("power", power, greater_than(0));
    f.finish();
    validate();
  }
  void validate() const {
    detail::check_lr(name, "peak_lr", peak_lr);
    detail::check_lr(name, "min_lr", min_lr);
    detail::check_steps(name, "cooldown_steps", cooldown_steps);
    SPARSELM_CHECK(std::isfinite(power) && power > 0, "schedule 'bert_power': field 'power' must be > 0, got ", power);
  }
  float operator()(std::size_t step) const noexcept {
    if (step < warmup_steps) return float(double(step) / double(warmup_steps) * peak_lr);
    double done = double(std::min(step - warmup_steps, cooldown_steps)) / double(cooldown_steps);
    return float((double(peak_lr) - min_lr) * std::pow(1.0 - done, double(power)) + min_lr);
  }
};

// A schedule of any of the types above (or any callable step -> lr), type-erased.
class schedule {
 public:
  template <class F>
  requires(!std::same_as<std::remove_cvref_t<F>, schedule> && std::is_invocable_r_v<float, const F&, std::size_t>)
      schedule(F f, std::string name = "custom")
      : f_(std::make_shared<std::function<float(std::size_t)>>(std::move(f))), name_(std::move(name)) {}

  float operator()(std::size_t step) const { return float(double((*f_)(step)) * scale_); }
  const std::string& name() const noexcept { return name_; }
  double scale() const noexcept { return scale_; }

  // The same schedule with every learning rate multiplied by `factor` (e.g. sparse_lr_scale(s)).
  schedule scaled(double factor) const {
    SPARSELM_CHECK(std::isfinite(factor) && factor > 0, "schedule: scale factor must be > 0, got ", factor);
    schedule s = *this;
    s.scale_ *= factor;
    return s;
  }

 private:
  std::shared_ptr<const std::function<float(std::size_t)>> f_;
  std::string name_;
  double scale_ = 1.0;
};

// Builds a schedule from {"type": ..., fields...}; errors name the type and the field.
inline schedule make_schedule(const nlohmann::json& j) {
  SPARSELM_CHECK(j.is_object(), "schedule: expected a JSON object, got ", j.type_name(), " ", j.dump());
  SPARSELM_CHECK(j.contains("type"), "schedule: missing required field 'type' (one of constant, warmup_cosine, ",
                 "linear, up_down, bert_power)");
  SPARSELM_CHECK(j.at("type").is_string(), "schedule: field 'type' must be a string, got ", j.at("type").dump());
  if (j.contains("sparse_lr_rescale")) {
    const auto& s = j.at("sparse_lr_rescale");
    SPARSELM_CHECK(s.is_number(), "schedule: field 'sparse_lr_rescale' must be the sparsity s in [0, 1), got ",
                   s.dump());
    nlohmann::json rest = j;
    rest.erase("sparse_lr_rescale");
    return make_schedule(rest).scaled(sparse_lr_scale(s.get<double>()));
  }
  const std::string type = j.at("type").get<std::string>();
  auto make = [&]<class T>() { return schedule(T(j), T::name); };
  if (type == constant_schedule::name) return make.template operator()<constant_schedule>();
  if (type == warmup_cosine_schedule::name) return make.template operator()<warmup_cosine_schedule>();
  if (type == linear_schedule::name) return make.template operator()<linear_schedule>();
  if (type == up_down_schedule::name) return make.template operator()<up_down_schedule>();
  if (type == bert_power_schedule::name) return make.template operator()<bert_power_schedule>();
  fail("schedule: unknown type '", type, "' (one of constant, warmup_cosine, linear, up_down, bert_power)");
}

}  // namespace sparselm::optim
