// Writes BERT pre-training examples (segment pairs with next-sentence labels and masked-LM
// targets) from text files into a binary example file.
//
//   bert_data -i data/corpus/train -o runs/bert/train-128.bex --seq-len 128 --max-predictions 20
//   bert_data -i data/corpus/train -o runs/bert/train-384.bex --seq-len 384 --max-predictions 56
//
// Rules and file format: sparselm/data/bert_pretraining.hpp, bert_examples.hpp, docs/design/data.md.

#include <CLI/CLI.hpp>

#include "cli.hpp"
#include "sparselm/core/checked.hpp"
#include "sparselm/core/program.hpp"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "sparselm/data/bert_examples.hpp"
#include "sparselm/data/dataset_encoder.hpp"
#include "sparselm/io/output_rule.hpp"

namespace sd = sparselm::data;

int main(int argc, char** argv) {
  return sparselm::run_program("bert_data", [&]() -> int {
    CLI::App app{
        "Make BERT pre-training examples (NSP segment pairs, 80/10/10 masked LM) from text files.\n"
        "A blank line separates documents (and so does a file boundary; see --documents); sentences split\n"
        "at line ends and at . ! ? before a word that does not start with a lower-case letter"};
    std::vector<std::filesystem::path> inputs;
    std::filesystem::path output;
    std::string vocab = std::string(SPARSELM_SOURCE_DIR) + "/data/bert/vocab.txt";
    sd::bert_example_options o;
    examples::reads(
        app.add_option("-i,--input", inputs, "Text files or directories (their *.txt and *.raw files, recursively)")
            ->required());
    examples::writes(app.add_option("-o,--output", output, "Example file to write")->required());
    examples::reads(app.add_option("--vocab", vocab, "BERT vocab.txt")->capture_default_str());
    app.add_option("--seq-len", o.seq_len, "Tokens per example, [CLS] and [SEP]s included")
        ->check(CLI::Range(5, 65535))
        ->capture_default_str();
    app.add_option("--max-predictions", o.max_predictions, "Masked-LM predictions per example at most")
        ->check(CLI::Range(1, 65535))
        ->capture_default_str();
    app.add_option("--dupe-factor", o.dupe_factor, "Passes over the documents, each with other masks")
        ->check(CLI::Range(1, 1000))
        ->capture_default_str();
    app.add_option("--mlm-prob", o.mlm_prob, "Fraction of tokens to predict")
        ->check(CLI::Range(0.001, 0.999))
        ->capture_default_str();
    app.add_option("--short-seq-prob", o.short_seq_prob, "Probability of a shorter target length")
        ->check(CLI::Range(0.0, 1.0))
        ->capture_default_str();
    std::string split = "blank-line";
    app.add_option("--documents", split,
                   "Where documents end: 'blank-line' (and at file ends) or 'file' (each input file is one document)")
        ->check(CLI::IsMember({"blank-line", "file"}))
        ->capture_default_str();
    app.add_flag("--whole-word-mask", o.whole_word_mask, "Mask all WordPiece pieces of a word together");
    app.add_option("--seed", o.seed, "Seed of every random choice")->capture_default_str();
    if (auto status = examples::parse(app, argc, argv)) return *status;

    SPARSELM_CHECK(o.max_predictions <= o.seq_len, "--max-predictions ", o.max_predictions, " exceeds --seq-len ",
                   o.seq_len);
    const auto t0 = std::chrono::steady_clock::now();
    const auto wp = sd::wordpiece::from_file(vocab);
    const auto files = sd::collect_text_files(inputs);
    {  // the one output rule (io/output_rule.hpp): not an input file, nor a link to one
      std::vector<sparselm::io::named_path> in{{vocab, "--vocab"}};
      for (const auto& f : files) in.push_back({f, "-i"});
      sparselm::io::check_output(output, in, "-o");
    }
    sd::bert_example_stats st;
    std::vector<sd::bert_document> docs;
    std::size_t bytes = 0;
    for (const auto& f : files) {
      const std::string text = sd::read_file_bytes(f);
      bytes += text.size();
      try {
        auto d = sd::bert_documents(text, wp, &st,
                                    split == "file" ? sd::bert_document_split::none : sd::bert_document_split::blank_lines);
        docs.insert(docs.end(), std::make_move_iterator(d.begin()), std::make_move_iterator(d.end()));
      } catch (const sparselm::error& e) {
        sparselm::fail(f.string(), ": ", e.what());
      }
    }
    SPARSELM_CHECK(!docs.empty(), "no text in the inputs (", sd::detail::describe_inputs(files), ": ", files.size(),
                   " files, ", bytes, " bytes)");
    const auto examples = sd::make_bert_examples(docs, wp, o, st);
    SPARSELM_CHECK(!examples.empty(), "no examples: every document has fewer than two sentences");
    if (output.has_parent_path()) std::filesystem::create_directories(output.parent_path());
    sd::write_bert_examples(output, examples,
                            {.seq_len = std::uint32_t(o.seq_len),
                             .max_predictions = std::uint32_t(o.max_predictions),
                             .vocab_size = std::uint32_t(wp.size())});
    const sd::bert_example_file check(output);  // read back and validated record by record
    SPARSELM_CHECK(check.size() == examples.size(), output.string(), ": ", check.size(), " examples read back, ",
                   examples.size(), " written");
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("bert_data: %zu files, %.1f MB of text: %zu documents, %zu sentences; skipped %zu documents with one "
                "sentence and %zu without any token\n",
                files.size(), double(bytes) / 1e6, st.documents, st.sentences, st.single_sentence_documents,
                st.empty_documents);
    std::printf("bert_data: %zu examples of at most %zu tokens (dupe factor %zu), %.1f %% with a random next "
                "segment, %.1f tokens and %.1f predictions per example on average; %zu single sentences left "
                "unpaired at document ends\n",
                st.examples, o.seq_len, o.dupe_factor, 100.0 * double(st.random_next) / double(st.examples),
                double(st.tokens) / double(st.examples), double(st.masked) / double(st.examples),
                st.unpaired_sentences);
    std::printf("bert_data: wrote %s (read back and validated) in %.1f s\n", output.string().c_str(), s);
    return 0;
  });
}
