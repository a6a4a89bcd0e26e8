#pragma once
// Token (+ learned position) embedding lookup, forward and backward.
//
// Legend: N rows (= B·T tokens, row n is position n mod T of its sequence), C channels,
// V vocab, P positions.
//   ids (N) int32, wte (V,C), wpe (P,C) or an empty view (no positions), out, dout (N,C)
//
//   forward:  out(n) = wte[ids[n]] + wpe[pos_offset + n mod T]
//   backward: dwte[ids[n]] += dout(n);  dwpe[pos_offset + n mod T] += dout(n)   (skipped if dwpe is empty)
//
// The backward is deterministic and race-free, and bit-identical to the sequential loop for any
// thread count: thread p of P owns the token ids with id mod P == p and adds their rows in
// increasing n; positions are split across threads the same way (each position's rows in order).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "sparselm/core/error.hpp"
#include "sparselm/core/simd.hpp"
#include "sparselm/core/threads.hpp"
#include "sparselm/core/view.hpp"
#include "sparselm/kernels/detail/simd_math.hpp"

namespace sparselm::kernels {

namespace detail {

inline bool is_empty(const auto& m) noexcept { return m.rows == 0 || m.cols == 0 || m.data == nullptr; }

// Checks the (N,C) rows view, the optional position table and the token ids; names are short
// argument names ("out", "wpe") reported as "fn: name".
inline void check_embedding(const char* fn, std::span<const std::int32_t> ids, const const_matrix_view<float>& table,
                            const char* table_name, const const_matrix_view<float>& rows, const char* rows_name,
                            const const_matrix_view<float>& pos, const char* pos_name, std::size_t T,
                            std::size_t pos_offset) {
  const std::string f(fn);
  check_view(table, (f + ": " + table_name).c_str());
  check_view(rows, (f + ": " + rows_name).c_str());
  SPARSELM_CHECK(rows.rows == ids.size() && rows.cols == table.cols, fn, ": ", rows_name, " ", shape_string(rows),
                 " does not match ", ids.size(), " ids and ", table_name, " ", shape_string(table));
  if (!is_empty(pos)) {
    check_view(pos, (f + ": " + pos_name).c_str());
    SPARSELM_CHECK(pos.cols == table.cols, fn, ": ", pos_name, " ", shape_string(pos), " has a different width than ",
                   table_name, " ", shape_string(table));
    SPARSELM_CHECK(T >= 1, fn, ": sequence length T must be >= 1 with position embeddings");
    const std::size_t used = std::min(T, ids.size());
    SPARSELM_CHECK(pos_offset + used <= pos.rows, fn, ": positions up to ", pos_offset + used, " (offset ", pos_offset,
                   ", T ", T, ") exceed the ", pos.rows, " rows of ", pos_name, " ", shape_string(pos));
  }
  for (std::size_t n = 0; n < ids.size(); ++n)
    SPARSELM_CHECK(ids[n] >= 0 && std::size_t(ids[n]) < table.rows, fn, ": token id ", ids[n], " at position ", n,
                   " is outside the vocabulary [0, ", table.rows, ")");
}

template <class Arch>
inline void add_row(float* dst, const float* src, std::size_t C) {
  for_each_batch<Arch>(0, C, [&](std::size_t j, std::size_t n) {
    storen<Arch>(loadn<Arch>(dst + j, n) + loadn<Arch>(src + j, n), dst + j, n);
  });
}

}  // namespace detail

// out(n) = wte[ids[n]] + wpe[pos_offset + n % T]. ids (N); wte (V,C); wpe (P,C) or empty; out (N,C).
template <class Arch = native_arch>
void embedding_forward(std::span<const std::int32_t> ids, const_matrix_view<float> wte, const_matrix_view<float> wpe,
                       std::size_t T, matrix_view<float> out, std::size_t pos_offset = 0) {
  detail::check_embedding("embedding_forward", ids, wte, "wte", out, "out", wpe, "wpe", T, pos_offset);
  const std::size_t C = wte.cols;
  const bool pos = !detail::is_empty(wpe);
  parallel_for(0, ids.size(), [&](std::size_t n) {
    const float* e = wte.row(std::size_t(ids[n]));
    float* o = out.row(n);
    if (pos) {
      const float* p = wpe.row(pos_offset + n % T);
      detail::for_each_batch<Arch>(0, C, [&](std::size_t j, std::size_t m) {
        detail::storen<Arch>(detail::loadn<Arch>(e + j, m) + detail::loadn<Arch>(p + j, m), o + j, m);
      });
    } else {
      std::copy(e, e + C, o);
    }
  }, 16);
}

// dwte[ids[n]] += dout(n); dwpe[pos_offset + n % T] += dout(n) unless dwpe is empty.
template <class Arch = native_arch>
void embedding_backward(std::span<const std::int32_t> ids, const_matrix_view<float> dout, std::size_t T,
                        matrix_view<float> dwte, matrix_view<float> dwpe, std::size_t pos_offset = 0) {
  detail::check_embedding("embedding_backward", ids, dwte, "dwte", dout, "dout", dwpe, "dwpe", T, pos_offset);
  const std::size_t N = ids.size(), C = dwte.cols;
  const std::size_t P = in_parallel() ? 1 : std::size_t(std::max(1, num_threads()));
  parallel_for(0, P, [&](std::size_t p) {
    for (std::size_t n = 0; n < N; ++n)
      if (std::size_t(ids[n]) % P == p) detail::add_row<Arch>(dwte.row(std::size_t(ids[n])), dout.row(n), C);
  }, 1);
  if (detail::is_empty(dwpe)) return;
  parallel_for(0, std::min(T, N), [&](std::size_t t) {
    float* d = dwpe.row(pos_offset + t);
    for (std::size_t n = t; n < N; n += T) detail::add_row<Arch>(d, dout.row(n), C);
  }, 4);
}

}  // namespace sparselm::kernels

// The embedding gather and scatter-add for the compiled ISA.
// Precompiled instances (docs/design/architecture.md, "Precompiled kernels"): defined once in sparselm::kernels
// (src/kernels_pointwise.cpp), declared extern where that library is linked.
#if defined(SPARSELM_INSTANTIATE_POINTWISE) || defined(SPARSELM_PRECOMPILED_KERNELS)
#ifdef SPARSELM_INSTANTIATE_POINTWISE
#define SPARSELM_INSTANCE template
#else
#define SPARSELM_INSTANCE extern template
#endif
namespace sparselm::kernels {
SPARSELM_INSTANCE decltype(embedding_forward<native_arch>) embedding_forward<native_arch>;
SPARSELM_INSTANCE decltype(embedding_backward<native_arch>) embedding_backward<native_arch>;
}  // namespace sparselm::kernels
#undef SPARSELM_INSTANCE
#endif
