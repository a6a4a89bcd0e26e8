#!/usr/bin/env bash
# ctest examples.plan: --dry-run's plan (train/plan.hpp) against what the same run measures.
#   For three configurations that differ in precision, recompute, sparsity, model and batch
#     A  gpt_train, dense, fp32, recompute none, batch 8 x 256
#     B  gpt_train, block-sparse (B = 16, sparsity 0.9, random regrowth every 3 steps), bf16,
#        recompute blocks, batch 8 x 256
#     C  bert_pretrain, bert-small, fp32, LAMB with bf16 slots, batch 8 x 128
#     D  gpt_train, a LLaMA ("model_type": "llama": 6 layers, width 128, 4 heads over 2 key/value
#        heads, SwiGLU 352, untied head), dense, fp32, recompute none, batch 8 x 256
#     E  the same LLaMA with a tied head, block-sparse (B = 16, sparsity 0.9, random regrowth every 3
#        steps), bf16, recompute blocks, batch 8 x 256
#     F  A split over 2 ranks of 1 thread (--tensor-parallel 2 under mpirun; the plan is one rank's
#        share, and rank 0, the largest process, assembles the whole model to save the checkpoint at
#        the end): the peak of mpirun's processes against the plan
#   the program's --dry-run prints a plan (JSON on stdout), then a short real run of the same
#   configuration (5 steps) is measured: its peak resident memory (ru_maxrss of the process) minus the
#   dry-run's baseline (the process's peak before the plan, the same code path) must be within 15 %
#   of the plan's total, the plan's stored parameters must equal the run's, and the predicted step
#   time is printed next to the measured one (median of the steps after the second) with their ratio.
#   The comparison can fail: the plan of configuration A at batch 2 is checked to miss the batch-8
#   run's memory by more than 15 %.
#   Then --dry-run of the GPT-3 2.7B recipe (configs/recipes/gpt3-2.7b.json: 32 layers, width 2560,
#   32 heads, sequence 2048, 512 micro-batches per step) prints a plan of about 2.65e9 parameters and exits 0 within seconds without allocating the model (its
#   peak resident memory stays under 512 MiB).
#
#   check_plan.sh GPT_TRAIN ENCODE_DATASET BERT_DATA BERT_PRETRAIN SOURCE_DIR WORK_DIR
set -euo pipefail
gpt=$1 encode=$2 bert_data=$3 bert=$4 src=$5 work=$6
rm -rf "$work"; mkdir -p "$work"
"$encode" --mode gpt -i "$src/data/corpus/valid" -o "$work/train.tok" --vocab "$src/data/gpt2" > /dev/null
"$bert_data" -i "$src/data/corpus/valid" -o "$work/p1.bex" --seq-len 128 --max-predictions 20 --dupe-factor 1 > /dev/null
for tied in false true; do
  cat > "$work/llama-$tied.json" <<JSON
{"model_type": "llama", "vocab_size": 50257, "max_position_embeddings": 256, "hidden_size": 128,
 "intermediate_size": 352, "num_hidden_layers": 6, "num_attention_heads": 4, "num_key_value_heads": 2,
 "tie_word_embeddings": $tied}
JSON
  sed "s|\"gpt-mini.json\"|\"$work/llama-$tied.json\"|" "$src/configs/gpt-mini-train.json" > "$work/llama-$tied-train.json"
done
/usr/bin/python3 - "$gpt" "$bert" "$src" "$work" <<'PY'
import json, os, shutil, statistics, subprocess, sys, time
gpt, bert, src, work = sys.argv[1:5]

def run(args, log):
    """Runs a program; returns (exit status, stdout, peak RSS in bytes, seconds)."""
    t0 = time.time()
    with open(log, "w") as err:
        p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=err, text=True)
        out = p.stdout.read()
        _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    return p.returncode, out, ru.ru_maxrss * 1024.0, time.time() - t0

def plan_of(args, name):
    rc, out, _, _ = run(args + ["--dry-run"], f"{work}/{name}.plan.log")
    assert rc == 0, f"{name}: --dry-run exited {rc}: {open(f'{work}/{name}.plan.log').read()}"
    return json.loads(out.strip().splitlines()[-1])

gpt_common = [gpt, "--config", f"{src}/configs/gpt-mini-train.json", "--train", f"{work}/train.tok", "--valid", f"{work}/train.tok",
              "--layers", "6", "--embd", "128", "--heads", "4", "--positions", "256", "--seq-len", "256",
              "--batch-size", "8", "--eval-every", "0", "--eval-batches", "1", "--log-every", "1", "--threads", "2",
              "--warmup-steps", "1"]
mpirun = []
if shutil.which("mpirun"):
    mpirun = ["mpirun", "-np", "2", "--oversubscribe", "--bind-to", "none"] + (["--allow-run-as-root"] if os.getuid() == 0 else [])
def one_thread(args):
    a = list(args)
    a[a.index("--threads") + 1] = "1"
    return a
# The LLaMA's shape is its model file's; the run's flags are GPT's (the GPT shape flags left out).
def llama_common(tied):
    return [gpt, "--config", f"{work}/llama-{tied}-train.json"] + gpt_common[3:7] + gpt_common[15:]

configs = {
    "A": gpt_common + ["--steps", "5", "--precision", "fp32"],
    "B": gpt_common + ["--steps", "5", "--precision", "bf16", "--recompute", "blocks", "--block-size", "16",
                       "--sparsity", "0.9", "--update-period", "3"],
    "D": llama_common("false") + ["--steps", "5", "--precision", "fp32"],
    "E": llama_common("true") + ["--steps", "5", "--precision", "bf16", "--recompute", "blocks", "--block-size", "16",
                                 "--sparsity", "0.9", "--update-period", "3"],
    # F: the dense GPT of A split over 2 ranks of 1 thread (--tensor-parallel 2 under mpirun), with a
    # checkpoint at the end: rank 0, the largest process, also assembles the whole model to save it
    "F": mpirun + one_thread(gpt_common) + ["--steps", "5", "--precision", "fp32", "--tensor-parallel", "2"]
         if mpirun else None,
    "C": [bert, "--model", f"{src}/configs/bert-small.json", "--train", f"{work}/p1.bex", "--batch-size", "8",
          "--steps", "5", "--eval-every", "0", "--log-every", "1", "--threads", "2", "--slots", "bf16"],
}
failed = []
rows = []
for name, args in configs.items():
    if args is None:
        print(f"{name}: skipped (no mpirun)")
        continue
    plan = plan_of(args, name)
    if name in "DE":
        assert plan["family"] == "llama" and plan["kv_heads"] == 2, f"{name}: not the LLaMA's plan: {plan}"
    rc, out, peak, secs = run(args + ["--out", f"{work}/{name}"], f"{work}/{name}.log")
    assert rc == 0, f"{name}: the run exited {rc}: {open(f'{work}/{name}.log').read()[-2000:]}"
    lines = [json.loads(l) for l in open(f"{work}/{name}/metrics.jsonl") if l.strip()]
    run_line = [l for l in lines if l.get("kind") == "run"][0]
    train = [l for l in lines if l.get("kind") == "train"]
    rows_per_step = plan["run"]["batch_size"] * plan["run"]["accumulation"]
    step = statistics.median(rows_per_step / l["samples_per_s"] for l in train[2:])
    measured = peak - plan["baseline_rss_bytes"]
    total = plan["memory_bytes"]["total"]
    err = (total - measured) / measured
    ratio = plan["predicted_step_seconds"] / step
    rows.append((name, total, measured, err, plan["predicted_step_seconds"], step, ratio))
    if abs(err) > 0.15:
        failed.append(f"{name}: planned {total / 2**20:.1f} MiB, measured {measured / 2**20:.1f} MiB ({100 * err:+.1f} %)")
    if "parameters" in run_line and run_line["parameters"] != plan["stored_parameters"]:
        failed.append(f"{name}: the run has {run_line['parameters']} parameters, the plan {plan['stored_parameters']}")
    plan[name] = {"peak": peak, "baseline": plan["baseline_rss_bytes"]}
    if name == "A":
        peak_a = peak
print("config  planned MiB  measured MiB  error    predicted s  measured s  predicted/measured")
for name, total, measured, err, pred, step, ratio in rows:
    print(f"{name:6}  {total / 2**20:11.1f}  {measured / 2**20:12.1f}  {100 * err:+6.1f} %  {pred:11.3f}  {step:10.3f}  {ratio:.2f}")

# The comparison can fail: the plan at batch 2 does not pass for the batch-8 run.
small = plan_of([a if a != "8" else "2" for a in configs["A"]], "A-small")
assert small["run"]["batch_size"] == 2, small["run"]
miss = abs(small["memory_bytes"]["total"] - (peak_a - small["baseline_rss_bytes"])) / (peak_a - small["baseline_rss_bytes"])
print(f"the plan at batch 2 against the batch-8 run: {100 * miss:.1f} % off")
if miss <= 0.15:
    failed.append(f"the batch-2 plan passes for the batch-8 run (error {100 * miss:.1f} %): the check cannot tell them apart")

# The GPT-3 2.7B recipe: a plan, exit 0, quickly, without the model's memory.
big = [gpt, "--config", f"{src}/configs/recipes/gpt3-2.7b.json", "--threads", "2"]
rc, out, peak, secs = run(big + ["--dry-run"], f"{work}/gpt3.log")
assert rc == 0, f"GPT-3 2.7B --dry-run exited {rc}: {open(f'{work}/gpt3.log').read()}"
p = json.loads(out.strip().splitlines()[-1])
print(f"GPT-3 2.7B recipe: {p['parameters']:.4g} parameters, {p['memory_gib_total']:.1f} GiB planned, "
      f"{p['predicted_step_seconds']:.1f} s per step predicted; the dry run took {secs:.1f} s and {peak / 2**20:.0f} MiB")
if not (2.6e9 < p["parameters"] < 2.7e9):
    failed.append(f"GPT-3 2.7B: {p['parameters']} parameters")
if peak > 512 * 2**20 or secs > 30:
    failed.append(f"GPT-3 2.7B --dry-run: {peak / 2**20:.0f} MiB, {secs:.1f} s")
if failed:
    print("FAIL:\n  " + "\n  ".join(failed))
    sys.exit(1)
PY
