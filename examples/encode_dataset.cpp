// Encodes text files into sparselm token files with the GPT-2 tokenizer.
//
//   encode_dataset --input data/corpus/train --output runs/corpus/train.tok
//                  --validation-input data/corpus/valid --validation-output runs/corpus/valid.tok
//   encode_dataset --mode wikitext --seq-len 256 --input wiki.train.raw --output train.tok
//   encode_dataset ... --vocab-limit 8192   (ids renumbered by training frequency, the rarest merged)
//
// The logic lives in sparselm/data/dataset_encoder.hpp; this is argument parsing and a report.

#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <string>

#include "cli.hpp"
#include "sparselm/core/program.hpp"
#include "sparselm/core/threads.hpp"
#include "sparselm/data/dataset_encoder.hpp"
#include "sparselm/data/vocab_limit.hpp"

namespace sd = sparselm::data;

static void report(const char* what, const sd::encoded_split& s) {
  std::printf("%-10s %s: %llu tokens (%s, vocab %llu", what, s.path.string().c_str(),
              static_cast<unsigned long long>(s.info.tokens), s.info.dtype == sd::token_dtype::uint16 ? "uint16" : "uint32",
              static_cast<unsigned long long>(s.info.vocab_size));
  if (s.info.sequence_length) std::printf(", %llu sequences of %llu", static_cast<unsigned long long>(s.info.documents),
                                          static_cast<unsigned long long>(s.info.sequence_length));
  else std::printf(", %llu documents", static_cast<unsigned long long>(s.info.documents));
  std::printf(")");
  if (s.discarded) std::printf(", %llu of %llu articles discarded as shorter than seq_len",
                               static_cast<unsigned long long>(s.discarded), static_cast<unsigned long long>(s.documents));
  if (s.input_bytes) std::printf(", %.1f MB of text", double(s.input_bytes) / 1e6);
  std::printf("\n");
}

int main(int argc, char** argv) {
  return sparselm::run_program("encode_dataset", [&]() -> int {
    CLI::App app{
        "Encode text files into sparselm token files with the GPT-2 byte-level BPE tokenizer.\n"
        "gpt mode: documents joined with <|endoftext|> into one stream (GPT pre-training).\n"
        "wikitext mode: articles between heading lines, each cropped to --seq-len tokens; shorter ones dropped."};
    sd::encode_dataset_options o;
    std::string vocab_dir = std::string(SPARSELM_SOURCE_DIR) + "/data/gpt2";
    int threads = 0;
    std::size_t vocab_limit = 0;
    std::string mode = "gpt", documents = "file";
    app.add_option("--mode", mode, "Output layout: gpt (one stream) or wikitext (fixed-length articles)")
        ->check(CLI::IsMember({"gpt", "wikitext"}))
        ->capture_default_str();
    examples::reads(
        app.add_option("-i,--input", o.inputs, "Text files or directories (their *.txt and *.raw files, recursively)")
            ->required());
    examples::writes(app.add_option("-o,--output", o.output, "Training token file to write")->required());
    examples::reads(
        app.add_option("--validation-input", o.validation_inputs, "Separate validation text files or directories"));
    examples::writes(app.add_option("--validation-output", o.validation_output, "Validation token file to write"));
    app.add_option("--validation-fraction", o.validation_fraction,
                   "gpt mode: hold out this fraction of the token stream (its tail) for validation")
        ->check(CLI::Range(0.0, 0.99));
    app.add_option("--documents", documents, "gpt mode: a document is a whole file or one non-empty line")
        ->check(CLI::IsMember({"file", "line"}))
        ->capture_default_str();
    app.add_option("--seq-len", o.seq_len, "wikitext mode: tokens per sequence (shorter articles are discarded)")
        ->check(examples::at_most(sparselm::limits::positions));
    examples::reads(
        app.add_option("--vocab", vocab_dir, "Directory with GPT-2's encoder.json and vocab.bpe")->capture_default_str());
    app.add_option("--vocab-limit", vocab_limit,
                   "Renumber the ids by their frequency in the training output and merge all but the most frequent "
                   "N - 1 into id N - 1: files for a model with an N-row embedding and head (0: GPT-2's ids)")
        ->check(CLI::Range(std::size_t(0), std::size_t(1) << 31));
    app.add_option("--threads", threads, "Encoding threads (0: OpenMP default)")
        ->check(CLI::Range(0, int(sparselm::limits::threads)));
    if (auto status = examples::parse(app, argc, argv)) return *status;
    o.mode = mode == "wikitext" ? sd::dataset_mode::wikitext : sd::dataset_mode::gpt;
    o.documents = documents == "line" ? sd::document_split::line : sd::document_split::file;

    if (threads > 0) sparselm::set_num_threads(threads);
    auto tok = sd::gpt2_bpe::from_directory(vocab_dir);
    for (const auto* p : {&o.output, &o.validation_output})
      if (!p->empty() && p->has_parent_path()) std::filesystem::create_directories(p->parent_path());
    auto r = sd::encode_dataset(tok, o);
    if (vocab_limit) {  // rewrite both outputs in place, numbered by the training output's frequencies
      const sd::token_file train(r.train.path);
      const auto ids = sd::frequency_ranked_ids(train, vocab_limit);
      r.train.info = ids.write(train, r.train.path);
      if (r.validation) r.validation->info = ids.write(sd::token_file(r.validation->path), r.validation->path);
    }
    report("train", r.train);
    if (r.validation) report("validation", *r.validation);
    const double mb = double(r.train.input_bytes + (r.validation ? r.validation->input_bytes : 0)) / 1e6;
    std::printf("encoded %.1f MB in %.2f s (%.1f MB/s on %d threads)\n", mb, r.seconds, mb / r.seconds,
                sparselm::num_threads());
    return 0;
  });
}
