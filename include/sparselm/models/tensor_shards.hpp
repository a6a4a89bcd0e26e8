#pragma once
// A whole model's tensors from the slices held by the ranks of a tensor-parallel group
// (parallel/tensor_parallel.hpp): rank r's model is the same model type built with tensor_split
// {r, P}, whose split linear layers hold their columns or rows (linear::split()); the whole model is
// built without a split. Replicated tensors (norms, embedding, head, the output projections' biases)
// are taken from rank 0.
//
//   assemble_shards<M>(shards, arenas, whole, whole.params(), true);   // values and block patterns
//   assemble_shards<M>(shards, grads, whole, whole_grads, false);      // gradients (or any arena)
//   take_slices(whole, whole.params(), mine, mine.params());           // dense: rank's slices of a whole model
//
// A block-sparse slice's blocks keep their values; the whole weight's slots are rank 0's slots,
// then rank 1's, ... (so the whole model must have been built with as many blocks as the slices
// together, e.g. through a sparse_plan count), its pattern the slices' blocks moved to their
// columns or rows. Used by the tensor-parallel tests to compare a group against one process.

#include <cstddef>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "sparselm/core/arena.hpp"
#include "sparselm/core/error.hpp"
#include "sparselm/layers/linear.hpp"
#include "sparselm/layers/visit.hpp"
#include "sparselm/parallel/tensor_parallel.hpp"

namespace sparselm {

namespace detail {
// Where index j of a slice of n_s items (in `parts` equal groups) lands among the whole's P·n_s.
inline std::size_t whole_index(std::size_t j, std::size_t n_s, std::size_t parts, std::size_t r, std::size_t P) {
  const std::size_t w = n_s / parts, t = j / w, k = j % w;
  return t * w * P + r * w + k;
}

template <class Linear>
void assemble_linear(std::span<const Linear* const> shard, std::span<const arena<float>* const> from,
                     const Linear& whole, arena<float>& to, bool set_pattern) {
  const auto sp = shard[0]->split();
  const std::size_t P = shard.size();
  const bool cols = sp.kind == parallel::split_kind::columns;
  const std::string& name = whole.weight().name;
  for (std::size_t r = 0; r < P; ++r)
    SPARSELM_CHECK(shard[r]->split().kind == sp.kind && shard[r]->split().of.size == P && shard[r]->split().of.rank == r,
                   "assemble_shards: '", name, "' of slice ", r, " is not rank ", r, " of ", P);
  const std::size_t in_s = shard[0]->in(), out_s = shard[0]->out();
  SPARSELM_CHECK(whole.in() == (cols ? in_s : in_s * P) && whole.out() == (cols ? out_s * P : out_s),
                 "assemble_shards: '", name, "' is ", whole.in(), "x", whole.out(), ", its ", P, " slices ", in_s, "x",
                 out_s);
  if (whole.has_bias()) {
    auto b = to[whole.bias().index];
    for (std::size_t r = 0; r < P; ++r) {
      auto s = (*from[r])[shard[r]->bias().index];
      for (std::size_t j = 0; j < s.size(); ++j)
        if (!cols) b[j] = (*from[0])[shard[0]->bias().index][j];  // replicated: rank 0's
        else b[whole_index(j, out_s, sp.parts, r, P)] = s[j];
    }
  }
  auto w = to[whole.weight().index];
  if constexpr (Linear::sparsity::is_sparse) {
    const std::size_t B = whole.block_size();  // B, or the plan's (block_sparse<runtime_block>)
    sparse::block_pattern p;
    p.block = B;
    p.rows_b = whole.in() / B;
    p.cols_b = whole.out() / B;
    std::size_t slot = 0;
    for (std::size_t r = 0; r < P; ++r) {
      const auto& q = shard[r]->state().pattern;
      SPARSELM_CHECK(!cols || (out_s / sp.parts) % B == 0, "assemble_shards: '", name, "' slices of ",
                     out_s / sp.parts, " columns per part are not whole blocks of ", B);
      for (std::size_t k = 0; k < q.nnz(); ++k) {
        p.row.push_back(cols ? q.row[k] : std::uint32_t(r * q.rows_b + q.row[k]));
        p.col.push_back(cols ? std::uint32_t(whole_index(q.col[k], q.cols_b, sp.parts, r, P)) : q.col[k]);
      }
      auto s = (*from[r])[shard[r]->weight().index];
      SPARSELM_CHECK(slot + s.size() <= w.size(), "assemble_shards: '", name, "' has ", whole.nnz_blocks(),
                     " blocks, fewer than its slices together");
      std::memcpy(w.data() + slot, s.data(), s.size_bytes());
      slot += s.size();
    }
    SPARSELM_CHECK(slot == w.size(), "assemble_shards: '", name, "' has ", whole.nnz_blocks(),
                   " blocks, its slices ", slot / (B * B));
    if (set_pattern) {
      p.finalize(name);
      whole.state().pattern = std::move(p);
    }
  } else {
    (void)set_pattern;
    for (std::size_t r = 0; r < P; ++r) {
      auto s = (*from[r])[shard[r]->weight().index];
      for (std::size_t i = 0; i < in_s; ++i)
        for (std::size_t j = 0; j < out_s; ++j) {
          if (cols) w[i * whole.out() + whole_index(j, out_s, sp.parts, r, P)] = s[i * out_s + j];
          else w[(r * in_s + i) * out_s + j] = s[i * out_s + j];
        }
    }
  }
}

// The linear layers of a model tree, in visiting order, type-erased (every model tree visits the
// same types in the same order).
template <class Model>
std::vector<const void*> linear_layers(const Model& m) {
  std::vector<const void*> r;
  visit_tree(m, [&](const auto& n) {
    if constexpr (is_linear_v<std::decay_t<decltype(n)>>) r.push_back(&n);
  });
  return r;
}
}  // namespace detail

// Which tensors of a model (by layout index) are a rank's slices rather than replicated: the
// column-split layers' weights and biases and the row-split layers' weights. A gradient norm over a
// tensor-parallel group sums the slices' squares over the group and counts the rest once.
template <class Model>
std::vector<bool> sliced_tensors(const Model& m, std::size_t tensors) {
  std::vector<bool> r(tensors, false);
  visit_tree(m, [&](const auto& n) {
    if constexpr (is_linear_v<std::decay_t<decltype(n)>>) {
      if (!n.split().active()) return;
      r.at(n.weight().index) = true;
      if (n.has_bias() && n.split().kind == parallel::split_kind::columns) r.at(n.bias().index) = true;
    }
  });
  return r;
}

// Writes into `to` (an arena over whole's layout) the whole model's tensors from the slices:
// shards[r] is rank r's model, from[r] the arena of rank r to read (its values, gradients, ...).
// set_patterns: also give whole's block-sparse weights the assembled patterns.
template <class Model>
void assemble_shards(std::span<const Model* const> shards, std::span<const arena<float>* const> from,
                     const Model& whole, arena<float>& to, bool set_patterns) {
  SPARSELM_CHECK(!shards.empty() && shards.size() == from.size(), "assemble_shards: ", shards.size(), " models and ",
                 from.size(), " arenas");
  // Replicated tensors first (every tensor by name), then the split layers overwrite theirs.
  const auto& L = to.layout();
  const auto& S = from[0]->layout();
  for (std::size_t i = 0; i < L.count(); ++i) {
    auto j = S.find(L[i].name);
    SPARSELM_CHECK(j.has_value(), "assemble_shards: the slices have no tensor '", L[i].name, "'");
    if (S[*j].size == L[i].size) std::memcpy(to[i].data(), (*from[0])[*j].data(), L[i].size * sizeof(float));
  }
  std::vector<std::vector<const void*>> per(shards.size());
  for (std::size_t r = 0; r < shards.size(); ++r) per[r] = detail::linear_layers(*shards[r]);
  std::size_t k = 0;
  visit_tree(whole, [&](const auto& n) {
    using N = std::decay_t<decltype(n)>;
    if constexpr (is_linear_v<N>) {
      std::vector<const N*> s;
      for (auto& v : per) {
        SPARSELM_CHECK(k < v.size(), "assemble_shards: the slices have fewer linear layers than the whole model");
        s.push_back(static_cast<const N*>(v[k]));
      }
      ++k;
      if (s[0]->split().active())
        detail::assemble_linear<N>(std::span<const N* const>(s), from, n, to, set_patterns);
      else
        SPARSELM_CHECK(s[0]->split().kind == parallel::split_kind::none || shards.size() == 1, "assemble_shards: '",
                       n.weight().name, "' is split over a group of ", s[0]->split().of.size, ", not ",
                       shards.size());
    }
  });
}

// The other way, dense models only: `to` (an arena over slice's layout) receives rank
// slice.split's slices of the whole model's tensors in `from` (an arena over whole's layout), and
// every replicated tensor whole. So a group starts from the weights one process initialises with
// the same seed. A block-sparse slice has its own pattern and count of blocks, which a whole
// pattern does not divide into: refused.
template <class Model>
void take_slices(const Model& whole, const arena<float>& from, const Model& slice, arena<float>& to) {
  const auto& L = to.layout();
  const auto& W = from.layout();
  for (std::size_t i = 0; i < L.count(); ++i) {
    auto j = W.find(L[i].name);
    SPARSELM_CHECK(j.has_value(), "take_slices: the whole model has no tensor '", L[i].name, "'");
    if (W[*j].size == L[i].size) std::memcpy(to[i].data(), from[*j].data(), L[i].size * sizeof(float));
  }
  const auto wl = detail::linear_layers(whole);
  std::size_t k = 0;
  visit_tree(slice, [&](const auto& n) {
    using N = std::decay_t<decltype(n)>;
    if constexpr (is_linear_v<N>) {
      const N& w = *static_cast<const N*>(wl.at(k++));
      const auto sp = n.split();
      if (!sp.active()) return;
      SPARSELM_CHECK(!N::sparsity::is_sparse, "take_slices: '", n.weight().name,
                     "' is block-sparse: a slice has its own pattern (initialise it with the model's init)");
      const bool cols = sp.kind == parallel::split_kind::columns;
      const std::size_t P = sp.of.size, r = sp.of.rank, in_s = n.in(), out_s = n.out();
      auto src = from[w.weight().index];
      auto dst = to[n.weight().index];
      for (std::size_t i = 0; i < in_s; ++i)
        for (std::size_t j = 0; j < out_s; ++j)
          dst[i * out_s + j] = cols ? src[i * w.out() + detail::whole_index(j, out_s, sp.parts, r, P)]
                                    : src[(r * in_s + i) * out_s + j];
      if (cols && n.has_bias())
        for (std::size_t j = 0; j < out_s; ++j)
          to[n.bias().index][j] = from[w.bias().index][detail::whole_index(j, out_s, sp.parts, r, P)];
    }
  });
}

}  // namespace sparselm
