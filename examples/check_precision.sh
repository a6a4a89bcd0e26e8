#!/usr/bin/env bash
# ctest examples.precision: --precision through the programs.
#   - gpt_train trains a tiny GPT for 20 steps in fp32, bf16 and fp16 from the same seed: each
#     summary names its precision, every loss is finite, the 16-bit runs end within 2 % of the fp32
#     run's final training loss and differ from it (the compute really changed), the fp16 run logs
#     its loss scale (dynamic, from 65536) and the bf16 run says what it runs on;
#   - the fp16 run resumed under fp32 (--resume --precision fp32 --steps 30) continues from step 20;
#   - sparse_lm trains 6 steps in bf16 (config key trainer.precision via --set);
#   - an unknown precision is a usage error (exit 2) naming the flag.
#
#   check_precision.sh GPT_TRAIN ENCODE_DATASET SPARSE_LM SOURCE_DIR WORK_DIR
set -euo pipefail
train=$1 encode=$2 sparse_lm=$3 src=$4 work=$5
rm -rf "$work"; mkdir -p "$work"
"$encode" --mode gpt -i "$src/data/corpus/valid" -o "$work/train.tok" --vocab "$src/data/gpt2" > /dev/null
common=(--config "$src/configs/gpt-mini-train.json" --train "$work/train.tok" --valid "$work/train.tok"
        --layers 2 --embd 64 --heads 2 --positions 48 --seq-len 32 --batch-size 4 --warmup-steps 2
        --eval-batches 1 --log-every 1 --threads 2 --seed 5)
for p in fp32 bf16 fp16; do
  "$train" "${common[@]}" --steps 20 --precision "$p" --out "$work/$p" > "$work/$p.json" 2> "$work/$p.err" ||
    { echo "FAIL: gpt_train --precision $p"; cat "$work/$p.err"; exit 1; }
done
grep -q "precision bf16" "$work/bf16.err" || { echo "FAIL: the bf16 run does not say what it runs on"; cat "$work/bf16.err"; exit 1; }
/usr/bin/python3 - "$work" <<'PY'
import json, math, sys
w = sys.argv[1]
def lines(p):
    return [json.loads(l) for l in open(f"{w}/{p}/metrics.jsonl") if l.strip()]
final = {}
for p in ("fp32", "bf16", "fp16"):
    s = json.load(open(f"{w}/{p}.json"))
    assert s["precision"] == p, (p, s.get("precision"))
    run = [l for l in lines(p) if l["kind"] == "run"][0]
    assert run["precision"] == p, (p, run)
    train = [l for l in lines(p) if l["kind"] == "train"]
    assert len(train) == 20 and all(math.isfinite(l["loss"]) for l in train), (p, len(train))
    final[p] = train[-1]["loss"]
    if p == "fp16":
        assert train[0]["loss_scale"] == 65536.0, train[0]
        assert "loss_scale" in s, s
    else:
        assert "loss_scale" not in train[0], (p, train[0])
for p in ("bf16", "fp16"):
    rel = abs(final[p] - final["fp32"]) / final["fp32"]
    assert rel <= 0.02, f"{p}: final loss {final[p]} vs fp32 {final['fp32']} ({100 * rel:.2f} %)"
    assert final[p] != final["fp32"], f"{p}: the same loss as fp32, the compute did not change"
print("final training losses:", final)
PY
"$train" "${common[@]}" --steps 30 --precision fp32 --resume --out "$work/fp16" > "$work/resumed.json" 2> "$work/resumed.err" ||
  { echo "FAIL: resuming the fp16 run under fp32"; cat "$work/resumed.err"; exit 1; }
/usr/bin/python3 -c "
import json, sys
s = json.load(open('$work/resumed.json'))
assert s['resumed_from'] == 20 and s['steps'] == 30 and s['precision'] == 'fp32', s
"
"$sparse_lm" -c "$src/configs/s1-tiny-train.json" --train "$work/train.tok" --valid "$work/train.tok" --vocab 50257 \
  --steps 6 --threads 2 --set trainer.precision=bf16 --out "$work/s1" > "$work/s1.json" 2> "$work/s1.err" ||
  { echo "FAIL: sparse_lm in bf16"; cat "$work/s1.err"; exit 1; }
grep -q '"precision":"bf16"' "$work/s1.json" || { echo "FAIL: sparse_lm summary"; cat "$work/s1.json"; exit 1; }
set +e
"$train" "${common[@]}" --steps 1 --precision fp8 --out "$work/bad" > /dev/null 2> "$work/bad.err"; rc=$?
set -e
[ "$rc" = 2 ] && grep -q -- "--precision" "$work/bad.err" || { echo "FAIL: --precision fp8 gave $rc"; cat "$work/bad.err"; exit 1; }
echo "examples.precision: OK"
