#pragma once
// Fused softmax + cross-entropy over large vocabularies: loss, statistics and (in place) gradient.
//
// Legend: N rows (target positions), V logit columns, Vv = valid_vocab <= V (columns >= Vv are
// vocabulary padding, e.g. GPT-2's 50257 padded to 50304).
//   logits (N,V)    in: logits; out (compute_grad): grad_scale·w_i·(softmax_i − onehot(t_i))
//   targets (N)     int32; rows with t_i == ignore_index are skipped (loss 0, gradient row 0)
//   weights (N)     optional (empty = all 1)
//   losses (N)      optional per-row unweighted CE (0 for ignored rows)
//
//   CE_i = logsumexp_{j<Vv}(x_ij) − x_{i,t_i}
//   stats: loss_sum = Σ w_i·CE_i, weight_sum = Σ w_i, correct = #{argmax_j x_ij == t_i} (first
//          maximum), count = #non-ignored rows — over the non-ignored rows, summed in row order.
//
// Passes over a row: one streaming pass reads the logits and computes, chunk by chunk (a chunk is
// 4 KiB, L1-resident), the running per-lane max, the rescaled running sum of exp and the argmax
// (re-scanning a chunk only when its max beats the best so far). With compute_grad it also writes
// e = exp(x − m_chunk) back in place, remembering each chunk's per-lane m. The second pass turns
// e into the gradient with one multiply per element (factor exp(m_chunk − max)·scale·w / sum), so
// each logit is read from memory once, written once and exp'd once. A row (V·4 bytes, 200 KB at
// V = 50304) stays in L2 between the passes. Without compute_grad the logits are only read.
//
// Parallel over rows (static); the statistics do not depend on the thread count.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "sparselm/core/error.hpp"
#include "sparselm/core/simd.hpp"
#include "sparselm/core/threads.hpp"
#include "sparselm/core/view.hpp"
#include "sparselm/kernels/detail/simd_math.hpp"
#include "sparselm/kernels/detail/workspace.hpp"

namespace sparselm::kernels {

struct cross_entropy_stats {
  double loss_sum = 0;    // Σ w_i·CE_i over non-ignored rows
  double weight_sum = 0;  // Σ w_i over non-ignored rows
  std::size_t correct = 0;
  std::size_t count = 0;  // non-ignored rows
};

namespace detail {

inline constexpr std::size_t ce_chunk = 1024;  // floats per chunk (4 KiB)

struct ce_row_result {
  double loss = 0;   // CE of the row
  bool correct = false;
};

// One row. x: Vv valid logits of a row with V columns in total; writes the gradient when grad.
template <class Arch>
ce_row_result ce_row(float* x, std::size_t V, std::size_t Vv, std::int32_t t, float coef_w, bool grad, float* chunk_m) {
  using F = fvec<Arch>;
  constexpr std::size_t W = F::size;
  constexpr float ninf = -std::numeric_limits<float>::infinity();
  const float xt = x[t];
  F mrun(ninf), s(0.0f), best(ninf), besti(0.0f);
  const F lane = iota<Arch>();
  std::size_t c = 0;
  for (std::size_t c0 = 0; c0 < Vv; c0 += ce_chunk, ++c) {
    const std::size_t c1 = std::min(Vv, c0 + ce_chunk);
    F cm(ninf);
    for_each_batch<Arch>(c0, c1, [&](std::size_t j, std::size_t n) { cm = xsimd::max(cm, loadn<Arch>(x + j, n, ninf)); });
    const auto imp = cm > best;
    if (xsimd::any(imp)) {  // first position of the new per-lane maximum within this chunk
      auto done = !imp;
      for_each_batch<Arch>(c0, c1, [&](std::size_t j, std::size_t n) {
        auto hit = (loadn<Arch>(x + j, n, ninf) == cm) & !done;
        besti = xsimd::select(hit, F(float(j)) + lane, besti);
        done = done | hit;
      });
      best = xsimd::select(imp, cm, best);
    }
    const F mnew = xsimd::max(mrun, cm);
    s *= xsimd::select(mrun == mnew, F(1.0f), detail::exp<Arch>(mrun - mnew));
    mrun = mnew;
    const F msafe = xsimd::select(mnew == F(ninf), F(0.0f), mnew);  // lanes that saw only -inf: exp(-inf) = 0
    if (grad) {
      mnew.store_aligned(chunk_m + c * W);
      for_each_batch<Arch>(c0, c1, [&](std::size_t j, std::size_t n) {
        F e = detail::exp<Arch>(loadn<Arch>(x + j, n, ninf) - msafe);
        s += e;
        storen<Arch>(e, x + j, n);
      });
    } else {
      for_each_batch<Arch>(c0, c1, [&](std::size_t j, std::size_t n) { s += detail::exp<Arch>(loadn<Arch>(x + j, n, ninf) - msafe); });
    }
  }
  // Combine lanes.
  const float M = hmax<Arch>(mrun);
  const F Mv(M);
  const float S = hsum<Arch>(s * xsimd::select(mrun == Mv, F(1.0f), detail::exp<Arch>(mrun - Mv)));
  alignas(64) float bv[W], bi[W];
  best.store_aligned(bv);
  besti.store_aligned(bi);
  float bmax = ninf, barg = float(Vv);
  for (std::size_t l = 0; l < W; ++l)
    if (bv[l] > bmax || (bv[l] == bmax && bi[l] < barg)) bmax = bv[l], barg = bi[l];
  ce_row_result r;
  r.loss = double(M) + std::log(double(S)) - double(xt);
  r.correct = barg == float(t);
  if (grad) {
    const float coef = coef_w / S;
    c = 0;
    for (std::size_t c0 = 0; c0 < Vv; c0 += ce_chunk, ++c) {
      const std::size_t c1 = std::min(Vv, c0 + ce_chunk);
      const F cm = F::load_aligned(chunk_m + c * W);
      const F f = xsimd::select(cm == F(ninf), F(0.0f), detail::exp<Arch>(cm - Mv) * F(coef));
      for_each_batch<Arch>(c0, c1, [&](std::size_t j, std::size_t n) { storen<Arch>(loadn<Arch>(x + j, n) * f, x + j, n); });
    }
    x[t] -= coef_w;
    std::fill(x + Vv, x + V, 0.0f);
  }
  return r;
}

}  // namespace detail

// Fused softmax cross-entropy; see the header comment. Returns the batch statistics.
template <class Arch = native_arch>
cross_entropy_stats cross_entropy(matrix_view<float> logits, std::span<const std::int32_t> targets,
                                  std::span<const float> weights, std::int32_t ignore_index, float grad_scale,
                                  bool compute_grad, std::span<float> losses = {}, std::size_t valid_vocab = SIZE_MAX) {
  check_view(const_matrix_view<float>(logits), "cross_entropy: logits");
  const std::size_t N = logits.rows, V = logits.cols;
  const std::size_t Vv = valid_vocab == SIZE_MAX ? V : valid_vocab;
  SPARSELM_CHECK(Vv >= 1 && Vv <= V, "cross_entropy: valid_vocab ", valid_vocab, " must be in [1, ", V,
                 "] for logits ", shape_string(logits));
  SPARSELM_CHECK(V < (std::size_t(1) << 24), "cross_entropy: ", V, " logit columns exceed the supported 2^24 for logits ",
                 shape_string(logits));
  SPARSELM_CHECK(targets.size() == N, "cross_entropy: ", targets.size(), " targets for logits ", shape_string(logits));
  SPARSELM_CHECK(weights.empty() || weights.size() == N, "cross_entropy: ", weights.size(), " weights for logits ",
                 shape_string(logits));
  SPARSELM_CHECK(losses.empty() || losses.size() == N, "cross_entropy: losses has ", losses.size(),
                 " entries for logits ", shape_string(logits));
  for (std::size_t i = 0; i < N; ++i) {
    const std::int32_t t = targets[i];
    SPARSELM_CHECK(t == ignore_index || (t >= 0 && std::size_t(t) < Vv), "cross_entropy: target ", t, " at row ", i,
                   " is outside the vocabulary [0, ", Vv, ")");
  }
  constexpr std::size_t W = detail::fvec<Arch>::size;
  std::vector<double> row_loss(N, 0.0);
  std::vector<unsigned char> row_ok(N, 0);
  const std::size_t nchunks = (Vv + detail::ce_chunk - 1) / detail::ce_chunk;
  parallel_for(0, N, [&](std::size_t i) {
    float* x = logits.row(i);
    if (targets[i] == ignore_index) {
      if (compute_grad) std::fill(x, x + V, 0.0f);
      return;
    }
    const float w = weights.empty() ? 1.0f : weights[i];
    float* chunk_m = compute_grad ? detail::scratch(nchunks * W) : nullptr;
    auto r = detail::ce_row<Arch>(x, V, Vv, targets[i], grad_scale * w, compute_grad, chunk_m);
    row_loss[i] = r.loss;
    row_ok[i] = r.correct;
  });
  cross_entropy_stats st;
  for (std::size_t i = 0; i < N; ++i) {
    if (!losses.empty()) losses[i] = float(row_loss[i]);
    if (targets[i] == ignore_index) continue;
    const double w = weights.empty() ? 1.0 : double(weights[i]);
    st.loss_sum += w * row_loss[i];
    st.weight_sum += w;
    st.correct += row_ok[i];
    st.count += 1;
  }
  return st;
}

}  // namespace sparselm::kernels

// The fused softmax cross-entropy for the compiled ISA.
// Precompiled instances (docs/design/architecture.md, "Precompiled kernels"): defined once in sparselm::kernels
// (src/kernels_pointwise.cpp), declared extern where that library is linked.
#if defined(SPARSELM_INSTANTIATE_POINTWISE) || defined(SPARSELM_PRECOMPILED_KERNELS)
#ifdef SPARSELM_INSTANTIATE_POINTWISE
#define SPARSELM_INSTANCE template
#else
#define SPARSELM_INSTANCE extern template
#endif
namespace sparselm::kernels {
SPARSELM_INSTANCE decltype(cross_entropy<native_arch>) cross_entropy<native_arch>;
}  // namespace sparselm::kernels
#undef SPARSELM_INSTANCE
#endif
