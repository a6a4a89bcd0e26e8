#!/usr/bin/env bash
# ctest examples.tensor_parallel_finetune: bert_classify and bert_squad with --tensor-parallel under
# mpirun, from a short bert_pretrain checkpoint (bert-tiny's shape, no dropout).
#   check_tensor_parallel_finetune.sh BERT_DATA BERT_PRETRAIN BERT_CLASSIFY BERT_SQUAD SOURCE_DIR WORK_DIR
#
# 1. bert_classify: 2 ranks splitting the encoder (--tensor-parallel 2, 8 rows) and a grid of 2
#    groups x 2 data replicas (4 ranks, 4 rows each) against 1 process x 8 rows: every training loss
#    within 1e-4 (relative), and the held-out evaluation after training (every rank of the group
#    computes the logits: a rank that did not would leave the others waiting in the group's sums)
#    gives the same predictions, but for at most one near tie. After 6 steps from a 2-step
#    pre-training the classifier still predicts (nearly) one class, so this comparison is weak; the
#    answers of 3., the argmax of span logits over every position, compare the logits closely.
# 2. Checkpoints are the whole model's (the classifier's head included): the group's step-3
#    checkpoint resumed by one process logs one process's losses for steps 4-6.
# 3. bert_squad: the group of 2 against one process: training losses, and the answers of
#    predictions.json (written by rank 0 after the group computed the span logits) with EM / F1.
# 4. A block-sparse encoder (B = 16, half the blocks) pre-trained by a group of 2, whose patterns
#    put as many blocks in each slice: bert_classify by a group of 2 and a 2 x 2 grid against one
#    process from it, every training loss within 1e-4; the group's step-3 checkpoint resumed by one
#    process; with pattern updates every 2 steps the grid makes the group's updates (each slice
#    prunes and regrows its own blocks). A one-process block-sparse pre-training checkpoint, whose patterns do not divide
#    evenly over 2 slices, is refused naming a weight and its slices' counts.
# 5. Refused before any work, naming the option: pruning a dense encoder (--block-size) and
#    --predict-only under --tensor-parallel, and a group that does not divide the ranks.
set -euo pipefail
data=$1 pretrain=$2 classify=$3 squad=$4 src=$5 work=$6
rm -rf "$work" && mkdir -p "$work"
"$data" -i "$src/data/corpus/valid" -o "$work/p.bex" --seq-len 64 --max-predictions 10 --dupe-factor 1 > /dev/null
"$pretrain" --model "$src/configs/bert-tiny.json" --train "$work/p.bex" --out "$work/pre" --steps 2 --batch-size 8 \
  --eval-every 0 --threads 2 > /dev/null 2> "$work/pre.log"

# A two-class set from the bundled validation text (Moby-Dick sentences against State of the Union
# sentences, labelled by their source): 48 to train on, 16 held out.
/usr/bin/python3 "$(dirname "$0")/make_classify_set.py" "$src/data/corpus/valid" "$work/train.jsonl" "$work/test.jsonl" 32 4

# shellcheck source=tensor_parallel_runs.sh
source "$(dirname "$0")/tensor_parallel_runs.sh"
prog=$classify
args=(--train "$work/train.jsonl" --test "$work/test.jsonl" --init-from "$work/pre" --max-seq 64 --lr 2e-4
      --log-every 1 --dropout 0 --threads 1 --steps 6 --checkpoint-every 3)
run one 1 --batch-size 8
run tp2 2 --batch-size 8 --tensor-parallel 2
run grid 4 --batch-size 4 --tensor-parallel 2
# one process resumes the group's step-3 checkpoint (the run directory as it was after step 3)
cp -r "$work/tp2" "$work/one-from-tp2"
rm -rf "$work/one-from-tp2/checkpoints/step-000006" "$work/one-from-tp2/eval.json"
echo "step-000003" > "$work/one-from-tp2/checkpoints/latest"
run one-from-tp2 1 --batch-size 8 --resume

compare_runs <<'PY'
same_losses("one", "tp2")
same_losses("one", "grid")
def steps_after(run, k):
    return [x for x in lines(run) if x["kind"] == "train" and x["step"] > k]
a, b = steps_after("one", 3), steps_after("one-from-tp2", 3)
if [x["step"] for x in a] != [4, 5, 6] or [x["step"] for x in b] != [4, 5, 6]:
    fails.append(f"one-from-tp2: steps after the resume {[x['step'] for x in b]}, expected [4, 5, 6]")
else:
    worst = max(abs(x["loss"] - y["loss"]) / abs(x["loss"]) for x, y in zip(a, b))
    print(f"one-from-tp2: steps 4-6 within {worst:.2e} of one process's")
    if worst > 1e-4: fails.append(f"one-from-tp2: losses differ by {worst:.2e} after the resume")
if resumed_at("one-from-tp2")[-1] != 3: fails.append(f"one-from-tp2: resumed_from {resumed_at('one-from-tp2')}")
ev = {r: json.load(open(f"{w}/{r}/eval.json")) for r in ("one", "tp2", "grid", "one-from-tp2")}
for r in ("tp2", "grid", "one-from-tp2"):
    cm_a, cm_b = ev["one"]["confusion"], ev[r]["confusion"]
    moved = sum(abs(x - y) for ra, rb in zip(cm_a, cm_b) for x, y in zip(ra, rb)) // 2
    print(f"{r}: held-out accuracy {ev[r]['accuracy']:.4f} (one process {ev['one']['accuracy']:.4f}), "
          f"{moved} prediction(s) moved")
    if moved > 1: fails.append(f"{r}: {moved} held-out predictions differ from one process's")
    if ev[r]["train"]["steps"] != 6: fails.append(f"{r}: eval.json's train summary: {ev[r]['train']}")
PY

prog=$squad
args=(--train "$src/data/squad/train-v1.1.json" --predict "$src/data/squad/dev-v1.1.json" --init-from "$work/pre"
      --max-seq 128 --doc-stride 64 --lr 2e-4 --log-every 1 --dropout 0 --threads 1 --steps 3)
run sq-one 1 --batch-size 8
run sq-tp2 2 --batch-size 8 --tensor-parallel 2
compare_runs <<'PY'
same_losses("sq-one", "sq-tp2")
pa, pb = (json.load(open(f"{w}/{r}/predictions.json")) for r in ("sq-one", "sq-tp2"))
if sorted(pa) != sorted(pb) or not pa:
    fails.append(f"sq-tp2: answered {len(pb)} questions, one process {len(pa)}")
else:
    differ = [q for q in pa if pa[q] != pb[q]]
    print(f"sq-tp2: {len(pa) - len(differ)} of {len(pa)} answers as one process's")
    if len(differ) > 1: fails.append(f"sq-tp2: {len(differ)} answers differ from one process's: {differ[:3]}")
ea, eb = (json.load(open(f"{w}/{r}/eval.json")) for r in ("sq-one", "sq-tp2"))
if ea["questions"] != eb["questions"]: fails.append(f"sq-tp2: scored {eb['questions']} questions, not {ea['questions']}")
PY

# 4. a block-sparse encoder from a block-sparse pre-training by a group of 2
prog=$pretrain
args=(--model "$src/configs/bert-tiny.json" --train "$work/p.bex" --steps 2 --batch-size 8 --eval-every 0
      --block-size 16 --sparsity 0.5)
run pre-sparse-tp2 2 --tensor-parallel 2 --threads 1
run pre-sparse-one 1 --threads 2
prog=$classify
args=(--train "$work/train.jsonl" --test "$work/test.jsonl" --init-from "$work/pre-sparse-tp2" --max-seq 64
      --lr 2e-4 --log-every 1 --dropout 0 --threads 1 --steps 6 --checkpoint-every 3)
run sp-one 1 --batch-size 8
run sp-tp2 2 --batch-size 8 --tensor-parallel 2
run sp-grid 4 --batch-size 4 --tensor-parallel 2
cp -r "$work/sp-tp2" "$work/sp-one-from-tp2"
rm -rf "$work/sp-one-from-tp2/checkpoints/step-000006" "$work/sp-one-from-tp2/eval.json"
echo "step-000003" > "$work/sp-one-from-tp2/checkpoints/latest"
run sp-one-from-tp2 1 --batch-size 8 --resume
# pattern updates while fine-tuning split: each slice prunes and regrows its own share (the grid's
# data replicas make the group's updates)
run sp-dyn-tp2 2 --batch-size 8 --tensor-parallel 2 --update-period 2
run sp-dyn-grid 4 --batch-size 4 --tensor-parallel 2 --update-period 2
compare_runs <<'PY'
same_losses("sp-one", "sp-tp2")
same_losses("sp-one", "sp-grid")
same_losses("sp-dyn-tp2", "sp-dyn-grid")
ua, ub = updates("sp-dyn-tp2"), updates("sp-dyn-grid")
print(f"sp-dyn: updates at steps {sorted(ua)}: pruned {[u['pruned'] for u in ua.values()]}")
if not ua or ua != ub or not all(u["pruned"] > 0 and u["pruned"] == u["regrown"] for u in ua.values()):
    fails.append(f"sp-dyn: the group's updates {ua}, the grid's {ub}")
a = [x for x in lines("sp-one") if x["kind"] == "train" and x["step"] > 3]
b = [x for x in lines("sp-one-from-tp2") if x["kind"] == "train" and x["step"] > 3]
if [x["step"] for x in b] != [4, 5, 6] or (resumed_at("sp-one-from-tp2") or [None])[-1] != 3:
    fails.append(f"sp-one-from-tp2: steps after the resume {[x['step'] for x in b]}, expected [4, 5, 6]")
else:
    worst = max(abs(x["loss"] - y["loss"]) / abs(x["loss"]) for x, y in zip(a, b))
    print(f"sp-one-from-tp2: steps 4-6 within {worst:.2e} of one process's")
    if worst > 1e-4: fails.append(f"sp-one-from-tp2: losses differ by {worst:.2e} after the resume")
cfg = json.load(open(f"{w}/sp-tp2/config.json"))
if cfg.get("sparsity", {}).get("block_size") != 16:
    fails.append(f"sp-tp2: config.json's sparsity {cfg.get('sparsity')}, not the checkpoint's blocks of 16")
PY

# refused before any work
refused() {  # refused NAME TEXT NP FLAGS...: the run fails and its error names TEXT
  local name=$1 text=$2 np=$3
  shift 3
  if mpirun -np "$np" "${mpi_opts[@]}" "$prog" "${args[@]}" --out "$work/$name" "$@" > /dev/null 2> "$work/$name.err"; then
    echo "FAIL: $name was accepted"; exit 1
  fi
  grep -qF -- "$text" "$work/$name.err" || { echo "FAIL: $name: $(cat "$work/$name.err")"; exit 1; }
  [ ! -e "$work/$name/metrics.jsonl" ] || { echo "FAIL: $name trained before refusing"; exit 1; }
  echo "$name: refused ($text)"
}
prog=$classify
args=(--train "$work/train.jsonl" --test "$work/test.jsonl" --init-from "$work/pre" --max-seq 64 --threads 1 --steps 2)
refused prune "(--tensor-parallel) 2: fine-tuning splits a dense or block-sparse encoder over ranks, but does not prune" \
  2 --tensor-parallel 2 --block-size 16 --sparsity 0.5
refused uneven "blocks in the 2 slices of a tensor-parallel group; its blocks must divide evenly" \
  2 --tensor-parallel 2 --init-from "$work/pre-sparse-one"
refused odd "trainer.tensor_parallel (--tensor-parallel) 2 must divide the number of processes" 3 --tensor-parallel 2
prog=$squad
args=(--predict "$src/data/squad/dev-v1.1.json" --init-from "$work/pre" --max-seq 128 --doc-stride 64 --threads 1)
refused predict-only "--predict-only scores the model in one process" 2 --tensor-parallel 2 --predict-only

echo "tensor_parallel_finetune: passed"
