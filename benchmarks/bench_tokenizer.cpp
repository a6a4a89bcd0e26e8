// GPT-2 and BERT WordPiece tokenizer throughput on the bundled training corpus (data/corpus/train,
// 3.1 MB).
//
//   cmake --build build --target bench_tokenizer
//   ./build/benchmarks/bench_tokenizer --benchmark_min_time=2
//
// bytes_per_second is input text bytes per second. "cold" starts every pass with an empty piece
// cache (a first encoding of unseen text); "warm" keeps the cache across passes.

#include <benchmark/benchmark.h>

#include <filesystem>
#include <string>
#include <vector>

#include "sparselm/core/threads.hpp"
#include "sparselm/data/dataset_encoder.hpp"
#include "sparselm/data/gpt2_bpe.hpp"
#include "sparselm/data/wordpiece.hpp"

namespace sd = sparselm::data;
namespace fs = std::filesystem;

namespace {

const fs::path root{SPARSELM_SOURCE_DIR};

const sd::gpt2_bpe& base_tokenizer() {
  static const sd::gpt2_bpe tok = sd::gpt2_bpe::from_directory(root / "data" / "gpt2");
  return tok;
}

const std::string& corpus() {
  static const std::string text = [] {
    std::string all;
    for (const auto& f : sd::collect_text_files({root / "data" / "corpus" / "train"})) all += sd::read_file_bytes(f);
    return all;
  }();
  return text;
}

void encode_cold(benchmark::State& st) {
  const std::string& text = corpus();
  std::size_t tokens = 0;
  for (auto _ : st) {
    sd::gpt2_bpe tok = base_tokenizer();  // empty cache
    auto ids = tok.encode(text);
    tokens = ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  st.SetBytesProcessed(std::int64_t(st.iterations() * text.size()));
  st.counters["tokens"] = double(tokens);
}

void encode_warm(benchmark::State& st) {
  const std::string& text = corpus();
  sd::gpt2_bpe tok = base_tokenizer();
  std::vector<std::int32_t> ids;
  tok.encode(text, ids);
  for (auto _ : st) {
    ids.clear();
    tok.encode(text, ids);
    benchmark::DoNotOptimize(ids.data());
  }
  st.SetBytesProcessed(std::int64_t(st.iterations() * text.size()));
}

void pretokenize(benchmark::State& st) {
  const std::string& text = corpus();
  std::size_t pieces = 0;
  for (auto _ : st) {
    pieces = 0;
    sd::gpt2_pretokenize(text, [&](std::size_t, std::size_t) { ++pieces; });
    benchmark::DoNotOptimize(pieces);
  }
  st.SetBytesProcessed(std::int64_t(st.iterations() * text.size()));
  st.counters["pieces"] = double(pieces);
}

void decode(benchmark::State& st) {
  const std::string& text = corpus();
  sd::gpt2_bpe tok = base_tokenizer();
  auto ids = tok.encode(text);
  for (auto _ : st) {
    std::string s = tok.decode(ids);
    benchmark::DoNotOptimize(s.data());
  }
  st.SetBytesProcessed(std::int64_t(st.iterations() * text.size()));
}

// All OpenMP threads, each with its own tokenizer copy (cold caches), as encode_dataset runs.
void encode_parallel_cold(benchmark::State& st) {
  const std::string& text = corpus();
  std::vector<std::string_view> texts{text};
  for (auto _ : st) {
    auto out = sd::encode_texts(base_tokenizer(), texts);
    benchmark::DoNotOptimize(out.data());
  }
  st.SetBytesProcessed(std::int64_t(st.iterations() * text.size()));
  st.counters["threads"] = sparselm::num_threads();
}

}  // namespace

BENCHMARK(encode_cold)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(encode_warm)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(pretokenize)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(decode)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(encode_parallel_cold)->Unit(benchmark::kMillisecond)->UseRealTime();

// BERT uncased WordPiece over the same text (no cache: every word is looked up every pass).
void wordpiece_encode(benchmark::State& state) {
  static const sd::wordpiece wp = sd::wordpiece::from_file(root / "data" / "bert" / "vocab.txt");
  const std::string& text = corpus();
  std::size_t tokens = 0;
  for (auto _ : state) {
    auto ids = wp.encode(text);
    tokens = ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(std::int64_t(state.iterations() * text.size()));
  state.counters["tokens"] = double(tokens);
}
BENCHMARK(wordpiece_encode)->Unit(benchmark::kMillisecond)->UseRealTime();

BENCHMARK_MAIN();
