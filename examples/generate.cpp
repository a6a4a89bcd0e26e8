// Generates text from a checkpoint of any causal LM this library trains (GPT dense or block-sparse
// with any block size, the S1 sparse LM): the prompt and its continuation on stdout, tokens/s on
// stderr.
//
//   generate --checkpoint runs/gpt-mini --prompt "The meaning of life is" --max-new-tokens 50
//            --temperature 0.8 --top-k 40 --top-p 0.95 --seed 1 [--no-cache] [--vocab-dir data/gpt2]
//            [--threads N]
//
// The checkpoint directory holds config.json ("model_type" gpt2, sparse_lm or llama; a block-sparse GPT
// also records "sparselm": {"block_size", "sparsity"}) and model.safetensors (io/checkpoint.hpp);
// a run directory (gpt_train/sparse_lm --out) stands for its newest complete checkpoint. A
// HuggingFace GPT-2 or LLaMA directory (config.json + model.safetensors as save_pretrained writes
// them) is read too (io/huggingface.hpp). The prompt is always encoded with the GPT-2 tokenizer, for
// LLaMA too (there is no SentencePiece tokenizer here): right for a LLaMA trained by gpt_train on
// GPT-2 token files, not for a HuggingFace LLaMA's own vocabulary (a note on stderr says so). The model
// type comes from train/registry.hpp, generation from models/generation.hpp; this is argument
// parsing, loading and output.

#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "cli.hpp"
#include "sparselm/core/checked.hpp"
#include "sparselm/core/program.hpp"
#include "sparselm/core/threads.hpp"
#include "sparselm/data/gpt2_bpe.hpp"
#include "sparselm/io/checkpoint.hpp"
#include "sparselm/io/huggingface.hpp"
#include "sparselm/io/pretrained.hpp"
#include "sparselm/models/generation.hpp"
#include "sparselm/train/registry.hpp"

using namespace sparselm;
using sparselm::data::gpt2_bpe;
using sparselm::data::specials;

namespace {

struct run_options {
  std::filesystem::path checkpoint;
  std::string prompt;
  generation_options gen;
  bool verify = true;
};

template <class Model, class Family, class Spec>
int run(const run_options& ro, const Spec& spec, gpt2_bpe& bpe) {
  Model model = Family::template make<Model>(spec);
  if constexpr (Model::sparsity::is_sparse) model.init(0);  // sizes the block patterns that loading restores
  const auto loaded = io::load_pretrained(ro.checkpoint, model, Family::hf_map(spec.config), {.verify = ro.verify});
  if (loaded.format == "huggingface") std::fprintf(stderr, "%s\n", loaded.summary().c_str());
  if constexpr (Family::name == std::string_view("llama"))
    std::fprintf(stderr,
                 "note: a LLaMA model: the prompt is encoded and the output decoded with the GPT-2 tokenizer "
                 "(--vocab-dir), which fits a LLaMA trained here on GPT-2 token files but not a HuggingFace "
                 "LLaMA's own (SentencePiece) vocabulary\n");
  generation_options o = ro.gen;
  if (o.stop_token >= 0 && std::size_t(o.stop_token) >= model.vocab_size()) {
    std::fprintf(stderr, "note: the model's vocabulary (%zu) has no <|endoftext|>; no stop token\n", model.vocab_size());
    o.stop_token = -1;
  }
  const std::vector<std::int32_t> prompt = bpe.encode(ro.prompt, specials::allow);
  std::fwrite(ro.prompt.data(), 1, ro.prompt.size(), stdout);
  std::fflush(stdout);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::int32_t> out = generate(model, prompt, o, [&](std::size_t, std::int32_t id) {
    const auto bytes = bpe.token_bytes(id);
    std::fwrite(bytes.data(), 1, bytes.size(), stdout);
    std::fflush(stdout);
  });
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("\n");
  std::fflush(stdout);
  std::fprintf(stderr, "%zu prompt tokens, %zu new tokens in %.3f s: %.2f tokens/s (%s, %d threads, prefill included)\n",
               prompt.size(), out.size(), s, s > 0 ? double(out.size()) / s : 0.0,
               o.use_cache ? "KV cache" : "no cache", num_threads());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return run_program("generate", [&]() -> int {
    CLI::App app{
        "Generate text from a GPT, S1 or LLaMA checkpoint (config.json + model.safetensors) with the GPT-2\n"
        "tokenizer. For LLaMA too: it fits a LLaMA trained here on GPT-2 token files, not a HuggingFace\n"
        "LLaMA's own (SentencePiece) vocabulary.\n"
        "Sampling: temperature (0: greedy), then top-k (0: off), then top-p (1: off); a seed gives the same\n"
        "text for any thread count."};
    run_options ro;
    std::string vocab_dir = std::string(SPARSELM_SOURCE_DIR) + "/data/gpt2", overflow = "error";
    int threads = 0;
    bool no_cache = false, no_stop = false, no_verify = false;
    auto& s = ro.gen.sampling;
    s.temperature = 0.8f;
    s.top_k = 40;
    s.top_p = 0.95f;
    s.seed = 1;
    examples::reads(app.add_option("--checkpoint", ro.checkpoint,
                                   "Checkpoint directory (config.json + model.safetensors; ours or HuggingFace "
                                   "GPT-2's or LLaMA's), or a run directory (its latest checkpoint)")
                        ->required());
    app.add_option("--prompt", ro.prompt, "Prompt text (must encode to at least one token)")->required();
    app.add_option("--max-new-tokens", ro.gen.max_new_tokens, "Tokens to generate at most")
        ->check(examples::at_most(limits::tokens))
        ->capture_default_str();
    app.add_option("--temperature", s.temperature, "Softmax temperature; 0 is greedy")->capture_default_str();
    app.add_option("--top-k", s.top_k, "Keep the k most likely tokens; 0 is off")->capture_default_str();
    app.add_option("--top-p", s.top_p, "Nucleus: smallest most-likely set with this mass, in (0, 1]; 1 is off")
        ->capture_default_str();
    app.add_option("--seed", s.seed, "Sampling seed")->capture_default_str();
    app.add_flag("--no-cache", no_cache, "Recompute the whole context every token instead of using the KV cache");
    app.add_flag("--no-stop", no_stop, "Do not stop at <|endoftext|>");
    app.add_flag("--no-verify", no_verify, "Load without checking the checkpoint's CRC-32C checksums");
    app.add_option("--overflow", overflow,
                   "Context longer than n_positions: error, or restart (keep the last half of the context)")
        ->check(CLI::IsMember({"error", "restart"}))
        ->capture_default_str();
    examples::reads(app.add_option("--vocab-dir", vocab_dir, "Directory with GPT-2's encoder.json and vocab.bpe")
                        ->capture_default_str());
    app.add_option("--threads", threads, "Threads (0: OpenMP default)")->check(CLI::Range(0, int(limits::threads)));
    if (auto status = examples::parse(app, argc, argv)) return *status;
    ro.gen.use_cache = !no_cache;
    ro.gen.stop_token = no_stop ? -1 : gpt2_endoftext_id;
    ro.verify = !no_verify;
    ro.gen.overflow = overflow == "restart" ? context_overflow::restart : context_overflow::error;
    if (threads > 0) set_num_threads(threads);
    auto bpe = gpt2_bpe::from_directory(vocab_dir);
    ro.checkpoint = io::resolve_checkpoint(ro.checkpoint);  // a run directory means its latest checkpoint
    std::fprintf(stderr, "checkpoint %s\n", ro.checkpoint.string().c_str());
    // the model the checkpoint holds, with each block-sparse weight's block count from the file
    // (any allocation: uniform, ERK, pruned), not recomputed from the config's sparsity
    return registry::with_checkpoint(
        ro.checkpoint, [&]<class Model, class Family>(const auto& spec) { return run<Model, Family>(ro, spec, bpe); });
  });
}
