#!/usr/bin/env bash
# ctest examples.tensor_parallel_bert: bert_pretrain with --tensor-parallel under mpirun.
#   check_tensor_parallel_bert.sh BERT_PRETRAIN BERT_DATA SOURCE_DIR WORK_DIR
#
# 1. Dense BERT (bert-tiny's shape, LAMB: the trust ratios from the whole tensors' norms, summed
#    over the group): 2 ranks splitting the encoder (--tensor-parallel 2, 8 rows) and a grid of 2
#    groups x 2 data replicas (4 ranks, 4 rows each) against 1 process x 8 rows, no dropout: every
#    training and validation loss (MLM + NSP) within 1e-4 (relative).
# 2. Block-sparse (B = 16, half the blocks): each slice draws its own pattern, so the grid is
#    compared with the group of 2.
# 3. Checkpoints are the whole model's: the group's step-5 checkpoint resumed by one process logs one
#    process's losses; the grid's block-sparse checkpoint resumed by the group of 2 logs the group's;
#    --init-from under the group starts from the slices of a whole checkpoint (one process's losses
#    with the same --init-from).
# 4. Dynamic sparsity (RigL every 2 steps, each rank its own slices): the grid logs the group's
#    losses and pattern updates.
set -euo pipefail
bert=$1 bert_data=$2 src=$3 work=$4
rm -rf "$work" && mkdir -p "$work"
"$bert_data" -i "$src/data/corpus/valid" -o "$work/p1.bex" --seq-len 64 --max-predictions 10 --dupe-factor 1 > /dev/null

prog=$bert
# shellcheck source=tensor_parallel_runs.sh
source "$(dirname "$0")/tensor_parallel_runs.sh"
args=(--model "$src/configs/bert-tiny.json" --train "$work/p1.bex" --valid "$work/p1.bex" --lr 2e-3
      --eval-batches 2 --eval-every 5 --log-every 1 --dropout 0 --threads 1 --steps 10
      --set schedule.total_steps=10)
sparse=(--block-size 16 --sparsity 0.5)
run one 1 --batch-size 8
run tp2 2 --batch-size 8 --tensor-parallel 2
run grid 4 --batch-size 4 --tensor-parallel 2
run sparse-tp2 2 --batch-size 8 --tensor-parallel 2 "${sparse[@]}"
run sparse-grid-half 4 --batch-size 4 --tensor-parallel 2 "${sparse[@]}" --steps 5
run tp2-half 2 --batch-size 8 --tensor-parallel 2 --steps 5
resume one-from-tp2 tp2-half 1 --batch-size 8
resume sparse-tp2-from-grid sparse-grid-half 2 --batch-size 8 --tensor-parallel 2 "${sparse[@]}"
run one-init 1 --batch-size 8 --steps 5 --init-from "$work/tp2-half/checkpoints"
run tp2-init 2 --batch-size 8 --steps 5 --tensor-parallel 2 --init-from "$work/tp2-half/checkpoints"
run dyn-tp2 2 --batch-size 8 --tensor-parallel 2 "${sparse[@]}" --update-period 2 \
  --set sparsity.update.total_steps=10
run dyn-grid 4 --batch-size 4 --tensor-parallel 2 "${sparse[@]}" --update-period 2 \
  --set sparsity.update.total_steps=10

compare_runs <<'PY'
same_losses("one", "tp2")
same_losses("one", "grid")
same_losses("one", "one-from-tp2")
same_losses("sparse-tp2", "sparse-tp2-from-grid")
same_losses("one-init", "tp2-init")
same_losses("dyn-tp2", "dyn-grid")
pruned = {run: {k: u["pruned"] for k, u in updates(run).items()} for run in ("dyn-tp2", "dyn-grid")}
if sorted(pruned["dyn-tp2"]) != [2, 4, 6, 8] or pruned["dyn-tp2"] != pruned["dyn-grid"]:
    fails.append(f"dyn: blocks pruned {pruned['dyn-tp2']} (group) and {pruned['dyn-grid']} (grid)")
for r in ("one-from-tp2", "sparse-tp2-from-grid"):  # the resumes did resume, at step 5
    if resumed_at(r) != [0, 5]: fails.append(f"{r}: resumed_from {resumed_at(r)}")
s = [x["loss"] for x in lines("sparse-tp2") if x["kind"] == "train"]
if not s[-1] < s[0]: fails.append(f"sparse-tp2: the loss did not go down ({s[0]} -> {s[-1]})")
PY

echo "tensor_parallel_bert: passed"
