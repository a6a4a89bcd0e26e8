#!/usr/bin/env bash
# ctest examples.tensor_parallel: gpt_train with --tensor-parallel under mpirun.
#   check_tensor_parallel.sh GPT_TRAIN ENCODE_DATASET SOURCE_DIR WORK_DIR
#
# 1. Dense GPT: 2 ranks splitting the model (--tensor-parallel 2, 4 rows) against 1 process x 4
#    rows; a dense group starts from the slices of the weights one process initialises with the
#    seed, so every training and validation loss agrees within the tolerance below.
# 2. A grid of 2 tensor-parallel ranks x 2 data replicas (4 ranks, 2 rows each) against the same
#    1 process x 4 rows; and the group with recompute (the blocks' forward sums run again in
#    backward), bf16 products and 2 micro-batches against 1 process with the same options; and
#    per-tensor clipping (each tensor by its whole norm: the slices' squares summed over the group);
#    and the group with its weights, gradients and Adam slots offloaded to files (--offload) against
#    the group in memory (the same arithmetic: 1e-7), also saved at step 5 and resumed offloaded.
# 3. Block-sparse GPT (B = 16): each slice has its own pattern (no one-process run has these
#    blocks), so the grid (2 x 2, 2 rows each) is compared with the group of 2 (4 rows).
# 4. Checkpoints are the whole model's (train/tensor_checkpoint.hpp): the group saves at step 5 and
#    resumes to step 10 with the losses of its uninterrupted run (1e-7); the same checkpoint resumed
#    by one process, and a one-process checkpoint resumed by the group, continue with the losses of
#    one process (1e-4); block-sparse, the grid's (4 ranks) checkpoint resumed by one process and by
#    the group of 2 continues with the group's losses; --init-from under the group starts from the
#    whole checkpoint's slices (losses of one process with --init-from); a one-process block-sparse
#    checkpoint whose blocks do not split evenly is refused naming the weight, its files kept.
# 5. Dynamic sparsity (RigL every 2 steps): each rank updates its own slices; the grid logs the
#    group's losses and update totals (the data replicas of a slice make the same update), the
#    totals keep the whole model's block count, and a run resumed from the group's step-5
#    checkpoint logs the uninterrupted run's losses and explored fractions (1e-7: the explored maps
#    are assembled for the save and sliced again on resume); one process continues it.
# 6. Refusals, each before any step and naming the option: a rank count the group does not divide,
#    pipeline stages and --shard-optimizer. (S1's sparse_lm: examples/check_tensor_parallel_s1.sh.)
# 7. The plan of a split run (below).
# 8. LLaMA (below).
#
# Tolerance: the group sums partial products in another order than one process's GEMMs (and the
# replicas their rows' gradients): float rounding, ~1e-7 relative per step, grown by Adam's division
# by sqrt(v) where v is tiny. Losses must agree to 1e-4 (relative), as examples.data_parallel asks.
set -euo pipefail
gpt=$1 encode=$2 src=$3 work=$4
rm -rf "$work" && mkdir -p "$work"
"$encode" --mode gpt -i "$src/data/corpus/valid" -o "$work/data.tok" --vocab "$src/data/gpt2" > /dev/null

prog=$gpt
# shellcheck source=tensor_parallel_runs.sh
source "$(dirname "$0")/tensor_parallel_runs.sh"
args=(--config "$src/configs/gpt-mini-train.json" --train "$work/data.tok" --valid "$work/data.tok"
      --layers 2 --embd 64 --heads 4 --positions 32 --seq-len 32 --warmup-steps 3 --eval-every 5
      --eval-batches 2 --log-every 1 --dropout 0 --threads 1 --steps 10 --set schedule.total_steps=10
      --set checkpoints=false)
run one 1 --batch-size 4
run tp2 2 --batch-size 4 --tensor-parallel 2
run grid 4 --batch-size 2 --tensor-parallel 2
run one-rb 1 --batch-size 4 --recompute blocks --precision bf16 --accumulation 2
run tp2-rb 2 --batch-size 4 --recompute blocks --precision bf16 --accumulation 2 --tensor-parallel 2
run sparse-tp2 2 --batch-size 4 --tensor-parallel 2 --block-size 16 --sparsity 0.5
run sparse-grid 4 --batch-size 2 --tensor-parallel 2 --block-size 16 --sparsity 0.5
run one-pt 1 --batch-size 4 --clip per_tensor --max-norm 0.05
run tp2-pt 2 --batch-size 4 --clip per_tensor --max-norm 0.05 --tensor-parallel 2
run tp2-off 2 --batch-size 4 --tensor-parallel 2 --offload "$work"

# 4. checkpoints: a first half of 5 steps (the schedule is the 10-step runs'), then resumes
ck=(--set checkpoints=true --steps 5)
run tp2-half 2 --batch-size 4 --tensor-parallel 2 "${ck[@]}"
run one-half 1 --batch-size 4 "${ck[@]}"
run sparse-grid-half 4 --batch-size 2 --tensor-parallel 2 --block-size 16 --sparsity 0.5 "${ck[@]}"
resume tp2-resumed tp2-half 2 --batch-size 4 --tensor-parallel 2
run tp2-off-half 2 --batch-size 4 --tensor-parallel 2 --offload "$work" "${ck[@]}"
resume tp2-off-resumed tp2-off-half 2 --batch-size 4 --tensor-parallel 2 --offload "$work"
resume one-from-tp2 tp2-half 1 --batch-size 4
resume tp2-from-one one-half 2 --batch-size 4 --tensor-parallel 2
resume sparse-one-from-grid sparse-grid-half 1 --batch-size 4 --block-size 16 --sparsity 0.5
resume sparse-tp2-from-grid sparse-grid-half 2 --batch-size 4 --tensor-parallel 2 --block-size 16 --sparsity 0.5
init=(--init-from "$work/one-half/checkpoints/step-000005" --steps 5)
run one-init 1 --batch-size 4 "${init[@]}"
run tp2-init 2 --batch-size 4 --tensor-parallel 2 "${init[@]}"

# 5. dynamic sparsity
dyn=(--block-size 16 --sparsity 0.5 --update-period 2
     --set sparsity.update.total_steps=10)  # the prune schedule of the 10-step runs
run dyn-tp2 2 --batch-size 4 --tensor-parallel 2 "${dyn[@]}"
run dyn-grid 4 --batch-size 2 --tensor-parallel 2 "${dyn[@]}"
run dyn-half 2 --batch-size 4 --tensor-parallel 2 "${dyn[@]}" "${ck[@]}"
resume dyn-resumed dyn-half 2 --batch-size 4 --tensor-parallel 2 "${dyn[@]}"
resume dyn-one-from-tp2 dyn-half 1 --batch-size 4 "${dyn[@]}"

compare_runs <<'PY'
same_losses("one", "tp2")
same_losses("one", "grid")
same_losses("one-rb", "tp2-rb")
same_losses("sparse-tp2", "sparse-grid")
same_losses("one-pt", "tp2-pt")  # per-tensor clipping by the whole tensors' norms
same_losses("tp2", "tp2-off", 1e-7)  # offloaded state: the same arithmetic, streamed through files
same_losses("tp2", "tp2-off-resumed", 1e-7)  # an offloaded group's checkpoint, resumed offloaded
for r in ("tp2-off", "tp2-off-resumed"):  # the state was in files: every training line reports its I/O
    if not all("offload" in x for x in lines(r) if x["kind"] == "train"): fails.append(f"{r}: a line without 'offload'")
same_losses("tp2", "tp2-resumed", 1e-7)  # the whole state back in the same split: the same arithmetic
same_losses("one", "one-from-tp2")
same_losses("one", "tp2-from-one")
same_losses("sparse-tp2", "sparse-one-from-grid")
same_losses("sparse-tp2", "sparse-tp2-from-grid")
same_losses("one-init", "tp2-init")
same_losses("dyn-tp2", "dyn-grid")
same_losses("dyn-tp2", "dyn-resumed", 1e-7)
u = updates("dyn-tp2")
if sorted(u) != [2, 4, 6, 8]: fails.append(f"dyn-tp2: pattern updates at steps {sorted(u)}, not 2, 4, 6, 8")
run_line = next(j for j in map(json.loads, open(f"{w}/dyn-tp2/metrics.jsonl")) if j.get("kind") == "run")
for k, x in u.items():  # the group's totals: the whole model's blocks, some pruned and regrown
    if x["nnz"] != run_line["sparse_blocks"] * 2 or x["pruned"] == 0 or x["pruned"] != x["regrown"]:
        fails.append(f"dyn-tp2: update at step {k}: {x} (one rank holds {run_line['sparse_blocks']} blocks)")
for other in ("dyn-grid", "dyn-resumed"):
    v = updates(other)
    for k in sorted(set(u) & set(v)):
        if (u[k]["pruned"], u[k]["explored"]) != (v[k]["pruned"], v[k]["explored"]):
            fails.append(f"{other}: update at step {k} {v[k]} differs from dyn-tp2's {u[k]}")
    if sorted(v) != sorted(u): fails.append(f"{other}: pattern updates at {sorted(v)}")  # (a resume logs all)
if sorted(updates("dyn-one-from-tp2")) != [2, 4, 6, 8]: fails.append("dyn-one-from-tp2: not updated after the resume")
for r in ("tp2-resumed", "tp2-off-resumed", "one-from-tp2", "sparse-one-from-grid", "dyn-resumed", "dyn-one-from-tp2"):  # the resumes did resume, at step 5
    if resumed_at(r) != [0, 5]: fails.append(f"{r}: resumed_from {resumed_at(r)}")
# the sparse group learns (its own patterns, no reference run): the last training loss is below the first
s = [x["loss"] for x in lines("sparse-tp2") if x["kind"] == "train"]
if not s[-1] < s[0]: fails.append(f"sparse-tp2: the loss did not go down ({s[0]} -> {s[-1]})")
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
refused pipeline "pipeline stages" "${mpi2[@]}" "$gpt" "${args[@]}" --batch-size 2 --accumulation 2 \
  --tensor-parallel 2 --pipeline-stages 2 --out "$work/pipeline"
refused shard "shard_optimizer" "${mpi2[@]}" "$gpt" "${args[@]}" --batch-size 2 --tensor-parallel 2 \
  --shard-optimizer --out "$work/shard"
# a one-process block-sparse checkpoint: its blocks need not split evenly over the group's slices
"$gpt" "${args[@]}" --batch-size 4 --block-size 16 --sparsity 0.5 "${ck[@]}" --out "$work/sparse-one-half" \
  > /dev/null 2> "$work/sparse-one-half.err" || { cat "$work/sparse-one-half.err" >&2; exit 1; }
if "${mpi2[@]}" "$gpt" "${args[@]}" --batch-size 4 --block-size 16 --sparsity 0.5 --tensor-parallel 2 --steps 10 \
  --set checkpoints=true --resume --out "$work/sparse-one-half" > /dev/null 2> "$work/uneven.err"; then
  echo "FAIL: uneven: a one-process pattern with 10 and 12 blocks in the slices of h.0.attn.c_attn resumed split" >&2
  exit 1
fi
grep -q "take_slices: 'h\..*blocks in slice" "$work/uneven.err" ||
  { cat "$work/uneven.err" >&2; echo "FAIL: uneven: no message naming the weight and the slice" >&2; exit 1; }
[ -f "$work/sparse-one-half/checkpoints/step-000005/model.safetensors" ] ||
  { echo "FAIL: uneven: the refused resume lost the checkpoint" >&2; exit 1; }

# 7. The plan of a split run (--dry-run; train/plan.hpp): one rank's share. Its parameters are the
#    group's run's per rank (the run line), the whole model's those of one process's plan, and the
#    difference is half of the blocks' split projections (weights and column-split biases):
#    L (12 C^2 + 7 C) / 2 for GPT; a grid of 4 ranks plans 2 data replicas; a memory budget under
#    the group is checked against the split plan.
plan one 1 --batch-size 4
plan tp2 2 --batch-size 4 --tensor-parallel 2
plan grid 4 --batch-size 2 --tensor-parallel 2
plan sparse-tp2 2 --batch-size 4 --tensor-parallel 2 --block-size 16 --sparsity 0.5
refused budget "memory budget 0.001 GiB" "${mpi2[@]}" "$gpt" "${args[@]}" --batch-size 4 --tensor-parallel 2 \
  --memory-budget 0.001 --out "$work/budget"
/usr/bin/python3 - "$work" <<'PY'
import json, sys
w = sys.argv[1]
def plan(n): return json.loads(open(f"{w}/{n}.plan").read().strip().splitlines()[-1])
def params(run): return next(j for j in map(json.loads, open(f"{w}/{run}/metrics.jsonl")) if j.get("kind") == "run")["parameters"]
one, tp2, grid, sparse = plan("one"), plan("tp2"), plan("grid"), plan("sparse-tp2")
L, C = 2, 64
fails = []
if tp2["run"]["tensor_parallel"] != 2 or grid["run"]["data_replicas"] != 2:
    fails.append(f"the split plans: tensor_parallel {tp2['run']['tensor_parallel']}, grid's replicas {grid['run']['data_replicas']}")
if tp2["stored_parameters"] != params("tp2") or sparse["stored_parameters"] != params("sparse-tp2"):
    fails.append(f"per rank: planned {tp2['stored_parameters']} / {sparse['stored_parameters']}, "
                 f"the runs hold {params('tp2')} / {params('sparse-tp2')}")
if tp2["whole_parameters"] != one["parameters"] or one["stored_parameters"] != params("one"):
    fails.append(f"whole model: {tp2['whole_parameters']} planned split, {one['parameters']} in one process's plan")
if one["stored_parameters"] - tp2["stored_parameters"] != L * (12 * C * C + 7 * C) / 2:
    fails.append(f"the split plan holds {one['stored_parameters'] - tp2['stored_parameters']} parameters fewer, "
                 f"not half the split projections' {L * (12 * C * C + 7 * C)}")
if tp2["memory_bytes"]["checkpoint_gather"] != 0:  # these runs write no checkpoint (checkpoints=false)
    fails.append(f"a run without checkpoints plans {tp2['memory_bytes']['checkpoint_gather']} bytes to gather one")
print(f"plans: one process {one['stored_parameters']:.0f} parameters, a rank of 2 {tp2['stored_parameters']:.0f}; "
      f"{tp2['tensor_sum_bytes_per_step'] / 1e6:.2f} MB summed per step")
for f in fails: print("FAIL:", f, file=sys.stderr)
sys.exit(1 if fails else 0)
PY

# 8. LLaMA ("model_type": "llama": 4 query heads over 2 key/value heads, each rank holding its query
#    heads' key/value heads; SwiGLU; untied head): the group of 2 against one process (a dense group
#    starts from one process's weights); block-sparse (B = 16), the group's step-5 checkpoint resumed
#    by one process continues with the group's losses; the plan's parameters per rank are the run's.
cat > "$work/llama.json" <<JSON
{"model_type": "llama", "vocab_size": 50257, "max_position_embeddings": 32, "hidden_size": 64,
 "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2}
JSON
sed "s|\"gpt-mini.json\"|\"$work/llama.json\"|" "$src/configs/gpt-mini-train.json" > "$work/llama-train.json"
args=(--config "$work/llama-train.json" --train "$work/data.tok" --valid "$work/data.tok" --seq-len 32
      --warmup-steps 3 --eval-every 5 --eval-batches 2 --log-every 1 --dropout 0 --threads 1 --steps 10
      --set schedule.total_steps=10 --set checkpoints=false)
run llama-one 1 --batch-size 4
run llama-tp2 2 --batch-size 4 --tensor-parallel 2
run llama-sparse-tp2 2 --batch-size 4 --tensor-parallel 2 --block-size 16 --sparsity 0.5
run llama-sparse-half 2 --batch-size 4 --tensor-parallel 2 --block-size 16 --sparsity 0.5 "${ck[@]}"
resume llama-sparse-one-from-tp2 llama-sparse-half 1 --batch-size 4 --block-size 16 --sparsity 0.5
plan llama-tp2 2 --batch-size 4 --tensor-parallel 2
compare_runs <<'PY'
same_losses("llama-one", "llama-tp2")
same_losses("llama-sparse-tp2", "llama-sparse-one-from-tp2")
if resumed_at("llama-sparse-one-from-tp2") != [0, 5]:
    fails.append(f"llama-sparse-one-from-tp2: resumed_from {resumed_at('llama-sparse-one-from-tp2')}")
run_line = lambda r: next(j for j in map(json.loads, open(f"{w}/{r}/metrics.jsonl")) if j.get("kind") == "run")
plan = json.loads(open(f"{w}/llama-tp2.plan").read().strip().splitlines()[-1])
if plan["family"] != "llama" or plan["stored_parameters"] != run_line("llama-tp2")["parameters"]:
    fails.append(f"llama-tp2: the plan ({plan['family']}) holds {plan['stored_parameters']} parameters per rank, "
                 f"the run {run_line('llama-tp2')['parameters']}")
if not plan["stored_parameters"] < run_line("llama-one")["parameters"]:
    fails.append("llama-tp2: a rank holds no fewer parameters than one process")
s = [x["loss"] for x in lines("llama-sparse-tp2") if x["kind"] == "train"]
if not s[-1] < s[0]: fails.append(f"llama-sparse-tp2: the loss did not go down ({s[0]} -> {s[-1]})")
PY
echo "tensor_parallel: passed"
