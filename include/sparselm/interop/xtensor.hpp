#pragma once
// xtensor at the user's boundary: hand a model batches as xtensor arrays and get logits, hidden
// states, per-token losses and parameter tensors back as xtensor containers or adaptors. Inside,
// the kernels keep working on raw spans and views; nothing here copies where the layout allows.
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
#include <span>
#include <string>
#include <vector>

#include <xtensor/xadapt.hpp>
#include <xtensor/xtensor.hpp>

#include "sparselm/core/error.hpp"
#include "sparselm/models/lm_loss.hpp"

namespace sparselm {

namespace detail {
template <class E>
void check_xt_tokens(const E& e, const char* what) {
  SPARSELM_CHECK(e.dimension() == 2, what, ": expected a 2-D (batch, sequence) array, got ", e.dimension(),
                 " dimensions");
  SPARSELM_CHECK(e.layout() == xt::layout_type::row_major, what, ": expected row-major storage");
}
}  // namespace detail

// A token batch viewing (B,T) int32 arrays (targets optional: empty for inference). The arrays
// must outlive the batch.
template <class Ids, class Targets = xt::xtensor<std::int32_t, 2>>
token_batch xt_batch(const Ids& ids, const Targets& targets = {}) {
  detail::check_xt_tokens(ids, "xt_batch: ids");
  const std::size_t B = ids.shape()[0], T = ids.shape()[1];
  token_batch b{{ids.data(), B * T}, {}, {}, B, T};
  if (targets.size() > 0) {
    detail::check_xt_tokens(targets, "xt_batch: targets");
    SPARSELM_CHECK(targets.shape()[0] == B && targets.shape()[1] == T, "xt_batch: targets (", targets.shape()[0], "x",
                   targets.shape()[1], ") do not match ids (", B, "x", T, ")");
    b.targets = {targets.data(), B * T};
  }
  return b;
}

// Logits (B,T,V) of a causal LM for ids (B,T).
template <class Model, class Ids>
xt::xtensor<float, 3> xt_logits(Model& m, const Ids& ids) {
  const token_batch b = xt_batch(ids);
  xt::xtensor<float, 3> out = xt::zeros<float>(std::array<std::size_t, 3>{b.batch, b.seq, m.vocab_size()});
  m.logits(b, matrix_view<float>(out.data(), b.batch * b.seq, m.vocab_size()));
  return out;
}

// The stack's output (B,T,C) for ids — the hidden states the head reads — as an adaptor over the
// model's buffer (valid until the model's next pass; copy it into an xt::xtensor to keep it).
template <class Model, class Ids>
auto xt_hidden_states(Model& m, const Ids& ids) {
  const token_batch b = xt_batch(ids);
  const auto h = m.hidden(b);
  return xt::adapt(h.data, b.batch * b.seq * h.cols, xt::no_ownership(),
                   std::array<std::size_t, 3>{b.batch, b.seq, h.cols});
}

// Per-position unweighted cross-entropy (B,T) of targets under the model (0 where a position is not
// scored: ignore_index targets, the loss's autoregression offset).
template <class Model, class Ids, class Targets>
xt::xtensor<float, 2> xt_token_losses(Model& m, const Ids& ids, const Targets& targets) {
  const token_batch b = xt_batch(ids, targets);
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
