#!/usr/bin/env bash
# bert_classify and bert_squad end to end, small and quick (bert-tiny, a few steps):
#   1. a short bert_pretrain run writes the checkpoint both programs start from (--init-from);
#   2. bert_classify on a real two-class task built from the bundled corpus (Moby-Dick sentences vs
#      State of the Union sentences, JSON lines): eval.json with accuracy, per-class F1 and a
#      confusion matrix that sums to the held-out count; exact resume (steps 7-12 logged
#      bit-identically after resuming from step 6); a test label unseen in training is an error;
#      --batch-size 4 --accumulation 2 trains what --batch-size 8 does (dropout off);
#   3. bert_classify --init-from a HuggingFace directory (export_hf of the same checkpoint) starts
#      from the same weights: its first logged loss equals the run from our checkpoint;
#   4. bert_squad on the bundled SQuAD-format set: predictions.json answers every dev question
#      with text from its context, eval.json's EM / F1 equal squad_eval's on those predictions;
#   5. a block-sparse pre-training run (--block-size 16 --sparsity 0.9) starts block-sparse fine-tuning
#      in both programs: the patterns of every encoder weight are the pre-training run's at the end
#      (bit for bit) while the active blocks trained; exact resume as in 2;
#   6. --block-size 16 --sparsity 0.5 from the dense checkpoint: each encoder weight keeps the
#      blocks of largest L2 norm of the pre-training weights (recomputed here), and keeps them;
#   7. the same with --update-period 2 over 6 steps: patterns updated at steps 2 and 4 (not at the
#      last), each weight's block count kept, the final patterns differ from 6's; exact resume from
#      step 3 (losses and final patterns bit-identical); --update-period on a dense encoder refused.
#   check_finetune.sh BERT_DATA BERT_PRETRAIN BERT_CLASSIFY BERT_SQUAD SQUAD_EVAL EXPORT_HF SOURCE_DIR WORK_DIR
set -euo pipefail
data=$1 pretrain=$2 classify=$3 squad=$4 squad_eval=$5 export_hf=$6 src=$7 work=$8
rm -rf "$work"
mkdir -p "$work"
"$data" -i "$src/data/corpus/valid" -o "$work/p.bex" --seq-len 64 --max-predictions 10 --dupe-factor 1 > /dev/null
"$pretrain" --model "$src/configs/bert-tiny.json" --train "$work/p.bex" --out "$work/pre" --steps 4 --batch-size 8 \
  --eval-every 0 --threads 2 > /dev/null 2> "$work/pre.log"

# A two-class set from the bundled validation text: 120 sentences of each source, labelled by it.
/usr/bin/python3 "$(dirname "$0")/make_classify_set.py" "$src/data/corpus/valid" "$work/train.jsonl" "$work/test.jsonl" \
  120 5
printf '%s\n' '{"text": "x", "label": "poetry"}' > "$work/bad.jsonl"

cls=(--train "$work/train.jsonl" --test "$work/test.jsonl" --init-from "$work/pre" --max-seq 64 --batch-size 8
     --lr 2e-4 --log-every 1 --threads 2)
"$classify" "${cls[@]}" --out "$work/cls" --steps 12 --checkpoint-every 6 > "$work/cls.json" 2> "$work/cls.log"
grep -q "model weights from $work/pre/checkpoints/step-000004" "$work/cls.log" ||
  { echo "FAIL: bert_classify did not start from the pre-training checkpoint: $(cat "$work/cls.log")"; exit 1; }
cp -r "$work/cls" "$work/cls-resumed"
rm -rf "$work/cls-resumed/checkpoints/step-000012"
echo "step-000006" > "$work/cls-resumed/checkpoints/latest"
"$classify" "${cls[@]}" --out "$work/cls-resumed" --steps 12 --checkpoint-every 6 --resume > /dev/null \
  2> "$work/cls-resumed.log"
# gradient accumulation: 2 micro-batches of 4 train what one batch of 8 does (dropout off)
acc=(--train "$work/train.jsonl" --test "$work/test.jsonl" --init-from "$work/pre" --max-seq 64 --lr 2e-4 --threads 2
     --log-every 1 --steps 3 --dropout 0)
"$classify" "${acc[@]}" --batch-size 8 --out "$work/cls-b8" > /dev/null 2> "$work/cls-b8.log"
"$classify" "${acc[@]}" --batch-size 4 --accumulation 2 --out "$work/cls-acc" > /dev/null 2> "$work/cls-acc.log"
if "$classify" --train "$work/train.jsonl" --test "$work/bad.jsonl" --out "$work/cls-bad" --steps 1 \
  > /dev/null 2> "$work/bad.log"; then
  echo "FAIL: a test label unseen in training was accepted"; exit 1
fi
grep -q "bad.jsonl:1: label 'poetry' is not one of the training labels" "$work/bad.log" ||
  { echo "FAIL: unseen label: $(cat "$work/bad.log")"; exit 1; }

"$export_hf" --checkpoint "$work/pre" --out "$work/pre-hf" > /dev/null 2>&1
"$classify" "${cls[@]/$work\/pre/$work/pre-hf}" --out "$work/cls-hf" --steps 2 > /dev/null 2> "$work/cls-hf.log"
grep -q "model weights from $work/pre-hf (.*huggingface" "$work/cls-hf.log" ||
  { echo "FAIL: bert_classify did not read the HF directory: $(cat "$work/cls-hf.log")"; exit 1; }

sq=(--train "$src/data/squad/train-v1.1.json" --predict "$src/data/squad/dev-v1.1.json" --init-from "$work/pre"
    --max-seq 128 --doc-stride 64 --batch-size 8 --lr 2e-4 --threads 2)
"$squad" "${sq[@]}" --out "$work/squad" --steps 6 --log-every 2 > "$work/squad.json" 2> "$work/squad.log"
"$squad_eval" "$src/data/squad/dev-v1.1.json" "$work/squad/predictions.json" > "$work/squad_eval.out"

"$pretrain" --model "$src/configs/bert-tiny.json" --train "$work/p.bex" --out "$work/pre-sparse" --steps 4 \
  --batch-size 8 --eval-every 0 --threads 2 --block-size 16 --sparsity 0.9 > /dev/null 2> "$work/pre-sparse.log"
cls_sparse=("${cls[@]/#$work\/pre/$work/pre-sparse}")
"$classify" "${cls_sparse[@]}" --out "$work/cls-sparse" --steps 6 --checkpoint-every 3 > /dev/null \
  2> "$work/cls-sparse.log"
grep -q "block-sparse encoder (B = 16, .* patterns fixed while fine-tuning" "$work/cls-sparse.log" ||
  { echo "FAIL: bert_classify did not build the block-sparse encoder: $(cat "$work/cls-sparse.log")"; exit 1; }
cp -r "$work/cls-sparse" "$work/cls-sparse-resumed"
rm -rf "$work/cls-sparse-resumed/checkpoints/step-000006"
echo "step-000003" > "$work/cls-sparse-resumed/checkpoints/latest"
"$classify" "${cls_sparse[@]}" --out "$work/cls-sparse-resumed" --steps 6 --checkpoint-every 3 --resume > /dev/null \
  2> "$work/cls-sparse-resumed.log"
"$squad" "${sq[@]/#$work\/pre/$work/pre-sparse}" --out "$work/squad-sparse" --steps 2 --log-every 2 > /dev/null \
  2> "$work/squad-sparse.log"
grep -q "block-sparse encoder (B = 16" "$work/squad-sparse.log" ||
  { echo "FAIL: bert_squad did not build the block-sparse encoder: $(cat "$work/squad-sparse.log")"; exit 1; }
"$classify" "${cls[@]}" --out "$work/cls-pruned" --steps 3 --block-size 16 --sparsity 0.5 > /dev/null \
  2> "$work/cls-pruned.log"
grep -q "block-sparse encoder (B = 16) pruned from $work/pre/checkpoints/step-000004 .* patterns fixed" \
  "$work/cls-pruned.log" || { echo "FAIL: bert_classify --block-size: $(cat "$work/cls-pruned.log")"; exit 1; }
if "$classify" "${cls_sparse[@]}" --out "$work/cls-prune-bad" --steps 1 --block-size 8 > /dev/null \
  2> "$work/prune-bad.log"; then
  echo "FAIL: --block-size accepted a block-sparse checkpoint"; exit 1
fi
grep -q "is block-sparse already (blocks of 16)" "$work/prune-bad.log" ||
  { echo "FAIL: --block-size on a sparse checkpoint: $(cat "$work/prune-bad.log")"; exit 1; }
dyn=(--block-size 16 --sparsity 0.5 --update-period 2 --regrow rigl --steps 6 --checkpoint-every 3)
"$classify" "${cls[@]}" "${dyn[@]}" --out "$work/cls-dynamic" > /dev/null 2> "$work/cls-dynamic.log"
grep -q "patterns pruned and regrown (rigl) every 2 steps" "$work/cls-dynamic.log" ||
  { echo "FAIL: bert_classify --update-period: $(cat "$work/cls-dynamic.log")"; exit 1; }
cp -r "$work/cls-dynamic" "$work/cls-dynamic-resumed"
rm -rf "$work/cls-dynamic-resumed/checkpoints/step-000006"
echo "step-000003" > "$work/cls-dynamic-resumed/checkpoints/latest"
"$classify" "${cls[@]}" "${dyn[@]}" --out "$work/cls-dynamic-resumed" --resume > /dev/null \
  2> "$work/cls-dynamic-resumed.log"
"$squad" "${sq[@]/#$work\/pre/$work/pre-sparse}" --out "$work/squad-dynamic" --steps 3 --log-every 2 --update-period 1 \
  --regrow random > /dev/null 2> "$work/squad-dynamic.log"
grep -q "patterns pruned and regrown (random) every 1 steps" "$work/squad-dynamic.log" ||
  { echo "FAIL: bert_squad --update-period: $(cat "$work/squad-dynamic.log")"; exit 1; }
if "$classify" "${cls[@]}" --out "$work/cls-dynamic-bad" --steps 2 --update-period 1 > /dev/null \
  2> "$work/dynamic-bad.log"; then
  echo "FAIL: --update-period accepted a dense encoder"; exit 1
fi
grep -q -- "--update-period needs a block-sparse encoder: .*; $work/pre/checkpoints/step-000004/model.safetensors is dense" \
  "$work/dynamic-bad.log" || { echo "FAIL: --update-period on a dense encoder: $(cat "$work/dynamic-bad.log")"; exit 1; }

/usr/bin/python3 - "$work" "$src" <<'PY'
import json, struct, sys
w, src = sys.argv[1], sys.argv[2]
def tensors(path, shapes=None):  # safetensors: name -> raw bytes (and name -> shape into `shapes`)
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    head = json.loads(b[8:8 + n])
    if shapes is not None:
        shapes.update({k: v["shape"] for k, v in head.items() if k != "__metadata__"})
    return {k: b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]] for k, v in head.items() if k != "__metadata__"}
pre = tensors(f"{w}/pre-sparse/checkpoints/step-000004/model.safetensors")
patterns = [k for k in pre if k.endswith(".pattern") and k.startswith("encoder.")]
assert len(patterns) == 8, f"FAIL: {len(patterns)} encoder patterns in the pre-training checkpoint"
for run in ("cls-sparse/checkpoints/step-000006", "squad-sparse/checkpoints/step-000002"):
    t = tensors(f"{w}/{run}/model.safetensors")
    for k in patterns:
        assert t[k] == pre[k], f"FAIL: {run}: pattern {k} changed"
        v = k[:-len(".pattern")]
        assert t[v] != pre[v], f"FAIL: {run}: {v} did not train"
# --block-size: the kept blocks are the largest by L2 norm of the dense pre-training weights.
import numpy as np
dshape = {}
dense = tensors(f"{w}/pre/checkpoints/step-000004/model.safetensors", dshape)
pruned = tensors(f"{w}/cls-pruned/checkpoints/step-000003/model.safetensors")
kept = grid = 0
for k in patterns:
    v = k[:-len(".pattern")]
    rows, cols = dshape[v]
    d = np.frombuffer(dense[v], dtype=np.float32).astype(np.float64).reshape(rows, cols)
    norms = (d.reshape(rows // 16, 16, cols // 16, 16) ** 2).sum(axis=(1, 3)).reshape(-1)
    got = np.frombuffer(pruned[k], dtype=np.int32).reshape(-1, 2)
    order = sorted(range(norms.size), key=lambda g: (-norms[g], g))[:len(got)]
    want = sorted(order)
    assert [int(r) * (cols // 16) + int(c) for r, c in got] == want, f"FAIL: {v}: pruned blocks are not the largest"
    kept, grid = kept + len(got), grid + norms.size
assert abs(kept / grid - 0.5) < 0.05, f"FAIL: --sparsity 0.5 kept {kept} of {grid} blocks"
# --update-period 2: updates after steps 2 and 4, never at the last (6); block counts kept; the
# patterns moved away from the static pruned run's; the resumed run is the same run.
def lines(run, kind):
    return [json.loads(l) for l in open(f"{w}/{run}/metrics.jsonl") if json.loads(l).get("kind") == kind]
ups = [j["sparsity_update"]["step"] for j in lines("cls-dynamic", "train") if "sparsity_update" in j]
assert ups == [2, 4], f"FAIL: pattern updates at steps {ups}, expected [2, 4]"
assert all(j["sparsity_update"]["regrown"] > 0 for j in lines("cls-dynamic", "train") if "sparsity_update" in j)
dyn = tensors(f"{w}/cls-dynamic/checkpoints/step-000006/model.safetensors")
moved = 0
for k in patterns:
    assert len(dyn[k]) == len(pruned[k]), f"FAIL: {k}: block count changed by the updates"
    moved += dyn[k] != pruned[k]
assert moved > 0, "FAIL: --update-period left every pattern as pruned"
res = tensors(f"{w}/cls-dynamic-resumed/checkpoints/step-000006/model.safetensors")
assert all(res[k] == dyn[k] for k in dyn), "FAIL: the resumed dynamic run's final model differs"
a = [(j["step"], j["loss"], j["grad_norm"], j.get("sparsity_update")) for j in lines("cls-dynamic", "train") if j["step"] > 3]
b = [(j["step"], j["loss"], j["grad_norm"], j.get("sparsity_update")) for j in lines("cls-dynamic-resumed", "train")
     if j["step"] > 3]
assert len(a) == 3 and a == b, f"FAIL: resumed dynamic run differs:\n{a}\n{b}"
pat = lines("cls-dynamic", "run")[0]["config"]["sparsity"]["update"]
assert pat["update_period"] == 2 and pat["regrow"] == "rigl", f"FAIL: run config {pat}"
ups = [j["sparsity_update"]["step"] for j in lines("squad-dynamic", "train") if "sparsity_update" in j]
assert ups == [1, 2], f"FAIL: bert_squad pattern updates logged at steps {ups}, expected [1, 2] (--log-every 2)"
rc = [json.loads(l) for l in open(f"{w}/cls-sparse/metrics.jsonl")]
assert rc[0]["config"]["sparsity"]["block_size"] == 16, rc[0]["config"]["sparsity"]
ev = json.load(open(f"{w}/cls/eval.json"))
n_test = sum(1 for _ in open(f"{w}/test.jsonl"))
assert ev["examples"] == n_test, f"FAIL: {ev['examples']} evaluated, {n_test} held out"
assert sum(map(sum, ev["confusion"])) == n_test, f"FAIL: confusion {ev['confusion']}"
assert ev["labels"] == ["moby", "sotu"] or ev["labels"] == ["sotu", "moby"], ev["labels"]
correct = sum(ev["confusion"][k][k] for k in range(2))
assert abs(ev["accuracy"] - correct / n_test) < 1e-12, f"FAIL: accuracy {ev['accuracy']} vs confusion"
for c in ev["classes"].values():
    assert 0 <= c["f1"] <= 1 and c["support"] > 0, c
train = lines("cls", "train")
assert [j["step"] for j in train] == list(range(1, 13)), f"FAIL: train steps {[j['step'] for j in train]}"
for k in ("loss", "accuracy", "lr", "grad_norm", "samples_per_s"):
    assert k in train[-1], f"FAIL: train line without {k}"
a = [(j["step"], j["loss"], j["grad_norm"]) for j in train if j["step"] > 6]
b = [(j["step"], j["loss"], j["grad_norm"]) for j in lines("cls-resumed", "train") if j["step"] > 6]
assert a == b, f"FAIL: resumed run differs:\n{a}\n{b}"
a = [(j["step"], j["loss"], j["grad_norm"]) for j in lines("cls-sparse", "train") if j["step"] > 3]
b = [(j["step"], j["loss"], j["grad_norm"]) for j in lines("cls-sparse-resumed", "train") if j["step"] > 3]
assert len(a) == 3 and a == b, f"FAIL: resumed block-sparse run differs:\n{a}\n{b}"
a = [(j["loss"], j["grad_norm"]) for j in lines("cls-b8", "train")]
b = [(j["loss"], j["grad_norm"]) for j in lines("cls-acc", "train")]
assert len(a) == len(b) == 3 and all(abs(x - y) <= 1e-4 * max(1.0, abs(x)) for p, q in zip(a, b) for x, y in zip(p, q)), \
    f"FAIL: --batch-size 4 --accumulation 2 differs from --batch-size 8:\n{a}\n{b}"
hf = lines("cls-hf", "train")
assert (hf[0]["loss"], hf[0]["grad_norm"]) == (train[0]["loss"], train[0]["grad_norm"]), \
    f"FAIL: HF start differs from ours: {hf[0]} vs {train[0]}"

dev = json.load(open(f"{src}/data/squad/dev-v1.1.json"))
contexts = {q["id"]: p["context"] for art in dev["data"] for p in art["paragraphs"] for q in p["qas"]}
preds = json.load(open(f"{w}/squad/predictions.json"))
assert set(preds) == set(contexts), f"FAIL: {len(preds)} predictions for {len(contexts)} questions"
for qid, text in preds.items():
    assert text == "empty" or text in contexts[qid], f"FAIL: {qid}: {text!r} is not in its context"
sq = json.load(open(f"{w}/squad/eval.json"))
ref = json.loads(open(f"{w}/squad_eval.out").readline())
assert abs(sq["exact_match"] - ref["exact_match"]) < 1e-9 and abs(sq["f1"] - ref["f1"]) < 1e-9, (sq, ref)
assert sq["questions"] == len(contexts)
st = lines("squad", "train")
assert st and all(k in st[-1] for k in ("start_loss", "end_loss", "start_accuracy", "end_accuracy")), st[-1]
print(f"classify accuracy {ev['accuracy']:.3f}; squad EM {sq['exact_match']:.2f} F1 {sq['f1']:.2f}; "
      f"block-sparse fine-tuning kept {len(patterns)} patterns; pruning kept {kept} of {grid} blocks; "
      f"{moved} patterns moved by pattern updates: ok")
PY
