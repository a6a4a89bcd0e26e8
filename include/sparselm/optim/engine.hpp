#pragma once
// The machinery the optimisers share (namespace detail): the work split of an arena into
// segments and the slot arenas with their checkpoint state. The element-wise part (a SIMD lane
// driver, deterministic sums of squares, slot conversions) is in optim/lanes.hpp.
//
// Work split. The non-frozen tensors of a layout are cut into segments of at most
// `segment_elems` elements, each starting at a multiple of `segment_elems` from its tensor's
// start. One thread handles a whole segment; a reduction (LAMB norms, the global gradient norm)
// keeps one partial sum per segment and adds the partials in segment order. The split depends
// only on the layout, so results are identical for every thread count.

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "sparselm/core/arena.hpp"
#include "sparselm/core/dtype.hpp"
#include "sparselm/core/error.hpp"
#include "sparselm/core/simd.hpp"
#include "sparselm/core/threads.hpp"
#include "sparselm/optim/concepts.hpp"
#include "sparselm/optim/lanes.hpp"
#include "sparselm/optim/shard.hpp"

namespace sparselm::optim::detail {

inline constexpr std::size_t segment_elems = 16384;  // one thread's unit of work (block_elems: optim/lanes.hpp)
static_assert(segment_elems % block_elems == 0 && block_elems % arena_layout::align_elems == 0);

// A contiguous range [begin, end) of the flat arena inside one tensor.
struct segment {
  std::size_t tensor = 0;
  std::size_t begin = 0;
  std::size_t end = 0;
  unsigned flags = param_none;  // the tensor's flags
  std::size_t size() const noexcept { return end - begin; }
};

// Offloaded state is streamed a window of segments at a time (256 segments: 4 Mi values, 16 MiB of
// fp32 per arena), so that its reads ahead and write-backs are a few large requests, not one per
// segment.
inline constexpr std::size_t stream_window = 256;

// Calls f(k) for every segment k (in flat order) across threads. Streamed: a window at a time,
// ahead(lo, hi) called with the next window's flat element range before a window runs and
// behind(lo, hi) with its own after. Which thread runs which segment changes, not what it computes.
template <class F, class Ahead, class Behind>
void for_segments(const std::vector<segment>& segs, bool streamed, F&& f, Ahead&& ahead, Behind&& behind) {
  if (!streamed) return parallel_for(0, segs.size(), f);
  for (std::size_t w = 0; w < segs.size(); w += stream_window) {
    const std::size_t e = std::min(segs.size(), w + stream_window);
    if (e < segs.size()) ahead(segs[e].begin, segs[std::min(segs.size(), e + stream_window) - 1].end);
    parallel_for(w, e, f);
    behind(segs[w].begin, segs[e - 1].end);
  }
}

inline bool is_frozen(const tensor_info& t) noexcept { return (t.flags & param_frozen) != 0; }

// Segments of every non-frozen tensor, in layout order.
inline std::vector<segment> split_segments(const arena_layout& layout) {
  std::vector<segment> out;
  for (std::size_t i = 0; i < layout.count(); ++i) {
    const auto& t = layout[i];
    if (is_frozen(t)) continue;
    for (std::size_t b = 0; b < t.size; b += segment_elems)
      out.push_back({i, t.offset + b, t.offset + std::min(t.size, b + segment_elems), t.flags});
  }
  return out;
}

// Base of the optimisers: owns the layout, the segment plan, up to N slot arenas and the step
// counter, and implements attach / reset_slots / state / restore for them.
//
// Sharding (optim/shard.hpp): attached with a tensor_range, the optimiser keeps slots for the
// tensors of that range only, over a sub-layout of them (same names, shapes and flags, in
// order; its offsets are the full layout's minus the range's first offset, since offsets are
// aligned per tensor). step() still takes the full params and grads but updates only the owned
// tensors; state() returns the sub-layout arenas; restore() also takes full-layout slots and
// copies the owned slice; export_owned() writes the owned slice into full-layout slots.
template <storage_type S, std::size_t N>
class slot_optimizer {
 public:
  using slot_type = S;

  // Allocates zeroed slots over `layout` and resets the step counter.
  void attach(std::shared_ptr<const arena_layout> layout) {
    SPARSELM_CHECK(layout != nullptr, who_, ": attach() needs a layout, got null");
    const std::size_t n = layout->count();
    attach(std::move(layout), tensor_range{0, n});
  }

  // As attach(layout), with slots for the tensors of `owned` only: step() updates only their
  // params, reset_slots() of other tensors does nothing.
  void attach(std::shared_ptr<const arena_layout> layout, tensor_range owned) {
    SPARSELM_CHECK(layout != nullptr, who_, ": attach() needs a layout, got null");
    SPARSELM_CHECK(owned.begin <= owned.end && owned.end <= layout->count(), who_, ": attach: owned tensor range [",
                   owned.begin, ", ", owned.end, ") is outside the layout (", layout->count(), " tensors)");
    layout_ = std::move(layout);
    owned_ = owned;
    elements_ = flat_elements(*layout_, owned_);
    slot_layout_ = sharded() ? sub_layout(*layout_, owned_, elements_.first) : layout_;
    segments_ = split_segments(*layout_);
    std::erase_if(segments_, [&](const segment& sg) { return !owned_.contains(sg.tensor); });
    for (std::size_t k = 0; k < N; ++k)
      slots_[k] = k >= active_ ? arena<S>()
                  : offload_dir_.empty()
                      ? arena<S>(slot_layout_)
                      : arena<S>(slot_layout_, file_backing{offload_dir_, std::string(who_) + " slot '" + names_[k] + "'"});
    step_ = 0;
    wrote_nonfinite_ = false;
  }

  bool attached() const noexcept { return layout_ != nullptr; }

  // Offloaded state: the slots of the next attach() live in unnamed files in `dir` (core/arena.hpp,
  // file_backing) instead of memory; step() streams them a window of segments at a time
  // (update_segments), so the process holds about two windows of them. Empty: in memory.
  void offload_to(std::filesystem::path dir) { offload_dir_ = std::move(dir); }
  bool offloaded() const noexcept { return !offload_dir_.empty(); }

  // Drops every slot's pages from the process (offloaded slots; nothing otherwise).
  void page_out_slots() const noexcept {
    for (std::size_t k = 0; k < active_; ++k) slots_[k].page_out_all();
  }

  // Calls f(k) for every segment k of the update across threads. With offloaded slots, weights or
  // gradients (models/transformer.hpp, offload_to), a window of segments at a time: the next
  // window's pages are asked for ahead, and after a window its weights' and slots' write-back is
  // started and their pages and the gradients' dropped (core/arena.hpp; nothing for arenas in memory).
  template <class F>
  void update_segments(const arena<float>& params, const arena<float>& grads, F&& f) const {
    const bool streamed = offloaded() || params.file_backed() || grads.file_backed();
    const std::size_t at = elements_.first;  // the slots start at the owned range
    detail::for_segments(
        segments_, streamed, f,
        [&](std::size_t lo, std::size_t hi) {
          params.prefetch(lo, hi);
          grads.prefetch(lo, hi);
          for (std::size_t k = 0; k < active_; ++k) slots_[k].prefetch(lo - at, hi - at);
        },
        [&](std::size_t lo, std::size_t hi) {
          params.write_behind(lo, hi);
          grads.page_out(lo, hi);
          for (std::size_t k = 0; k < active_; ++k) slots_[k].write_behind(lo - at, hi - at);
        });
  }
  const arena_layout& layout() const {
    require_attached("layout()");
    return *layout_;
  }

  // The tensors whose slots this optimiser keeps (all of them unless attached with a range),
  // and whether that is fewer than all.
  tensor_range owned() const noexcept { return owned_; }
  bool sharded() const noexcept { return layout_ != nullptr && owned_.size() != layout_->count(); }

  // The owned tensors' flat elements in the full layout, [first, last): the slice of the params
  // (and of full-layout slots) this optimiser is responsible for. Empty for an empty range.
  element_range owned_elements() const {
    require_attached("owned_elements()");
    return elements_;
  }

  // Slot k's owned bytes: owned_elements().size() values of S, laid out as elements
  // [first, last) of a full-layout slot arena (for gathering the shards into full arenas).
  std::span<std::byte> owned_slot_bytes(std::size_t k) { return std::as_writable_bytes(slots_[checked_slot(k)].all()); }
  std::span<const std::byte> owned_slot_bytes(std::size_t k) const {
    return std::as_bytes(slots_[checked_slot(k)].all());
  }

  // Zeroes every slot of elements [offset, offset + count) of `tensor` (full-layout index); a
  // tensor outside the owned range has no slots here, and nothing happens.
  void reset_slots(std::size_t tensor, std::size_t offset, std::size_t count) {
    require_attached("reset_slots()");
    SPARSELM_CHECK(tensor < layout_->count(), who_, ": reset_slots: tensor index ", tensor, " out of range (",
                   layout_->count(), " tensors)");
    const auto& t = (*layout_)[tensor];
    SPARSELM_CHECK(offset <= t.size && count <= t.size - offset, who_, ": reset_slots: range [", offset, ", ",
                   offset + count, ") is outside tensor '", t.name, "' of ", t.size, " elements");
    if (!owned_.contains(tensor)) return;
    for (std::size_t k = 0; k < active_; ++k)
      std::memset(static_cast<void*>(slots_[k][tensor - owned_.begin].data() + offset), 0, count * sizeof(S));
  }

  // The slot arenas by name (mutable) and the step counter. Sharded: arenas over the owned
  // tensors' sub-layout.
  optimizer_state<S> state() {
    require_attached("state()");
    optimizer_state<S> st;
    for (std::size_t k = 0; k < active_; ++k) st.slots.push_back({names_[k], &slots_[k]});
    st.step = step_;
    return st;
  }

  // Takes slots (by name) and the step counter from `st`. Each slot follows the layout of
  // state() (copied whole) or, when sharded, the full layout (the owned slice is copied, e.g.
  // from a checkpoint of the unsharded run). Slots that already are this optimiser's arenas are
  // not copied, so a loader can fill state() in place.
  void restore(const optimizer_state<S>& st) {
    require_attached("restore()");
    check_slot_names(st, "restore");
    for (std::size_t k = 0; k < active_; ++k) {
      arena<S>* src = find_slot(st, k, "restore");
      auto to = slots_[k].all();
      if (src == &slots_[k] || to.empty()) continue;  // (an empty range has no memory to copy to)
      if (follows(*src, *slot_layout_)) {
        std::memcpy(static_cast<void*>(to.data()), src->all().data(), to.size() * sizeof(S));
      } else {
        SPARSELM_CHECK(follows(*src, *layout_), who_, ": restore: slot '", names_[k],
                       "' does not follow the attached parameter layout",
                       sharded() ? " (nor the owned tensors' sub-layout)" : "");
        std::memcpy(static_cast<void*>(to.data()), src->all().data() + elements_.first, to.size() * sizeof(S));
      }
    }
    step_ = st.step;
    wrote_nonfinite_ = false;
  }

  // Whether the last update wrote only finite parameters and slots (for 16-bit slots: values that
  // store as finite ones), as the update itself checked them (detail::finite_watch, fused into its
  // lanes: no extra pass). An update rewrites every parameter and slot it owns, and a non-finite
  // value stays non-finite under the next update, so this says whether the owned state is finite
  // now (conservatively: reset_slots() may since have zeroed the culprit); true after attach()
  // and restore(). Sharded: the owned tensors only.
  bool state_finite() const noexcept { return !wrote_nonfinite_; }

  // Copies the owned slice of every slot into the same-named full-layout arenas of `full`
  // (supplied by the caller) and sets full.step; the rest of those arenas is left as it is, so
  // exporting every shard of a partition into one state assembles the unsharded state.
  void export_owned(optimizer_state<S>& full) const {
    require_attached("export_owned()");
    check_slot_names(full, "export_owned");
    for (std::size_t k = 0; k < active_; ++k) {
      arena<S>* dst = find_slot(full, k, "export_owned");
      SPARSELM_CHECK(follows(*dst, *layout_), who_, ": export_owned: slot '", names_[k],
                     "' does not follow the attached parameter layout");
      auto from = slots_[k].all();
      if (dst == &slots_[k] || from.empty()) continue;
      std::memcpy(static_cast<void*>(dst->all().data() + elements_.first), from.data(), from.size() * sizeof(S));
    }
    full.step = step_;
  }

  std::size_t step_count() const noexcept { return step_; }


  // Bytes of slot storage held (the owned tensors' only, when sharded).
  std::size_t slot_bytes() const noexcept {
    std::size_t n = 0;
    for (std::size_t k = 0; k < active_; ++k) n += slots_[k].all().size() * sizeof(S);
    return n;
  }

 protected:
  slot_optimizer(std::string_view who, std::array<const char*, N> names) : who_(who), names_(names) {}

  // Number of slot arenas in use (an optimiser may need fewer than N, e.g. SGD without momentum).
  void set_active_slots(std::size_t n) noexcept { active_ = n; }

  void require_attached(const char* what) const {
    SPARSELM_CHECK(layout_ != nullptr, who_, ": ", what, " before attach()");
  }

  void check_step(const arena<float>& params, const arena<float>& grads, float lr, float grad_scale) const {
    require_attached("step()");
    auto same = [&](const arena<float>& a) {
      return !a.empty() && (a.layout_ptr() == layout_ || a.layout().same_as(*layout_));
    };
    SPARSELM_CHECK(same(params), who_, ": step: params do not follow the attached layout");
    SPARSELM_CHECK(same(grads), who_, ": step: grads do not follow the attached layout");
    SPARSELM_CHECK(std::isfinite(lr), who_, ": step: learning rate must be finite, got ", lr);
    SPARSELM_CHECK(std::isfinite(grad_scale), who_, ": step: grad_scale must be finite, got ", grad_scale);
  }

  // Pointers to every slot at flat element offset `at` of the full layout (an owned element).
  std::array<S*, N> slot_ptrs(std::size_t at) noexcept {
    std::array<S*, N> p{};
    for (std::size_t k = 0; k < active_; ++k) p[k] = slots_[k].all().data() + (at - elements_.first);
    return p;
  }

  std::string_view who_;
  std::array<const char*, N> names_;
  std::size_t active_ = N;
  std::shared_ptr<const arena_layout> layout_;       // params and grads
  std::shared_ptr<const arena_layout> slot_layout_;  // the slots: layout_ itself, or the owned sub-layout
  tensor_range owned_;
  element_range elements_;         // owned_ in layout_'s flat elements
  std::vector<segment> segments_;  // owned tensors only
  std::array<arena<S>, N> slots_;
  std::filesystem::path offload_dir_;  // offload_to: the slots' files go here (empty: in memory)
  std::size_t step_ = 0;
  bool wrote_nonfinite_ = false;  // the last step() wrote a non-finite value (state_finite())

 private:
  // The tensors of `r` (names, shapes, flags, order) as a layout of their own; its offsets are
  // the full ones minus `base` (the first tensor's offset), which the slot copies rely on.
  std::shared_ptr<const arena_layout> sub_layout(const arena_layout& full, tensor_range r, std::size_t base) const {
    auto sub = std::make_shared<arena_layout>();
    for (std::size_t i = r.begin; i < r.end; ++i) {
      const auto& t = full[i];
      const std::size_t j = sub->add(t.name, t.shape, t.flags);
      SPARSELM_CHECK((*sub)[j].offset == t.offset - base, who_, ": attach: tensor '", t.name,
                     "' would not keep its offset relative to the owned range");
    }
    SPARSELM_CHECK(sub->total() == flat_elements(full, r).size(), who_, ": attach: the owned sub-layout has ",
                   sub->total(), " elements, the owned slice ", flat_elements(full, r).size());
    return sub;
  }

  // An arena following `layout` (an empty layout allocates nothing, so an empty arena matches it).
  static bool follows(const arena<S>& a, const arena_layout& layout) {
    return (!a.empty() || layout.total() == 0) && a.layout_ptr() != nullptr && a.layout().same_as(layout);
  }

  std::size_t checked_slot(std::size_t k) const {
    require_attached("owned_slot_bytes()");
    SPARSELM_CHECK(k < active_, who_, ": owned_slot_bytes: slot ", k, " out of range (", active_, " slots)");
    return k;
  }

  // Throws if `st` names a slot this optimiser does not have.
  void check_slot_names(const optimizer_state<S>& st, const char* what) const {
    for (auto& s : st.slots) {
      bool known = false;
      for (std::size_t k = 0; k < active_; ++k) known = known || s.name == names_[k];
      SPARSELM_CHECK(known, who_, ": ", what, ": unexpected slot '", s.name, "'");
    }
  }

  // The arena of slot k in `st`; throws if there is none.
  arena<S>* find_slot(const optimizer_state<S>& st, std::size_t k, const char* what) const {
    arena<S>* found = nullptr;
    for (auto& s : st.slots)
      if (s.name == names_[k]) found = s.slots;
    SPARSELM_CHECK(found != nullptr, who_, ": ", what, ": the state has no slot '", names_[k], "'");
    return found;
  }
};

// Bias-correction factors for step t: 1/(1 − β1^t) and 1/sqrt(1 − β2^t) (both 1 when off).
struct bias_correction {
  float c1 = 1.0f;
  float sc2 = 1.0f;
  bias_correction(bool on, double beta1, double beta2, std::size_t t) {
    if (!on) return;
    c1 = float(1.0 / (1.0 - std::pow(beta1, double(t))));
    sc2 = float(1.0 / std::sqrt(1.0 - std::pow(beta2, double(t))));
  }
};

// Adam moments and direction, shared by Adam(W) and LAMB; V is float or a simd batch. The
// coefficients are formed in double and rounded once (1 − β as torch.optim computes it).
struct adam_math {
  float b1, ob1, b2, ob2, eps, c1, sc2, grad_scale;

  adam_math(double beta1, double beta2, double eps_, const bias_correction& bc, float gs) noexcept
      : b1(float(beta1)),
        ob1(float(1.0 - beta1)),
        b2(float(beta2)),
        ob2(float(1.0 - beta2)),
        eps(float(eps_)),
        c1(bc.c1),
        sc2(bc.sc2),
        grad_scale(gs) {}

  // m = β1·m + (1 − β1)·g, v = β2·v + (1 − β2)·g², with g scaled by grad_scale.
  template <class V>
  void moments(V& g, V& m, V& v) const noexcept {
    V gs = g * V(grad_scale);
    m = V(b1) * m + V(ob1) * gs;
    v = V(b2) * v + V(ob2) * (gs * gs);
  }
  // u = m̂ / (sqrt(v̂) + ε) + decay·w with m̂ = m·c1, sqrt(v̂) = sqrt(v)·sc2.
  template <class V>
  V direction(const V& w, const V& m, const V& v, float decay) const noexcept {
    return (m * V(c1)) / (vsqrt(v) * V(sc2) + V(eps)) + V(decay) * w;
  }
};

}  // namespace sparselm::optim::detail
