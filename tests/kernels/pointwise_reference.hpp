#pragma once
// Naive reference implementations of the element-wise and attention kernels, in double, for the
// tests. Deliberately simple loops that follow the defining formulas; shapes are passed explicitly
// and all matrices are dense row-major std::vectors.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include <xsimd/xsimd.hpp>

#include "sparselm/core/rng.hpp"
#include "sparselm/core/simd.hpp"

// The SIMD architectures the kernel tests run: the portable SSE2 path, AVX2 when the compiler may
// use it, and the native one (duplicates are harmless).
#if defined(__AVX2__) && defined(__FMA__)
#define SPARSELM_TEST_ARCHS xsimd::sse2, xsimd::fma3<xsimd::avx2>, sparselm::native_arch
#else
#define SPARSELM_TEST_ARCHS xsimd::sse2, sparselm::native_arch
#endif

namespace sparselm::test {

using dvec = std::vector<double>;
using fvec = std::vector<float>;

// Uniform floats in [lo, hi) from a counter rng stream.
inline fvec random_vector(std::size_t n, std::uint64_t stream, float lo = -1.0f, float hi = 1.0f, std::uint64_t seed = 7) {
  counter_rng rng(seed);
  fvec v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = lo + (hi - lo) * rng.uniform(stream, i);
  return v;
}

inline dvec to_double(std::span<const float> v) { return dvec(v.begin(), v.end()); }

// max |a − b| / (atol/rtol + |b|) style: returns the largest |a_i − b_i| / (1 + |b_i|).
inline double max_rel_err(std::span<const float> a, const dvec& b) {
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(double(a[i]) - b[i]) / (1.0 + std::fabs(b[i])));
  return m;
}
inline double max_abs_err(std::span<const float> a, const dvec& b) {
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(double(a[i]) - b[i]));
  return m;
}

// Σ w_i·y_i in double: a scalar loss for gradient checks.
inline double dot(std::span<const float> y, std::span<const float> w) {
  double s = 0;
  for (std::size_t i = 0; i < y.size(); ++i) s += double(y[i]) * w[i];
  return s;
}

// ---------------------------------------------------------------- layer norm (N,C)
struct ln_ref {
  dvec y, mean, rstd;
};
inline ln_ref layer_norm_ref(const fvec& x, const fvec& g, const fvec& b, std::size_t N, std::size_t C, double eps) {
  ln_ref r{dvec(N * C), dvec(N), dvec(N)};
  for (std::size_t i = 0; i < N; ++i) {
    double m = 0, v = 0;
    for (std::size_t c = 0; c < C; ++c) m += x[i * C + c];
    m /= double(C);
    for (std::size_t c = 0; c < C; ++c) v += (x[i * C + c] - m) * (x[i * C + c] - m);
    v /= double(C);
    double rs = 1.0 / std::sqrt(v + eps);
    r.mean[i] = m;
    r.rstd[i] = rs;
    for (std::size_t c = 0; c < C; ++c) r.y[i * C + c] = (x[i * C + c] - m) * rs * g[c] + b[c];
  }
  return r;
}
struct ln_grad_ref {
  dvec dx, dg, db;
};
inline ln_grad_ref layer_norm_backward_ref(const fvec& dy, const fvec& x, const fvec& g, std::size_t N, std::size_t C,
                                           double eps) {
  auto f = layer_norm_ref(x, g, fvec(C, 0.0f), N, C, eps);
  ln_grad_ref r{dvec(N * C), dvec(C, 0.0), dvec(C, 0.0)};
  for (std::size_t i = 0; i < N; ++i) {
    double a = 0, b = 0;
    for (std::size_t c = 0; c < C; ++c) {
      double xh = (x[i * C + c] - f.mean[i]) * f.rstd[i];
      double d = dy[i * C + c] * g[c];
      a += d;
      b += d * xh;
      r.dg[c] += dy[i * C + c] * xh;
      r.db[c] += dy[i * C + c];
    }
    a /= double(C);
    b /= double(C);
    for (std::size_t c = 0; c < C; ++c) {
      double xh = (x[i * C + c] - f.mean[i]) * f.rstd[i];
      r.dx[i * C + c] = f.rstd[i] * (dy[i * C + c] * g[c] - a - xh * b);
    }
  }
  return r;
}

// ---------------------------------------------------------------- softmax (N,C) with a per-row column limit
// limit(r) = number of visible leading columns of row r.
template <class Limit>
dvec softmax_ref(const fvec& x, std::size_t N, std::size_t C, Limit limit) {
  dvec y(N * C, 0.0);
  for (std::size_t r = 0; r < N; ++r) {
    std::size_t L = std::min<std::size_t>(C, limit(r));
    if (L == 0) continue;
    double m = -std::numeric_limits<double>::infinity(), s = 0;
    for (std::size_t c = 0; c < L; ++c) m = std::max(m, double(x[r * C + c]));
    for (std::size_t c = 0; c < L; ++c) s += std::exp(x[r * C + c] - m);
    for (std::size_t c = 0; c < L; ++c) y[r * C + c] = std::exp(x[r * C + c] - m) / s;
  }
  return y;
}
inline dvec softmax_backward_ref(const fvec& y, const fvec& dy, std::size_t N, std::size_t C) {
  dvec dx(N * C);
  for (std::size_t r = 0; r < N; ++r) {
    double s = 0;
    for (std::size_t c = 0; c < C; ++c) s += double(y[r * C + c]) * dy[r * C + c];
    for (std::size_t c = 0; c < C; ++c) dx[r * C + c] = y[r * C + c] * (dy[r * C + c] - s);
  }
  return dx;
}

// ---------------------------------------------------------------- GELU
inline double gelu_tanh_ref(double x) {
  const double k = std::sqrt(2.0 / M_PI);
  return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
}
inline double gelu_tanh_grad_ref(double x) {
  const double k = std::sqrt(2.0 / M_PI);
  double t = std::tanh(k * (x + 0.044715 * x * x * x));
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3.0 * 0.044715 * x * x);
}
inline double gelu_erf_ref(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }
inline double gelu_erf_grad_ref(double x) {
  return 0.5 * (1.0 + std::erf(x / std::sqrt(2.0))) + x * std::exp(-0.5 * x * x) / std::sqrt(2.0 * M_PI);
}

// ---------------------------------------------------------------- cross-entropy (N,V), V valid columns Vv
struct ce_ref {
  dvec grad, losses;
  double loss_sum = 0, weight_sum = 0;
  std::size_t correct = 0, count = 0;
};
inline ce_ref cross_entropy_ref(const fvec& logits, std::size_t N, std::size_t V, std::size_t Vv,
                                const std::vector<std::int32_t>& t, const fvec& w, std::int32_t ignore, double scale) {
  ce_ref r{dvec(N * V, 0.0), dvec(N, 0.0)};
  for (std::size_t i = 0; i < N; ++i) {
    if (t[i] == ignore) continue;
    const float* x = &logits[i * V];
    double m = -std::numeric_limits<double>::infinity();
    std::size_t am = 0;
    for (std::size_t j = 0; j < Vv; ++j)
      if (x[j] > m) m = x[j], am = j;
    double s = 0;
    for (std::size_t j = 0; j < Vv; ++j) s += std::exp(double(x[j]) - m);
    double ce = m + std::log(s) - x[t[i]];
    double wi = w.empty() ? 1.0 : w[i];
    r.losses[i] = ce;
    r.loss_sum += wi * ce;
    r.weight_sum += wi;
    r.count++;
    r.correct += am == std::size_t(t[i]);
    for (std::size_t j = 0; j < Vv; ++j)
      r.grad[i * V + j] = scale * wi * (std::exp(double(x[j]) - m) / s - (j == std::size_t(t[i]) ? 1.0 : 0.0));
  }
  return r;
}

// ---------------------------------------------------------------- dropout
inline dvec dropout_ref(const fvec& x, float p, const counter_rng& rng, std::uint64_t stream) {
  dvec y(x.size());
  const float scale = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;
  for (std::size_t i = 0; i < x.size(); ++i) y[i] = rng.uniform(stream, i) >= p ? double(x[i] * scale) : 0.0;
  return y;
}

// ---------------------------------------------------------------- attention
// Generic reference head: queries Tq (at positions P..P+Tq-1), keys Tk; key j visible to query i iff
// j < key_limit and (not causal or j <= P + i). Dropout multiplier mult(i, j) on probabilities.
struct attn_ref_head {
  dvec out, lse, P;  // out (Tq,D), lse (Tq), P (Tq,Tk) probabilities before dropout
};
template <class Q, class K, class Vf, class Mult>
attn_ref_head attention_head_ref(Q q, K k, Vf v, std::size_t Tq, std::size_t Tk, std::size_t D, std::size_t P, bool causal,
                                 std::size_t key_limit, double scale, Mult mult) {
  attn_ref_head r{dvec(Tq * D, 0.0), dvec(Tq, -std::numeric_limits<double>::infinity()), dvec(Tq * Tk, 0.0)};
  for (std::size_t i = 0; i < Tq; ++i) {
    std::size_t L = std::min(Tk, key_limit);
    if (causal) L = std::min(L, P + i + 1);
    if (L == 0) continue;
    dvec s(L);
    double m = -std::numeric_limits<double>::infinity();
    for (std::size_t j = 0; j < L; ++j) {
      double d = 0;
      for (std::size_t c = 0; c < D; ++c) d += double(q(i, c)) * k(j, c);
      s[j] = scale * d;
      m = std::max(m, s[j]);
    }
    double z = 0;
    for (std::size_t j = 0; j < L; ++j) z += std::exp(s[j] - m);
    r.lse[i] = m + std::log(z);
    for (std::size_t j = 0; j < L; ++j) {
      double p = std::exp(s[j] - m) / z;
      r.P[i * Tk + j] = p;
      double pd = p * mult(i, j);
      for (std::size_t c = 0; c < D; ++c) r.out[i * D + c] += pd * v(j, c);
    }
  }
  return r;
}

struct attn_ref {
  dvec out, lse, dqkv;
};
enum class ref_mask { causal, padding, none };
// qkv (B·T, 3HD), dout (B·T, HD) (may be empty: no backward).
inline attn_ref attention_ref(const fvec& qkv, const fvec& dout, std::size_t B, std::size_t T, std::size_t H, std::size_t D,
                              ref_mask mask, double scale, const std::vector<std::int32_t>& lengths, float p,
                              const counter_rng& rng, std::uint64_t stream) {
  const std::size_t HD = H * D, ld = 3 * HD;
  attn_ref r{dvec(B * T * HD, 0.0), dvec(B * H * T), dvec(B * T * ld, 0.0)};
  const float dscale = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t h = 0; h < H; ++h) {
      auto q = [&](std::size_t i, std::size_t c) { return qkv[(b * T + i) * ld + h * D + c]; };
      auto k = [&](std::size_t j, std::size_t c) { return qkv[(b * T + j) * ld + HD + h * D + c]; };
      auto v = [&](std::size_t j, std::size_t c) { return qkv[(b * T + j) * ld + 2 * HD + h * D + c]; };
      auto mult = [&](std::size_t i, std::size_t j) -> double {
        if (p <= 0) return 1.0;
        std::uint64_t idx = ((b * H + h) * T + i) * T + j;
        return rng.uniform(stream, idx) >= p ? double(dscale) : 0.0;
      };
      std::size_t limit = mask == ref_mask::padding ? std::size_t(lengths[b]) : T;
      auto hr = attention_head_ref(q, k, v, T, T, D, 0, mask == ref_mask::causal, limit, scale, mult);
      for (std::size_t i = 0; i < T; ++i) {
        r.lse[(b * H + h) * T + i] = hr.lse[i];
        for (std::size_t c = 0; c < D; ++c) r.out[(b * T + i) * HD + h * D + c] = hr.out[i * D + c];
      }
      if (dout.empty()) continue;
      auto dO = [&](std::size_t i, std::size_t c) { return double(dout[(b * T + i) * HD + h * D + c]); };
      for (std::size_t i = 0; i < T; ++i) {
        // dP_ij = mult·(dO_i · V_j); dS_ij = P_ij (dP_ij − Σ_l P_il dP_il)
        dvec dP(T, 0.0);
        double rs = 0;
        for (std::size_t j = 0; j < T; ++j) {
          double pij = hr.P[i * T + j];
          if (pij == 0) continue;
          double d = 0;
          for (std::size_t c = 0; c < D; ++c) d += dO(i, c) * v(j, c);
          dP[j] = mult(i, j) * d;
          rs += pij * dP[j];
        }
        for (std::size_t j = 0; j < T; ++j) {
          double pij = hr.P[i * T + j];
          if (pij == 0) continue;
          double ds = pij * (dP[j] - rs);
          double pd = pij * mult(i, j);
          for (std::size_t c = 0; c < D; ++c) {
            r.dqkv[(b * T + i) * ld + h * D + c] += scale * ds * k(j, c);
            r.dqkv[(b * T + j) * ld + HD + h * D + c] += scale * ds * q(i, c);
            r.dqkv[(b * T + j) * ld + 2 * HD + h * D + c] += pd * dO(i, c);
          }
        }
      }
    }
  return r;
}

}  // namespace sparselm::test
