#pragma once
// The machinery the optimisers share (namespace detail): the work split of an arena into
// segments, the slot arenas with their checkpoint state, a SIMD lane driver and deterministic
// sums of squares.
//
// Work split. The non-frozen tensors of a layout are cut into segments of at most
// `segment_elems` elements, each starting at a multiple of `segment_elems` from its tensor's
// start. One thread handles a whole segment; a reduction (LAMB norms, the global gradient norm)
// keeps one partial sum per segment and adds the partials in segment order. The split depends
// only on the layout, so results are identical for every thread count.
//
// Memory traffic. An update reads params, grads and slots once and writes params and slots
// once. Slots stored as bf16/half are converted to float in blocks of `block_elems` that stay in
// L1, and rounded back to nearest even after the block is done.

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
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
#include "sparselm/optim/shard.hpp"

namespace sparselm::optim::detail {

inline constexpr std::size_t segment_elems = 16384;  // one thread's unit of work
inline constexpr std::size_t block_elems = 512;      // slot conversion and norm flush unit
static_assert(segment_elems % block_elems == 0 && block_elems % arena_layout::align_elems == 0);

// A contiguous range [begin, end) of the flat arena inside one tensor.
struct segment {
  std::size_t tensor = 0;
  std::size_t begin = 0;
  std::size_t end = 0;
  unsigned flags = param_none;  // the tensor's flags
  std::size_t size() const noexcept { return end - begin; }
};

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

// ---- SIMD lanes -------------------------------------------------------------------------------

inline float vsqrt(float x) noexcept { return std::sqrt(x); }
template <class A>
xsimd::batch<float, A> vsqrt(const xsimd::batch<float, A>& x) noexcept {
  return xsimd::sqrt(x);
}

template <class V, class P>
V load_lane(P* p, std::size_t i) noexcept {
  if constexpr (std::is_same_v<V, float>)
    return p[i];
  else
    return V::load_unaligned(p + i);
}
template <class V, class P>
void store_lane(P* p, std::size_t i, const V& v) noexcept {
  if constexpr (!std::is_const_v<P>) {
    if constexpr (std::is_same_v<V, float>)
      p[i] = v;
    else
      v.store_unaligned(p + i);
  }
}
template <class V, class F, class Ptrs, std::size_t... K>
void lane_at(std::size_t i, F& f, const Ptrs& p, std::index_sequence<K...>) {
  std::tuple<decltype(load_lane<V>(std::get<K>(p), i))...> v{load_lane<V>(std::get<K>(p), i)...};
  f(std::get<K>(v)...);
  (store_lane(std::get<K>(p), i, std::get<K>(v)), ...);
}

// Calls f(x0&, x1&, ...) on n lanes: simd<float, Arch>::size at a time, then one float at a time
// for the tail, so f is written once as a generic lambda. Streams passed as `float*` are stored
// back; `const float*` streams are only read.
template <class Arch, class F, class... P>
void lanes(std::size_t n, F&& f, P*... p) {
  using B = simd<float, Arch>;
  constexpr std::size_t W = B::size;
  auto ptrs = std::make_tuple(p...);
  auto seq = std::index_sequence_for<P...>{};
  std::size_t i = 0;
  for (; i + W <= n; i += W) lane_at<B>(i, f, ptrs, seq);
  for (; i < n; ++i) lane_at<float>(i, f, ptrs, seq);
}

// Sum of squares over lanes, flushed to double once per block (call flush() after each block).
template <class Arch>
struct square_sum {
  simd<float, Arch> lanes = simd<float, Arch>(0.0f);  // not {0.0f}: that is the initializer-list constructor
  float tail = 0.0f;
  double total = 0.0;
  void add(const simd<float, Arch>& x) noexcept { lanes = xsimd::fma(x, x, lanes); }
  void add(float x) noexcept { tail += x * x; }
  void flush() noexcept {
    total += double(xsimd::hadd(lanes)) + double(tail);
    lanes = simd<float, Arch>(0.0f);
    tail = 0.0f;
  }
};

// Σ x² over [x, x + n): float lanes per block, double across blocks; a block whose float sum
// overflows is summed again in double. Deterministic for a given n and Arch.
template <class Arch = native_arch>
double sum_squares(const float* x, std::size_t n) {
  double total = 0.0;
  for (std::size_t b = 0; b < n; b += block_elems) {
    std::size_t len = std::min(block_elems, n - b);
    square_sum<Arch> acc;
    lanes<Arch>(
        len, [&](auto& v) { acc.add(v); }, x + b);
    acc.flush();
    if (!std::isfinite(acc.total)) {
      double s = 0.0;
      for (std::size_t i = 0; i < len; ++i) s += double(x[b + i]) * double(x[b + i]);
      acc.total = s;
    }
    total += acc.total;
  }
  return total;
}

// ---- slots --------------------------------------------------------------------------------------

// Branch-free conversions that the compiler vectorises (the scalar half conversions in
// core/dtype.hpp branch per value, which makes a half-slot update compute bound). Results are
// bit-identical to half::to_float / half::from_float (round to nearest even, subnormals, NaN
// quieted, overflow to infinity); tests/optim check that.
inline float half_to_float_fast(std::uint16_t h) noexcept {
  const std::uint32_t sign = std::uint32_t(h & 0x8000u) << 16;
  const std::uint32_t em = h & 0x7fffu;
  const std::uint32_t normal = (em << 13) + (112u << 23);  // rebias exponent
  const std::uint32_t sub = std::bit_cast<std::uint32_t>(float(std::int32_t(em)) * 5.9604644775390625e-08f);
  const std::uint32_t is_sub = 0u - std::uint32_t(em < 0x0400u);       // all ones or zero
  const std::uint32_t is_special = 0u - std::uint32_t(em >= 0x7c00u);  // inf / NaN
  std::uint32_t r = (sub & is_sub) | (normal & ~is_sub);
  r |= is_special & 0x7f800000u;
  return std::bit_cast<float>(r | sign);
}
inline std::uint16_t float_to_half_fast(float f) noexcept {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  const std::uint32_t sign = (u >> 16) & 0x8000u;
  const std::uint32_t a = u & 0x7fffffffu;
  // normal results: rebias, round the 23-bit mantissa to 10 bits (nearest even)
  const std::uint32_t r = a - (112u << 23);
  const std::uint32_t normal = (r + 0xfffu + ((r >> 13) & 1u)) >> 13;
  // subnormal results (|f| < 2^-14): adding 0.5 aligns the half's last mantissa bit with the
  // float's, so the float addition rounds to nearest even; the low bits are then the result
  const std::uint32_t sub = std::bit_cast<std::uint32_t>(std::bit_cast<float>(a) + 0.5f) - 0x3f000000u;
  std::uint32_t h = a < 0x38800000u ? sub : normal;
  h = a >= 0x477ff000u ? 0x7c00u : h;  // overflow and inf
  h = a > 0x7f800000u ? 0x7e00u : h;   // NaN
  return std::uint16_t(h | sign);
}

// Second-moment slots (Adam/LAMB v) stored as half hold sqrt(v) instead of v: v spans twice
// the exponent range of the gradients, which half (normal range 2^-14 .. 2^16) cannot hold —
// for |g| below ~1e-2, v would be subnormal or zero and m/sqrt(v) garbage. sqrt(v) has the
// range of |g|. The slot is then named "sqrt_v" in the optimiser state. float and bf16 store v.
template <storage_type S>
inline constexpr bool store_sqrt_v = std::is_same_v<S, half>;

// Float values of n slots of type S, and back (nearest even). Sqrt: the slot holds sqrt(value).
template <storage_type S, bool Sqrt = false>
void slots_to_float(const S* src, float* dst, std::size_t n) noexcept {
  if constexpr (std::is_same_v<S, half>)
    for (std::size_t i = 0; i < n; ++i) dst[i] = half_to_float_fast(src[i].bits);
  else
    for (std::size_t i = 0; i < n; ++i) dst[i] = to_float(src[i]);
  if constexpr (Sqrt)
    for (std::size_t i = 0; i < n; ++i) dst[i] *= dst[i];
}
template <storage_type S, bool Sqrt = false>
void float_to_slots(const float* src, S* dst, std::size_t n) noexcept {
  if constexpr (Sqrt) {
    // through a small buffer: std::sqrt's errno path would keep the conversion loop scalar
    alignas(64) float root[64];
    for (std::size_t b = 0; b < n; b += 64) {
      std::size_t len = std::min<std::size_t>(64, n - b);
      lanes<native_arch>(
          len, [](auto& r, auto& x) { r = vsqrt(x); }, root, src + b);
      float_to_slots<S, false>(root, dst + b, len);
    }
  } else if constexpr (std::is_same_v<S, half>) {
    for (std::size_t i = 0; i < n; ++i) dst[i].bits = float_to_half_fast(src[i]);
  } else {
    for (std::size_t i = 0; i < n; ++i) dst[i] = from_float<S>(src[i]);
  }
}

// Bit k of SqrtMask: slot k holds the square root of its value (only used with store_sqrt_v).
template <std::size_t SqrtMask, std::size_t K>
inline constexpr bool sqrt_slot = ((SqrtMask >> K) & 1u) != 0;

// Rounds float slot values to what storing them as S gives back, in place (no-op for float).
template <storage_type S, bool Sqrt = false>
void round_trip(float* p, std::size_t n) noexcept {
  if constexpr (!std::is_same_v<S, float>) {
    S tmp[block_elems];
    for (std::size_t b = 0; b < n; b += block_elems) {
      std::size_t len = std::min(block_elems, n - b);
      float_to_slots<S, Sqrt>(p + b, tmp, len);
      slots_to_float<S, Sqrt>(tmp, p + b, len);
    }
  }
}

// Calls body(off, len, std::array<float*, N> s) over consecutive blocks of [0, n), where s[k]
// points at the float values of slot k for element `off`: the slot memory itself for float
// slots, a converted copy for bf16/half slots that is rounded back (nearest even) afterwards
// unless WriteBack is false. SqrtMask marks slots stored as square roots.
template <storage_type S, std::size_t N, bool WriteBack = true, std::size_t SqrtMask = 0, class Body>
void with_slots(std::size_t n, const std::array<S*, N>& base, Body&& body) {
  for (std::size_t off = 0; off < n; off += block_elems) {
    std::size_t len = std::min(block_elems, n - off);
    if constexpr (std::is_same_v<S, float>) {
      std::array<float*, N> s;
      for (std::size_t k = 0; k < N; ++k) s[k] = base[k] + off;
      body(off, len, s);
    } else {
      alignas(64) float buf[N == 0 ? 1 : N][block_elems];
      std::array<float*, N> s;
      [&]<std::size_t... K>(std::index_sequence<K...>) {
        ((s[K] = buf[K], slots_to_float<S, sqrt_slot<SqrtMask, K>>(base[K] + off, buf[K], len)), ...);
      }
      (std::make_index_sequence<N>{});
      body(off, len, s);
      if constexpr (WriteBack) [&]<std::size_t... K>(std::index_sequence<K...>) {
          (float_to_slots<S, sqrt_slot<SqrtMask, K>>(buf[K], base[K] + off, len), ...);
        }
      (std::make_index_sequence<N>{});
    }
  }
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
    for (std::size_t k = 0; k < N; ++k) slots_[k] = k < active_ ? arena<S>(slot_layout_) : arena<S>();
    step_ = 0;
  }

  bool attached() const noexcept { return layout_ != nullptr; }
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
  }

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
  std::size_t step_ = 0;

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
