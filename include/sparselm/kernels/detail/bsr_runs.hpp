#pragma once
// The B = 1 weight gradient's walk over the slots (bsr_wgrad.hpp): each slot is a dot product of
// an X column and a dY column over a chunk of L rows, both transposed (lanes along M). The smaller
// side "streams": the slots are walked in tiles of TJ indices of the larger side (TJ rows of L
// floats, ~24 KiB, stay in L1), and within a tile in runs of one stream-side index (its row is
// loaded once per run, from L2, into registers). It depends only on the pattern and L, so it is
// built once per pattern and kept in the pattern's derived structures (block_pattern::derived)
// until the pattern changes: building it is O(nnz + stream side x tiles), 0.2-1.2 ms on the
// transformer shapes at density 0.1, against a B = 1 weight gradient of a few ms at M = 1024.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "sparselm/sparse/block_pattern.hpp"

namespace sparselm::kernels::detail {

struct wgrad_runs_order {
  bool stream_rows = true;                      // X's side (the input rows) streams: in <= out
  std::vector<std::uint32_t> order;             // per position: the slot (nnz), then its tile-side index (nnz)
  std::vector<std::uint32_t> run_row, run_ptr;  // per run: stream-side index, first position (+ nnz)
  std::size_t runs() const noexcept { return run_row.size(); }
};

inline wgrad_runs_order build_wgrad_runs_order(const sparse::block_pattern& p, std::size_t L) {
  wgrad_runs_order o;
  const std::size_t nnz = p.nnz();
  o.stream_rows = p.in() <= p.out();
  const bool sr = o.stream_rows;
  const std::size_t TJ = std::max<std::size_t>(1, (24u * 1024u) / (sizeof(float) * L));
  const std::size_t S = sr ? p.rows_b : p.cols_b, T = sr ? p.cols_b : p.rows_b;
  const std::uint32_t* ptr = sr ? p.row_ptr.data() : p.col_ptr.data();
  const std::uint32_t* list = sr ? p.row_slots.data() : p.col_slots.data();
  const std::uint32_t* tile_of = sr ? p.col.data() : p.row.data();
  o.order.resize(2 * nnz);
  std::vector<std::uint32_t> cursor(ptr, ptr + S), key(nnz), run_len(S), by_len(S), len_start(TJ + 2);
  // The tile-side index of every slot in list order, gathered once: the scans below then read it
  // sequentially instead of gathering from the pattern's slot arrays for every tile.
  for (std::size_t e = 0; e < nnz; ++e) key[e] = tile_of[list[e]];
  std::size_t pos = 0;
  for (std::size_t t0 = 0; t0 < T; t0 += TJ) {
    // Within a tile the runs go longest first (a counting sort: a run has at most TJ slots), so
    // the run loop's trip count changes rarely and its exit branch is mostly predicted.
    std::fill(len_start.begin(), len_start.end(), 0u);
    for (std::size_t s = 0; s < S; ++s) {
      std::uint32_t e = cursor[s];
      while (e < ptr[s + 1] && key[e] < t0 + TJ) ++e;
      run_len[s] = e - cursor[s];
      ++len_start[TJ + 1 - run_len[s]];
    }
    for (std::size_t n = 1; n <= TJ + 1; ++n) len_start[n] += len_start[n - 1];
    for (std::size_t s = 0; s < S; ++s) by_len[len_start[TJ - run_len[s]]++] = std::uint32_t(s);
    for (std::size_t s : by_len) {
      if (run_len[s] == 0) break;  // the empty runs come last
      o.run_row.push_back(std::uint32_t(s));
      o.run_ptr.push_back(std::uint32_t(pos));
      for (std::uint32_t e = cursor[s]; e < cursor[s] + run_len[s]; ++e, ++pos) {
        o.order[pos] = list[e];
        o.order[nnz + pos] = key[e];
      }
      cursor[s] += run_len[s];
    }
  }
  o.run_ptr.push_back(std::uint32_t(nnz));
  return o;
}

// The order for chunks of L rows: the pattern's kept one (built on first use), or, for a pattern
// never finalized (no derived structures), one built for this call.
inline std::shared_ptr<const wgrad_runs_order> wgrad_runs_order_for(const sparse::block_pattern& p, std::size_t L) {
  const auto make = [&] { return build_wgrad_runs_order(p, L); };
  if (!p.derived) return std::make_shared<const wgrad_runs_order>(make());
  return p.derived->get<wgrad_runs_order>(L, make);
}

}  // namespace sparselm::kernels::detail
