#!/usr/bin/env bash
# ctest examples.tensor_parallel_s1: sparse_lm (the S1 model, s1-tiny's shape) with --tensor-parallel
# under mpirun.
#   check_tensor_parallel_s1.sh SPARSE_LM ENCODE_DATASET SOURCE_DIR WORK_DIR
#
# 1. Dense S1 (--block-size 0 --update-period 0): 2 ranks splitting every block (--tensor-parallel 2, 4 rows) and a
#    grid of 2 groups x 2 data replicas (4 ranks, 2 rows each) against 1 process x 4 rows: every
#    training and validation loss within 1e-4 (relative). The factorised embedding, its
#    up-projection and the head stay whole on every rank.
# 2. Block-sparse S1 (B = 4, RigL every 5 steps): each slice allocates and draws its own blocks and
#    updates them on its own, so the grid is compared with the group of 2; its loss goes down.
# 3. Checkpoints are the whole model's: the dense group's step-5 checkpoint resumed by one process
#    logs one process's losses for steps 6-10; the block-sparse grid's step-5 checkpoint resumed by
#    the group of 2 logs the group's.
set -euo pipefail
s1=$1 encode=$2 src=$3 work=$4
rm -rf "$work" && mkdir -p "$work"
"$encode" --mode gpt -i "$src/data/corpus/valid" -o "$work/data.tok" --vocab "$src/data/gpt2" > /dev/null

prog=$s1
# shellcheck source=tensor_parallel_runs.sh
source "$(dirname "$0")/tensor_parallel_runs.sh"
args=(--config "$src/configs/s1-tiny-train.json" --train "$work/data.tok" --valid "$work/data.tok" --vocab 50257
      --steps 10 --cooldown-steps 6 --threads 1 --set eval_every=5 --set checkpoint_every=5)
# a run directory as it was after the step-5 checkpoint (the later one removed), to resume
cut_at_5() {
  cp -r "$work/$1" "$work/$2"
  rm -rf "$work/$2/checkpoints/step-000010"
  echo "step-000005" > "$work/$2/checkpoints/latest"
}
run one 1 --batch-size 4 --block-size 0 --update-period 0
run tp2 2 --batch-size 4 --block-size 0 --update-period 0 --tensor-parallel 2
run grid 4 --batch-size 2 --block-size 0 --update-period 0 --tensor-parallel 2
run sparse-tp2 2 --batch-size 4 --tensor-parallel 2
run sparse-grid 4 --batch-size 2 --tensor-parallel 2
cut_at_5 tp2 one-from-tp2
run one-from-tp2 1 --batch-size 4 --block-size 0 --update-period 0 --resume
cut_at_5 sparse-grid sparse-tp2-from-grid
run sparse-tp2-from-grid 2 --batch-size 4 --tensor-parallel 2 --resume

compare_runs <<'PY'
same_losses("one", "tp2")
same_losses("one", "grid")
same_losses("one", "one-from-tp2")
same_losses("sparse-tp2", "sparse-grid")
same_losses("sparse-tp2", "sparse-tp2-from-grid")
for r in ("one-from-tp2", "sparse-tp2-from-grid"):
    if resumed_at(r)[-1] != 5: fails.append(f"{r}: resumed_from {resumed_at(r)}")
u, v = updates("sparse-tp2"), updates("sparse-grid")
if sorted(u) != [5] or sorted(v) != sorted(u) or any(u[k]["pruned"] != v[k]["pruned"] for k in u):
    fails.append(f"sparse: pattern updates {u} (group) and {v} (grid)")
s = [x["loss"] for x in lines("sparse-tp2") if x["kind"] == "train"]
if not s[-1] < s[0]: fails.append(f"sparse-tp2: the loss did not go down ({s[0]} -> {s[-1]})")
PY
# 4. The plan of a split S1 run (--dry-run, one rank's share): its parameters are the group's run's
#    per rank, dense and block-sparse, and its whole model's are one process's.
plan one 1 --batch-size 4 --block-size 0 --update-period 0
plan tp2 2 --batch-size 4 --block-size 0 --update-period 0 --tensor-parallel 2
plan sparse-tp2 2 --batch-size 4 --tensor-parallel 2
compare_runs <<'PY'
def plan(n): return json.loads(open(f"{w}/{n}.plan").read().strip().splitlines()[-1])
def params(run): return next(j for j in map(json.loads, open(f"{w}/{run}/metrics.jsonl")) if j.get("kind") == "run")["parameters"]
for name in ("one", "tp2", "sparse-tp2"):
    print(f"plan {name}: {plan(name)['stored_parameters']:.0f} parameters per rank, the run {params(name)}")
    if plan(name)["stored_parameters"] != params(name):
        fails.append(f"plan {name}: {plan(name)['stored_parameters']} parameters, the run holds {params(name)}")
if plan("tp2")["whole_parameters"] != plan("one")["parameters"]:
    fails.append(f"plan tp2: whole model {plan('tp2')['whole_parameters']}, one process's {plan('one')['parameters']}")
PY
echo "tensor_parallel_s1: passed"
