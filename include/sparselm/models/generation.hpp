#pragma once
// Text generation from any causal language model of this library (GPT, the S1 sparse LM; dense or
// block-sparse): incremental inference with a key/value cache, the no-cache reference path (the
// whole context recomputed by model.logits every token), and sampling with temperature, top-k and
// top-p (nucleus) seeded by the counter-based RNG.
//
// Legend: B sequences decoded together, n new tokens per sequence in one decoder call, N = B·n
// rows, P positions already cached (the same for every sequence), V vocab.
//   decoder           ids (N, sequence b's n tokens at b·n..b·n+n) -> logits (N,V) for every new
//                     position, or (B,V) for the last new position of each sequence:
//                     embedding at positions [P, P+n) -> block_stack::forward_cached (each block's
//                     attention appends its K, V to the kv_cache, layers/kv_cache.hpp) -> head logits
// The model's own layers run every step, so any embedding, block and head a model is built from
// decodes the same way. Dropout is off.
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
#include "sparselm/layers/branch.hpp"
#include "sparselm/layers/context.hpp"
#include "sparselm/layers/kv_cache.hpp"

namespace sparselm {

// GPT-2's <|endoftext|> id: the default stop token.
inline constexpr std::int32_t gpt2_endoftext_id = 50256;

// ---------------------------------------------------------------------------------------------
// Incremental decoder
// ---------------------------------------------------------------------------------------------

// Runs a causal LM one chunk of tokens at a time against a kv_cache. The model must outlive the
// decoder and its parameters must not change while a cache is in use.
template <class Model>
class decoder {
  static_assert(requires(const Model& m) { m.stack()[0].attn(); m.stack().size(); m.stack().channels(); },
                "decoder: the model needs 'stack()' (a block_stack whose blocks have 'attn()')");
  static_assert(requires(const Model& m) { m.embedding(); m.head(); m.params(); m.vocab_size(); m.max_positions(); },
                "decoder: the model needs 'embedding()', 'head()', 'params()', 'vocab_size()' and 'max_positions()'");
  static_assert(requires { typename Model::embedding_type::cache; typename Model::block_type::cache;
                           typename Model::head_type::cache; },
                "decoder: the model needs 'embedding_type', 'block_type' and 'head_type' with their caches");

 public:
  // batch: sequences decoded together; capacity: cached positions (0: the model's max_positions()).
  explicit decoder(const Model& model, std::size_t batch = 1, std::size_t capacity = 0) : model_(&model) {
    const auto& attn = model.stack()[0].attn();
    cache_ = kv_cache(model.stack().size(), batch, capacity ? capacity : model.max_positions(),
                      kv_width_of(attn));
    SPARSELM_CHECK(cache_.capacity() <= model.max_positions(), "decoder: cache capacity ", cache_.capacity(),
                   " exceeds the model's ", model.max_positions(), " positions");
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
    const std::size_t B = cache_.batch(), N = B * n, P = cache_.length(), V = model_->vocab_size();
    const std::size_t C = model_->stack().channels();
    SPARSELM_CHECK(n > 0, "decoder::forward: no new tokens");
    SPARSELM_CHECK(ids.size() == N, "decoder::forward: ", ids.size(), " token ids for ", B, " sequences x ", n,
                   " new tokens");
    SPARSELM_CHECK(P + n <= cache_.capacity(), "decoder::forward: ", n, " new tokens after ", P,
                   " cached positions exceed the cache capacity ", cache_.capacity());
    for (std::size_t i = 0; i < N; ++i)
      SPARSELM_CHECK(ids[i] >= 0 && std::size_t(ids[i]) < V, "decoder::forward: token id ", ids[i], " at position ",
                     i, " is outside the vocabulary [0, ", V, ")");
    const bool last_only = out.rows == B && n > 1;
    SPARSELM_CHECK((out.rows == N || out.rows == B) && out.cols == V, "decoder::forward: out ", shape_string(out),
                   " should be (", N, "x", V, ") or (", B, "x", V, ")");

    step_context s;
    s.params = &model_->params();
    s.tmp = &tmp_;
    s.batch = B;
    s.seq = n;
    auto x = x_.matrix(N, C);
    model_->embedding().forward(s, ids, x, emb_c_, P);
    model_->stack().forward_cached(s, x, cache_, P, block_c_);
    cache_.advance(n);
    const_matrix_view<float> rows = x;
    if (last_only) {
      auto sel = sel_.matrix(B, C);
      for (std::size_t b = 0; b < B; ++b) std::copy_n(x.row(b * n + n - 1), C, sel.row(b));
      rows = sel;
    }
    model_->head().logits(s, rows, out, head_c_);
  }

 private:
  const Model* model_;
  kv_cache cache_;
  scratch tmp_;
  buffer x_, sel_;
  typename Model::embedding_type::cache emb_c_;
  typename Model::block_type::cache block_c_;  // shared by every block: there is no backward
  typename Model::head_type::cache head_c_;
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

template <class Model>
void check_generation(const std::vector<std::vector<std::int32_t>>& prompts, const generation_options& o,
                      const Model& model) {
  const std::size_t vocab = model.vocab_size();
  o.sampling.validate();
  SPARSELM_CHECK(!prompts.empty(), "generation: no prompts");
  for (std::size_t b = 0; b < prompts.size(); ++b) {
    SPARSELM_CHECK(!prompts[b].empty(), "generation: prompt ", b, " is empty");
    SPARSELM_CHECK(prompts[b].size() == prompts[0].size(), "generation: prompts must have the same length (prompt 0 has ",
                   prompts[0].size(), " tokens, prompt ", b, " has ", prompts[b].size(), ")");
    for (std::size_t i = 0; i < prompts[b].size(); ++i)
      SPARSELM_CHECK(prompts[b][i] >= 0 && std::size_t(prompts[b][i]) < vocab, "generation: token id ",
                     prompts[b][i], " at position ", i, " of prompt ", b, " is outside the vocabulary [0, ",
                     vocab, ")");
  }
  SPARSELM_CHECK(o.stop_token == -1 || (o.stop_token >= 0 && std::size_t(o.stop_token) < vocab),
                 "generation: stop_token ", o.stop_token, " is outside the vocabulary [0, ", vocab,
                 ") (-1: no stop token)");
  const std::size_t T = prompts[0].size(), P = model.max_positions();
  if (o.overflow == context_overflow::error) {
    // The last generated token is never fed back, so the model sees at most T + max_new - 1 positions.
    const std::size_t need = T + (o.max_new_tokens ? o.max_new_tokens - 1 : 0);
    SPARSELM_CHECK(need <= P, "generation: prompt (", T, " tokens) + max_new_tokens (", o.max_new_tokens, ") needs ",
                   need, " positions but the model has ", P, " positions",
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
  detail::check_generation(prompts, o, model);
  const std::size_t B = prompts.size(), V = model.vocab_size(), P = model.max_positions();
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
  std::optional<decoder<Model>> dec;
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
