#!/usr/bin/env bash
# ctest examples.tensor_parallel: gpt_train with --tensor-parallel under mpirun.
#   check_tensor_parallel.sh GPT_TRAIN SPARSE_LM ENCODE_DATASET SOURCE_DIR WORK_DIR
#
# 1. Dense GPT: 2 ranks splitting the model (--tensor-parallel 2, 4 rows) against 1 process x 4
#    rows; a dense group starts from the slices of the weights one process initialises with the
#    seed, so every training and validation loss agrees within the tolerance below.
# 2. A grid of 2 tensor-parallel ranks x 2 data replicas (4 ranks, 2 rows each) against the same
#    1 process x 4 rows; and the group with recompute (the blocks' forward sums run again in
#    backward), bf16 products and 2 micro-batches against 1 process with the same options.
# 3. Block-sparse GPT (B = 16): each slice has its own pattern (no one-process run has these
#    blocks), so the grid (2 x 2, 2 rows each) is compared with the group of 2 (4 rows).
# 4. Refusals, each before any step and naming the option: a rank count the group does not divide,
#    checkpoints left on, pipeline stages, --shard-optimizer, pattern updates, and sparse_lm (a
#    program that does not split its model).
#
# Tolerance: the group sums partial products in another order than one process's GEMMs (and the
# replicas their rows' gradients): float rounding, ~1e-7 relative per step, grown by Adam's division
# by sqrt(v) where v is tiny. Losses must agree to 1e-4 (relative), as examples.data_parallel asks.
set -euo pipefail
gpt=$1 s1=$2 encode=$3 src=$4 work=$5
rm -rf "$work" && mkdir -p "$work"
"$encode" --mode gpt -i "$src/data/corpus/valid" -o "$work/data.tok" --vocab "$src/data/gpt2" > /dev/null

mpi_opts=(--oversubscribe --bind-to none)
[ "$(id -u)" = 0 ] && mpi_opts+=(--allow-run-as-root)
export OMP_NUM_THREADS=1

args=(--config "$src/configs/gpt-mini-train.json" --train "$work/data.tok" --valid "$work/data.tok"
      --layers 2 --embd 64 --heads 4 --positions 32 --seq-len 32 --warmup-steps 3 --eval-every 5
      --eval-batches 2 --log-every 1 --dropout 0 --threads 1 --steps 10 --set schedule.total_steps=10
      --set checkpoints=false)
run() {  # run NAME [mpirun ranks or 1] ARGS...
  local name=$1 np=$2
  shift 2
  local cmd=("$gpt")
  [ "$np" -gt 1 ] && cmd=(mpirun -np "$np" "${mpi_opts[@]}" "$gpt")
  "${cmd[@]}" "${args[@]}" --out "$work/$name" "$@" > "$work/$name.json" 2> "$work/$name.err" ||
    { cat "$work/$name.err" >&2; echo "FAIL: $name did not run" >&2; exit 1; }
}
run one 1 --batch-size 4
run tp2 2 --batch-size 4 --tensor-parallel 2
run grid 4 --batch-size 2 --tensor-parallel 2
run one-rb 1 --batch-size 4 --recompute blocks --precision bf16 --accumulation 2
run tp2-rb 2 --batch-size 4 --recompute blocks --precision bf16 --accumulation 2 --tensor-parallel 2
run sparse-tp2 2 --batch-size 4 --tensor-parallel 2 --block-size 16 --sparsity 0.5
run sparse-grid 4 --batch-size 2 --tensor-parallel 2 --block-size 16 --sparsity 0.5

/usr/bin/python3 - "$work" <<'PY'
import json, sys
w = sys.argv[1]
def lines(run):
    return [j for j in map(json.loads, open(f"{w}/{run}/metrics.jsonl")) if j.get("kind") in ("train", "eval")]
fails = []
def same_losses(a, b):
    la, lb = lines(a), lines(b)
    if not la or [(x["kind"], x["step"]) for x in la] != [(x["kind"], x["step"]) for x in lb]:
        fails.append(f"{a} / {b}: the runs logged different steps"); return
    worst = max(abs(x["loss"] - y["loss"]) / abs(x["loss"]) for x, y in zip(la, lb))
    print(f"tensor_parallel: {b} against {a}: losses within {worst:.2e} (relative) over {len(la)} lines")
    if worst > 1e-4: fails.append(f"{b} against {a}: losses differ by {worst:.2e} (relative)")
same_losses("one", "tp2")
same_losses("one", "grid")
same_losses("one-rb", "tp2-rb")
same_losses("sparse-tp2", "sparse-grid")
# the sparse group learns (its own patterns, no reference run): the last training loss is below the first
s = [x["loss"] for x in lines("sparse-tp2") if x["kind"] == "train"]
if not s[-1] < s[0]: fails.append(f"sparse-tp2: the loss did not go down ({s[0]} -> {s[-1]})")
for f in fails: print("FAIL:", f, file=sys.stderr)
sys.exit(1 if fails else 0)
PY

refused() {  # refused NAME PATTERN CMD...: exits non-zero before any step, its message matching PATTERN
  local name=$1 pattern=$2
  shift 2
  if "$@" > "$work/$name.out" 2> "$work/$name.err"; then echo "FAIL: $name was not refused" >&2; exit 1; fi
  grep -q -- "$pattern" "$work/$name.err" || { cat "$work/$name.err" >&2; echo "FAIL: $name: no '$pattern'" >&2; exit 1; }
  if [ -f "$work/$name/metrics.jsonl" ] && grep -q '"kind": *"train"' "$work/$name/metrics.jsonl"; then
    echo "FAIL: $name trained before refusing" >&2; exit 1
  fi
}
mpi3=(mpirun -np 3 "${mpi_opts[@]}")
mpi2=(mpirun -np 2 "${mpi_opts[@]}")
refused odd-ranks "must divide the number of processes" "${mpi3[@]}" "$gpt" "${args[@]}" --batch-size 2 \
  --tensor-parallel 2 --out "$work/odd-ranks"
refused checkpoints "checkpoints=false" "${mpi2[@]}" "$gpt" "${args[@]}" --batch-size 2 --tensor-parallel 2 \
  --set checkpoints=true --out "$work/checkpoints"
refused pipeline "pipeline stages" "${mpi2[@]}" "$gpt" "${args[@]}" --batch-size 2 --accumulation 2 \
  --tensor-parallel 2 --pipeline-stages 2 --out "$work/pipeline"
refused shard "shard_optimizer" "${mpi2[@]}" "$gpt" "${args[@]}" --batch-size 2 --tensor-parallel 2 \
  --shard-optimizer --out "$work/shard"
refused updates "pattern updates" "${mpi2[@]}" "$gpt" "${args[@]}" --batch-size 2 --tensor-parallel 2 \
  --block-size 16 --update-period 2 --out "$work/updates"
refused s1 "tensor_parallel (--tensor-parallel) 2" "$s1" --config "$src/configs/s1-tiny-train.json" \
  --train "$work/data.tok" --vocab 50257 --steps 2 --tensor-parallel 2 --out "$work/s1"
echo "tensor_parallel: passed"
