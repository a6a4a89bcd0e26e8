#!/usr/bin/python3
"""Every preset of configs/recipes/ runs end to end, scaled down, with its policies on.

    check_recipes.py BIN_DIR SOURCE_DIR WORK_DIR [RECIPE ...]

BIN_DIR holds the example programs (build/examples). Each recipe runs with its run config (-c) and
overrides that shrink the model, the data and the run (a few steps of a 2-layer model of width 64
or 128 on tiny files made here) but leave its policies on; then the test reads the run's
metrics.jsonl ("run" line: the resolved config, precision, pipeline; "train" lines: pattern
updates, learning rates) and the summary, and checks that each policy the recipe names took
effect: accumulation count and mode, recompute, pipeline stages (the staged steps' report),
precision, optimiser and schedule, sparsity, pattern-update steps, prune ratio and its cosine
decay, the regrowth rule, the learning-rate rescale, init_from, SQuAD scoring without training.
The full-size facts (GPT-3 sizes and batches, the seeds' global batches and run lengths) are
checked on the recipe files themselves. Named recipes (file names without .json) run alone.
"""
import json
import math
import os
import subprocess
import sys
import time

BIN, SRC, WORK = sys.argv[1:4]
ONLY = set(sys.argv[4:])
RECIPES = os.path.join(SRC, "configs", "recipes")
failures = []


def fail(name, msg):
    failures.append(f"{name}: {msg}")
    print(f"FAIL {name}: {msg}", flush=True)


def check(name, cond, msg):
    if not cond:
        fail(name, msg)
    return cond


def run(cmd, log, env=None, expect=0):
    e = dict(os.environ, OMP_NUM_THREADS="2")
    e.update(env or {})
    with open(log, "w") as f:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=f, text=True, env=e)
    if p.returncode != expect:
        raise RuntimeError(f"exit {p.returncode} (expected {expect}) from {' '.join(cmd)}:\n" + open(log).read()[-3000:])
    return p.stdout


def recipe(name):
    with open(os.path.join(RECIPES, name + ".json")) as f:
        return json.load(f)


def metrics(out):
    with open(os.path.join(out, "metrics.jsonl")) as f:
        lines = [json.loads(l) for l in f if l.strip()]
    runs = [l for l in lines if l.get("kind") == "run"]
    assert len(runs) == 1, f"{len(runs)} run lines in {out}/metrics.jsonl"
    return runs[0], [l for l in lines if l.get("kind") == "train"]


def last_json(stdout):
    for line in reversed(stdout.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError("no summary JSON on stdout")


def eta(s):  # the sparse learning-rate rescale of the blog's paper
    return math.exp(1.969 * s * s + 0.2905 * s)


# --- tiny data -----------------------------------------------------------------------------------
os.makedirs(WORK, exist_ok=True)
text = open(os.path.join(SRC, "data", "corpus", "valid", "moby_dick.txt"), encoding="utf-8").read()
with open(os.path.join(WORK, "train.txt"), "w", encoding="utf-8") as f:
    f.write(text[:60000])
with open(os.path.join(WORK, "valid.txt"), "w", encoding="utf-8") as f:
    f.write(text[60000:80000])
W = lambda *p: os.path.join(WORK, *p)  # noqa: E731
run([f"{BIN}/encode_dataset", "--mode", "gpt", "-i", W("train.txt"), "-o", W("train.tok"), "--validation-input",
     W("valid.txt"), "--validation-output", W("valid.tok")], W("encode.log"))
# BERT examples as the recipes' "about" says, at the seeds' sequence lengths and masks per sequence
for seq, masks in ((128, 20), (384, 56)):
    run([f"{BIN}/bert_data", "-i", W("train.txt"), "-o", W(f"p{seq}.bex"), "--seq-len", str(seq), "--max-predictions",
         str(masks), "--dupe-factor", "1"], W(f"bert_data_{seq}.log"))
# a SQuAD-format sample: the first paragraphs of the bundled sets
for split, keep in (("train", 3), ("dev", 2)):
    d = json.load(open(os.path.join(SRC, "data", "squad", f"{split}-v1.1.json"), encoding="utf-8"))
    d["data"] = d["data"][:1]
    d["data"][0]["paragraphs"] = d["data"][0]["paragraphs"][:keep]
    json.dump(d, open(W(f"squad-{split}.json"), "w"))

LM = ["--train", W("train.tok"), "--valid", W("valid.tok"), "--threads", "2", "--log-every", "1", "--eval-batches", "2",
      "--checkpoint-every", "0", "--overwrite"]
BERT = ["--threads", "2", "--log-every", "1", "--eval-batches", "2", "--checkpoint-every", "0", "--overwrite"]
S1_SMALL = ["--set", "model.hidden_length=64", "--set", "model.ff_length=256", "--set", "model.attention_heads=2",
            "--set", "model.qkv_length=16", "--set", "model.embedding_length=32", "--set", "model.sequence_length=64",
            "--seq-len", "63"]
GPT_SMALL = ["--set", "model.n_layer=2", "--set", "model.n_embd=64", "--set", "model.n_head=2", "--set",
             "model.n_positions=64", "--seq-len", "32"]


def bert_small(width):
    return ["--set", "model.num_hidden_layers=2", "--set", f"model.hidden_size={width}", "--set",
            "model.num_attention_heads=2", "--set", f"model.intermediate_size={4 * width}"]


def common_checks(name, r, run_line):
    """What every recipe says about itself is recorded; the program is the recipe's."""
    c = run_line["config"]
    check(name, r.get("program") and run_line["program"] == r["program"], f"program {run_line['program']} vs {r.get('program')}")
    check(name, isinstance(r.get("about"), str) and len(r["about"]) > 200 and c.get("about") == r["about"],
          "the recipe's 'about' is missing, short or not recorded in the run config")
    check(name, c.get("program") == r["program"], "'program' not recorded in the run config")


def check_trainer(name, c, run_line, acc=None, mode=None, pre=None, recompute=None, precision=None, stages=None):
    t = c["trainer"]
    if acc is not None:
        check(name, t["accumulation"]["steps"] == acc, f"accumulation {t['accumulation']['steps']}, expected {acc}")
    if mode is not None:
        check(name, t["accumulation"]["mode"] == mode, f"accumulation mode {t['accumulation']['mode']}, expected {mode}")
    if pre is not None:
        check(name, t["accumulation"]["scale_before"] == pre, f"pre-scaling {t['accumulation']['scale_before']}")
    if recompute is not None:
        check(name, t["recompute"] == recompute, f"recompute {t['recompute']}, expected {recompute}")
    if precision is not None:
        check(name, t.get("precision", "fp32") == precision and run_line["precision"] == precision,
              f"precision {t.get('precision')} / run line {run_line['precision']}, expected {precision}")
    if stages is not None:
        check(name, t["pipeline"]["stages"] == stages, f"pipeline stages {t['pipeline']['stages']}, expected {stages}")


def check_staged(name, summary, stages):
    p = summary.get("pipeline")
    check(name, p is not None and p["stages"] == stages, f"the steps did not run in {stages} pipeline stages: {p}")


def update_steps(train):
    return [l["sparsity_update"]["step"] for l in train if "sparsity_update" in l]


def check_updates(name, train, summary, steps, expected, ratio):
    ups = [l["sparsity_update"] for l in train if "sparsity_update" in l]
    check(name, [u["step"] for u in ups] == expected, f"pattern updates at {[u['step'] for u in ups]}, expected {expected}")
    check(name, summary.get("pattern_updates") == len(expected), f"summary pattern_updates {summary.get('pattern_updates')}")
    for u in ups:  # cosine decay of the prune ratio: f(t) = (1 + cos(pi t / T)) / 2
        f = 0.5 * (1 + math.cos(math.pi * u["step"] / steps))
        check(name, abs(u["fraction"] - f) < 1e-6, f"update at {u['step']}: decay {u['fraction']}, expected {f:.6f}")
        check(name, u["pruned"] == u["regrown"] and u["pruned"] > 0, f"update at {u['step']}: {u}")
        if ratio is not None:  # ceil per projection: at most a few blocks above ratio * f * nnz
            got = u["pruned"] / u["nnz"]
            check(name, ratio * f - 1e-9 <= got <= ratio * f + 0.06,
                  f"update at {u['step']}: pruned {u['pruned']} of {u['nnz']} ({got:.3f}), expected ~{ratio * f:.3f}")


def check_sparsity(name, c, block, sparsity, update):
    sp = c["sparsity"]
    check(name, sp["block_size"] == block, f"block size {sp['block_size']}, expected {block}")
    if block:
        check(name, abs(sp["sparsity"] - sparsity) < 1e-9, f"sparsity {sp.get('sparsity')}, expected {sparsity}")
    if update is None:
        check(name, "update" not in sp, f"pattern updates configured in a static run: {sp.get('update')}")
    else:
        for k, v in update.items():
            check(name, sp["update"].get(k) == v, f"sparsity.update.{k} = {sp['update'].get(k)}, expected {v}")


timings = {}


def case(name):
    def wrap(fn):
        if ONLY and name not in ONLY:
            return fn
        t0 = time.time()
        try:
            fn(name, recipe(name), W(name))
        except Exception as e:  # a run that fails is a failed check
            fail(name, str(e))
        timings[name] = time.time() - t0
        return fn
    return wrap


# --- S1 ------------------------------------------------------------------------------------------
@case("s1-quickstart")
def _(name, r, out):
    check(name, r["model"]["vocab_size"] == 50257 and r["model"]["layers"] == 1 and r["model"]["hidden_length"] == 768
          and r["trainer"]["accumulation"]["steps"] == 60, "the recipe's S1 quick-start shape changed")
    s = last_json(run([f"{BIN}/sparse_lm", "-c", os.path.join(RECIPES, name + ".json"), *LM, *S1_SMALL, "--steps", "5",
                       "--accumulation", "3", "--update-period", "2", "--eval-every", "0", "--out", out], W(name + ".log")))
    rl, train = metrics(out)
    c = rl["config"]
    common_checks(name, r, rl)
    check_trainer(name, c, rl, acc=3, mode="sum", recompute="none", precision="fp32")
    check(name, c["model"]["vocab_size"] == 50257, "vocabulary")
    check(name, c["trainer"]["clip"] == "none" and c["optimizer"]["type"] == "adam" and c["optimizer"]["eps"] == 1e-2,
          f"S1 optimiser: {c['optimizer']}, clip {c['trainer']['clip']}")
    check(name, c["schedule"]["type"] == "bert_power" and c["schedule"]["peak_lr"] == 2e-4, f"schedule {c['schedule']}")
    check_sparsity(name, c, 16, 0.9, {"prune_ratio": 0.3, "regrow": "rigl", "pooling": "avg", "prune_metric": "l1"})
    check_updates(name, train, s, 5, [2, 4], None)


@case("s1-gpt2-size")
def _(name, r, out):
    m = r["model"]
    check(name, (m["layers"], m["hidden_length"], m["ff_length"], m["vocab_size"]) == (45, 1600, 6400, 50257)
          and r["trainer"]["accumulation"]["steps"] == 376 and r["trainer"]["pipeline"]["stages"] == 16,
          "the recipe's GPT-2-size shape changed")
    args = [f"{BIN}/sparse_lm", "-c", os.path.join(RECIPES, name + ".json"), *LM, *S1_SMALL, "--set", "model.layers=2",
            "--pipeline-stages", "2", "--accumulation", "4", "--update-period", "2", "--eval-every", "0"]
    s = last_json(run([*args, "--steps", "5", "--out", out], W(name + ".log")))
    rl, train = metrics(out)
    c = rl["config"]
    common_checks(name, r, rl)
    check_trainer(name, c, rl, acc=4, mode="avg", pre=True, recompute="blocks", precision="bf16", stages=2)
    check(name, c["optimizer"].get("slots") == "bf16", f"optimiser slots {c['optimizer'].get('slots')}")
    check(name, c["schedule"]["power"] == 0.8 and c["schedule"]["peak_lr"] == 2.5e-4, f"schedule {c['schedule']}")
    check_staged(name, s, 2)
    check_sparsity(name, c, 16, 0.9, {"prune_ratio": 0.5, "regrow": "rigl", "pooling": "avg"})
    check_updates(name, train, s, 5, [2, 4], None)
    # a host without AVX512-BF16: the portable bf16 path runs the same recipe
    run([*args, "--steps", "2", "--out", out + "-portable"], W(name + "-portable.log"), env={"SPARSELM_BF16_KERNEL": "portable"})
    check(name, "portable path" in open(W(name + "-portable.log")).read(), "SPARSELM_BF16_KERNEL=portable not on the portable path")
    check(name, metrics(out + "-portable")[0]["precision"] == "bf16", "portable run's precision")


# --- GPT-3 ---------------------------------------------------------------------------------------
# (name, parameters, layers, width, heads, batch tokens, peak lr): the GPT-3 paper's Table 2.1, with
# XL's heads and 13B's width made consistent (16 x 128 = 2048; 40 x 128 = 5120)
GPT3 = [("125m", 125e6, 12, 768, 12, 0.5e6, 6e-4), ("350m", 350e6, 24, 1024, 16, 0.5e6, 3e-4),
        ("760m", 760e6, 24, 1536, 16, 0.5e6, 2.5e-4), ("1.3b", 1.3e9, 24, 2048, 16, 1e6, 2e-4),
        ("2.7b", 2.7e9, 32, 2560, 32, 1e6, 1.6e-4), ("6.7b", 6.7e9, 32, 4096, 32, 2e6, 1.2e-4),
        ("13b", 13e9, 40, 5120, 40, 2e6, 1e-4), ("175b", 175e9, 96, 12288, 96, 3.2e6, 0.6e-4)]
for size, params, L, C, H, tokens, lr in GPT3:
    @case("gpt3-" + size)
    def _(name, r, out, params=params, L=L, C=C, H=H, tokens=tokens, lr=lr):
        m = json.load(open(os.path.join(RECIPES, r["model"])))
        check(name, (m["n_layer"], m["n_embd"], m["n_head"], m["n_positions"], m["vocab_size"]) == (L, C, H, 2048, 50257),
              f"model preset {m}")
        n = 12 * L * C * C + (50257 + 2048) * C
        check(name, abs(n / params - 1) < 0.05, f"the preset has {n / 1e6:.0f}M parameters, not {params / 1e6:.0f}M")
        gb = r["global_batch"]
        check(name, abs(gb * 2048 / tokens - 1) < 0.05 and r["seq_len"] == 2048, f"global batch {gb} x 2048 vs {tokens}")
        check(name, r["steps"] * gb * 2048 >= 300e9 and (r["steps"] - 1) * gb * 2048 < 300e9, "run length is not 300B tokens")
        sc = r["schedule"]
        check(name, sc["max_lr"] == lr and abs(sc["min_lr"] - lr / 10) < 1e-12
              and abs(sc["warmup_steps"] * gb * 2048 / 375e6 - 1) < 0.01 and abs(sc["total_steps"] * gb * 2048 / 260e9 - 1) < 0.01,
              f"schedule {sc}")
        s = last_json(run([f"{BIN}/gpt_train", "-c", os.path.join(RECIPES, name + ".json"), *LM, *GPT_SMALL,
                           "--global-batch", "4", "--steps", "3", "--eval-every", "3", "--out", out], W(name + ".log")))
        rl, train = metrics(out)
        c = rl["config"]
        common_checks(name, r, rl)
        check_trainer(name, c, rl, acc=4, mode="avg", recompute="blocks", precision="bf16")
        check(name, c["trainer"]["shard_optimizer"] is True and c["trainer"]["clip"] == "global_norm", "sharding / clipping")
        o = c["optimizer"]
        check(name, (o["type"], o["beta2"], o["eps"], o["weight_decay"]) == ("adamw", 0.95, 1e-8, 0.1), f"optimiser {o}")
        check(name, c["schedule"] == dict(sc, type="warmup_cosine"), f"resolved schedule {c['schedule']}")
        check(name, len(train) == 3 and "valid" in s, f"{len(train)} training lines, summary {s}")


# --- BERT pre-training ----------------------------------------------------------------------------
def bert_pretrain(name, r, out, width, data, extra, steps):
    return last_json(run([f"{BIN}/bert_pretrain", "-c", os.path.join(RECIPES, name + ".json"), *BERT, *bert_small(width),
                          "--train", W(data), "--valid", W(data), "--batch-size", "2", "--global-batch", "8",
                          "--pipeline-stages", "2", "--steps", str(steps), "--eval-every", str(steps), "--out", out,
                          *extra], W(name + ".log")))


def check_phase(name, r, rl, seq, s):
    c = rl["config"]
    common_checks(name, r, rl)
    check_trainer(name, c, rl, acc=4, mode="avg", recompute="blocks", precision="bf16", stages=2)
    check_staged(name, s, 2)
    check(name, c["optimizer"]["type"] == "lamb" and c["optimizer"]["weight_decay"] == 0.01, f"optimiser {c['optimizer']}")
    check(name, c["schedule"]["type"] == "up_down" and c["schedule"]["max_lr"] == r["schedule"]["max_lr"]
          and c["schedule"]["warmup_frac"] == r["schedule"]["warmup_frac"], f"schedule {c['schedule']}")
    check(name, rl["seq_len"] == seq, f"sequence {rl['seq_len']}, expected {seq}")


@case("bert-phase1")
def _(name, r, out):
    check(name, r["global_batch"] == 32 * 4 * 510 and r["batch_size"] == 32 and r["steps"] == 7060, "phase-1 batch / length")
    s = bert_pretrain(name, r, out, 64, "p128.bex", [], 3)
    rl, train = metrics(out)
    check_phase(name, r, rl, 128, s)
    check(name, rl["config"]["sparsity"]["block_size"] == 0, "phase 1 is dense")


@case("bert-phase2")
def _(name, r, out):
    check(name, r["global_batch"] == 8 * 4 * 510 and r["batch_size"] == 8 and r["steps"] == 2098, "phase-2 batch / length")
    check(name, r["init_from"] == recipe("bert-phase1")["out"], "phase 2 does not start from phase 1's run")
    if not os.path.isdir(W("bert-phase1")):
        bert_pretrain("bert-phase1", recipe("bert-phase1"), W("bert-phase1"), 64, "p128.bex", [], 3)
    s = bert_pretrain(name, r, out, 64, "p384.bex", ["--init-from", W("bert-phase1")], 2)
    rl, train = metrics(out)
    check_phase(name, r, rl, 384, s)
    check(name, "model weights from " + W("bert-phase1") in open(W(name + ".log")).read(),
          "phase 2 did not load phase 1's weights")


# --- SQuAD ---------------------------------------------------------------------------------------
def squad_features(log):
    for line in open(log):
        if "training features" in line:
            return int(line.split("->")[1].split()[0])
    raise RuntimeError("no feature count in " + log)


@case("squad-finetune")
def _(name, r, out):
    if not os.path.isdir(W("bert-phase2")):
        raise RuntimeError("needs the bert-phase2 run (run that recipe's case first)")
    run([f"{BIN}/bert_squad", "-c", os.path.join(RECIPES, name + ".json"), *BERT, "--init-from", W("bert-phase2"),
         "--train", W("squad-train.json"), "--predict", W("squad-dev.json"), "--batch-size", "2", "--global-batch", "8",
         "--out", out], W(name + ".log"))
    rl, train = metrics(out)
    c = rl["config"]
    common_checks(name, r, rl)
    check_trainer(name, c, rl, acc=4, mode="avg", recompute="blocks", precision="bf16")
    o = c["optimizer"]
    check(name, o["type"] == "adamw" and o["bias_correction"] is False and o["eps"] == 1e-6, f"optimiser {o}")
    check(name, c["schedule"]["type"] == "linear" and c["schedule"]["max_lr"] == 6e-5, f"schedule {c['schedule']}")
    expected = math.ceil(3 * squad_features(W(name + ".log")) / 8)  # 3 epochs at a global batch of 8
    check(name, c["steps"] == expected and len(train) == expected, f"{c['steps']} steps, {len(train)} lines, expected {expected}")
    check(name, c["max_seq"] == 384 and c["doc_stride"] == 128, "windows")
    ev = json.load(open(os.path.join(out, "eval.json")))
    check(name, ev["questions"] > 0 and 0 <= ev["f1"] <= 100, f"eval {ev}")


@case("squad-eval")
def _(name, r, out):
    if not os.path.isdir(W("squad-finetune")):
        raise RuntimeError("needs the squad-finetune run")
    stdout = run([f"{BIN}/bert_squad", "-c", os.path.join(RECIPES, name + ".json"), "--threads", "2", "--overwrite",
                  "--init-from", W("squad-finetune"), "--predict", W("squad-dev.json"), "--out", out], W(name + ".log"))
    ev = json.loads(stdout.strip().splitlines()[-1])
    check(name, ev["train"]["steps"] == 0, f"trained {ev['train']} steps")
    check(name, not os.path.exists(os.path.join(out, "checkpoints")) and not os.path.exists(os.path.join(out, "metrics.jsonl")),
          "an evaluation wrote a training run")
    ref = json.load(open(W("squad-finetune", "eval.json")))
    check(name, (ev["exact_match"], ev["f1"], ev["questions"]) == (ref["exact_match"], ref["f1"], ref["questions"]),
          f"scores {ev['exact_match']}/{ev['f1']} differ from the fine-tuning run's {ref['exact_match']}/{ref['f1']}")
    check(name, json.load(open(os.path.join(out, "predictions.json"))) == json.load(open(W("squad-finetune", "predictions.json"))),
          "predictions differ from the fine-tuned model's")


# --- the blog's dynamic-sparse BERT and its baselines ---------------------------------------------
def blog_lr_checks(name, train, sparse):
    top = max(l["lr"] for l in train)
    if sparse:  # eta(0.9) ~ 6.4: the rescaled rate exceeds the recipe's peak
        check(name, 0.006 < top <= 0.006 * eta(0.9) * (1 + 1e-6), f"peak lr {top}: not rescaled by eta(0.9)")
    else:
        check(name, top <= 0.006 * (1 + 1e-6), f"peak lr {top} above the recipe's 0.006")


@case("blog-dynamic-sparse")
def _(name, r, out):
    u = r["sparsity"]["update"]
    check(name, math.floor((r["steps"] - 1) / u["update_period"]) == 160, "not 160 pattern updates in the phase")
    s = bert_pretrain(name, r, out, 128, "p128.bex", ["--update-period", "2"], 9)
    rl, train = metrics(out)
    c = rl["config"]
    common_checks(name, r, rl)
    check_trainer(name, c, rl, acc=4, mode="avg", recompute="blocks", precision="bf16", stages=2)
    check_staged(name, s, 2)
    check_sparsity(name, c, 16, 0.9, {"prune_ratio": 0.5, "regrow": "random", "prune_metric": "l1", "period": 0.5})
    check(name, c["sparsity"]["lr_rescale"] is True, "lr rescale off")
    check_updates(name, train, s, 9, [2, 4, 6, 8], 0.5)
    blog_lr_checks(name, train, True)


@case("blog-static-sparse")
def _(name, r, out):
    s = bert_pretrain(name, r, out, 128, "p128.bex", [], 5)
    rl, train = metrics(out)
    c = rl["config"]
    common_checks(name, r, rl)
    check_trainer(name, c, rl, acc=4, mode="avg", recompute="blocks", precision="bf16", stages=2)
    check_sparsity(name, c, 16, 0.9, None)
    check(name, update_steps(train) == [] and "pattern_updates" not in s, "a static run updated its patterns")
    blog_lr_checks(name, train, True)


@case("blog-dense-baseline")
def _(name, r, out):
    check(name, r["model"]["hidden_size"] == 512 and r["model"]["num_hidden_layers"] == 4, "dense baseline is BERT-Small")
    s = bert_pretrain(name, r, out, 128, "p128.bex", [], 5)
    rl, train = metrics(out)
    c = rl["config"]
    common_checks(name, r, rl)
    check_trainer(name, c, rl, acc=4, mode="avg", recompute="blocks", precision="bf16", stages=2)
    check_sparsity(name, c, 0, None, None)
    blog_lr_checks(name, train, False)


# --- every recipe is tested, and names its program -------------------------------------------------
if not ONLY:
    names = sorted(f[:-5] for f in os.listdir(RECIPES) if f.endswith(".json"))
    check("recipes", sorted(timings) == names, f"recipes without a case: {sorted(set(names) - set(timings))}")
    # a recipe is refused by another program
    log = W("wrong-program.log")
    run([f"{BIN}/gpt_train", "-c", os.path.join(RECIPES, "s1-quickstart.json"), "--steps", "1", "--out", W("wrong")], log,
        expect=1)
    check("recipes", 'is for "sparse_lm", not gpt_train' in open(log).read(), "gpt_train ran sparse_lm's recipe")

for n, t in timings.items():
    print(f"{n}: {t:.1f} s")
if failures:
    print(f"{len(failures)} failed checks")
    sys.exit(1)
print(f"OK: {len(timings)} recipes ran scaled down with their policies on")
