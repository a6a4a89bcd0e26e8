// bert_squad: fine-tunes BERT on SQuAD v1.1 (span start / end over the context) and evaluates it:
// predictions.json ({"question id": "answer"}) and exact match / F1 by the official rules.
//
//   bert_squad --train data/squad/train-v1.1.json --predict data/squad/dev-v1.1.json
//              --init-from runs/bert/phase2 --out runs/squad --epochs 2 --lr 1e-4
//   bert_squad --train train-v1.1.json --predict dev-v1.1.json --init-from bert-base-uncased/ --lr 3e-5
//
// Features (sparselm/data/squad_features.hpp): [CLS] question [SEP] context window [SEP], at most
// --max-seq tokens, windows --doc-stride apart, an answer outside a window labelled [CLS].
// Answers: the n-best (--n-best) start and end logits of every window, spans of at most
// --max-answer tokens that start in a token's max-context window, mapped back to the context text.
// Training: AdamW without bias correction (ε 1e-6), the linear schedule, checkpoints, exact
// --resume, SIGINT saves and stops. <out>/predictions.json and <out>/eval.json hold the results.
// Under mpirun the fine-tuning is data parallel (docs/design/distribution.md): --batch-size examples per
// rank, --shard-optimizer for ZeRO-1; rank 0 writes the run directory and evaluates.
// A block-sparse --init-from checkpoint (bert_pretrain --block-size B) gives a block-sparse encoder
// of its block size with the checkpoint's patterns, --block-size B one pruned from a dense
// checkpoint; --update-period N prunes and regrows its patterns while fine-tuning (docs/guide/bert.md,
// "Fine-tuning programs"). Every option of the common schema applies (docs/reference/options.md).
// --predict-only scores the --init-from model (a bert_squad checkpoint or a HuggingFace QA
// directory) on --predict without training.

#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "finetune_cli.hpp"
#include "replicas.hpp"
#include "sparselm/core/checked.hpp"
#include "sparselm/core/program.hpp"
#include "sparselm/data/squad.hpp"
#include "sparselm/data/squad_eval.hpp"
#include "sparselm/data/squad_features.hpp"
#include "sparselm/data/wordpiece.hpp"
#include "sparselm/io/atomic_file.hpp"
#include "sparselm/io/crc32c.hpp"
#include "sparselm/io/run_dir.hpp"
#include "sparselm/models/bert_finetune.hpp"

using namespace sparselm;

namespace {

struct span_task {
  using batch_type = bert_span_batch;
  const std::vector<data::squad_feature>* features = nullptr;
  std::size_t seq = 0;
  struct arrays {
    std::vector<std::int32_t> ids, types, lengths, starts, ends;
  };
  std::vector<arrays> slots;  // a batch's arrays, one set per micro-batch of a step

  std::size_t size() const { return features->size(); }
  // CRC-32C of every feature's ids, segments and targets (data parallelism: equal on every rank).
  std::uint32_t fingerprint() const {
    std::uint32_t c = 0;
    for (const auto& f : *features) {
      c = io::crc32c(f.ids.data(), f.ids.size() * sizeof(std::int32_t), c);
      c = io::crc32c(f.segments.data(), f.segments.size() * sizeof(std::int32_t), c);
      const std::uint64_t se[2] = {f.start, f.end};
      c = io::crc32c(se, sizeof se, c);
    }
    return c;
  }
  // Micro-batch k of a training step (valid until the next call with that k), and a batch to predict.
  bert_span_batch batch(std::span<const std::size_t> pick, std::size_t k = 0) { return fill(pick, k, true); }
  bert_span_batch unlabelled(std::span<const std::size_t> pick) { return fill(pick, 0, false); }
  bert_span_batch fill(std::span<const std::size_t> pick, std::size_t k, bool with_labels) {
    if (k >= slots.size()) slots.resize(k + 1);
    auto& [ids, types, lengths, starts, ends] = slots[k];
    const std::size_t B = pick.size();
    ids.resize(B * seq);
    types.resize(B * seq);
    lengths.resize(B);
    starts.resize(B);
    ends.resize(B);
    for (std::size_t i = 0; i < B; ++i) {
      const data::squad_feature& f = (*features)[pick[i]];
      std::copy(f.ids.begin(), f.ids.end(), ids.begin() + std::ptrdiff_t(i * seq));
      std::copy(f.segments.begin(), f.segments.end(), types.begin() + std::ptrdiff_t(i * seq));
      std::int32_t n = 0;
      for (auto m : f.mask) n += m != 0;
      lengths[i] = n;
      starts[i] = with_labels ? std::int32_t(f.start) : -1;
      ends[i] = with_labels ? std::int32_t(f.end) : -1;
    }
    return {ids, types, lengths, starts, ends, B, seq};
  }
  // main = start position, aux = end position (bert_span_head's loss_stats)
  nlohmann::json loss_json(const loss_stats& s) const {
    return {{"loss", s.mean_loss()},
            {"start_loss", s.mean_ce()},
            {"start_accuracy", s.accuracy()},
            {"end_loss", s.aux_mean_loss()},
            {"end_accuracy", s.aux_accuracy()},
            {"features", s.count}};
  }
  std::string brief(const loss_stats& s) const {
    char buf[80];
    std::snprintf(buf, sizeof buf, "loss %.3f start acc %.2f end acc %.2f", s.mean_loss(), s.accuracy(),
                  s.aux_accuracy());
    return buf;
  }
};

std::span<const option_entry> squad_options() {
  using k = option_kind;
  static const option_entry table[] = {
      {"data.train", "--train", k::input, "SQuAD v1.1 training JSON", "", "", "data"},
      {"data.predict", "--predict", k::input, "SQuAD v1.1 JSON to answer and score after training", "", "", "data"},
      {"predict_only", "--predict-only", k::boolean,
       "Score the --init-from model (a bert_squad checkpoint or a HuggingFace BERT QA directory) on data.predict "
       "without training",
       "", "false", "data"},
      {"vocab", "--vocab", k::input, "WordPiece vocab.txt", "", "data/bert/vocab.txt", "data"},
      {"max_seq", "--max-seq", k::count, "Tokens per feature", "", "384", "data"},
      {"doc_stride", "--doc-stride", k::count, "Tokens between the starts of a context's windows", "", "128", "data"},
      {"max_query", "--max-query", k::count, "Question tokens kept", "", "64", "data"},
      {"n_best", "--n-best", k::count, "Start and end candidates per window", "", "20", "data"},
      {"max_answer", "--max-answer", k::count, "Longest answer, in tokens", "", "30", "data"},
  };
  return table;
}

}  // namespace

int main(int argc, char** argv) {
  examples::replicas replicas;  // MPI ranks under mpirun; outlives the body (a failed rank ends the job)
  const int status = run_program("bert_squad", [&]() -> int {
    replicas.start(argc, argv);
    const bool rank0 = replicas.group().rank() == 0;
    examples::finetune_cli cli("bert_squad", "Fine-tune BERT on SQuAD v1.1 and write + score predictions.",
                               squad_options(), {{"epochs", 2.0}, {"out", "runs/squad"}});
    if (auto status = cli.parse(argc, argv)) return *status;
    cli.read({"predict_only", "vocab", "max_seq", "doc_stride", "max_query", "n_best", "max_answer"});
    const std::string ctx = cli.settings.context;
    json keys = cli.settings.task;
    keys.erase("model");
    json_fields r(keys, ctx);
    const json data = r.object("data");
    json_fields d(data, ctx + " data");
    r.ignore({"data"});
    const std::filesystem::path train_path = d.get("train", std::string()), predict_path = d.get("predict", std::string());
    d.finish();
    const bool predict_only = r.get("predict_only", false);
    SPARSELM_CHECK(!predict_only || cli.tensor_parallel() == 1, "bert_squad: --predict-only scores the model in ",
                   "one process; trainer.tensor_parallel (--tensor-parallel) ", cli.tensor_parallel(),
                   " splits a model for training");
    const parallel::tensor_split split = cli.split(replicas.group());  // before reading any data
    const std::filesystem::path vocab =
        r.get("vocab", (std::filesystem::path(SPARSELM_SOURCE_DIR) / "data/bert/vocab.txt").string());
    data::squad_feature_options fo;
    data::squad_postprocess_options po;
    fo.max_seq = r.get("max_seq", fo.max_seq, in_closed(16, 1 << 14));
    fo.doc_stride = r.get("doc_stride", fo.doc_stride, in_closed(1, 1 << 14));
    fo.max_query_tokens = r.get("max_query", fo.max_query_tokens, in_closed(1, 1 << 14));
    po.n_best = r.get("n_best", po.n_best, in_closed(1, 1000));
    po.max_answer_tokens = r.get("max_answer", po.max_answer_tokens, in_closed(1, 1 << 14));
    r.finish();
    SPARSELM_CHECK(fo.max_seq > fo.max_query_tokens + 3, "bert_squad: --max-seq ", fo.max_seq,
                   " leaves no room for the context after ", fo.max_query_tokens, " question tokens");
    if (predict_only) {
      SPARSELM_CHECK(!predict_path.empty(), "bert_squad: --predict-only needs questions to answer (--predict)");
      SPARSELM_CHECK(!cli.job.init_from.empty(), "bert_squad: --predict-only needs the model to score (--init-from)");
      SPARSELM_CHECK(!cli.cli.resume, "bert_squad: --predict-only trains nothing; it cannot --resume");
    } else {
      SPARSELM_CHECK(!train_path.empty(), "bert_squad: no training questions (--train, data.train; or --predict-only)");
    }
    if (!predict_path.empty()) {  // before any training: a file without a question to answer scores nothing
      const data::squad_dataset dev = data::read_squad(predict_path);
      SPARSELM_CHECK(!data::squad_examples(dev).empty(), predict_path.string(), ": no usable question to answer (",
                     dev.skipped.total(), " skipped): nothing to score");
    }

    const auto wp = data::wordpiece::from_file(vocab);
    const bert_config cfg = cli.model_config();
    SPARSELM_CHECK(wp.size() <= cfg.vocab_size, vocab.string(), ": ", wp.size(), " tokens, more than the model's ",
                   cfg.vocab_size);
    SPARSELM_CHECK(fo.max_seq <= cfg.max_position_embeddings, "bert_squad: --max-seq ", fo.max_seq,
                   " exceeds the model's max_position_embeddings ", cfg.max_position_embeddings);

    std::vector<data::squad_feature> train_features;
    if (!predict_only) {
      const data::squad_dataset train_set = data::read_squad(train_path);
      if (rank0)
        for (const std::string& m : train_set.skipped.messages)
          std::fprintf(stderr, "%s: skipped: %s\n", train_path.string().c_str(), m.c_str());
      const auto train_examples = data::squad_examples(train_set);
      train_features = data::squad_features(train_examples, wp, fo, /*training=*/true);
      SPARSELM_CHECK(!train_features.empty(), train_path.string(), ": no training question");
      if (rank0)
        std::fprintf(stderr, "bert_squad: %zu questions -> %zu training features\n", train_examples.size(),
                     train_features.size());
    }
    span_task task{&train_features, fo.max_seq, {}};
    cli.resolve(std::max<std::size_t>(1, task.size()), replicas.group().size());
    if (rank0 && !predict_only) std::fprintf(stderr, "bert_squad: %zu steps\n", cli.job.steps);

    cli.job.config["model"] = cfg.to_json();
    cli.job.config["data"] = cli.settings.task["data"];
    cli.job.config.update({{"vocab", vocab.string()},
                           {"max_seq", fo.max_seq},
                           {"doc_stride", fo.doc_stride},
                           {"max_query", fo.max_query_tokens},
                           {"n_best", po.n_best},
                           {"max_answer", po.max_answer_tokens}});
    if (auto rc = cli.plan_gate(model_shape_of(cfg, head_kind::span), fo.max_seq, replicas.group().size(), rank0))
      return *rc;
    // Answers every question of --predict with `model` and scores the answers (rank 0 writes;
    // the other ranks of a tensor-parallel group compute the predictions with it).
    auto predict_and_score = [&](auto& model, const json& summary, const step_context& ctx) -> int {
      const data::squad_dataset dev = data::read_squad(predict_path);
      if (rank0)
        for (const std::string& m : dev.skipped.messages)
          std::fprintf(stderr, "%s: skipped: %s\n", predict_path.string().c_str(), m.c_str());
      const auto dev_examples = data::squad_examples(dev);
      const auto dev_features = data::squad_features(dev_examples, wp, fo, /*training=*/false);
      span_task ev{&dev_features, fo.max_seq, {}};
      const std::size_t B = cli.job.batch_size, T = fo.max_seq;
      std::vector<std::vector<float>> starts(dev_features.size()), ends(dev_features.size());
      std::vector<float> out(B * T * 2);
      std::vector<std::size_t> pick;
      for (std::size_t at = 0; at < dev_features.size(); at += B) {
        pick.clear();
        for (std::size_t i = at; i < std::min(at + B, dev_features.size()); ++i) pick.push_back(i);
        model.predict(ev.unlabelled(pick), matrix_view<float>{out.data(), pick.size() * T, 2}, ctx);
        for (std::size_t i = 0; i < pick.size(); ++i) {
          auto& s = starts[pick[i]];
          auto& e = ends[pick[i]];
          s.resize(T);
          e.resize(T);
          for (std::size_t p = 0; p < T; ++p) {
            s[p] = out[2 * (i * T + p)];
            e[p] = out[2 * (i * T + p) + 1];
          }
        }
      }
      if (!rank0) return 0;
      const auto preds = data::squad_best_answers(wp, dev_examples, dev_features, starts, ends, po);
      nlohmann::json pj = nlohmann::json::object();
      for (const auto& [id, text] : preds) pj[id] = text;
      std::filesystem::create_directories(cli.job.out);
      io::atomic_write_text(cli.job.out / "predictions.json", pj.dump(2) + "\n");
      const data::squad_totals tot = data::squad_evaluate(dev.graded(), preds);
      const nlohmann::json report = {{"exact_match", tot.exact_match},   {"f1", tot.f1},
                                     {"questions", tot.questions},       {"features", dev_features.size()},
                                     {"predict", predict_path.string()}, {"train", summary}};
      io::atomic_write_text(cli.job.out / "eval.json", report.dump(2) + "\n");
      std::printf("%s\n", report.dump().c_str());
      std::fprintf(stderr, "%s: exact match %.2f, F1 %.2f over %zu questions (%s/predictions.json)\n",
                   predict_path.string().c_str(), tot.exact_match, tot.f1, tot.questions, cli.job.out.string().c_str());
      return 0;
    };
    return cli.with_encoder_sparsity(rank0, [&]<class S>(const sparse_plan& plan) -> int {
      auto model = cli.make_model<bert_qa<float, S>>(plan, split, cfg);
      model.init(cli.job.seed);
      cli.start_split(model);
      cli.start_pruned<bert_qa<>>(model, rank0, cfg);
      // After training (or without it): rank 0 predicts, scores and writes; under tensor parallelism
      // every rank of its group computes the predictions with it (ctx: the trainer's group sum).
      auto finish = [&](const json& summary, const step_context& ctx) -> int {
        if (!rank0 && !split.active()) return 0;
        if (rank0) std::fprintf(stderr, "%s\n", summary.dump().c_str());
        if (predict_path.empty()) {
          if (rank0) std::printf("%s\n", nlohmann::json{{"train", summary}}.dump().c_str());
          return 0;
        }
        return predict_and_score(model, summary, ctx);
      };
      std::optional<io::run_lock> lock;  // --predict-only writes --out too: one job per directory
      if (predict_only) {  // the model as it is: its span head must be in the file
        if (rank0) lock.emplace(cli.job.out);
        const auto from = io::resolve_checkpoint(cli.job.init_from);
        const auto loaded = io::load_pretrained(from, model, io::hf_bert_map());
        SPARSELM_CHECK(loaded.absent_groups.empty(), "bert_squad: --predict-only: ", from.string(),
                       " has no trained span head (", loaded.summary(), "); fine-tune it first");
        if (rank0) std::fprintf(stderr, "bert_squad: scoring %s (%s)\n", from.string().c_str(), loaded.summary().c_str());
        return finish({{"steps", 0}, {"init_from", from.string()}}, {});
      }
      auto t = cli.make_trainer(model);
      t.set_replicas(replicas.group());
      const json summary = cli.run(model, t, task);
      if (summary.value("interrupted", false)) return 130;
      return finish(summary, t.inference_context());
    });
  });
  return replicas.finish(status);
}
