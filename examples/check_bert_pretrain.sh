#!/usr/bin/env bash
# bert_data + bert_pretrain end to end on the bundled validation text (small and quick):
#   1. phase 1 (sequence 64): 20 steps, checkpoints at 10 and 20; MLM and NSP metrics logged;
#   2. exact resume: the run resumed from its step-10 checkpoint logs bit-identical metrics
#      (dropout on) for steps 11-20;
#   3. phase 2 (sequence 128) starts from phase 1's weights;
#   4. a dynamic block-sparse run logs its pattern updates;
#   5. a fresh run in a used --out is refused without touching it; --overwrite (with dynamic loss
#      scaling) starts it again;
#   6. gradient accumulation: 5 steps of 2 micro-batches reach phase 1's data position of step 10.
#   check_bert_pretrain.sh BERT_DATA BERT_PRETRAIN SOURCE_DIR WORK_DIR
set -euo pipefail
data=$1 train=$2 src=$3 work=$4
rm -rf "$work"
mkdir -p "$work"
"$data" -i "$src/data/corpus/valid" -o "$work/p1.bex" --seq-len 64 --max-predictions 10 --dupe-factor 2 > /dev/null
"$data" -i "$src/data/corpus/valid" -o "$work/p2.bex" --seq-len 128 --max-predictions 20 --dupe-factor 1 > /dev/null
common=(--model "$src/configs/bert-tiny.json" --batch-size 8 --lr 2e-3 --eval-batches 2 --log-every 1 --threads 2)
"$train" "${common[@]}" --train "$work/p1.bex" --valid "$work/p1.bex" --out "$work/phase1" --steps 20 \
  --checkpoint-every 10 --eval-every 10 > "$work/phase1.json" 2> "$work/phase1.log"
grep -q '"steps":20' "$work/phase1.json" || { echo "FAIL: phase 1 summary: $(cat "$work/phase1.json")"; exit 1; }

# resume from step 10 in a copy of the run
cp -r "$work/phase1" "$work/resumed"
rm -rf "$work/resumed/checkpoints/step-000020"
echo "step-000010" > "$work/resumed/checkpoints/latest"
"$train" "${common[@]}" --train "$work/p1.bex" --valid "$work/p1.bex" --out "$work/resumed" --steps 20 \
  --checkpoint-every 10 --eval-every 10 --resume > /dev/null 2> "$work/resumed.log"

"$train" "${common[@]}" --train "$work/p2.bex" --valid "$work/p2.bex" --out "$work/phase2" --steps 4 \
  --init-from "$work/phase1/checkpoints" > "$work/phase2.json" 2> "$work/phase2.log"
grep -q "model weights from $work/phase1/checkpoints/step-000020" "$work/phase2.log" ||
  { echo "FAIL: phase 2 did not start from phase 1: $(cat "$work/phase2.log")"; exit 1; }

# gradient accumulation: a step of 2 micro-batches of 8 draws 16 examples (5 steps: phase 1's 10)
"$train" "${common[@]}" --train "$work/p1.bex" --out "$work/acc" --steps 5 --accumulation 2 --eval-every 0 \
  > "$work/acc.json" 2> "$work/acc.log"

"$train" "${common[@]}" --train "$work/p1.bex" --out "$work/sparse" --steps 12 --block-size 16 --sparsity 0.75 \
  --update-period 5 --eval-every 0 > "$work/sparse.json" 2> "$work/sparse.log"

# checkpoints=false: the run trains and logs, and writes no checkpoint at all
"$train" "${common[@]}" --train "$work/p1.bex" --out "$work/nockpt" --steps 2 --eval-every 0 --set checkpoints=false \
  > "$work/nockpt.json" 2> "$work/nockpt.log"
[ "$(grep -c '"kind":"train"' "$work/nockpt/metrics.jsonl")" = 2 ] || { echo "FAIL: checkpoints=false: no training lines"; exit 1; }
[ -z "$(ls -A "$work/nockpt/checkpoints" 2> /dev/null)" ] || { echo "FAIL: checkpoints=false wrote a checkpoint"; exit 1; }

# a used run directory: a fresh run is refused (nothing touched), --overwrite starts again;
# dynamic loss scaling logs its scale
before=$(md5sum "$work/phase2/metrics.jsonl")
if "$train" "${common[@]}" --train "$work/p2.bex" --out "$work/phase2" --steps 2 > /dev/null 2> "$work/used.log"; then
  echo "FAIL: a fresh run in a used --out was accepted"; exit 1
fi
grep -q "is not empty" "$work/used.log" || { echo "FAIL: used --out: $(cat "$work/used.log")"; exit 1; }
[ "$(md5sum "$work/phase2/metrics.jsonl")" = "$before" ] || { echo "FAIL: the refused run changed metrics.jsonl"; exit 1; }
"$train" "${common[@]}" --train "$work/p2.bex" --out "$work/phase2" --steps 2 --eval-every 0 --overwrite \
  --loss-scaling dynamic > "$work/overwrite.json" 2> "$work/overwrite.log"
grep -q '"loss_scale":65536' "$work/phase2/metrics.jsonl" ||
  { echo "FAIL: no loss_scale in the overwritten run's metrics"; exit 1; }

/usr/bin/python3 - "$work" <<'PY'
import json, struct, sys
w = sys.argv[1]
def data_position(ckpt):
    b = open(f"{w}/{ckpt}/training_state.safetensors", "rb").read()
    meta = json.loads(b[8:8 + struct.unpack("<Q", b[:8])[0]])["__metadata__"]
    return json.loads(meta["sparselm.training_state"])["run"]["data"]
acc, ref = data_position("acc/checkpoints/step-000005"), data_position("phase1/checkpoints/step-000010")
assert acc == ref, f"FAIL: 5 steps of 2 x 8 examples reached {acc}, 10 steps of 8 {ref}"
def lines(run, kind):
    return [json.loads(l) for l in open(f"{w}/{run}/metrics.jsonl") if json.loads(l).get("kind") == kind]
train = lines("phase1", "train")
assert len(train) == 20, f"FAIL: {len(train)} train lines in phase 1"
for k in ("mlm_loss", "mlm_accuracy", "nsp_loss", "nsp_accuracy", "samples_per_s", "tokens_per_s", "lr"):
    assert k in train[-1], f"FAIL: train line without {k}: {train[-1]}"
a = [(j["step"], j["loss"], j["grad_norm"]) for j in train if j["step"] > 10]
b = [(j["step"], j["loss"], j["grad_norm"]) for j in lines("resumed", "train") if j["step"] > 10]
assert a == b and len(a) == 10, f"FAIL: resumed run differs: {a[:2]} vs {b[:2]}"
ea = [(j["step"], j["loss"]) for j in lines("phase1", "eval")]
eb = [(j["step"], j["loss"]) for j in lines("resumed", "eval")]
assert ea == eb, f"FAIL: evaluations differ after resume: {ea} vs {eb}"
ups = [j["sparsity_update"]["step"] for j in lines("sparse", "train") if "sparsity_update" in j]
assert ups == [5, 10], f"FAIL: pattern updates at {ups}, expected [5, 10]"
print(f"OK: phase 1 MLM {train[0]['mlm_loss']:.3f} -> {train[-1]['mlm_loss']:.3f}, resume bit-identical over "
      f"steps 11-20, phase 2 from phase 1, sparse updates at {ups}")
PY
