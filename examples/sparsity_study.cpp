// Does dynamic sparsity learn, and better than static sparsity or a dense model of the same cost?
// Trains variants of one model on the same token files, with the same optimiser, schedule and
// step count, tunes the learning rate of each variant over a grid (first seed; the grid is
// widened by factors of 2 while its best rate is at one end, --lr-extend), then repeats the best
// learning rate with the other seeds, and reports the held-out loss (cross-entropy) of each
// variant as mean, standard deviation and extremes over the seeds.
//
//   dense        the model as configured (every projection dense)
//   dense-flops  dense, width chosen so that its total multiply-adds per token (projections,
//                attention, embedding projections and head) match the block-sparse model's
//   static       projections block_sparse<B> at sparsity s; the initial pattern never changes
//   rigl         the same, pattern updated every update_period steps: prune the smallest-L1
//                blocks, regrow by pooled dense-gradient magnitude (docs/design/sparsity-algorithm.md)
//   random       the same, regrowing uniformly at random among the inactive blocks
//
// Sparse variants run once per block size of --blocks (names static-b16, rigl-b1, ...). Two model
// families: --family gpt (models/gpt.hpp, a GPT config such as configs/gpt-mini.json) and
// --family s1 (models/sparse_lm.hpp, the S1 model, e.g. configs/s1-study.json).
//
//   ./build/examples/sparsity_study --train runs/data/train.tok --valid runs/data/valid.tok
//       --family gpt --model configs/gpt-mini.json --vocab-limit 8192 --steps 800 --batch-size 4
//       --update-period 5 --blocks 16,1 --lr 1e-3,2e-3,4e-3 --seeds 1,2,3 --out runs/study/gpt
//
// Every finished run is kept in <out>/runs/<run>.json (result and the settings it was trained
// with) beside its metrics <out>/runs/<run>.jsonl; a later invocation with the same settings
// reuses it, so a study can be split over processes (disjoint --variants or --blocks, same
// --out) or continued after an interruption; a run file trained with other settings is an error.
// Writes <out>/summary.json and prints a table. docs/guide/train-sparse.md ("Comparing dynamic, static and dense on your data") has the
// results on the bundled corpus and the commands.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "cli.hpp"
#include "sparselm/core/checked.hpp"
#include "sparselm/core/program.hpp"
#include "sparselm/core/threads.hpp"
#include "sparselm/data/token_file.hpp"
#include "sparselm/data/vocab_limit.hpp"
#include "sparselm/io/atomic_file.hpp"
#include "sparselm/io/output_rule.hpp"
#include "sparselm/io/run_dir.hpp"
#include "sparselm/models/gpt.hpp"
#include "sparselm/models/sparse_lm.hpp"
#include "sparselm/train/dynamic_sparsity.hpp"
#include "sparselm/train/lm_training.hpp"
#include "sparselm/train/registry.hpp"
#include "sparselm/train/run_config.hpp"

namespace fs = std::filesystem;
using namespace sparselm;

namespace {

struct study_options {
  std::size_t steps = 1000, batch = 8, seq = 128, eval_every = 100, eval_batches = 0;
  double sparsity = 0.9, prune_ratio = 0.3;
  std::size_t update_period = 8;
};

// ---- multiply-adds per token of the forward pass (one per stored weight; the backward is twice) ----

// GPT: the four projections of every block at the given density; the tied head and the attention
// scores and values at sequence length T (a causal position attends to (T + 1) / 2 keys on average).
double gpt_projection_macs(const gpt_config& c, double density) {
  const double d = double(c.n_embd), h = double(c.hidden());
  return density * (d * 3 * d + d * d + d * h + h * d) * double(c.n_layer);
}
double gpt_other_macs(const gpt_config& c, std::size_t T) {
  return double(c.n_embd) * double(c.vocab_size) + double(c.n_layer) * double(c.n_embd) * double(T + 1);
}
// S1: the sparse projections are the embedding's up-projection E -> H, per layer QKV H -> 3AD,
// output AD -> H and the feed-forward H -> F -> H, and the head's down-projection H -> E; the tied
// head E -> V and the attention (A·D wide) are dense.
double s1_projection_macs(const sparse_lm_config& c, double density) {
  const double H = double(c.hidden_length), F = double(c.ff_length), E = double(c.embedding_length),
               AD = double(c.attention_heads * c.qkv_length);
  return density * (2 * E * H + double(c.layers) * (H * 3 * AD + AD * H + 2 * H * F));
}
double s1_other_macs(const sparse_lm_config& c, std::size_t T) {
  return double(c.embedding_length) * double(c.vocab_size) +
         double(c.layers) * double(c.attention_heads * c.qkv_length) * double(T + 1);
}

// ---- one training run ----

struct run_result {
  std::string name, variant;
  std::size_t block = 0;  // 0: dense
  double lr = 0;
  std::uint64_t seed = 0;
  std::size_t width = 0, params = 0;
  double density = 1, proj_macs = 0, total_macs = 0;
  // held-out cross-entropy and its exp, seconds of training
  double valid_loss = 0, valid_ppl = 0, train_seconds = 0;
  std::size_t steps_done = 0;
  std::size_t updates = 0;  // pattern updates that moved at least one block
  double explored = 0;      // fraction of the block grid active at some point (dynamic variants)
};

json to_json(const run_result& r) {
  return {{"name", r.name},
          {"variant", r.variant},
          {"block", r.block},
          {"lr", r.lr},
          {"seed", r.seed},
          {"width", r.width},
          {"parameters", r.params},
          {"density", r.density},
          {"projection_macs_per_token", r.proj_macs},
          {"total_macs_per_token", r.total_macs},
          {"valid_loss", r.valid_loss},
          {"valid_perplexity", r.valid_ppl},
          {"train_seconds", r.train_seconds},
          {"steps", r.steps_done},
          {"updates", r.updates},
          {"explored", r.explored}};
}
run_result result_from_json(const json& j) {
  run_result r;
  r.name = j.at("name");
  r.variant = j.at("variant");
  r.block = j.at("block");
  r.lr = j.at("lr");
  r.seed = j.at("seed");
  r.width = j.at("width");
  r.params = j.at("parameters");
  r.density = j.at("density");
  r.proj_macs = j.at("projection_macs_per_token");
  r.total_macs = j.at("total_macs_per_token");
  r.valid_loss = j.at("valid_loss");
  r.valid_ppl = j.at("valid_perplexity");
  r.train_seconds = j.at("train_seconds");
  r.steps_done = j.at("steps");
  r.updates = j.at("updates");
  r.explored = j.at("explored");
  return r;
}

struct study_interrupted {};

struct policies : default_policies {
  using optimizer = optim::adamw<float>;
};

// Trains `model` (already initialised with the run's seed) and fills the loss fields of r.
// regrow: "" for a static pattern (or a dense model), else "rigl" or "random".
template <class Model>
void train_run(Model& model, run_result& r, const std::string& regrow, const study_options& so,
               data::token_file& train_file, data::token_file& valid_file, const fs::path& metrics) {
  data::lm_sampler sampler(
      train_file,
      {.batch_size = so.batch, .windows = {.seq_len = so.seq}, .order = data::lm_order::shuffled, .seed = r.seed});
  data::lm_eval_pass valid(valid_file, so.batch, data::lm_window_options{.seq_len = so.seq});
  json opt = {{"type", "adamw"}, {"beta1", 0.9}, {"beta2", 0.95}, {"eps", 1e-8}, {"weight_decay", 0.1}};
  json sched = {{"type", "warmup_cosine"},
                {"max_lr", r.lr},
                {"warmup_steps", so.steps / 20},
                {"min_lr", r.lr / 10},
                {"total_steps", so.steps}};
  trainer_options to;
  to.clip = clip_mode::global_norm;
  to.max_norm = 1.0;
  to.dropout_seed = r.seed;
  trainer<Model, policies> t(model, to, optim::adamw<float>(opt), optim::make_schedule(sched));
  metrics_log log(metrics, /*truncate=*/true);
  loop_hooks hooks;
  hooks.message = [&](const std::string& s) { std::fprintf(stderr, "[%s] %s\n", r.name.c_str(), s.c_str()); };
  std::optional<dynamic_sparsity<Model, trainer<Model, policies>>> ds;
  if constexpr (Model::sparsity::is_sparse) {
    if (!regrow.empty()) {
      sparse::update_config uc;
      uc.schedule.prune_ratio = so.prune_ratio;
      uc.schedule.update_period = so.update_period;
      uc.schedule.total_steps = so.steps;
      uc.regrow = sparse::parse_regrow_method(regrow);
      ds.emplace(model, t, uc, r.seed + 7);
      hooks.extra_metrics = [&](std::size_t) {
        json m = ds->take_metrics();
        if (m.contains("sparsity_update")) {
          const json& u = m["sparsity_update"];
          if (u.value("pruned", std::size_t(0)) > 0) ++r.updates;
          r.explored = u.value("explored", r.explored);
        }
        return m;
      };
    }
  }
  // a training line at every update step (each line carries the update since the previous one)
  const std::size_t log_every = std::gcd(std::size_t(10), so.update_period);
  loop_options lo{
      .steps = so.steps, .eval_every = so.eval_every, .eval_batches = so.eval_batches, .log_every = log_every};
  lm_task task(t, sampler, &valid);
  auto res = train_loop(t, task, lo, log, hooks);
  r.steps_done = res.steps_done;
  // an interrupted run is not a result: stop the study (the finished runs are kept and reused)
  if (res.interrupted) throw study_interrupted{};
  // held-out cross-entropy per predicted token (for the S1 model, not its training objective, which
  // down-weights repeated tokens), and its exponential
  r.valid_loss = res.last_eval->mean_ce();
  r.valid_ppl = res.last_eval->perplexity();
  r.train_seconds = res.train_seconds;
  r.params = model.num_parameters();
  SPARSELM_CHECK(std::isfinite(r.valid_loss), r.name, ": held-out loss is not finite (", r.valid_loss,
                 "); the learning rate ", r.lr, " may be too large");
}

template <class Model>
void measure_sparse(Model& model, run_result& r) {
  double nnz = 0, all = 0, macs = 0;
  for (auto& w : model.sparse_weights()) {
    const double b = double(w.pattern->block);
    nnz += double(w.pattern->nnz());
    all += double(w.pattern->rows_b * w.pattern->cols_b);
    macs += double(w.pattern->nnz()) * b * b;
  }
  r.density = all > 0 ? nnz / all : 1.0;
  r.proj_macs = macs;
}

// ---- the two model families ----

struct gpt_family {
  gpt_config base;
  static constexpr const char* name = "gpt";
  void set_vocab(std::size_t v) { base.vocab_size = v; }
  std::size_t vocab() const { return base.vocab_size; }
  std::size_t max_seq() const { return base.n_positions; }
  json config_json() const { return base.to_json(); }
  std::size_t width() const { return base.n_embd; }
  std::size_t block_multiple() const { return std::gcd(base.n_embd, base.hidden()); }

  // Dense config whose total MACs per token are closest to `target` (width a multiple of the heads).
  gpt_config flops_matched(double target, std::size_t T) const {
    gpt_config best = base;
    double err = INFINITY;
    for (std::size_t w = base.n_head; w <= 2 * base.n_embd; w += base.n_head) {
      gpt_config c = base;
      c.n_embd = w;
      if (base.n_inner) c.n_inner = std::max<std::size_t>(1, base.n_inner * w / base.n_embd);
      const double e = std::abs(gpt_projection_macs(c, 1.0) + gpt_other_macs(c, T) - target);
      if (e < err) err = e, best = c;
    }
    return best;
  }
  double sparse_total(double density, std::size_t T) const {
    return gpt_projection_macs(base, density) + gpt_other_macs(base, T);
  }

  template <class F>
  run_result run(const std::string& variant, std::size_t block, const std::string& regrow, run_result r,
                 const study_options& so, F&& train) const {
    if (block == 0) {
      const gpt_config c =
          variant == "dense-flops" ? flops_matched(sparse_total(1.0 - so.sparsity, so.seq), so.seq) : base;
      gpt<> model(c);
      model.init(r.seed);
      r.width = c.n_embd;
      r.proj_macs = gpt_projection_macs(c, 1.0);
      r.total_macs = r.proj_macs + gpt_other_macs(c, so.seq);
      train(model, r, std::string());
      return r;
    }
    return registry::with_sparsity(
        block,
        [&]<class Sparsity>() {
          sparse_plan plan;
          plan.sparsity = so.sparsity;
          plan.block = block;
          gpt<float, Sparsity> model(base, plan);
          model.init(r.seed);
          r.width = base.n_embd;
          measure_sparse(model, r);
          r.total_macs = r.proj_macs + gpt_other_macs(base, so.seq);
          train(model, r, regrow);
          return r;
        },
        "--blocks");
  }
};

struct s1_family {
  sparse_lm_config base;
  static constexpr const char* name = "s1";
  void set_vocab(std::size_t v) { base.vocab_size = v; }
  std::size_t vocab() const { return base.vocab_size; }
  std::size_t max_seq() const { return base.sequence_length; }
  json config_json() const { return base.to_json(); }
  std::size_t width() const { return base.hidden_length; }
  std::size_t block_multiple() const {
    return std::gcd(std::gcd(base.hidden_length, base.ff_length),
                    std::gcd(base.embedding_length, base.attention_heads * base.qkv_length));
  }

  // Dense config with H, F and the head count scaled together (per-head width D and the
  // embedding width E kept) whose total MACs per token are closest to `target`.
  sparse_lm_config flops_matched(double target, std::size_t T) const {
    sparse_lm_config best = base;
    best.block_size = 0;
    double err = INFINITY;
    for (std::size_t H = 8; H <= 2 * base.hidden_length; H += 8) {
      sparse_lm_config c = base;
      c.block_size = 0;
      const double s = double(H) / double(base.hidden_length);
      c.hidden_length = H;
      c.ff_length = std::max<std::size_t>(8, std::size_t(std::llround(s * double(base.ff_length) / 8.0)) * 8);
      c.attention_heads = std::max<std::size_t>(1, std::size_t(std::llround(s * double(base.attention_heads))));
      const double e = std::abs(s1_projection_macs(c, 1.0) + s1_other_macs(c, T) - target);
      if (e < err) err = e, best = c;
    }
    return best;
  }
  double sparse_total(double density, std::size_t T) const {
    return s1_projection_macs(base, density) + s1_other_macs(base, T);
  }

  template <class F>
  run_result run(const std::string& variant, std::size_t block, const std::string& regrow, run_result r,
                 const study_options& so, F&& train) const {
    return registry::with_sparsity(
        block,
        [&]<class Sparsity>() {
          sparse_lm_config c = base;
          c.block_size = block;
          c.sparsity = so.sparsity;
          if (variant == "dense-flops") c = flops_matched(sparse_total(1.0 - so.sparsity, so.seq), so.seq);
          sparse_lm<float, Sparsity> model(c);
          model.init(r.seed);
          r.width = c.hidden_length;
          if constexpr (Sparsity::is_sparse) {
            measure_sparse(model, r);
            r.total_macs = r.proj_macs + s1_other_macs(c, so.seq);
          } else {
            r.proj_macs = s1_projection_macs(c, 1.0);
            r.total_macs = r.proj_macs + s1_other_macs(c, so.seq);
          }
          train(model, r, regrow);
          return r;
        },
        "--blocks");
  }
};

// ---- the study ----

struct study {
  study_options so;
  std::vector<std::string> variants;
  std::vector<std::size_t> blocks;
  std::vector<double> lrs;
  std::size_t lr_extend = 2;  // grid widenings allowed when the best rate is at an end of it
  std::vector<std::uint64_t> seeds;
  fs::path out;
  json settings;  // everything a run's result depends on besides its own (variant, block, lr, seed)

  static std::string lr_text(double lr) {
    std::ostringstream s;
    s << lr;
    return s.str();
  }

  template <class Family>
  std::vector<run_result> run_all(const Family& fam, data::token_file& train_file, data::token_file& valid_file) {
    std::vector<run_result> all;
    fs::create_directories(out / "runs");
    auto one = [&](const std::string& variant, std::size_t block, double lr, std::uint64_t seed) {
      run_result r;
      r.variant = variant;
      r.block = block;
      r.lr = lr;
      r.seed = seed;
      r.name = variant + "_lr" + lr_text(lr) + "_seed" + std::to_string(seed);
      const fs::path file = out / "runs" / (r.name + ".json");
      if (fs::exists(file)) {
        const json saved = read_json_file(file);
        SPARSELM_CHECK(saved.contains("settings") && saved["settings"] == settings, file.string(),
                       ": this run was trained with other settings (model, data, steps, batch or sparsity); "
                       "use another --out or delete the file to train it again");
        std::fprintf(stderr, "== %s: reusing %s\n", r.name.c_str(), file.c_str());
        r = result_from_json(saved.at("result"));
        SPARSELM_CHECK(r.steps_done == so.steps, file.string(), ": the run stopped after ", r.steps_done, " of ",
                       so.steps, " steps; delete the file to train it again");
      } else {
        std::fprintf(stderr, "== %s\n", r.name.c_str());
        const std::string kind = variant.substr(0, variant.find('-'));
        const std::string regrow = (kind == "rigl" || kind == "random") ? kind : std::string();
        r = fam.run(kind == "dense" ? variant : kind, block, regrow, r, so,
                    [&](auto& model, run_result& rr, const std::string& rg) {
                      train_run(model, rr, rg, so, train_file, valid_file, out / "runs" / (rr.name + ".jsonl"));
                    });
        const fs::path tmp = out / "runs" / (r.name + ".json.tmp");
        {
          std::ofstream f(tmp);
          f << json{{"settings", settings}, {"result", to_json(r)}}.dump(2) << "\n";
          SPARSELM_CHECK(f.good(), tmp.string(), ": write failed");
        }
        fs::rename(tmp, file);
      }
      all.push_back(r);
      return r;
    };
    for (const auto& v : variants) {
      std::vector<std::pair<std::string, std::size_t>> named;
      if (v == "dense" || v == "dense-flops")
        named.push_back({v, 0});
      else
        for (auto b : blocks) named.push_back({v + "-b" + std::to_string(b), b});
      for (const auto& [name, block] : named) {
        // learning-rate grid on the first seed (widened by factors of 2 while the best rate is at
        // an end of it, at most lr_extend times), then the other seeds at the best rate
        double best_lr = lrs.front(), best = INFINITY, lo = lrs.front(), hi = lrs.back();
        auto consider = [&](double lr) {
          const auto r = one(name, block, lr, seeds.front());
          if (r.valid_loss < best) best = r.valid_loss, best_lr = lr;
        };
        for (double lr : lrs) consider(lr);
        for (std::size_t e = 0; e < lr_extend && lrs.size() > 1; ++e) {
          if (best_lr == lo && lo / 2 >= 1e-7)
            consider(lo /= 2);
          else if (best_lr == hi && hi * 2 <= 1.0)
            consider(hi *= 2);
          else
            break;
        }
        for (std::size_t i = 1; i < seeds.size(); ++i) one(name, block, best_lr, seeds[i]);
      }
    }
    return all;
  }
};

struct variant_summary {
  std::string name;
  std::vector<run_result> grid, at_best;  // the first seed's lr grid; every seed at the best lr
  double best_lr = 0, mean = 0, sd = 0, lo = 0, hi = 0;
};

std::vector<variant_summary> summarise(const std::vector<run_result>& runs, std::uint64_t first_seed) {
  std::vector<variant_summary> out;
  std::map<std::string, std::size_t> index;
  for (const auto& r : runs) {
    if (!index.count(r.variant)) index[r.variant] = out.size(), out.push_back({r.variant});
    auto& v = out[index[r.variant]];
    if (r.seed == first_seed) v.grid.push_back(r);
  }
  for (auto& v : out) {
    const auto best = std::min_element(v.grid.begin(), v.grid.end(),
                                       [](const auto& a, const auto& b) { return a.valid_loss < b.valid_loss; });
    v.best_lr = best->lr;
    for (const auto& r : runs)
      if (r.variant == v.name && r.lr == v.best_lr) v.at_best.push_back(r);
    double s = 0, s2 = 0;
    v.lo = INFINITY, v.hi = -INFINITY;
    for (const auto& r : v.at_best)
      s += r.valid_loss, v.lo = std::min(v.lo, r.valid_loss), v.hi = std::max(v.hi, r.valid_loss);
    const double n = double(v.at_best.size());
    v.mean = s / n;
    for (const auto& r : v.at_best) s2 += (r.valid_loss - v.mean) * (r.valid_loss - v.mean);
    v.sd = n > 1 ? std::sqrt(s2 / (n - 1)) : 0.0;
  }
  return out;
}

template <class Family>
int run_study(Family fam, study& st, const std::string& train_path, const std::string& valid_path,
              std::size_t vocab_limit) {
  data::token_file train0(train_path), valid0(valid_path);
  SPARSELM_CHECK(train0.size() > 0, train_path, ": empty token file");
  SPARSELM_CHECK(valid0.size() > 0, valid_path, ": empty token file");
  std::optional<data::token_file> train_l, valid_l;
  if (vocab_limit) {  // it merges ids: a limit above the files' vocabulary would only make the model larger
    const std::size_t have = std::max(train0.vocab_size(), valid0.vocab_size());
    if (vocab_limit > have)
      throw usage_error("--vocab-limit " + std::to_string(vocab_limit) + " is above the token files' vocabulary " +
                        std::to_string(have) + " (it merges the rarest ids into one)");
    const fs::path dir = st.out / ("data-v" + std::to_string(vocab_limit));
    fs::create_directories(dir);
    const auto ids = data::frequency_ranked_ids(train0, vocab_limit);
    ids.write(train0, dir / "train.tok");
    ids.write(valid0, dir / "valid.tok");
    train_l.emplace(dir / "train.tok");
    valid_l.emplace(dir / "valid.tok");
    fam.set_vocab(vocab_limit);
  }
  data::token_file& train_file = train_l ? *train_l : train0;
  data::token_file& valid_file = valid_l ? *valid_l : valid0;
  SPARSELM_CHECK(train_file.vocab_size() <= fam.vocab() && valid_file.vocab_size() <= fam.vocab(),
                 "token files: vocabulary ", std::max(train_file.vocab_size(), valid_file.vocab_size()),
                 " exceeds the model's ", fam.vocab(), " (--vocab-limit renumbers the ids)");
  SPARSELM_CHECK(st.so.seq <= fam.max_seq(), "--seq-len ", st.so.seq, " exceeds the model's maximum ", fam.max_seq());
  for (auto b : st.blocks)
    SPARSELM_CHECK(
        fam.block_multiple() % b == 0, "--blocks ", b,
        ": every sparse projection's sides must be multiples of the block size (the model's are multiples of ",
        fam.block_multiple(), ")");

  st.settings = {{"family", Family::name},
                 {"model", fam.config_json()},
                 {"train", {{"path", fs::absolute(train_path).string()}, {"tokens", train0.size()}}},
                 {"valid", {{"path", fs::absolute(valid_path).string()}, {"tokens", valid0.size()}}},
                 {"vocab_limit", vocab_limit},
                 {"steps", st.so.steps},
                 {"batch_size", st.so.batch},
                 {"seq_len", st.so.seq},
                 {"sparsity", st.so.sparsity},
                 {"prune_ratio", st.so.prune_ratio},
                 {"update_period", st.so.update_period},
                 {"eval_every", st.so.eval_every},
                 {"eval_batches", st.so.eval_batches}};
  const double unigram = unigram_perplexity(train_file, valid_file, fam.vocab());
  std::fprintf(stderr, "unigram baseline: validation perplexity %.1f (loss %.4f)\n", unigram, std::log(unigram));

  const auto runs = st.run_all(fam, train_file, valid_file);
  const auto vs = summarise(runs, st.seeds.front());

  json summary = st.settings;
  summary["unigram_perplexity"] = unigram;
  summary["learning_rates"] = st.lrs;
  summary["lr_extend"] = st.lr_extend;
  summary["seeds"] = st.seeds;
  summary["variants"] = json::array();
  std::printf("%-15s %6s %8s %11s %12s %12s %8s %22s %17s %8s %9s %7s\n", "variant", "width", "density", "params",
              "proj MAC/tok", "total MAC/tok", "best lr", "held-out loss (mean±sd)", "min-max", "updates", "explored",
              "s/run");
  for (const auto& v : vs) {
    const auto& r = v.at_best.front();
    double secs = 0;
    for (const auto& x : v.at_best) secs += x.train_seconds;
    secs /= double(v.at_best.size());
    std::printf("%-15s %6zu %8.3f %11zu %12.4g %12.4g %8.2g %15.4f ± %.4f (%zu) %8.4f-%.4f %8zu %9.3f %7.0f\n",
                v.name.c_str(), r.width, r.density, r.params, r.proj_macs, r.total_macs, v.best_lr, v.mean, v.sd,
                v.at_best.size(), v.lo, v.hi, r.updates, r.explored, secs);
    json grid = json::array(), seeds = json::array();
    for (const auto& x : v.grid) grid.push_back({{"lr", x.lr}, {"valid_loss", x.valid_loss}});
    for (const auto& x : v.at_best) seeds.push_back(to_json(x));
    summary["variants"].push_back({{"name", v.name},
                                   {"block", r.block},
                                   {"width", r.width},
                                   {"density", r.density},
                                   {"parameters", r.params},
                                   {"projection_macs_per_token", r.proj_macs},
                                   {"total_macs_per_token", r.total_macs},
                                   {"best_lr", v.best_lr},
                                   {"lr_grid", grid},
                                   {"valid_loss_mean", v.mean},
                                   {"valid_loss_sd", v.sd},
                                   {"valid_loss_min", v.lo},
                                   {"valid_loss_max", v.hi},
                                   {"runs", seeds}});
  }
  io::atomic_write_text(st.out / "summary.json", summary.dump(2) + "\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return run_program("sparsity_study", [&]() -> int {
    try {
      CLI::App app{
          "Dynamic (RigL or random regrowth) vs static block-sparse vs dense models of the same width and of the same\n"
          "total FLOPs, on the same data: learning rate tuned per variant, repeated over seeds."};
      std::string train_path, valid_path, model_path, family = "gpt", out = "runs/study";
      study st;
      st.variants = {"dense-flops", "static", "rigl", "random"};
      st.blocks = {16};
      st.lrs = {1.5e-3};
      st.seeds = {1234};
      std::size_t vocab_limit = 0;
      int threads = 0;
      auto& so = st.so;
      examples::reads(app.add_option("--train", train_path, "Training token file (encode_dataset)")->required());
      examples::reads(app.add_option("--valid", valid_path, "Validation token file")->required());
      app.add_option("--family", family, "Model family: gpt (models/gpt.hpp) or s1 (models/sparse_lm.hpp)")
          ->check(CLI::IsMember({"gpt", "s1"}))
          ->capture_default_str();
      examples::reads(app.add_option("--model", model_path,
                     "Model config JSON (default configs/gpt-mini.json for gpt, configs/s1-study.json for s1); its "
                     "width is the sparse and dense variants'"));
      app.add_option("--variants", st.variants, "Variants: dense, dense-flops, static, rigl, random")
          ->delimiter(',')
          ->check(CLI::IsMember({"dense", "dense-flops", "static", "rigl", "random"}))
          ->capture_default_str();
      app.add_option("--blocks", st.blocks, "Block sizes of the sparse variants (1, 4, 8, 16)")
          ->delimiter(',')
          ->check(CLI::IsMember({1, 4, 8, 16}))
          ->capture_default_str();
      app.add_option("--lr", st.lrs, "Peak learning rates to try per variant, first seed (warmup 5 %, cosine to lr/10)")
          ->delimiter(',')
          ->capture_default_str();
      app.add_option("--lr-extend", st.lr_extend,
                     "While the best rate of the grid is its smallest or largest, try half or twice it, up to N times")
          ->check(CLI::Range(std::size_t(0), std::size_t(20)))
          ->capture_default_str();
      app.add_option("--seeds", st.seeds, "Seeds (initialisation, pattern, data order); the first tunes the lr")
          ->delimiter(',')
          ->capture_default_str();
      app.add_option("--vocab-limit", vocab_limit,
                     "Renumber token ids by training-set frequency and merge all but the most frequent N-1 into one "
                     "(0: keep the files' ids; the model's vocabulary becomes N)")
          ->check(CLI::Range(std::size_t(2), limits::vocab))
          ->capture_default_str();
      app.add_option("--steps", so.steps, "Optimiser steps per run")
          ->check(CLI::Range(std::size_t(1), limits::steps))
          ->capture_default_str();
      app.add_option("--batch-size", so.batch, "Sequences per step")
          ->check(CLI::Range(std::size_t(1), limits::batch))
          ->capture_default_str();
      app.add_option("--seq-len", so.seq, "Tokens per sequence")
          ->check(CLI::Range(std::size_t(2), limits::positions))
          ->capture_default_str();
      app.add_option("--sparsity", so.sparsity, "Fraction of zero blocks in each projection")
          ->check(CLI::Range(0.0, 0.999))
          ->capture_default_str();
      app.add_option("--prune-ratio", so.prune_ratio, "Fraction of active blocks pruned at the first update")
          ->check(CLI::Range(0.0, 1.0))
          ->capture_default_str();
      app.add_option("--update-period", so.update_period, "Steps between pattern updates")
          ->check(CLI::Range(std::size_t(1), limits::steps))
          ->capture_default_str();
      app.add_option("--eval-every", so.eval_every, "Evaluate every N steps (0: at the end only)")
          ->capture_default_str();
      app.add_option("--eval-batches", so.eval_batches, "Validation batches per evaluation (0: all)")
          ->capture_default_str();
      app.add_option("--threads", threads, "Threads (0: all cores)")
          ->check(CLI::Range(0, int(limits::threads)))
          ->capture_default_str();
      bool overwrite = false;
      examples::writes(app.add_option("-o,--out", out, "Output directory")->capture_default_str());
      app.add_flag("--overwrite", overwrite, "Use an --out that holds files other than a study's");
      if (auto status = examples::parse(app, argc, argv)) return *status;
      if (vocab_limit) SPARSELM_CHECK(vocab_limit >= 2, "--vocab-limit ", vocab_limit, ": at least 2");

      for (double lr : st.lrs)
        if (!(lr >= 1e-7 && lr <= limits::max_learning_rate))  // the upper bound: every program's
          throw usage_error("--lr: " + study::lr_text(lr) + " is outside [1e-7, " +
                            study::lr_text(limits::max_learning_rate) + "]");
      if (threads > 0) set_num_threads(threads);
      {  // drop repeated seeds, keeping the order (the first tunes the learning rate)
        std::vector<std::uint64_t> s;
        for (auto x : st.seeds)
          if (std::find(s.begin(), s.end(), x) == s.end()) s.push_back(x);
        st.seeds = s;
      }
      std::sort(st.lrs.begin(), st.lrs.end());
      st.lrs.erase(std::unique(st.lrs.begin(), st.lrs.end()), st.lrs.end());
      st.out = out;
      // the one output rule (io/output_rule.hpp) and one study per directory (its lock, held to the end)
      io::check_output(st.out, {{train_path, "--train"}, {valid_path, "--valid"}, {model_path, "--model"}}, "--out");
      io::check_output_dir(st.out, "--out", overwrite, {"summary.json", "runs", "data-v*"});
      io::run_lock lock(st.out);
      for (const auto& p : io::remove_stale_temporaries(st.out))
        std::fprintf(stderr, "sparsity_study: removed '%s', left by an interrupted write\n", p.string().c_str());
      if (model_path.empty())
        model_path =
            std::string(SPARSELM_SOURCE_DIR) + (family == "gpt" ? "/configs/gpt-mini.json" : "/configs/s1-study.json");
      const json model_json = read_json_file(model_path);
      check_model_limits(model_json, model_path);
      if (family == "gpt")
        return run_study(gpt_family{gpt_config::from_json(model_json, model_path)}, st, train_path, valid_path,
                         vocab_limit);
      return run_study(s1_family{sparse_lm_config::from_json(model_json, model_path)}, st, train_path, valid_path,
                       vocab_limit);
    } catch (const study_interrupted&) {
      std::fprintf(stderr,
                   "sparsity_study: interrupted; the finished runs are kept in <out>/runs and reused by the "
                   "same command\n");
      return 130;
    }
  });
}
