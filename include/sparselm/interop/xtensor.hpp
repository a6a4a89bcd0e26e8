#pragma once
// xtensor at the user's boundary: hand a model batches as xtensor arrays and get logits, hidden
// states, per-token losses and parameter tensors back as xtensor containers or adaptors. Inside,
// the kernels keep working on raw spans and views; nothing here copies where the layout allows.
// This header is the only one of the library that includes xtensor; it also holds the owning
// aligned xtensor types (sparselm::tensor, sparselm::array).
//
// Legend: B batch, T sequence, C model width, V vocab.
//
//   xt::xtensor<std::int32_t, 2> ids = ..., targets = ...;               // (B,T), row-major
//   auto batch = sparselm::xt_batch(ids, targets);                         // spans over their storage
//   xt::xtensor<float, 3> logits = sparselm::xt_logits(model, ids);        // (B,T,V)
//   auto h = sparselm::xt_hidden_states(model, ids);                       // (B,T,C) adaptor, no copy
//   xt::xtensor<float, 2> ce = sparselm::xt_token_losses(model, ids, targets);  // (B,T)
//   auto w = sparselm::xt_parameter(model, "h.0.attn.c_attn.weight");     // adaptor over the arena
//   w *= 0.5f;                                                             // writes the model's weights
//
// Adaptors view the model's storage: a parameter adaptor stays valid as long as the model; a hidden
// state adaptor until the model's next pass.

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include <xtensor/xadapt.hpp>
#include <xtensor/xarray.hpp>
#include <xtensor/xtensor.hpp>

#include "sparselm/core/error.hpp"
#include "sparselm/core/tensor.hpp"
#include "sparselm/models/lm_loss.hpp"

namespace sparselm {

// Owning tensors: xtensor containers over 64-byte aligned storage.
//
//   sparselm::tensor<float, 2> x({B * T, C});   // aligned, row-major, fixed rank
//   sparselm::array<float> y;                   // dynamic rank
//   auto v = sparselm::view_of(x);              // matrix_view<float> for the kernels

template <class T>
using aligned_uvector = xt::uvector<T, aligned_allocator<T>>;

// Fixed-rank, row-major, 64-byte aligned tensor.
template <class T, std::size_t N>
using tensor = xt::xtensor_container<aligned_uvector<T>, N, xt::layout_type::row_major>;

// Dynamic-rank, row-major, 64-byte aligned tensor.
template <class T>
using array = xt::xarray_container<aligned_uvector<T>, xt::layout_type::row_major>;

// Matrix view of a rank-2 tensor.
template <class T>
matrix_view<T> view_of(tensor<T, 2>& t) noexcept {
  return {t.data(), t.shape()[0], t.shape()[1], t.shape()[1]};
}
template <class T>
matrix_view<const T> view_of(const tensor<T, 2>& t) noexcept {
  return {t.data(), t.shape()[0], t.shape()[1], t.shape()[1]};
}

namespace detail {

// The (B,T) token array e as a span over its storage when its elements lie there row by row — a
// container, or a view of whole rows (xt::range on the first axis) whose first element is at
// data() + data_offset(); an empty optional when they do not (a strided view, an expression).
template <class E>
std::optional<std::span<const std::int32_t>> xt_contiguous_tokens(const E& e, const char* fn, const char* what) {
  using value = std::remove_cv_t<typename std::decay_t<E>::value_type>;
  static_assert(std::is_same_v<value, std::int32_t>, "sparselm xtensor adaptors: token ids must be std::int32_t");
  SPARSELM_CHECK(e.dimension() == 2, fn, ": ", what, ": expected a 2-D (batch, sequence) array, got ", e.dimension(),
                 " dimensions");
  if constexpr (xt::has_data_interface<std::decay_t<E>>::value) {
    const std::size_t B = e.shape()[0], T = e.shape()[1];
    const auto& st = e.strides();
    // A dimension of extent 1 may carry any stride (xtensor writes 0).
    const bool rows_packed = T <= 1 || std::size_t(st[1]) == 1;
    const bool rows_adjacent = B <= 1 || std::size_t(st[0]) == T;
    if (rows_packed && rows_adjacent) return std::span<const std::int32_t>(e.data() + e.data_offset(), B * T);
  }
  return std::nullopt;
}

// A (B,T) int32 array's tokens as a span, the array's own storage when it is laid out row by row,
// else a row-major copy kept in `copy` (which must outlive the span).
template <class E>
std::span<const std::int32_t> xt_tokens(const E& e, const char* fn, const char* what, xt::xtensor<std::int32_t, 2>& copy) {
  if (auto s = xt_contiguous_tokens(e, fn, what)) return *s;
  copy = e;  // evaluates the view or expression into row-major storage
  return {copy.data(), copy.size()};
}

// A (B,T) token batch over ids (and targets, when not empty), copies kept in ids_copy / targets_copy
// where the layout needs them.
template <class Ids, class Targets>
token_batch xt_make_batch(const Ids& ids, const Targets* targets, const char* fn, xt::xtensor<std::int32_t, 2>& ids_copy,
                          xt::xtensor<std::int32_t, 2>& targets_copy) {
  token_batch b{xt_tokens(ids, fn, "ids", ids_copy), {}, {}, ids.shape()[0], ids.shape()[1]};
  if (targets && targets->size() > 0) {
    SPARSELM_CHECK(targets->dimension() == 2 && targets->shape()[0] == b.batch && targets->shape()[1] == b.seq, fn,
                   ": targets (", targets->shape()[0], "x", targets->dimension() > 1 ? targets->shape()[1] : 1,
                   ") do not match ids (", b.batch, "x", b.seq, ")");
    b.targets = xt_tokens(*targets, fn, "targets", targets_copy);
  }
  return b;
}

}  // namespace detail

// A token batch viewing (B,T) int32 arrays (targets optional: empty for inference). The arrays
// must outlive the batch. The batch views their storage, so their elements must lie there row by
// row: a container, or a view of whole rows (xt::view(a, xt::range(i, j), xt::all())). A strided
// view or an expression is refused (copy it into an xt::xtensor first); xt_logits, xt_hidden_states
// and xt_token_losses take any (B,T) int32 expression and copy where the layout needs it.
template <class Ids, class Targets = xt::xtensor<std::int32_t, 2>>
token_batch xt_batch(const Ids& ids, const Targets& targets = {}) {
  const auto i = detail::xt_contiguous_tokens(ids, "xt_batch", "ids");
  SPARSELM_CHECK(i.has_value(), "xt_batch: ids are not stored row by row (a strided view or an expression); copy "
                 "them into an xt::xtensor<std::int32_t, 2> first");
  token_batch b{*i, {}, {}, ids.shape()[0], ids.shape()[1]};
  if (targets.size() > 0) {
    SPARSELM_CHECK(targets.dimension() == 2 && targets.shape()[0] == b.batch && targets.shape()[1] == b.seq,
                   "xt_batch: targets (", targets.shape()[0], "x", targets.dimension() > 1 ? targets.shape()[1] : 1,
                   ") do not match ids (", b.batch, "x", b.seq, ")");
    const auto t = detail::xt_contiguous_tokens(targets, "xt_batch", "targets");
    SPARSELM_CHECK(t.has_value(), "xt_batch: targets are not stored row by row (a strided view or an expression); "
                   "copy them into an xt::xtensor<std::int32_t, 2> first");
    b.targets = *t;
  }
  return b;
}

// Logits (B,T,V) of a causal LM for ids (B,T).
template <class Model, class Ids>
xt::xtensor<float, 3> xt_logits(Model& m, const Ids& ids) {
  xt::xtensor<std::int32_t, 2> ids_copy, unused;
  const token_batch b = detail::xt_make_batch(ids, (const Ids*)nullptr, "xt_logits", ids_copy, unused);
  xt::xtensor<float, 3> out = xt::zeros<float>(std::array<std::size_t, 3>{b.batch, b.seq, m.vocab_size()});
  m.logits(b, matrix_view<float>(out.data(), b.batch * b.seq, m.vocab_size()));
  return out;
}

// The stack's output (B,T,C) for ids — the hidden states the head reads — as an adaptor over the
// model's buffer (valid until the model's next pass; copy it into an xt::xtensor to keep it).
template <class Model, class Ids>
auto xt_hidden_states(Model& m, const Ids& ids) {
  xt::xtensor<std::int32_t, 2> ids_copy, unused;
  const token_batch b = detail::xt_make_batch(ids, (const Ids*)nullptr, "xt_hidden_states", ids_copy, unused);
  const auto h = m.hidden(b);
  return xt::adapt(h.data, b.batch * b.seq * h.cols, xt::no_ownership(),
                   std::array<std::size_t, 3>{b.batch, b.seq, h.cols});
}

// Per-position unweighted cross-entropy (B,T) of targets under the model (0 where a position is not
// scored: ignore_index targets, the loss's autoregression offset).
template <class Model, class Ids, class Targets>
xt::xtensor<float, 2> xt_token_losses(Model& m, const Ids& ids, const Targets& targets) {
  xt::xtensor<std::int32_t, 2> ids_copy, targets_copy;
  const token_batch b = detail::xt_make_batch(ids, std::addressof(targets), "xt_token_losses", ids_copy, targets_copy);
  SPARSELM_CHECK(!b.targets.empty(), "xt_token_losses: no targets");
  xt::xtensor<float, 2> ce = xt::zeros<float>(std::array<std::size_t, 2>{b.batch, b.seq});
  m.evaluate(b, {}, std::span<float>(ce.data(), ce.size()));
  return ce;
}

namespace detail {
template <class Arena>
auto xt_tensor(Arena& a, const std::string& name) {
  const auto& info = a.layout()[a.layout().at(name)];
  auto s = a.at(name);
  return xt::adapt(s.data(), s.size(), xt::no_ownership(), std::vector<std::size_t>(info.shape.begin(), info.shape.end()));
}
}  // namespace detail

// A parameter (or its gradient) with its arena shape — (in, out) for a linear weight, (nnz, B, B)
// for block-sparse values — as a writable adaptor over the model's storage. Throws naming the
// tensor when the model has none of that name.
template <class Model>
auto xt_parameter(Model& m, const std::string& name) {
  return detail::xt_tensor(m.params(), name);
}
template <class Model>
auto xt_gradient(Model& m, const std::string& name) {
  return detail::xt_tensor(m.grads(), name);
}

}  // namespace sparselm

// sparselm's aligned_allocator (core/tensor.hpp) gives 64-byte aligned blocks, as wide as any SIMD
// register: xtensor may assign into sparselm::tensor and sparselm::array with aligned loads and stores.
namespace xsimd {
template <class T>
struct allocator_alignment<sparselm::aligned_allocator<T>> {
  using type = aligned_mode;
};
}  // namespace xsimd
