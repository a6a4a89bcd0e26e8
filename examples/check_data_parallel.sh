#!/usr/bin/env bash
# ctest examples.data_parallel: data-parallel training under mpirun gives the single-process result.
#   check_data_parallel.sh GPT_TRAIN SPARSE_LM ENCODE_DATASET SOURCE_DIR WORK_DIR BERT_DATA BERT_PRETRAIN BERT_CLASSIFY
#                          BERT_SQUAD
#
# 1. GPT, dense: 2 ranks x 2 rows per rank against 1 process x 4 rows (the same global batch):
#    every training and validation loss, and the final weights, agree within the tolerance below.
# 2. Sharded optimiser state (--shard-optimizer, ZeRO-1): a 2-rank sharded run stopped at step 20
#    and resumed with --resume (same P) reproduces the uninterrupted unsharded 2-rank run bit for
#    bit (weights and the whole optimiser state of the final checkpoint); its gathered step-20
#    checkpoint resumed by 1 process x 4 rows goes on as the 2-rank run does (within the tolerance).
# 3. S1 sparse LM with RigL pattern updates: 2 ranks x 2 rows against 1 process with 2 micro-batches
#    of 2 rows (rank r's rows are micro-batch r, and the pooled dense-gradient scores are summed the
#    same way): the same pattern updates (pruned and regrown blocks, explored fractions), losses
#    within the tolerance, identical block patterns at the end.
# 4. BERT pre-training (MLM + NSP, LAMB): 2 ranks x 4 sequences against 1 process x 8, losses and
#    weights within the tolerance; with --shard-optimizer bit-identical to the unsharded 2 ranks.
# 5. BERT fine-tuning (bert_classify on a two-class set from the bundled text): 2 ranks x 4 against
#    1 process x 8, losses and weights within the tolerance, sharded = unsharded bit for bit;
#    rank 0 alone writes eval.json. bert_squad on the bundled SQuAD set: 2 ranks x 4 against
#    1 process x 8, losses and weights within the tolerance, predictions.json from rank 0.
#    bert_classify pruned to block-sparse from section 4's checkpoint with pattern updates every 3
#    steps (RigL, whose scores are the ranks' summed dense gradients): updates after steps 3 and 6
#    on 2 ranks, sharded = unsharded bit for bit (weights, patterns, optimiser state, explored maps).
# 6. Bad launches: ranks given different configs stop at once with an error naming the rank; a
#    rank killed (SIGKILL) mid-run ends the whole job with an error, and its last checkpoint
#    resumes.
#
# Tolerance: the replicas sum their gradients in another order than one process's GEMMs do (rank
# sums, then one addition), so results differ by float rounding: ~1e-7 relative per step, grown by
# Adam's division by sqrt(v) where v is tiny. Losses must agree to 1e-4 (relative) and weights to
# 1e-3 of each tensor's largest magnitude.
set -euo pipefail
gpt=$1 s1=$2 encode=$3 src=$4 work=$5 bert_data=$6 bert=$7 classify=$8 squad=$9
rm -rf "$work" && mkdir -p "$work"
"$encode" --mode gpt -i "$src/data/corpus/valid" -o "$work/data.tok" --vocab "$src/data/gpt2" > /dev/null

mpi_opts=(--oversubscribe --bind-to none)
[ "$(id -u)" = 0 ] && mpi_opts+=(--allow-run-as-root)
mpi=(mpirun -np 2 "${mpi_opts[@]}")
export OMP_NUM_THREADS=1

gpt_args=(--config "$src/configs/gpt-mini-train.json" --train "$work/data.tok" --valid "$work/data.tok"
          --layers 2 --embd 32 --heads 2 --positions 32 --seq-len 32 --warmup-steps 5 --eval-every 10
          --eval-batches 4 --log-every 1 --checkpoint-every 10 --dropout 0 --threads 1 --set schedule.total_steps=30)
"$gpt" "${gpt_args[@]}" --steps 30 --batch-size 4 --out "$work/gpt-1" > "$work/gpt-1.json" 2> "$work/gpt-1.err" ||
  { cat "$work/gpt-1.err" >&2; exit 1; }
"${mpi[@]}" "$gpt" "${gpt_args[@]}" --steps 30 --batch-size 2 --out "$work/gpt-2" > "$work/gpt-2.json" \
  2> "$work/gpt-2.err" || { cat "$work/gpt-2.err" >&2; exit 1; }
grep -q "data parallel over MPI, 2 ranks" "$work/gpt-2.err" || { echo "FAIL: no data-parallel message" >&2; exit 1; }
# sharded, stopped at 20, resumed to 30 (2 ranks); and the step-20 checkpoint resumed by one process x 4 rows
"${mpi[@]}" "$gpt" "${gpt_args[@]}" --shard-optimizer --steps 20 --batch-size 2 --out "$work/gpt-2r" > /dev/null \
  2> "$work/gpt-2r.err" || { cat "$work/gpt-2r.err" >&2; exit 1; }
cp -r "$work/gpt-2r" "$work/gpt-1r"
"${mpi[@]}" "$gpt" "${gpt_args[@]}" --shard-optimizer --steps 30 --batch-size 2 --out "$work/gpt-2r" --resume \
  > /dev/null 2> "$work/gpt-2r.err" || { cat "$work/gpt-2r.err" >&2; exit 1; }
"$gpt" "${gpt_args[@]}" --steps 30 --batch-size 4 --out "$work/gpt-1r" --resume > /dev/null 2> "$work/gpt-1r.err" ||
  { cat "$work/gpt-1r.err" >&2; exit 1; }

s1_args=(--config "$src/configs/s1-tiny-train.json" --train "$work/data.tok" --valid "$work/data.tok" --vocab 50257
         --steps 24 --warmup-steps 4 --cooldown-steps 20 --update-period 5 --set eval_every=8 --set checkpoint_every=8
         --set eval_batches=3
         --threads 1)
"$s1" "${s1_args[@]}" --batch-size 2 --set trainer.accumulation.steps=2 --out "$work/s1-1" > /dev/null \
  2> "$work/s1-1.err" || { cat "$work/s1-1.err" >&2; exit 1; }
"${mpi[@]}" "$s1" "${s1_args[@]}" --batch-size 2 --out "$work/s1-2" > /dev/null 2> "$work/s1-2.err" ||
  { cat "$work/s1-2.err" >&2; exit 1; }

"$bert_data" -i "$src/data/corpus/valid" -o "$work/bert.bex" --seq-len 64 --max-predictions 10 > /dev/null
bert_args=(--model "$src/configs/bert-tiny.json" --train "$work/bert.bex" --valid "$work/bert.bex" --steps 10
           --eval-every 5 --eval-batches 2 --log-every 1 --checkpoint-every 5 --dropout 0 --threads 1)
"$bert" "${bert_args[@]}" --batch-size 8 --out "$work/bert-1" > /dev/null 2> "$work/bert-1.err" ||
  { cat "$work/bert-1.err" >&2; exit 1; }
"${mpi[@]}" "$bert" "${bert_args[@]}" --batch-size 4 --out "$work/bert-2" > /dev/null 2> "$work/bert-2.err" ||
  { cat "$work/bert-2.err" >&2; exit 1; }
"${mpi[@]}" "$bert" "${bert_args[@]}" --batch-size 4 --shard-optimizer --out "$work/bert-2s" > /dev/null \
  2> "$work/bert-2s.err" || { cat "$work/bert-2s.err" >&2; exit 1; }
# fine-tuning: 80 sentences of each source of the bundled text, labelled by it
/usr/bin/python3 "$(dirname "$0")/make_classify_set.py" "$src/data/corpus/valid" "$work/cls-train.jsonl" \
  "$work/cls-test.jsonl" 80 5
cls_args=(--model "$src/configs/bert-tiny.json" --train "$work/cls-train.jsonl" --test "$work/cls-test.jsonl"
          --max-seq 64 --steps 8 --lr 2e-4 --log-every 1 --checkpoint-every 4 --dropout 0 --threads 1)
"$classify" "${cls_args[@]}" --batch-size 8 --out "$work/cls-1" > /dev/null 2> "$work/cls-1.err" ||
  { cat "$work/cls-1.err" >&2; exit 1; }
"${mpi[@]}" "$classify" "${cls_args[@]}" --batch-size 4 --out "$work/cls-2" > /dev/null 2> "$work/cls-2.err" ||
  { cat "$work/cls-2.err" >&2; exit 1; }
grep -q "bert_classify: data parallel over MPI, 2 ranks" "$work/cls-2.err" ||
  { echo "FAIL: bert_classify: no data-parallel message" >&2; cat "$work/cls-2.err" >&2; exit 1; }
"${mpi[@]}" "$classify" "${cls_args[@]}" --batch-size 4 --shard-optimizer --out "$work/cls-2s" > /dev/null \
  2> "$work/cls-2s.err" || { cat "$work/cls-2s.err" >&2; exit 1; }
dyn_args=(--init-from "$work/bert-1" --block-size 16 --sparsity 0.5 --update-period 3 --batch-size 4)
"${mpi[@]}" "$classify" "${cls_args[@]}" "${dyn_args[@]}" --out "$work/cls-2d" > /dev/null 2> "$work/cls-2d.err" ||
  { cat "$work/cls-2d.err" >&2; exit 1; }
"${mpi[@]}" "$classify" "${cls_args[@]}" "${dyn_args[@]}" --shard-optimizer --out "$work/cls-2ds" > /dev/null \
  2> "$work/cls-2ds.err" || { cat "$work/cls-2ds.err" >&2; exit 1; }
[ "$(grep -c 'held-out accuracy' "$work/cls-2.err")" = 1 ] && [ -f "$work/cls-2/eval.json" ] ||
  { echo "FAIL: bert_classify under mpirun: rank 0 alone should evaluate" >&2; exit 1; }
sq_args=(--model "$src/configs/bert-tiny.json" --train "$src/data/squad/train-v1.1.json"
         --predict "$src/data/squad/dev-v1.1.json" --max-seq 128 --doc-stride 64 --steps 6 --lr 2e-4 --log-every 1
         --dropout 0 --threads 1)
"$squad" "${sq_args[@]}" --batch-size 8 --out "$work/sq-1" > /dev/null 2> "$work/sq-1.err" ||
  { cat "$work/sq-1.err" >&2; exit 1; }
"${mpi[@]}" "$squad" "${sq_args[@]}" --batch-size 4 --out "$work/sq-2" > /dev/null 2> "$work/sq-2.err" ||
  { cat "$work/sq-2.err" >&2; exit 1; }
[ -s "$work/sq-2/predictions.json" ] ||
  { echo "FAIL: bert_squad under mpirun wrote no predictions" >&2; exit 1; }

# 5a. rank 1 with another learning rate; rank 1 with a bad flag (a usage error, exit status 2):
# the job ends with an error, it does not wait for rank 1 for ever
status=0
timeout 120 mpirun -np 1 "${mpi_opts[@]}" "$gpt" "${gpt_args[@]}" --steps 5 --batch-size 2 --out "$work/bad" : \
  -np 1 "$gpt" "${gpt_args[@]}" --steps 5 --batch-size 2 --out "$work/bad" --lr 0.1 > /dev/null \
  2> "$work/bad.err" || status=$?
grep -q "rank 1 runs another config than rank 0" "$work/bad.err" && [ "$status" -ne 0 ] && [ "$status" -ne 124 ] ||
  { echo "FAIL: ranks with different configs (status $status)" >&2; cat "$work/bad.err" >&2; exit 1; }
status=0
timeout 120 mpirun -np 1 "${mpi_opts[@]}" "$gpt" "${gpt_args[@]}" --steps 5 --batch-size 2 --out "$work/bad2" : \
  -np 1 "$gpt" "${gpt_args[@]}" --steps 5 --batch-size 2 --out "$work/bad2" --no-such-flag > /dev/null \
  2> "$work/bad2.err" || status=$?
grep -q "usage error" "$work/bad2.err" && [ "$status" -ne 0 ] && [ "$status" -ne 124 ] ||
  { echo "FAIL: a rank with a usage error (status $status)" >&2; cat "$work/bad2.err" >&2; exit 1; }
# 5b. rank 1 killed after the step-10 checkpoint; the job ends; the checkpoint resumes
timeout 300 "${mpi[@]}" "$gpt" "${gpt_args[@]}" --steps 100000 --set schedule.total_steps=100000 --batch-size 2 \
  --out "$work/killed" > /dev/null 2> "$work/killed.err" &
launcher=$!
for _ in $(seq 1 3000); do [ -d "$work/killed/checkpoints/step-000010" ] && break; sleep 0.02; done
victim=""
for p in $(pgrep -f -- "--out $work/killed"); do
  tr '\0' '\n' < "/proc/$p/environ" 2> /dev/null | grep -qx "OMPI_COMM_WORLD_RANK=1" && victim=$p
done
[ -n "$victim" ] || { echo "FAIL: rank 1 not found" >&2; kill "$launcher"; exit 1; }
kill -9 "$victim"
status=0; wait "$launcher" || status=$?
[ "$status" -ne 0 ] || { echo "FAIL: the job went on after a rank died" >&2; exit 1; }
"${mpi[@]}" "$gpt" "${gpt_args[@]}" --steps 12 --set schedule.total_steps=100000 --batch-size 2 \
  --out "$work/killed" --resume > /dev/null 2> "$work/killed-resume.err" ||
  { echo "FAIL: the run of the killed rank does not resume" >&2; cat "$work/killed-resume.err" >&2; exit 1; }
grep -q "resuming from" "$work/killed-resume.err" || { echo "FAIL: no resume message" >&2; exit 1; }

/usr/bin/python3 - "$work" <<'PY'
import json, struct, sys
import numpy as np
w = sys.argv[1]
def lines(run, kinds=("train", "eval")):
    return [j for j in map(json.loads, open(f"{w}/{run}/metrics.jsonl")) if j.get("kind") in kinds]
def tensors(run, name="model.safetensors"):
    d = f"{w}/{run}/checkpoints/" + open(f"{w}/{run}/checkpoints/latest").read().strip()
    b = open(f"{d}/{name}", "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n]); h.pop("__metadata__", None)
    out = {}
    for k, v in h.items():
        s, e = v["data_offsets"]
        dt = {"F32": np.float32, "I32": np.int32, "U8": np.uint8, "I64": np.int64}[v["dtype"]]
        out[k] = np.frombuffer(b[8 + n + s:8 + n + e], dtype=dt)
    return out
fails = []
def same_losses(a, b, what, exact=False, kinds=("train", "eval")):
    la, lb = lines(a, kinds), lines(b, kinds)
    if [(x["kind"], x["step"]) for x in la] != [(x["kind"], x["step"]) for x in lb]:
        fails.append(f"{what}: the runs logged different steps"); return 0
    worst = max(abs(x["loss"] - y["loss"]) / abs(x["loss"]) for x, y in zip(la, lb))
    if (exact and worst != 0) or worst > 1e-4:
        fails.append(f"{what}: losses differ by {worst:.2e} (relative)")
    return worst
def same_weights(a, b, what, skip=()):
    ta, tb = tensors(a), tensors(b)
    if ta.keys() != tb.keys():
        fails.append(f"{what}: different tensors"); return 0
    worst = 0.0
    for k in ta:
        if k in skip: continue
        x, y = ta[k].astype(np.float64), tb[k].astype(np.float64)
        if ta[k].dtype != np.float32:
            if not np.array_equal(x, y): fails.append(f"{what}: '{k}' differs")
            continue
        worst = max(worst, float(np.max(np.abs(x - y)) / max(np.max(np.abs(x)), 1e-30)))
    if worst > 1e-3:
        fails.append(f"{what}: weights differ by {worst:.2e} of a tensor's largest magnitude")
    return worst
d1 = same_losses("gpt-1", "gpt-2", "GPT 1 process x 4 rows vs 2 ranks x 2")
w1 = same_weights("gpt-1", "gpt-2", "GPT 1 process x 4 rows vs 2 ranks x 2")
def bit_identical(a, b, what):  # losses, weights and the whole optimiser state of the last checkpoints
    same_losses(a, b, what, exact=True)
    for name in ("model.safetensors", "training_state.safetensors"):
        x, y = tensors(a, name), tensors(b, name)
        if x.keys() != y.keys() or any(not np.array_equal(x[k], y[k]) for k in x):
            fails.append(f"{what}: {name} differs")
bit_identical("gpt-2", "gpt-2r", "GPT 2 ranks vs 2 ranks sharded, stopped at 20 and resumed")
d3 = same_losses("gpt-2", "gpt-1r", "GPT 2 ranks vs its step-20 checkpoint resumed by 1 process")
# (training losses only: the 1-process run validates on batches of 2 rows, the 2-rank run on 4)
d4 = same_losses("s1-1", "s1-2", "S1 1 process x 2 micro-batches vs 2 ranks", kinds=("train",))
d5 = same_losses("bert-1", "bert-2", "BERT 1 process x 8 vs 2 ranks x 4")
w5 = same_weights("bert-1", "bert-2", "BERT 1 process x 8 vs 2 ranks x 4")
bit_identical("bert-2", "bert-2s", "BERT 2 ranks vs 2 ranks sharded")
d6 = same_losses("cls-1", "cls-2", "bert_classify 1 process x 8 vs 2 ranks x 4", kinds=("train",))
w6 = same_weights("cls-1", "cls-2", "bert_classify 1 process x 8 vs 2 ranks x 4")
bit_identical("cls-2", "cls-2s", "bert_classify 2 ranks vs 2 ranks sharded")
bit_identical("cls-2d", "cls-2ds", "bert_classify with pattern updates, 2 ranks vs 2 ranks sharded")
ud = [j["sparsity_update"]["step"] for j in lines("cls-2d") if "sparsity_update" in j]
if ud != [3, 6]:
    fails.append(f"bert_classify with pattern updates on 2 ranks: updates after steps {ud}, expected [3, 6]")
d7 = same_losses("sq-1", "sq-2", "bert_squad 1 process x 8 vs 2 ranks x 4", kinds=("train",))
# The span loss is a softmax over positions, which a shift of every position's logit leaves as it
# is; the QA bias and the bias of the last LayerNorm (bert-tiny's layer 1) do just that, so their
# gradient is 0 in exact arithmetic and rounding noise here, whose sign Adam turns into steps of up
# to lr: they differ between any two summation orders and are left out of the comparison.
w7 = same_weights("sq-1", "sq-2", "bert_squad 1 process x 8 vs 2 ranks x 4",
                  skip=("qa_outputs.bias", "encoder.layer.1.ln_2.bias"))
w4 = same_weights("s1-1", "s1-2", "S1 1 process x 2 micro-batches vs 2 ranks")
u1 = [j["sparsity_update"] for j in lines("s1-1") if "sparsity_update" in j]
u2 = [j["sparsity_update"] for j in lines("s1-2") if "sparsity_update" in j]
if len(u1) < 4 or u1 != u2:
    fails.append(f"S1: pattern updates differ or too few ({len(u1)} vs {len(u2)})")
if fails:
    sys.exit("FAIL: " + "; ".join(fails))
print(f"OK: GPT 2 ranks = 1 process (losses {d1:.1e}, weights {w1:.1e}); sharded 2 ranks stopped and resumed "
      f"bit-identical to unsharded (weights, optimiser state); its checkpoint resumed by 1 process: "
      f"{d3:.1e}; S1 RigL 2 ranks = 2 micro-batches ({len(u1)} identical pattern updates, "
      f"losses {d4:.1e}, weights {w4:.1e}); BERT 2 ranks = 1 process (losses {d5:.1e}, weights {w5:.1e}), "
      f"sharded = unsharded bit for bit; bert_classify 2 ranks = 1 process (losses {d6:.1e}, weights {w6:.1e}), "
      f"sharded = unsharded bit for bit; bert_squad 2 ranks = 1 process (losses {d7:.1e}, weights {w7:.1e}); "
      f"bert_classify with pattern updates at steps {ud}: sharded = unsharded bit for bit")
PY
