#pragma once
// What the ranks of a tensor-parallel group (parallel/tensor_parallel.hpp) check at every
// checkpoint: the tensors each of them holds whole -- norms, embedding, head, the row-split
// projections' biases, S1's whole block-sparse projections and their block patterns
// (models/tensor_shards.hpp, sliced_tensors: all but the slices) -- are the same bytes on every rank. They stay equal
// by construction (the run's seed on every rank, gradients that are the group's sums, the same
// update); a difference means the group no longer trains one model, and a checkpoint, which keeps
// rank 0's copy, would hide it. Collective: every rank of the group calls it, and every rank fails
// with the same message, naming the first tensor that differs and the two ranks.
//
//   check_group_replicated(trainer.tensor_ranks().tensor(), model, "at the checkpoint of step 20");

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "sparselm/core/error.hpp"
#include "sparselm/io/crc32c.hpp"
#include "sparselm/models/tensor_shards.hpp"
#include "sparselm/parallel/replica_group.hpp"

namespace sparselm {

template <class Model>
void check_group_replicated(parallel::replica_group& g, const Model& m, const std::string& when) {
  if (g.size() == 1) return;
  const auto& params = m.params();
  const auto& layout = *m.layout();
  // one CRC-32C per replicated tensor, then one per whole block-sparse layer's pattern
  std::vector<std::uint32_t> crc;
  std::vector<std::string> names;
  const std::vector<bool> sliced = sliced_tensors(m, layout.count());
  for (std::size_t i = 0; i < sliced.size(); ++i) {
    if (sliced[i]) continue;
    const auto t = params[i];
    crc.push_back(io::crc32c(t.data(), t.size_bytes()));
    names.push_back("'" + layout[i].name + "'");
  }
  detail::for_sparse_layers(m, false, [&](const auto& n) {
    const auto& p = n.state().pattern;
    std::uint32_t c = io::crc32c(p.row.data(), p.row.size() * sizeof(p.row[0]));
    crc.push_back(io::crc32c(p.col.data(), p.col.size() * sizeof(p.col[0]), c));
    names.push_back("the block pattern of '" + n.weight().name + "'");
  });
  if (names.empty()) return;
  // every rank's CRCs, gathered in whole units of the transport
  constexpr std::size_t per_unit = parallel::replica_group::gather_unit / sizeof(std::uint32_t);
  const std::size_t n = (crc.size() + per_unit - 1) / per_unit * per_unit, P = g.size();
  std::vector<std::uint32_t> all(n * P, 0);
  std::copy(crc.begin(), crc.end(), all.begin() + std::ptrdiff_t(n * g.rank()));
  std::vector<std::size_t> bounds(P + 1);
  for (std::size_t r = 0; r <= P; ++r) bounds[r] = r * n * sizeof(std::uint32_t);
  g.all_gather_bytes(std::as_writable_bytes(std::span<std::uint32_t>(all)), bounds);
  for (std::size_t k = 0; k < names.size(); ++k)
    for (std::size_t r = 1; r < P; ++r) {
      const std::uint32_t mine = all[r * n + k], first = all[k];
      SPARSELM_CHECK(mine == first, "tensor parallel: ", when, ", ", names[k],
                     ", which every rank of the group holds whole, differs between rank 0 (CRC-32C ",
                     io::crc32c_hex(first), ") and rank ", r, " (", io::crc32c_hex(mine),
                     "): the group no longer trains one model");
    }
}

}  // namespace sparselm
