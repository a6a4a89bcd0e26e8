// Text generation: KV-cache logits against the full forward (dense and block-sparse), greedy and
// seeded sampling, context restarts, top-k / top-p filtering against a naive reference, bad input.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

#include "sparselm/core/threads.hpp"
#include "sparselm/models/generation.hpp"
#include "sparselm/models/gpt.hpp"
#include "sparselm/models/sparse_lm.hpp"

// Each test file is its own namespace: the area's files are compiled as one unity translation unit
// (tests/CMakeLists.txt), and their helpers must not meet.
namespace SPARSELM_UNITY_ID {

using namespace sparselm;

namespace {
gpt_config tiny(float init_range = 0.2f) {
  auto c = gpt_config::from_json(read_json_file(SPARSELM_SOURCE_DIR "/configs/gpt-tiny.json"), "gpt-tiny");
  c.initializer_range = init_range;  // larger weights: logits that differ clearly between positions
  return c;
}

std::vector<std::int32_t> random_ids(std::size_t n, std::size_t vocab, std::uint64_t seed) {
  counter_rng rng(seed);
  std::vector<std::int32_t> r(n);
  for (std::size_t i = 0; i < n; ++i) r[i] = std::int32_t(rng.below(0, i, vocab));
  return r;
}

// max |a - b| / max(1, max |b|) over one row.
double rel_diff(const float* a, const float* b, std::size_t n) {
  double d = 0, m = 1;
  for (std::size_t i = 0; i < n; ++i) {
    d = std::max(d, std::abs(double(a[i]) - double(b[i])));
    m = std::max(m, std::abs(double(b[i])));
  }
  return d / m;
}

// Feeds B sequences of T tokens through the decoder in the chunks `chunks` (summing to T) and
// compares the logits of every position with gpt::logits over the whole sequences.
template <class Model>
void check_cache_against_full(Model& m, std::size_t B, const std::vector<std::size_t>& chunks) {
  const std::size_t V = m.vocab_size();
  std::size_t T = 0;
  for (auto c : chunks) T += c;
  const auto ids = random_ids(B * T, V, 11);  // sequence b at b·T..b·T+T
  std::vector<float> full(B * T * V);
  m.logits(ids, B, T, {full.data(), B * T, V});

  decoder<Model> dec(m, B);
  std::size_t pos = 0;
  double worst = 0;
  for (std::size_t n : chunks) {
    std::vector<std::int32_t> chunk;
    for (std::size_t b = 0; b < B; ++b)
      chunk.insert(chunk.end(), ids.begin() + std::ptrdiff_t(b * T + pos), ids.begin() + std::ptrdiff_t(b * T + pos + n));
    std::vector<float> out(B * n * V);
    dec.forward(chunk, n, {out.data(), B * n, V});
    for (std::size_t b = 0; b < B; ++b)
      for (std::size_t i = 0; i < n; ++i)
        worst = std::max(worst, rel_diff(out.data() + (b * n + i) * V, full.data() + (b * T + pos + i) * V, V));
    pos += n;
    CHECK(dec.length() == pos);
  }
  CHECK(worst < 1e-4);
  MESSAGE("max relative logit difference: ", worst);
}

// Greedy continuation by the naive loop: gpt::logits over the whole context, argmax of the last row.
std::vector<std::int32_t> naive_greedy(gpt<>& m, std::vector<std::int32_t> ctx, std::size_t new_tokens) {
  const std::size_t V = m.config().vocab_size;
  std::vector<std::int32_t> r;
  for (std::size_t s = 0; s < new_tokens; ++s) {
    std::vector<float> lg(ctx.size() * V);
    m.logits(ctx, 1, ctx.size(), {lg.data(), ctx.size(), V});
    const float* last = lg.data() + (ctx.size() - 1) * V;
    const auto t = std::int32_t(std::max_element(last, last + V) - last);
    r.push_back(t);
    ctx.push_back(t);
  }
  return r;
}

generation_options opts(float temperature, std::size_t max_new, std::uint64_t seed = 1) {
  generation_options o;
  o.sampling.temperature = temperature;
  o.sampling.seed = seed;
  o.max_new_tokens = max_new;
  o.stop_token = -1;  // the tiny vocabulary has no <|endoftext|>
  return o;
}
}  // namespace

TEST_CASE("generation: cached logits equal the full forward at every position") {
  gpt<> m(tiny());
  m.init(3);
  SUBCASE("one sequence: prefill then single-token steps") { check_cache_against_full(m, 1, {5, 1, 1, 1, 1, 1}); }
  SUBCASE("two sequences, mixed chunks, up to the full context") {
    check_cache_against_full(m, 2, {4, 1, 2, 1, 3, 1, 1, 1, 2});
  }
  SUBCASE("last-position logits (row-dot head) equal the last row of the all-position logits (GEMM head)") {
    const std::size_t V = m.config().vocab_size;
    const auto ids = random_ids(2 * 6, V, 5);
    decoder<gpt<>> a(m, 2), b(m, 2);
    std::vector<float> all(2 * 6 * V), last(2 * V);
    a.forward(ids, 6, {all.data(), 12, V});
    b.forward(ids, 6, {last.data(), 2, V});
    for (std::size_t s = 0; s < 2; ++s)
      CHECK(rel_diff(last.data() + s * V, all.data() + (s * 6 + 5) * V, V) < 1e-6);  // head: row dots vs GEMM
  }
}

TEST_CASE("generation: cached logits of a block-sparse GPT equal its full forward") {
  sparse_plan plan;
  plan.sparsity = 0.5;
  gpt<float, block_sparse<4>> m(tiny(), plan);
  m.init(4);
  check_cache_against_full(m, 2, {3, 1, 1, 2, 1});
}

namespace {
sparse_lm_config s1_tiny(std::size_t block) {
  auto c = sparse_lm_config::from_json(read_json_file(SPARSELM_SOURCE_DIR "/configs/s1-tiny.json"), "s1-tiny");
  c.block_size = block;
  c.sparsity = 0.5;
  c.projection_bias = true;  // the logit bias takes part in decoding too
  c.layer_norm_gamma = 1.0f; // larger activations: logits that differ clearly between positions
  return c;
}

// The same seeded text with the cache and without, on 1 and 2 threads.
template <class Model>
void check_same_text(Model& m) {
  const std::size_t V = m.vocab_size();
  const auto prompt = random_ids(3, V, 21);
  auto o = opts(0.9f, 8, 17);
  std::vector<std::vector<std::int32_t>> runs;
  const int default_threads = num_threads();
  for (int threads : {1, 2})
    for (bool cache : {true, false}) {
      set_num_threads(threads);
      o.use_cache = cache;
      runs.push_back(generate(m, prompt, o));
    }
  set_num_threads(default_threads);
  REQUIRE(runs[0].size() == 8);
  for (auto& r : runs) CHECK(r == runs[0]);
}
}  // namespace

TEST_CASE("generation: every model kind decodes with the cache as without it") {
  SUBCASE("GPT, block size 1 (unstructured)") {
    gpt<float, block_sparse<1>> m(tiny(), sparse_plan{.sparsity = 0.5});
    m.init(6);
    check_cache_against_full(m, 2, {3, 1, 2, 1});
    check_same_text(m);
  }
  SUBCASE("GPT, block size 16") {
    auto c = tiny();
    c.n_embd = 32;
    c.n_head = 2;
    gpt<float, block_sparse<16>> m(c, sparse_plan{.sparsity = 0.5});
    m.init(7);
    check_cache_against_full(m, 1, {4, 1, 1});
    check_same_text(m);
  }
  SUBCASE("S1 sparse LM, dense") {
    sparse_lm<float, dense> m(s1_tiny(0));
    m.init(8);
    check_cache_against_full(m, 2, {5, 1, 1, 2});
    check_same_text(m);
  }
  SUBCASE("S1 sparse LM, block size 4 and 1") {
    sparse_lm<float, block_sparse<4>> m(s1_tiny(4));
    m.init(9);
    check_cache_against_full(m, 2, {2, 3, 1});
    check_same_text(m);
    sparse_lm<float, block_sparse<1>> u(s1_tiny(1));
    u.init(10);
    check_cache_against_full(u, 1, {3, 1, 1});
  }
}

TEST_CASE("generation: the S1 model with block_sparse_attention decodes with the cache as without it") {
  auto c = s1_tiny(4);
  c.block_sparse_attention = kernels::block_causal_options{.block = 3, .density = 0.5, .seed = 2};  // partial last block
  sparse_lm<float, block_sparse<4>> m(c);
  m.init(11);
  check_cache_against_full(m, 2, {4, 1, 2, 1, 1, 3, 1, 3});  // up to the full context of 16
  check_same_text(m);
  // the cached logits are not the dense model's
  auto d = c;
  d.block_sparse_attention.reset();
  sparse_lm<float, block_sparse<4>> dense_attn(d);
  dense_attn.init(11);
  const auto ids = random_ids(16, m.vocab_size(), 4);
  std::vector<float> a(16 * m.vocab_size()), b(a.size());
  m.logits(ids, 1, 16, {a.data(), 16, m.vocab_size()});
  dense_attn.logits(ids, 1, 16, {b.data(), 16, m.vocab_size()});
  CHECK(rel_diff(a.data() + 15 * m.vocab_size(), b.data() + 15 * m.vocab_size(), m.vocab_size()) > 1e-4);
}

TEST_CASE("generation: greedy is the argmax; top_k = 1 is greedy") {
  gpt<> m(tiny());
  m.init(7);
  const auto prompt = random_ids(4, m.config().vocab_size, 2);
  const auto ref = naive_greedy(m, prompt, 10);
  auto o = opts(0.0f, 10);
  CHECK(generate(m, prompt, o) == ref);
  o.use_cache = false;
  CHECK(generate(m, prompt, o) == ref);
  auto k1 = opts(0.8f, 10, 99);
  k1.sampling.top_k = 1;
  CHECK(generate(m, prompt, k1) == ref);
  k1.sampling.top_p = 1e-6f;  // nucleus of one token: greedy too
  k1.sampling.top_k = 0;
  CHECK(generate(m, prompt, k1) == ref);
}

TEST_CASE("generation: a seed gives the same tokens (cache or not, any thread count); seeds differ") {
  gpt<> m(tiny(0.02f));  // small weights: a broad next-token distribution
  m.init(8);
  const auto prompt = random_ids(3, m.config().vocab_size, 4);
  auto o = opts(1.0f, 12, 5);
  o.sampling.top_k = 40;
  o.sampling.top_p = 0.95f;
  const auto a = generate(m, prompt, o);
  CHECK(a.size() == 12);
  CHECK(generate(m, prompt, o) == a);
  const int threads = num_threads();
  set_num_threads(1);
  CHECK(generate(m, prompt, o) == a);
  set_num_threads(threads);
  auto nc = o;
  nc.use_cache = false;
  CHECK(generate(m, prompt, nc) == a);
  auto other = o;
  other.sampling.seed = 6;
  CHECK(generate(m, prompt, other) != a);
}

TEST_CASE("generation: batches, stop token, context restart") {
  gpt<> m(tiny());
  m.init(9);
  const std::size_t V = m.config().vocab_size;
  const auto p0 = random_ids(4, V, 20), p1 = random_ids(4, V, 21);
  const auto g0 = naive_greedy(m, p0, 8), g1 = naive_greedy(m, p1, 8);

  SUBCASE("two prompts decoded together equal each alone") {
    auto r = generate_batch(m, {p0, p1}, opts(0.0f, 8));
    CHECK(r.tokens[0] == g0);
    CHECK(r.tokens[1] == g1);
    CHECK(r.stopped == std::vector<bool>{false, false});
  }
  SUBCASE("the stop token ends a sequence and is not returned") {
    auto o = opts(0.0f, 8);
    o.stop_token = g0[3];
    const auto first = std::size_t(std::find(g0.begin(), g0.end(), g0[3]) - g0.begin());
    auto r = generate_batch(m, {p0}, o);
    CHECK(r.stopped[0]);
    CHECK(r.tokens[0] == std::vector<std::int32_t>(g0.begin(), g0.begin() + std::ptrdiff_t(first)));
  }
  SUBCASE("restart: cached and uncached see the same windows; windows as the naive rule") {
    auto o = opts(0.0f, 30);  // 6 + 30 > n_positions = 16
    o.overflow = context_overflow::restart;
    o.keep_on_overflow = 8;
    const auto prompt = random_ids(6, V, 22);
    auto cached = generate_batch(m, {prompt}, o);
    o.use_cache = false;
    auto uncached = generate_batch(m, {prompt}, o);
    CHECK(cached.tokens[0].size() == 30);
    CHECK(cached.tokens[0] == uncached.tokens[0]);
    CHECK(cached.restarts == uncached.restarts);
    // Naive rule: whenever the context exceeds 16 tokens, keep its last 8.
    std::vector<std::int32_t> ctx = prompt, ref;
    std::size_t restarts = 0;
    for (int s = 0; s < 30; ++s) {
      if (ctx.size() > 16) {
        ctx.erase(ctx.begin(), ctx.end() - 8);
        ++restarts;
      }
      const auto t = naive_greedy(m, ctx, 1)[0];
      ref.push_back(t);
      ctx.push_back(t);
    }
    CHECK(cached.tokens[0] == ref);
    CHECK(restarts == 3);
    CHECK(cached.restarts == restarts);
  }
}

namespace {
// Naive reference for the filtering rules, by ranks instead of sorting:
//   top-k keeps token i when fewer than k tokens are strictly more likely (ties: lower id first);
//   top-p keeps token i when the (top-k renormalised) mass of the tokens ranked before it is < p.
std::map<std::int32_t, double> naive_filter(const std::vector<float>& logits, double temperature, std::size_t k,
                                            double p) {
  const std::size_t V = logits.size();
  auto before = [&](std::size_t j, std::size_t i) {  // j ranks before i
    return logits[j] > logits[i] || (logits[j] == logits[i] && j < i);
  };
  std::vector<bool> kept(V, true);
  if (k > 0)
    for (std::size_t i = 0; i < V; ++i) {
      std::size_t ahead = 0;
      for (std::size_t j = 0; j < V; ++j) ahead += before(j, i);
      kept[i] = ahead < k;
    }
  std::vector<double> prob(V, 0.0);
  double z = 0;
  for (std::size_t i = 0; i < V; ++i)
    if (kept[i]) z += prob[i] = std::exp(double(logits[i]) / temperature);
  for (auto& q : prob) q /= z;
  std::vector<bool> kept_p = kept;
  for (std::size_t i = 0; i < V; ++i) {
    if (!kept[i]) continue;
    double ahead = 0;
    for (std::size_t j = 0; j < V; ++j)
      if (kept[j] && before(j, i)) ahead += prob[j];
    kept_p[i] = ahead < p;
  }
  std::map<std::int32_t, double> r;
  double s = 0;
  for (std::size_t i = 0; i < V; ++i)
    if (kept_p[i]) s += prob[i];
  for (std::size_t i = 0; i < V; ++i)
    if (kept_p[i]) r[std::int32_t(i)] = prob[i] / s;
  return r;
}
}  // namespace

TEST_CASE("sampling: top-k / top-p kept sets and renormalised probabilities match a naive reference") {
  const std::vector<float> logits{2.0f, 1.0f, 0.5f, 3.0f, -1.0f, 0.0f, 2.5f, 1.5f, -0.25f, 0.75f};
  int cases = 0;
  for (float t : {0.5f, 1.0f, 2.0f})
    for (std::int64_t k : {0, 1, 3, 7, 10, 25})
      for (float p : {0.05f, 0.3f, 0.6f, 0.9f, 1.0f}) {
        CAPTURE(t);
        CAPTURE(k);
        CAPTURE(p);
        sampling_options o;
        o.temperature = t;
        o.top_k = k;
        o.top_p = p;
        const auto d = sampling_distribution(logits, o);
        const auto ref = naive_filter(logits, t, std::size_t(k), p == 1.0f ? 2.0 : double(p));
        std::map<std::int32_t, double> got;
        double total = 0;
        for (auto& e : d) got[e.id] = e.p, total += e.p;
        REQUIRE(got.size() == ref.size());
        for (auto& [id, q] : ref) {
          REQUIRE(got.count(id) == 1);
          CHECK(got[id] == doctest::Approx(q).epsilon(1e-6));
        }
        CHECK(total == doctest::Approx(1.0).epsilon(1e-6));
        ++cases;
      }
  CHECK(cases == 90);
  // A concrete case by hand: temperature 1, top-k 3 keeps ids 3, 6, 0 (logits 3, 2.5, 2).
  sampling_options o;
  o.top_k = 3;
  const auto d = sampling_distribution(logits, o);
  REQUIRE(d.size() == 3);
  CHECK(d[0].id == 3);
  CHECK(d[1].id == 6);
  CHECK(d[2].id == 0);
  const double z = std::exp(3.0) + std::exp(2.5) + std::exp(2.0);
  CHECK(d[0].p == doctest::Approx(std::exp(3.0) / z).epsilon(1e-6));
}

TEST_CASE("sampling: inverse CDF draws follow the filtered distribution; greedy is the first maximum") {
  const std::vector<float> logits{0.1f, 1.2f, -0.3f, 1.2f, 0.7f, -2.0f};
  sampling_options g;
  g.temperature = 0.0f;
  CHECK(sample_token(logits, g, 0.9f) == 1);  // tie between ids 1 and 3: the lower id
  sampling_options o;
  o.temperature = 0.7f;
  o.top_p = 0.9f;
  const auto d = sampling_distribution(logits, o);
  std::vector<double> freq(logits.size(), 0.0);
  const std::size_t n = 40000;
  for (std::size_t i = 0; i < n; ++i) freq[std::size_t(sample_token(logits, o, sampling_uniform(17, 0, i)))] += 1.0 / n;
  std::vector<double> want(logits.size(), 0.0);
  for (auto& e : d) want[std::size_t(e.id)] = e.p;
  for (std::size_t i = 0; i < logits.size(); ++i) {
    CAPTURE(i);
    CHECK(std::abs(freq[i] - want[i]) < 0.01);
  }
  CHECK(want[5] == 0.0);  // outside the nucleus
  // u at the edges of the CDF
  CHECK(sample_token(logits, o, 0.0f) == d.front().id);
  CHECK(sample_token(logits, o, 0.99999994f) == d.back().id);
}

TEST_CASE("generation: bad input is an error naming the culprit") {
  gpt<> m(tiny());
  m.init(1);
  const std::vector<std::int32_t> prompt{1, 2, 3};
  auto o = opts(1.0f, 4);
  auto throws = [&](const std::vector<std::vector<std::int32_t>>& prompts, const generation_options& g, const char* what) {
    CAPTURE(what);
    CHECK_THROWS_WITH_AS(generate_batch(m, prompts, g), doctest::Contains(what), sparselm::error);
  };
  throws({{}}, o, "prompt 0 is empty");
  throws({{1, 61, 2}}, o, "token id 61");
  throws({{1, 2, 3}, {1, 2}}, o, "same length");
  auto b = o;
  b.sampling.top_p = 0.0f;
  throws({prompt}, b, "top_p");
  b.sampling.top_p = 1.5f;
  throws({prompt}, b, "top_p");
  b = o;
  b.sampling.temperature = -0.5f;
  throws({prompt}, b, "temperature");
  b.sampling.temperature = std::nanf("");
  throws({prompt}, b, "temperature");
  b = o;
  b.sampling.top_k = -1;
  throws({prompt}, b, "top_k");
  b = o;
  b.stop_token = gpt2_endoftext_id;  // outside the tiny vocabulary
  throws({prompt}, b, "stop_token");
  b = o;
  b.max_new_tokens = 15;  // 3 + 15 - 1 > 16
  throws({prompt}, b, "the model has 16 positions");
  b.max_new_tokens = 14;  // 3 + 14 - 1 = 16 fits
  CHECK(generate(m, prompt, b).size() == 14);
  b.overflow = context_overflow::restart;
  b.keep_on_overflow = 17;
  throws({prompt}, b, "keep_on_overflow");
  // top_k = 0 means off: the unfiltered distribution
  sampling_options k0;
  k0.top_k = 0;
  CHECK(sampling_distribution(std::vector<float>{1.0f, 2.0f, 3.0f}, k0).size() == 3);

  // The decoder's own checks.
  const std::size_t V = m.config().vocab_size;
  decoder<gpt<>> dec(m, 1);
  std::vector<float> out(16 * V);
  CHECK_THROWS_WITH_AS(dec.forward(std::vector<std::int32_t>{}, 0, {out.data(), 1, V}), doctest::Contains("no new tokens"),
                       sparselm::error);
  CHECK_THROWS_WITH_AS(dec.forward(std::vector<std::int32_t>{1, 70}, 2, {out.data(), 2, V}),
                       doctest::Contains("token id 70"), sparselm::error);
  CHECK_THROWS_WITH_AS(dec.forward(std::vector<std::int32_t>{1, 2}, 2, {out.data(), 3, V}), doctest::Contains("out"),
                       sparselm::error);
  dec.forward(random_ids(15, V, 1), 15, {out.data(), 1, V});
  CHECK_THROWS_WITH_AS(dec.forward(std::vector<std::int32_t>{1, 2}, 2, {out.data(), 1, V}),
                       doctest::Contains("capacity 16"), sparselm::error);
  CHECK_THROWS_WITH_AS(decoder<gpt<>>(m, 1, 17), doctest::Contains("capacity 17 exceeds the model's 16 positions"), sparselm::error);
}

}  // namespace SPARSELM_UNITY_ID
