#pragma once
// Text generation from a trained GPT (SPEC §7): incremental inference with a key/value cache,
// the no-cache reference path (the whole context recomputed by gpt::logits every token), and
// sampling with temperature, top-k and top-p (nucleus) seeded by the counter-based RNG.
//
// Legend: B sequences decoded together, n new tokens per sequence in one decoder call, N = B·n
// rows, P positions already cached (the same for every sequence), Tmax the cache capacity
// (<= n_positions), L layers, C channels, H heads, D head width (HD = H·D), V vocab.
//   kv_cache          per layer: K and V, (B, Tmax, HD) each; keys(l, b) is a (Tmax, HD) view whose
//                     row t is position t of sequence b, head h at columns h·D..h·D+D
//   gpt_decoder       ids (N, sequence b's n tokens at b·n..b·n+n) -> logits (N,V) for every new
//                     position, or (B,V) for the last new position of each sequence
//   per layer:        h = ln1(x); qkv (N,3HD) = h·Wqkv + b; K,V rows -> cache[P, P+n);
//                     a (N,HD) = softmax(q·Kᵀ/sqrt(D)) V over cached positions [0, P+i];
//                     x += a·Wo + b; x += ffn(ln2(x))
//   head:             logits = ln_f(x)·wteᵀ (tied); a row-streaming product for <= 4 rows
//
// Dropout is off. The linear layers' own forward methods run the projections, so a block-sparse
// gpt<float, block_sparse<B>> decodes as well as a dense one.
//
// Determinism: every sampled token is a pure function of (seed, sequence index, step) and the
// logits; the kernels split work over rows/columns only, so the same seed gives the same text
// for any thread count.
//
//   gpt<> model(cfg); io::load_model(dir, model);
//   generation_options o;  o.sampling = {0.8f, 40, 0.95f, 1};  o.max_new_tokens = 50;
//   std::vector<std::int32_t> out = generate(model, prompt_ids, o);

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <numeric>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "sparselm/core/error.hpp"
#include "sparselm/core/rng.hpp"
#include "sparselm/core/tensor.hpp"
#include "sparselm/core/threads.hpp"
#include "sparselm/core/view.hpp"
#include "sparselm/kernels/detail/simd_math.hpp"
#include "sparselm/kernels/reduce.hpp"
#include "sparselm/kernels/softmax.hpp"
#include "sparselm/layers/context.hpp"
#include "sparselm/models/gpt.hpp"

namespace sparselm {

// GPT-2's <|endoftext|> id: the default stop token.
inline constexpr std::int32_t gpt2_endoftext_id = 50256;

// ---------------------------------------------------------------------------------------------
// Key/value cache
// ---------------------------------------------------------------------------------------------

// Keys and values of every layer for B sequences that advance together (one shared length).
class kv_cache {
 public:
  kv_cache() = default;
  // layers L, batch B, capacity Tmax (positions), width HD (= heads · head width).
  kv_cache(std::size_t layers, std::size_t batch, std::size_t capacity, std::size_t width)
      : layers_(layers), batch_(batch), cap_(capacity), width_(width) {
    SPARSELM_CHECK(layers > 0 && batch > 0 && capacity > 0 && width > 0, "kv_cache: zero size (layers ", layers,
                   ", batch ", batch, ", capacity ", capacity, ", width ", width, ")");
    k_.resize(layers);
    v_.resize(layers);
    for (std::size_t l = 0; l < layers; ++l) {
      k_[l] = aligned_vector<float>(batch * capacity * width);
      v_[l] = aligned_vector<float>(batch * capacity * width);
    }
  }

  std::size_t layers() const noexcept { return layers_; }
  std::size_t batch() const noexcept { return batch_; }
  std::size_t capacity() const noexcept { return cap_; }
  std::size_t width() const noexcept { return width_; }
  // Positions filled (per sequence).
  std::size_t length() const noexcept { return len_; }
  std::size_t bytes() const noexcept { return 2 * layers_ * batch_ * cap_ * width_ * sizeof(float); }

  // (Tmax, HD) views of layer l, sequence b; rows [0, length()) are valid.
  matrix_view<float> keys(std::size_t l, std::size_t b) { return {k_[l].data() + b * cap_ * width_, cap_, width_}; }
  matrix_view<float> values(std::size_t l, std::size_t b) { return {v_[l].data() + b * cap_ * width_, cap_, width_}; }
  const_matrix_view<float> keys(std::size_t l, std::size_t b) const {
    return {k_[l].data() + b * cap_ * width_, cap_, width_};
  }
  const_matrix_view<float> values(std::size_t l, std::size_t b) const {
    return {v_[l].data() + b * cap_ * width_, cap_, width_};
  }

  // Marks n more positions as filled (their rows must have been written).
  void advance(std::size_t n) {
    SPARSELM_CHECK(len_ + n <= cap_, "kv_cache: ", n, " new positions after ", len_, " exceed the capacity ", cap_);
    len_ += n;
  }
  // Forgets every position (storage is kept).
  void clear() noexcept { len_ = 0; }

 private:
  std::size_t layers_ = 0, batch_ = 0, cap_ = 0, width_ = 0, len_ = 0;
  std::vector<aligned_vector<float>> k_, v_;
};

namespace detail {

template <class Arch = native_arch>
inline float dot(const float* a, const float* b, std::size_t n) noexcept {
  using F = kernels::detail::fvec<Arch>;
  F acc(0.0f);
  kernels::detail::for_each_batch<Arch>(0, n, [&](std::size_t j, std::size_t m) {
    acc = xsimd::fma(kernels::detail::loadn<Arch>(a + j, m), kernels::detail::loadn<Arch>(b + j, m), acc);
  });
  return kernels::detail::hsum<Arch>(acc);
}

// y += w · x (n floats).
template <class Arch = native_arch>
inline void axpy(float w, const float* x, float* y, std::size_t n) noexcept {
  using F = kernels::detail::fvec<Arch>;
  const F wv(w);
  kernels::detail::for_each_batch<Arch>(0, n, [&](std::size_t j, std::size_t m) {
    kernels::detail::storen<Arch>(
        xsimd::fma(wv, kernels::detail::loadn<Arch>(x + j, m), kernels::detail::loadn<Arch>(y + j, m)), y + j, m);
  });
}

// Causal attention of n new queries per sequence over the cache of one layer.
//   qkv (B·n, 3HD): the new rows' Q | K | V (their K, V already copied into the cache at
//   positions [past, past+n)); att (B·n, HD) is assigned; scores: B·H·Tmax floats of workspace.
// Row i of sequence b attends to cached positions [0, past + i]. Parallel over (b, h); each
// (b, h) is computed by one thread in a fixed order, so the result does not depend on the
// thread count.
inline void cached_attention(const_matrix_view<float> qkv, const kv_cache& cache, std::size_t layer, std::size_t past,
                             std::size_t n, std::size_t heads, std::size_t head_dim, matrix_view<float> att,
                             std::span<float> scores) {
  const std::size_t B = cache.batch(), H = heads, D = head_dim, T = cache.capacity();
  SPARSELM_CHECK(qkv.rows == B * n && qkv.cols == 3 * H * D && att.rows == B * n && att.cols == H * D &&
                     cache.width() == H * D && past + n <= T && scores.size() >= B * H * T,
                 "cached_attention: qkv ", shape_string(qkv), ", att ", shape_string(att), " do not fit B=", B,
                 " n=", n, " H=", H, " D=", D, " past=", past, " capacity=", T);
  const float scale = 1.0f / std::sqrt(float(D));
  // About 4·n·(past + n)·D flops per (b, h): run short decode steps on fewer threads, where a
  // fork/join would cost more than the work.
  const std::size_t work = std::max<std::size_t>(1, 4 * n * (past + n) * D);
  const std::size_t min_tasks = std::max<std::size_t>(1, (std::size_t(1) << 15) / work);
  parallel_for(0, B * H, [&](std::size_t bh) {
    const std::size_t b = bh / H, h = bh % H;
    const auto K = cache.keys(layer, b), V = cache.values(layer, b);
    float* s = scores.data() + bh * T;
    for (std::size_t i = 0; i < n; ++i) {
      const std::size_t visible = past + i + 1;
      const float* q = qkv.row(b * n + i) + h * D;
      for (std::size_t j = 0; j < visible; ++j) s[j] = dot(q, K.row(j) + h * D, D) * scale;
      kernels::detail::softmax_row<native_arch>(s, s, visible, visible);
      float* o = att.row(b * n + i) + h * D;
      std::fill(o, o + D, 0.0f);
      for (std::size_t j = 0; j < visible; ++j) axpy(s[j], V.row(j) + h * D, o, D);
    }
  }, min_tasks);
}

// out (M,V) = x (M,C) · Eᵀ (+ bias (V)) for a few rows M (decode steps). Each row of E is read
// once, contiguously, and dotted with every x row; parallel over vocabulary ranges. The GEMM
// would pack (transpose) all of E for an M of 1, which costs more than the product itself.
inline void few_row_logits(const_matrix_view<float> x, const_matrix_view<float> E, const float* bias,
                           matrix_view<float> out) {
  SPARSELM_CHECK(x.cols == E.cols && out.rows == x.rows && out.cols == E.rows, "few_row_logits: x ", shape_string(x),
                 ", E ", shape_string(E), ", out ", shape_string(out), " do not fit");
  const std::size_t M = x.rows, C = x.cols;
  parallel_chunks(E.rows, [&](int, std::size_t v0, std::size_t v1) {
    for (std::size_t v = v0; v < v1; ++v) {
      const float* e = E.row(v);
      const float b = bias ? bias[v] : 0.0f;
      for (std::size_t m = 0; m < M; ++m) out(m, v) = dot(x.row(m), e, C) + b;
    }
  }, 256);
}
inline constexpr std::size_t few_rows = 4;  // up to this many rows few_row_logits beats the GEMM

}  // namespace detail

// ---------------------------------------------------------------------------------------------
// Incremental decoder
// ---------------------------------------------------------------------------------------------

// Runs a GPT (gpt<float, Sparsity, Act>) one chunk of tokens at a time against a kv_cache. The
// model must outlive the decoder and its parameters must not change while a cache is in use.
template <class Model>
class gpt_decoder {
 public:
  // batch: sequences decoded together; capacity: cached positions (0: the model's n_positions).
  explicit gpt_decoder(const Model& model, std::size_t batch = 1, std::size_t capacity = 0)
      : model_(&model), cache_(model.config().n_layer, batch, capacity ? capacity : model.config().n_positions,
                               model.config().n_head * model.config().head_dim()) {
    SPARSELM_CHECK(cache_.capacity() <= model.config().n_positions, "gpt_decoder: cache capacity ",
                   cache_.capacity(), " exceeds the model's n_positions ", model.config().n_positions);
    scores_.get(batch * model.config().n_head * cache_.capacity());
  }

  const kv_cache& cache() const noexcept { return cache_; }
  std::size_t batch() const noexcept { return cache_.batch(); }
  std::size_t length() const noexcept { return cache_.length(); }
  std::size_t capacity() const noexcept { return cache_.capacity(); }
  // Starts over (empty cache).
  void reset() noexcept { cache_.clear(); }

  // Appends n tokens to every sequence (ids (B·n), sequence b's at b·n..b·n+n) at positions
  // [length(), length()+n) and writes logits: out (B·n, V) for every new position, or (B, V) for
  // the last new position of each sequence.
  void forward(std::span<const std::int32_t> ids, std::size_t n, matrix_view<float> out) {
    const auto& cfg = model_->config();
    const std::size_t B = cache_.batch(), N = B * n, P = cache_.length(), C = cfg.n_embd;
    const std::size_t H = cfg.n_head, D = cfg.head_dim(), HD = H * D;
    SPARSELM_CHECK(n > 0, "gpt_decoder::forward: no new tokens");
    SPARSELM_CHECK(ids.size() == N, "gpt_decoder::forward: ", ids.size(), " token ids for ", B, " sequences x ", n,
                   " new tokens");
    SPARSELM_CHECK(P + n <= cache_.capacity(), "gpt_decoder::forward: ", n, " new tokens after ", P,
                   " cached positions exceed the cache capacity ", cache_.capacity());
    for (std::size_t i = 0; i < N; ++i)
      SPARSELM_CHECK(ids[i] >= 0 && std::size_t(ids[i]) < cfg.vocab_size, "gpt_decoder::forward: token id ", ids[i],
                     " at position ", i, " is outside the vocabulary [0, ", cfg.vocab_size, ")");
    const bool last_only = out.rows == B && n > 1;
    SPARSELM_CHECK((out.rows == N || out.rows == B) && out.cols == cfg.vocab_size, "gpt_decoder::forward: out ",
                   shape_string(out), " should be (", N, "x", cfg.vocab_size, ") or (", B, "x", cfg.vocab_size, ")");

    step_context s;
    s.params = &model_->params();
    s.tmp = &tmp_;
    s.batch = B;
    s.seq = n;
    auto x = x_.matrix(N, C);
    auto h = h_.matrix(N, C);
    auto qkv = qkv_.matrix(N, 3 * HD);
    auto att = att_.matrix(N, HD);
    auto branch = branch_.matrix(N, C);
    model_->embedding().forward(s, ids, x, P);
    const auto& blocks = model_->blocks();
    for (std::size_t l = 0; l < blocks.size(); ++l) {
      const auto& blk = blocks[l];
      blk.ln1().forward(s, x, h, ln_c_);
      blk.attn().qkv().forward(s, h, qkv, lin_c_);
      for (std::size_t b = 0; b < B; ++b) {
        auto K = cache_.keys(l, b), V = cache_.values(l, b);
        for (std::size_t i = 0; i < n; ++i) {
          const float* r = qkv.row(b * n + i);
          std::copy_n(r + HD, HD, K.row(P + i));
          std::copy_n(r + 2 * HD, HD, V.row(P + i));
        }
      }
      detail::cached_attention(qkv, cache_, l, P, n, H, D, att, scores_.get(B * H * cache_.capacity()));
      blk.attn().proj().forward(s, att, branch, lin_c_);
      kernels::add(x, branch, x);
      blk.ln2().forward(s, x, h, ln_c_);
      blk.ffn().forward(s, h, branch, ffn_c_);
      kernels::add(x, branch, x);
    }
    cache_.advance(n);
    // Final norm and the tied head on the rows asked for.
    const_matrix_view<float> rows = x;
    if (last_only) {
      auto sel = sel_.matrix(B, C);
      for (std::size_t b = 0; b < B; ++b) std::copy_n(x.row(b * n + n - 1), C, sel.row(b));
      rows = sel;
    }
    auto xf = h_.matrix(rows.rows, C);
    model_->final_norm().forward(s, rows, xf, ln_c_);
    const auto& head = model_->head();
    if (xf.rows <= detail::few_rows)
      detail::few_row_logits(xf, s.pm(head.embedding().index), head.bias() ? s.p(head.bias()->index).data() : nullptr,
                             out);
    else
      head.logits(s, xf, out);
  }

 private:
  const Model* model_;
  kv_cache cache_;
  scratch tmp_;
  buffer x_, h_, qkv_, att_, branch_, sel_, scores_;
  layer_norm::cache ln_c_;
  typename Model::block_type::attention_type::linear_type::cache lin_c_;
  typename Model::block_type::ffn_type::cache ffn_c_;
};

// ---------------------------------------------------------------------------------------------
// Sampling
// ---------------------------------------------------------------------------------------------

// How the next token is chosen from a row of logits. Order: temperature, then top-k, then top-p.
struct sampling_options {
  float temperature = 1.0f;  // 0: greedy (argmax, top_k/top_p unused); > 0: logits / temperature
  std::int64_t top_k = 0;    // keep the k most likely tokens; 0: off; k >= V: off
  float top_p = 1.0f;        // keep the smallest most-likely set whose probability is >= top_p; 1: off
  std::uint64_t seed = 0;    // counter_rng key

  // Throws sparselm::error naming the bad field.
  void validate() const {
    SPARSELM_CHECK(std::isfinite(temperature) && temperature >= 0.0f, "sampling: temperature must be >= 0 (0: greedy), got ",
                   temperature);
    SPARSELM_CHECK(top_k >= 0, "sampling: top_k must be >= 0 (0: off), got ", top_k);
    SPARSELM_CHECK(top_p > 0.0f && top_p <= 1.0f, "sampling: top_p must be in (0, 1] (1: off), got ", top_p);
  }
};

struct token_probability {
  std::int32_t id = 0;
  float p = 0.0f;
};

// The tokens sampling may choose from one row of logits and their renormalised probabilities
// (summing to 1). Greedy gives the argmax (lowest id on ties) with probability 1. When top-k or
// top-p filter, the result is ordered most likely first (ties: lower id first); otherwise it is
// every token in id order.
inline std::vector<token_probability> sampling_distribution(std::span<const float> logits, const sampling_options& o) {
  o.validate();
  const std::size_t V = logits.size();
  SPARSELM_CHECK(V > 0, "sampling: empty logits");
  for (std::size_t i = 0; i < V; ++i)
    SPARSELM_CHECK(!std::isnan(logits[i]), "sampling: logit ", i, " is NaN");
  if (o.temperature == 0.0f) {
    const auto it = std::max_element(logits.begin(), logits.end());  // first maximum
    return {{std::int32_t(it - logits.begin()), 1.0f}};
  }
  std::vector<token_probability> c(V);
  for (std::size_t i = 0; i < V; ++i) c[i] = {std::int32_t(i), logits[i]};
  auto more_likely = [](const token_probability& a, const token_probability& b) {
    return a.p > b.p || (a.p == b.p && a.id < b.id);
  };
  const bool use_k = o.top_k > 0 && std::size_t(o.top_k) < V, use_p = o.top_p < 1.0f;
  if (use_k) {
    std::partial_sort(c.begin(), c.begin() + o.top_k, c.end(), more_likely);
    c.resize(std::size_t(o.top_k));
  } else if (use_p) {
    std::sort(c.begin(), c.end(), more_likely);
  }
  // Softmax of logits / temperature over the kept tokens (double sums).
  float m = -std::numeric_limits<float>::infinity();
  for (auto& t : c) m = std::max(m, t.p);
  SPARSELM_CHECK(std::isfinite(m), "sampling: no finite logit among the candidates");
  const double inv_t = 1.0 / double(o.temperature);
  double sum = 0;
  std::vector<double> e(c.size());
  for (std::size_t i = 0; i < c.size(); ++i) sum += e[i] = std::exp((double(c[i].p) - double(m)) * inv_t);
  if (use_p) {  // c is sorted: keep the shortest prefix with mass >= top_p
    double acc = 0;
    std::size_t keep = 0;
    while (keep < c.size()) {
      acc += e[keep++] / sum;
      if (acc >= double(o.top_p)) break;
    }
    c.resize(keep);
    e.resize(keep);
    sum = std::accumulate(e.begin(), e.end(), 0.0);
  }
  for (std::size_t i = 0; i < c.size(); ++i) c[i].p = float(e[i] / sum);
  return c;
}

// Picks from sampling_distribution by inverse CDF with u in [0, 1): the first token whose
// cumulative probability exceeds u (the last kept token if rounding leaves u above the total).
inline std::int32_t sample_token(std::span<const float> logits, const sampling_options& o, float u) {
  const auto d = sampling_distribution(logits, o);
  double acc = 0;
  for (const auto& t : d) {
    acc += t.p;
    if (double(u) < acc) return t.id;
  }
  return d.back().id;
}

// The uniform number for sequence `seq`'s `step`-th generated token under `seed`.
inline float sampling_uniform(std::uint64_t seed, std::size_t seq, std::size_t step) noexcept {
  return counter_rng(seed).uniform(mix_stream(0x73616d706c65ull, seq), step);  // "sample"
}

// ---------------------------------------------------------------------------------------------
// Generation loop
// ---------------------------------------------------------------------------------------------

// What happens when the context (prompt + generated tokens) no longer fits n_positions.
enum class context_overflow {
  error,    // prompt + max_new_tokens must fit; checked before anything runs
  restart,  // the context is cut to its last `keep_on_overflow` tokens, and the cache rebuilt
};

struct generation_options {
  sampling_options sampling{};
  std::size_t max_new_tokens = 50;
  std::int32_t stop_token = gpt2_endoftext_id;  // stop a sequence when sampled; -1: none
  bool use_cache = true;                        // false: recompute the whole context every token
  context_overflow overflow = context_overflow::error;
  std::size_t keep_on_overflow = 0;  // restart: tokens kept, in [1, n_positions] (0: n_positions / 2)
};

struct generation_result {
  std::vector<std::vector<std::int32_t>> tokens;  // per sequence: the new tokens (stop token excluded)
  std::vector<bool> stopped;                      // per sequence: ended on the stop token
  std::size_t restarts = 0;                       // context cuts (context_overflow::restart), the prompt's included
};

namespace detail {

inline void check_generation(const std::vector<std::vector<std::int32_t>>& prompts, const generation_options& o,
                             const gpt_config& cfg) {
  o.sampling.validate();
  SPARSELM_CHECK(!prompts.empty(), "generation: no prompts");
  for (std::size_t b = 0; b < prompts.size(); ++b) {
    SPARSELM_CHECK(!prompts[b].empty(), "generation: prompt ", b, " is empty");
    SPARSELM_CHECK(prompts[b].size() == prompts[0].size(), "generation: prompts must have the same length (prompt 0 has ",
                   prompts[0].size(), " tokens, prompt ", b, " has ", prompts[b].size(), ")");
    for (std::size_t i = 0; i < prompts[b].size(); ++i)
      SPARSELM_CHECK(prompts[b][i] >= 0 && std::size_t(prompts[b][i]) < cfg.vocab_size, "generation: token id ",
                     prompts[b][i], " at position ", i, " of prompt ", b, " is outside the vocabulary [0, ",
                     cfg.vocab_size, ")");
  }
  SPARSELM_CHECK(o.stop_token == -1 || (o.stop_token >= 0 && std::size_t(o.stop_token) < cfg.vocab_size),
                 "generation: stop_token ", o.stop_token, " is outside the vocabulary [0, ", cfg.vocab_size,
                 ") (-1: no stop token)");
  const std::size_t T = prompts[0].size(), P = cfg.n_positions;
  if (o.overflow == context_overflow::error) {
    // The last generated token is never fed back, so the model sees at most T + max_new - 1 positions.
    const std::size_t need = T + (o.max_new_tokens ? o.max_new_tokens - 1 : 0);
    SPARSELM_CHECK(need <= P, "generation: prompt (", T, " tokens) + max_new_tokens (", o.max_new_tokens, ") needs ",
                   need, " positions but the model's n_positions is ", P,
                   "; shorten them or use context_overflow::restart");
  } else {
    SPARSELM_CHECK(o.keep_on_overflow <= P, "generation: keep_on_overflow (", o.keep_on_overflow,
                   ") exceeds n_positions (", P, ")");
  }
}

}  // namespace detail

// Generates up to max_new_tokens for each prompt (all prompts the same length; decoded as one
// batch). on_token(sequence, id), if given, is called for each new token as it is chosen.
template <class Model>
generation_result generate_batch(Model& model, const std::vector<std::vector<std::int32_t>>& prompts,
                                 const generation_options& o,
                                 const std::function<void(std::size_t, std::int32_t)>& on_token = {}) {
  const auto& cfg = model.config();
  detail::check_generation(prompts, o, cfg);
  const std::size_t B = prompts.size(), V = cfg.vocab_size, P = cfg.n_positions;
  const std::size_t keep = o.keep_on_overflow ? o.keep_on_overflow : std::max<std::size_t>(1, P / 2);
  generation_result r;
  r.tokens.resize(B);
  r.stopped.assign(B, false);
  if (o.max_new_tokens == 0) return r;

  // Context of every sequence: all tokens so far; the model sees [start, size).
  std::vector<std::vector<std::int32_t>> ctx = prompts;
  std::size_t start = 0;
  auto fit_window = [&] {
    if (ctx[0].size() - start > P) {
      start = ctx[0].size() - keep;
      ++r.restarts;
      return true;
    }
    return false;
  };
  std::vector<std::int32_t> ids;
  auto gather = [&](std::size_t from) {  // ids (B·n) of context positions [from, size)
    ids.clear();
    for (auto& c : ctx) ids.insert(ids.end(), c.begin() + std::ptrdiff_t(from), c.end());
    return ctx[0].size() - from;
  };

  std::vector<float> logits;
  std::vector<float> next_logits(B * V);
  std::optional<gpt_decoder<Model>> dec;
  if (o.use_cache) dec.emplace(model, B);
  std::size_t active = B;
  for (std::size_t step = 0; step < o.max_new_tokens && active > 0; ++step) {
    const bool restarted = fit_window() || step == 0;  // the cache must be (re)filled from `start`
    if (o.use_cache) {
      if (restarted) dec->reset();
      const std::size_t n = gather(restarted ? start : ctx[0].size() - 1);
      dec->forward(ids, n, {next_logits.data(), B, V});
    } else {
      const std::size_t n = gather(start);
      logits.resize(B * n * V);
      model.logits(ids, B, n, {logits.data(), B * n, V});
      for (std::size_t b = 0; b < B; ++b)
        std::copy_n(logits.data() + (b * n + n - 1) * V, V, next_logits.data() + b * V);
    }
    for (std::size_t b = 0; b < B; ++b) {
      std::int32_t t = ctx[b].back();  // finished sequences repeat their last token
      if (!r.stopped[b]) {
        t = sample_token({next_logits.data() + b * V, V}, o.sampling, sampling_uniform(o.sampling.seed, b, step));
        if (t == o.stop_token) {
          r.stopped[b] = true;
          --active;
        } else {
          r.tokens[b].push_back(t);
          if (on_token) on_token(b, t);
        }
      }
      ctx[b].push_back(t);
    }
  }
  return r;
}

// One prompt: the new tokens.
template <class Model>
std::vector<std::int32_t> generate(Model& model, std::span<const std::int32_t> prompt, const generation_options& o,
                                   const std::function<void(std::size_t, std::int32_t)>& on_token = {}) {
  return generate_batch(model, {{prompt.begin(), prompt.end()}}, o, on_token).tokens[0];
}

}  // namespace sparselm
