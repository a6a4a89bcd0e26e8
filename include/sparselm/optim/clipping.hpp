#pragma once
// Gradient clipping: global-norm clip (S2) and per-tensor clip-by-norm (S1).
//
// Both skip param_frozen tensors: their gradients neither count towards a norm nor get scaled.
// Norms are sums of squares per segment of the arena (float lanes, double across blocks), added
// in segment order: the result is the same for every thread count.
//
//   double norm = clip_global_norm(grads, 1.0f);     // returns the pre-clip norm (for the log)
//
// Fast path (one read pass over the gradients instead of read + write): compute the norm,
// then fold the factor into the optimiser's grad_scale:
//
//   double norm = global_norm(grads) * unscale;       // unscale = 1/loss_scale, 1/accumulation ...
//   opt.step(params, grads, lr, unscale * clip_factor(norm, max_norm));

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "sparselm/core/arena.hpp"
#include "sparselm/core/error.hpp"
#include "sparselm/core/simd.hpp"
#include "sparselm/core/threads.hpp"
#include "sparselm/optim/engine.hpp"

namespace sparselm::optim {

// Σ g² per non-frozen tensor (index = tensor; frozen tensors 0). With a range [lo, hi) of flat
// offsets, only the tensors that start in it (the others 0; the same sums, bit for bit).
// Offloaded gradients are paged out segment by segment behind the pass.
template <class Arch = native_arch>
std::vector<double> tensor_sum_squares(const arena<float>& grads, std::size_t lo = 0, std::size_t hi = SIZE_MAX) {
  SPARSELM_CHECK(!grads.empty(), "tensor_sum_squares: empty gradient arena");
  auto segs = detail::split_segments(grads.layout());
  std::erase_if(segs, [&](const detail::segment& s) {
    const std::size_t at = grads.layout()[s.tensor].offset;
    return at < lo || at >= hi;
  });
  std::vector<double> part(segs.size(), 0.0);
  const float* g = grads.all().data();
  detail::for_segments(  // offloaded gradients: a streamed pass, a window of segments at a time
      segs, grads.file_backed(),
      [&](std::size_t k) { part[k] = detail::sum_squares<Arch>(g + segs[k].begin, segs[k].size()); },
      [&](std::size_t lo, std::size_t hi) { grads.prefetch(lo, hi); },
      [&](std::size_t lo, std::size_t hi) { grads.page_out(lo, hi); });
  std::vector<double> out(grads.layout().count(), 0.0);
  for (std::size_t k = 0; k < segs.size(); ++k) out[segs[k].tensor] += part[k];
  return out;
}

// ‖g‖₂ over every non-frozen tensor (NaN or inf when a gradient is).
template <class Arch = native_arch>
double global_norm(const arena<float>& grads) {
  double s = 0.0;
  for (double x : tensor_sum_squares<Arch>(grads)) s += x;
  return std::sqrt(s);
}

// g_max / max(‖g‖, g_max): 1 when the norm is within the limit or not finite (a non-finite
// gradient is a case for loss scaling to skip, not for clipping to hide).
inline float clip_factor(double norm, double max_norm) {
  SPARSELM_CHECK(max_norm > 0 && std::isfinite(max_norm), "clip_factor: max_norm must be > 0, got ", max_norm);
  if (!std::isfinite(norm) || norm <= max_norm) return 1.0f;
  return float(max_norm / norm);
}

namespace detail {
// g *= factor_of(tensor) on every non-frozen tensor that starts in the flat range [lo, hi) (factor 1
// is skipped).
template <class Arch, class Factor>
void scale_tensors(arena<float>& grads, Factor&& factor_of, std::size_t lo = 0, std::size_t hi = SIZE_MAX) {
  auto segs = split_segments(grads.layout());
  std::erase_if(segs, [&](const segment& s) {
    const std::size_t at = grads.layout()[s.tensor].offset;
    return at < lo || at >= hi;
  });
  float* g = grads.all().data();
  auto scale = [&](std::size_t k) {
    const float f = factor_of(segs[k].tensor);
    if (f == 1.0f) return;
    lanes<Arch>(
        segs[k].size(),
        [&](auto& x) {
          using V = std::remove_cvref_t<decltype(x)>;
          x = x * V(f);
        },
        g + segs[k].begin);
  };
  for_segments(  // offloaded gradients: a streamed pass, a window of segments at a time
      segs, grads.file_backed(), scale, [&](std::size_t lo, std::size_t hi) { grads.prefetch(lo, hi); },
      [&](std::size_t lo, std::size_t hi) { grads.write_behind(lo, hi); });
}
}  // namespace detail

// g *= factor on every non-frozen tensor (that starts in the flat range [lo, hi)).
template <class Arch = native_arch>
void scale_grads(arena<float>& grads, float factor, std::size_t lo = 0, std::size_t hi = SIZE_MAX) {
  SPARSELM_CHECK(!grads.empty(), "scale_grads: empty gradient arena");
  SPARSELM_CHECK(std::isfinite(factor), "scale_grads: factor must be finite, got ", factor);
  detail::scale_tensors<Arch>(
      grads, [&](std::size_t) { return factor; }, lo, hi);
}

// Global-norm clip (S2): scales the non-frozen gradients by g_max / max(‖g‖, g_max) and returns
// the norm before clipping.
template <class Arch = native_arch>
double clip_global_norm(arena<float>& grads, float max_norm) {
  SPARSELM_CHECK(max_norm > 0 && std::isfinite(max_norm), "clip_global_norm: max_norm must be > 0, got ", max_norm);
  double norm = global_norm<Arch>(grads);
  scale_grads<Arch>(grads, clip_factor(norm, max_norm));
  return norm;
}

// Per-tensor clip-by-norm (S1, tf.clip_by_norm on each gradient): every non-frozen tensor (that
// starts in the flat range [lo, hi); the others untouched) is scaled by max_norm / max(‖g_i‖,
// max_norm). Returns the per-tensor norms before clipping (index = tensor; frozen tensors and
// those outside the range 0). `whole`, when given, turns the per-tensor sums of squares into the
// whole tensors' before the norms are taken (a process holding slices of tensors: a sum over its
// tensor-parallel group, train/trainer.hpp).
template <class Arch = native_arch>
std::vector<double> clip_tensor_norms(arena<float>& grads, float max_norm, std::size_t lo = 0,
                                      std::size_t hi = SIZE_MAX,
                                      const std::function<void(std::span<double>)>& whole = {}) {
  SPARSELM_CHECK(max_norm > 0 && std::isfinite(max_norm), "clip_tensor_norms: max_norm must be > 0, got ", max_norm);
  std::vector<double> norms = tensor_sum_squares<Arch>(grads, lo, hi);
  if (whole) whole(std::span<double>(norms));
  std::vector<float> factor(norms.size());
  for (std::size_t i = 0; i < norms.size(); ++i) {
    norms[i] = std::sqrt(norms[i]);
    factor[i] = clip_factor(norms[i], max_norm);
  }
  detail::scale_tensors<Arch>(
      grads, [&](std::size_t t) { return factor[t]; }, lo, hi);
  return norms;
}

}  // namespace sparselm::optim
