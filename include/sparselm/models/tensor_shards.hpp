#pragma once
// A whole model's tensors from the slices held by the ranks of a tensor-parallel group
// (parallel/tensor_parallel.hpp), and the other way: rank r's model is the same model type built
// with tensor_split {r, P}, whose split linear layers hold their columns or rows (linear::split());
// the whole model is built without a split (for block-sparse weights with whole_plan(slice, P): as
// many blocks as the slices together). Replicated tensors (norms, embedding, head, the output
// projections' biases) are taken from rank 0.
//
//   assemble_shards<M>(shards, arenas, whole, whole.params(), true);   // values and block patterns
//   assemble_shards<M>(shards, grads, whole, whole_grads, false);      // gradients (or any arena)
//   take_slices(whole, whole.params(), mine, mine.params());           // a rank's slices of a whole model
//   take_slices(whole, whole_slot, mine, my_slot, false);              // ... of optimiser slots (any type)
//   plan = even_slice_plan(probe, io::read_checkpoint_sparsity(dir).patterns, plan, dir);  // a slice's share
//
// A block-sparse slice's blocks keep their values; the whole weight's slots are rank 0's slots,
// then rank 1's, ..., its pattern the slices' blocks moved to their columns or rows. take_slices
// gives a slice the whole pattern's blocks in its columns or rows, in slot order (so assembling and
// taking back gives each rank its own slots in its own order); a whole pattern that puts another
// number of blocks in a slice than the slice holds is an error naming the weight and the rank.
// Used by tensor-parallel checkpoints (train/tensor_checkpoint.hpp) and the tests that compare a
// group against one process.

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "sparselm/core/arena.hpp"
#include "sparselm/core/error.hpp"
#include "sparselm/layers/linear.hpp"
#include "sparselm/layers/visit.hpp"
#include "sparselm/parallel/tensor_parallel.hpp"
#include "sparselm/sparse/block_pattern.hpp"

namespace sparselm {

// Read-only tensors over a layout and memory it does not own (e.g. a slice's arena received from
// another rank), indexed like an arena.
template <class T>
struct tensor_source {
  const arena_layout* tensors = nullptr;
  const T* data = nullptr;

  const arena_layout& layout() const noexcept { return *tensors; }
  std::span<const T> operator[](std::size_t i) const { return {data + (*tensors)[i].offset, (*tensors)[i].size}; }
};

namespace detail {
// Where index j of a slice of n_s items (in `parts` equal groups) lands among the whole's P·n_s.
inline std::size_t whole_index(std::size_t j, std::size_t n_s, std::size_t parts, std::size_t r, std::size_t P) {
  const std::size_t w = n_s / parts, t = j / w, k = j % w;
  return t * w * P + r * w + k;
}
// The other way: whole index i of P·n_s items -> (rank, index in that rank's slice).
inline std::pair<std::size_t, std::size_t> slice_index(std::size_t i, std::size_t n_s, std::size_t parts,
                                                       std::size_t P) {
  const std::size_t w = n_s / parts, t = i / (w * P), rem = i % (w * P);
  return {rem / w, t * w + rem % w};
}

// The rank whose slice holds block (row, col) of a whole block-sparse weight, and the block's row and
// column in that slice: split by columns (cols_s block columns per slice, in `parts` equal groups)
// or by rows (rows_s block rows per slice).
inline std::tuple<std::size_t, std::size_t, std::size_t> block_owner(bool cols, std::size_t row, std::size_t col,
                                                                     std::size_t rows_s, std::size_t cols_s,
                                                                     std::size_t parts, std::size_t P) {
  if (!cols) return {row / rows_s, row % rows_s, col};
  const auto [owner, c] = slice_index(col, cols_s, parts, P);
  return {owner, row, c};
}

// One split linear layer of the whole model from its P slices: s0 is rank 0's layer (every rank's
// has its shape and split), pattern[r] rank r's block pattern (block-sparse weights), from[r] rank
// r's tensors (an arena or a tensor_source of any element type).
template <class Linear, class Src, class T>
void assemble_linear(const Linear& s0, std::span<const sparse::block_pattern* const> pattern,
                     std::span<const Src* const> from, const Linear& whole, arena<T>& to, bool set_pattern) {
  const auto sp = s0.split();
  const std::size_t P = from.size();
  const bool cols = sp.kind == parallel::split_kind::columns;
  const std::string& name = whole.weight().name;
  const std::size_t in_s = s0.in(), out_s = s0.out();
  SPARSELM_CHECK(sp.of.size == P, "assemble_shards: '", name, "' is split over ", sp.of.size, " ranks, not ", P);
  SPARSELM_CHECK(whole.in() == (cols ? in_s : in_s * P) && whole.out() == (cols ? out_s * P : out_s),
                 "assemble_shards: '", name, "' is ", whole.in(), "x", whole.out(), ", its ", P, " slices ", in_s, "x",
                 out_s);
  if (whole.has_bias()) {
    auto b = to[whole.bias().index];
    for (std::size_t r = 0; r < P; ++r) {
      auto s = (*from[r])[s0.bias().index];
      for (std::size_t j = 0; j < s.size(); ++j)
        if (!cols) b[j] = (*from[0])[s0.bias().index][j];  // replicated: rank 0's
        else b[whole_index(j, out_s, sp.parts, r, P)] = s[j];
    }
  }
  auto w = to[whole.weight().index];
  if constexpr (Linear::sparsity::is_sparse) {
    const std::size_t B = whole.block_size();  // B, or the plan's (block_sparse<runtime_block>)
    SPARSELM_CHECK(pattern.size() == P, "assemble_shards: '", name, "': ", pattern.size(), " patterns for ", P,
                   " slices");
    sparse::block_pattern p;
    p.block = B;
    p.rows_b = whole.in() / B;
    p.cols_b = whole.out() / B;
    std::size_t slot = 0;
    for (std::size_t r = 0; r < P; ++r) {
      const auto& q = *pattern[r];
      SPARSELM_CHECK(!cols || (out_s / sp.parts) % B == 0, "assemble_shards: '", name, "' slices of ",
                     out_s / sp.parts, " columns per part are not whole blocks of ", B);
      SPARSELM_CHECK(q.row.size() == q.col.size() && q.rows_b * B == in_s && q.cols_b * B == out_s,
                     "assemble_shards: '", name, "': slice ", r, "'s pattern is not a ", in_s, "x", out_s,
                     " grid of blocks of ", B);
      for (std::size_t k = 0; k < q.nnz(); ++k) {
        p.row.push_back(cols ? q.row[k] : std::uint32_t(r * q.rows_b + q.row[k]));
        p.col.push_back(cols ? std::uint32_t(whole_index(q.col[k], q.cols_b, sp.parts, r, P)) : q.col[k]);
      }
      auto s = (*from[r])[s0.weight().index];
      SPARSELM_CHECK(s.size() == q.nnz() * B * B, "assemble_shards: '", name, "': slice ", r, " has ", s.size(),
                     " values for ", q.nnz(), " blocks");
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
    (void)pattern, (void)set_pattern;
    for (std::size_t r = 0; r < P; ++r) {
      auto s = (*from[r])[s0.weight().index];
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
// A model's block-sparse layers, in visiting order: f(layer) for those split over the ranks
// (`split` true) or for those every rank holds whole (S1's embedding up-projection and head
// down-projection, whose patterns are the same on every rank).
template <class Model, class F>
void for_sparse_layers(const Model& m, bool split, F&& f) {
  visit_tree(m, [&](const auto& n) {
    using N = std::decay_t<decltype(n)>;
    if constexpr (is_linear_v<N>)
      if constexpr (N::sparsity::is_sparse)
        if (n.split().active() == split) f(n);
  });
}
}  // namespace detail

// The block patterns of a model's split block-sparse weights, in visiting order (what a rank sends
// besides its tensors for its slices to be assembled).
template <class Model>
std::vector<const sparse::block_pattern*> split_patterns(const Model& m) {
  std::vector<const sparse::block_pattern*> r;
  detail::for_sparse_layers(m, true, [&](const auto& n) { r.push_back(&n.state().pattern); });
  return r;
}

// The plan of the whole model a slice belongs to (a group of P ranks): every split block-sparse
// weight gets P times the slice's blocks, the others the slice's own count.
template <class Model>
sparse_plan whole_plan(const Model& slice, std::size_t P) {
  std::map<std::string, std::size_t> blocks;
  visit_tree(slice, [&](const auto& n) {
    using N = std::decay_t<decltype(n)>;
    if constexpr (is_linear_v<N>)
      if constexpr (N::sparsity::is_sparse) blocks[n.weight().name] = n.nnz_blocks() * (n.split().active() ? P : 1);
  });
  sparse_plan p = slice.plan();
  p.count = [blocks = std::move(blocks)](const std::string& w, std::size_t, std::size_t) {
    const auto it = blocks.find(w);
    SPARSELM_CHECK(it != blocks.end(), "whole_plan: the slice has no block-sparse weight '", w, "'");
    return it->second;
  };
  return p;
}

// The plan of a tensor-parallel slice whose whole model's block patterns are given (weight name ->
// (row, col) pairs in slot order, as a checkpoint stores them: io::read_checkpoint_sparsity): each
// split weight gets the blocks its whole pattern puts in every slice, which must be as many in each
// (as in a split run's own checkpoints; a pattern trained without the split need not divide evenly,
// and is an error naming the weight, the slices' counts and `source`); a weight every rank holds
// whole keeps its count. probe: the slice built with any plan (only its shapes and splits are read).
template <class Model>
sparse_plan even_slice_plan(const Model& probe, const std::map<std::string, std::vector<std::int32_t>>& whole,
                            sparse_plan plan, const std::string& source) {
  std::map<std::string, std::size_t> blocks;
  visit_tree(probe, [&](const auto& n) {
    using N = std::decay_t<decltype(n)>;
    if constexpr (is_linear_v<N>)
      if constexpr (N::sparsity::is_sparse) {
        const std::string& name = n.weight().name;
        const auto it = whole.find(name);
        SPARSELM_CHECK(it != whole.end(), source, ": no block pattern for the model's weight '", name, "'");
        const auto& q = it->second;
        const auto sp = n.split();
        if (!sp.active()) {
          blocks[name] = q.size() / 2;
          return;
        }
        const bool cols = sp.kind == parallel::split_kind::columns;
        const std::size_t P = sp.of.size, B = n.block_size(), rows_s = n.in() / B, cols_s = n.out() / B;
        const std::size_t rows_w = cols ? rows_s : rows_s * P, cols_w = cols ? cols_s * P : cols_s;
        std::vector<std::size_t> per(P, 0);
        for (std::size_t k = 0; k + 1 < q.size(); k += 2) {
          SPARSELM_CHECK(q[k] >= 0 && q[k + 1] >= 0 && std::size_t(q[k]) < rows_w && std::size_t(q[k + 1]) < cols_w,
                         source, ": block (", q[k], ", ", q[k + 1], ") of '", name, "' is outside its ", rows_w, "x",
                         cols_w, " grid of blocks");
          ++per[std::get<0>(detail::block_owner(cols, std::size_t(q[k]), std::size_t(q[k + 1]), rows_s, cols_s,
                                                sp.parts, P))];
        }
        std::string counts;
        for (std::size_t r = 0; r < P; ++r) counts += (r ? ", " : "") + std::to_string(per[r]);
        SPARSELM_CHECK(std::all_of(per.begin(), per.end(), [&](std::size_t c) { return c == per[0]; }), source,
                       ": the pattern of '", name, "' puts ", counts, " blocks in the ", P,
                       " slices of a tensor-parallel group; its blocks must divide evenly (a checkpoint of a group of ",
                       P, " does)");
        blocks[name] = per[0];
      }
  });
  plan.count = [blocks = std::move(blocks)](const std::string& w, std::size_t, std::size_t) {
    const auto it = blocks.find(w);
    SPARSELM_CHECK(it != blocks.end(), "even_slice_plan: the probe had no block-sparse weight '", w, "'");
    return it->second;
  };
  return plan;
}

// The whole (unsplit) model a slice belongs to, built with `plan` (whole_plan(slice, P) for
// block-sparse weights): Model(config, plan), or the slice's own unsplit(plan) for a model whose
// constructor takes more than its config (a fine-tuning head's label count, models/bert_finetune.hpp).
template <class Model>
concept has_unsplit_twin = requires(const Model& m, const sparse_plan& p) {
  { m.unsplit(p) } -> std::same_as<Model>;
} || requires(const Model& m, const sparse_plan& p) { Model(m.config(), p); };

template <has_unsplit_twin Model>
Model unsplit_model(const Model& slice, const sparse_plan& plan) {
  if constexpr (requires { slice.unsplit(plan); })
    return slice.unsplit(plan);
  else
    return Model(slice.config(), plan);
}

// Which tensors of a model (by layout index) are a rank's slices rather than replicated: the
// column-split layers' weights and biases and the row-split layers' weights. A gradient norm over a
// tensor-parallel group sums the slices' squares over the group and counts the rest once; the rest
// must stay the same on every rank of the group (train/tensor_group_checks.hpp checks it).
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

// Writes into `to` (an arena over whole's layout) the whole model's tensors from P slices: s0 is
// rank 0's model (every slice has its layout), patterns[r] rank r's split_patterns, from[r] rank
// r's tensors (an arena or tensor_source over s0's layout). set_patterns: also give whole's
// block-sparse weights the assembled patterns.
template <class Model, class Src, class T>
void assemble_slices(const Model& s0, std::span<const std::vector<const sparse::block_pattern*>> patterns,
                     std::span<const Src* const> from, const Model& whole, arena<T>& to, bool set_patterns) {
  const std::size_t P = from.size();
  SPARSELM_CHECK(P >= 1 && patterns.size() == P, "assemble_shards: ", patterns.size(), " pattern lists and ", P,
                 " slices");
  // Replicated tensors first (every tensor by name), then the split layers overwrite theirs.
  const auto& L = to.layout();
  const auto& S = from[0]->layout();
  for (std::size_t i = 0; i < L.count(); ++i) {
    auto j = S.find(L[i].name);
    SPARSELM_CHECK(j.has_value(), "assemble_shards: the slices have no tensor '", L[i].name, "'");
    if (S[*j].size == L[i].size) std::memcpy(to[i].data(), (*from[0])[*j].data(), L[i].size * sizeof(T));
  }
  const auto parts = detail::linear_layers(s0);
  std::size_t k = 0, sparse_k = 0;
  visit_tree(whole, [&](const auto& n) {
    using N = std::decay_t<decltype(n)>;
    if constexpr (is_linear_v<N>) {
      SPARSELM_CHECK(k < parts.size(), "assemble_shards: the slices have fewer linear layers than the whole model");
      const N& s = *static_cast<const N*>(parts[k++]);
      if (!s.split().active()) {
        SPARSELM_CHECK(s.split().kind == parallel::split_kind::none || P == 1, "assemble_shards: '", n.weight().name,
                       "' is split over a group of ", s.split().of.size, ", not ", P);
        if constexpr (N::sparsity::is_sparse)  // replicated: rank 0's values (above) and pattern
          if (set_patterns) n.state().pattern = s.state().pattern;
        return;
      }
      std::vector<const sparse::block_pattern*> mine;
      if constexpr (N::sparsity::is_sparse) {
        for (std::size_t r = 0; r < P; ++r) {
          SPARSELM_CHECK(sparse_k < patterns[r].size(), "assemble_shards: slice ", r, " has no pattern for '",
                         n.weight().name, "'");
          mine.push_back(patterns[r][sparse_k]);
        }
        ++sparse_k;
      }
      detail::assemble_linear<N>(s, std::span<const sparse::block_pattern* const>(mine), from, n, to, set_patterns);
    }
  });
}

// The same from the slices' own models: shards[r] is rank r's model, from[r] its arena to read
// (its values, gradients, ...).
template <class Model, class T>
void assemble_shards(std::span<const Model* const> shards, std::span<const arena<std::type_identity_t<T>>* const> from,
                     const Model& whole, arena<T>& to, bool set_patterns) {
  SPARSELM_CHECK(!shards.empty() && shards.size() == from.size(), "assemble_shards: ", shards.size(), " models and ",
                 from.size(), " arenas");
  const std::size_t P = shards.size();
  std::vector<std::vector<const sparse::block_pattern*>> patterns;
  for (std::size_t r = 0; r < P; ++r) {
    visit_tree(*shards[r], [&](const auto& n) {
      if constexpr (is_linear_v<std::decay_t<decltype(n)>>) {
        const auto sp = n.split();
        SPARSELM_CHECK(!sp.active() || (sp.of.size == P && sp.of.rank == r), "assemble_shards: '", n.weight().name,
                       "' of slice ", r, " is not rank ", r, " of ", P);
      }
    });
    patterns.push_back(split_patterns(*shards[r]));
  }
  assemble_slices(*shards[0], std::span<const std::vector<const sparse::block_pattern*>>(patterns), from, whole, to,
                  set_patterns);
}

// The other way: `to` (an arena over slice's layout) receives rank slice.split's slices of the
// whole model's tensors in `from` (an arena over whole's layout, any element type: values,
// optimiser slots), and every replicated tensor whole. set_patterns: also give slice's block-sparse
// weights their part of whole's patterns (once, with the values; the slots follow the same order).
template <class Model, class T>
void take_slices(const Model& whole, const arena<T>& from, const Model& slice, arena<T>& to, bool set_patterns = true) {
  const auto& L = to.layout();
  const auto& W = from.layout();
  for (std::size_t i = 0; i < L.count(); ++i) {
    auto j = W.find(L[i].name);
    SPARSELM_CHECK(j.has_value(), "take_slices: the whole model has no tensor '", L[i].name, "'");
    if (W[*j].size == L[i].size) std::memcpy(to[i].data(), from[*j].data(), L[i].size * sizeof(T));
  }
  const auto wl = detail::linear_layers(whole);
  std::size_t k = 0;
  visit_tree(slice, [&](const auto& n) {
    using N = std::decay_t<decltype(n)>;
    if constexpr (is_linear_v<N>) {
      const N& w = *static_cast<const N*>(wl.at(k++));
      const auto sp = n.split();
      if (!sp.active()) {
        if constexpr (N::sparsity::is_sparse)  // replicated: the whole values (above) and pattern
          if (set_patterns) {
            SPARSELM_CHECK(w.nnz_blocks() == n.nnz_blocks(), "take_slices: '", n.weight().name, "' has ",
                           w.nnz_blocks(), " blocks in the whole model, ", n.nnz_blocks(), " in the slice");
            n.state().pattern = w.state().pattern;
          }
        return;
      }
      const bool cols = sp.kind == parallel::split_kind::columns;
      const std::size_t P = sp.of.size, r = sp.of.rank, in_s = n.in(), out_s = n.out();
      const std::string& name = n.weight().name;
      SPARSELM_CHECK(w.in() == (cols ? in_s : in_s * P) && w.out() == (cols ? out_s * P : out_s), "take_slices: '",
                     name, "' is ", w.in(), "x", w.out(), " in the whole model, ", in_s, "x", out_s, " in slice ", r,
                     " of ", P);
      auto src = from[w.weight().index];
      auto dst = to[n.weight().index];
      if constexpr (N::sparsity::is_sparse) {
        const std::size_t B = n.block_size();
        SPARSELM_CHECK(w.block_size() == B && (!cols || (out_s / sp.parts) % B == 0), "take_slices: '", name,
                       "': blocks of ", w.block_size(), " in the whole model, ", B, " in the slice");
        const auto& q = w.state().pattern;
        const std::size_t bb = B * B, rows_s = in_s / B, cols_s = out_s / B;
        sparse::block_pattern p;
        p.block = B;
        p.rows_b = rows_s;
        p.cols_b = cols_s;
        std::size_t slot = 0;
        for (std::size_t s = 0; s < q.nnz(); ++s) {
          const auto [owner, row, col] = detail::block_owner(cols, q.row[s], q.col[s], rows_s, cols_s, sp.parts, P);
          if (owner != r) continue;
          SPARSELM_CHECK(slot < n.nnz_blocks(), "take_slices: '", name, "': the whole pattern puts more than ",
                         n.nnz_blocks(), " blocks in slice ", r, " of ", P,
                         " (a pattern trained without this split need not divide evenly)");
          p.row.push_back(std::uint32_t(row));
          p.col.push_back(std::uint32_t(col));
          std::memcpy(dst.data() + slot * bb, src.data() + s * bb, bb * sizeof(T));
          ++slot;
        }
        SPARSELM_CHECK(slot == n.nnz_blocks(), "take_slices: '", name, "': the whole pattern puts ", slot,
                       " blocks in slice ", r, " of ", P, ", which holds ", n.nnz_blocks(),
                       " (a pattern trained without this split need not divide evenly)");
        if (set_patterns) {
          p.finalize(name);
          n.state().pattern = std::move(p);
        }
      } else {
        for (std::size_t i = 0; i < in_s; ++i)
          for (std::size_t j = 0; j < out_s; ++j)
            dst[i * out_s + j] = cols ? src[i * w.out() + detail::whole_index(j, out_s, sp.parts, r, P)]
                                      : src[(r * in_s + i) * out_s + j];
      }
      if (cols && n.has_bias())
        for (std::size_t j = 0; j < out_s; ++j)
          to[n.bias().index][j] = from[w.bias().index][detail::whole_index(j, out_s, sp.parts, r, P)];
    }
  });
}

}  // namespace sparselm
