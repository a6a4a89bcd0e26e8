#!/usr/bin/env bash
# ctest examples.time_to_quality: the parts of the time-to-quality race (benchmarks/time_to_quality.sh)
# at a tiny size, on the bundled corpus:
#   - encode_dataset --vocab-limit 256 writes both splits with vocabulary 256;
#   - gpt_train --stop-at-loss stops at the first evaluation at or below the loss (a loss every
#     evaluation beats: at the first one after step 0; summary "reached_loss_at"), and runs every step
#     when none reaches it, and is refused without validation data; metrics lines carry wall_seconds,
#     which never decrease;
#   - the PyTorch peer (benchmarks/peers/torch_gpt_train.py) reads the same token files into as many
#     training windows as gpt_train, its first evaluation (the same windows, an untrained model of
#     the same shape) is within 2 % of ours, and its port of the shuffled order gives the golden
#     values that tests/data/test_lm_batches.cpp holds index_permutation to;
#   - benchmarks/time_to_quality.py turns the two runs into the race's table and results line.
#   check_time_to_quality.sh GPT_TRAIN ENCODE_DATASET SOURCE_DIR WORK_DIR
set -euo pipefail
gpt=$1 encode=$2 src=$3 work=$4
rm -rf "$work"; mkdir -p "$work"
fail() { echo "check_time_to_quality.sh: FAIL: $*" >&2; exit 1; }

"$encode" --mode gpt -i "$src/data/corpus/valid/sotu" -o "$work/train.tok" --validation-input "$src/data/corpus/valid/moby_dick.txt" \
  --validation-output "$work/valid.tok" --vocab "$src/data/gpt2" --vocab-limit 256 > "$work/encode.txt"
grep -q "train.tok: .*vocab 256" "$work/encode.txt" || fail "training split not limited: $(cat "$work/encode.txt")"
grep -q "valid.tok: .*vocab 256" "$work/encode.txt" || fail "validation split not limited: $(cat "$work/encode.txt")"

/usr/bin/python3 -c "import json,sys; c=json.load(open(sys.argv[1])); c.update(vocab_size=256, n_positions=32); json.dump(c, open(sys.argv[2], 'w'))" \
  "$src/configs/gpt-tiny.json" "$work/model.json"
args=(--config "$src/configs/gpt-mini-train.json" --set "model=$work/model.json" --train "$work/train.tok" --valid "$work/valid.tok"
      --batch-size 4 --seq-len 32 --order shuffled --seed 7 --steps 12 --warmup-steps 2 --eval-every 4 --eval-batches 2 --log-every 2
      --threads 1 --set checkpoints=false)
# without validation data there is nothing to reach: refused before any work, naming the key
/usr/bin/python3 -c "import json,sys; c=json.load(open(sys.argv[1])); c['data'].pop('valid', None); c['model'] = 'model.json'; json.dump(c, open(sys.argv[2], 'w'))" \
  "$src/configs/gpt-mini-train.json" "$work/novalid-run.json"
if "$gpt" --config "$work/novalid-run.json" --train "$work/train.tok" --steps 2 --warmup-steps 1 --seq-len 32 --threads 1 --out "$work/novalid" --stop-at-loss 5 > /dev/null 2> "$work/novalid.err"; then
  fail "--stop-at-loss without validation data ran"
fi
grep -q "stop_at_loss (--stop-at-loss) needs validation data" "$work/novalid.err" || fail "no validation: $(cat "$work/novalid.err")"
[[ ! -e "$work/novalid/metrics.jsonl" ]] || fail "--stop-at-loss without validation data wrote metrics"
"$gpt" "${args[@]}" --out "$work/reach" --stop-at-loss 1000 > "$work/reach.json" 2> "$work/reach.err"
"$gpt" "${args[@]}" --out "$work/full" --stop-at-loss 0.001 > "$work/full.json" 2> "$work/full.err"
/usr/bin/python3 - "$work" <<'PY'
import json, sys
w = sys.argv[1]
reach, full = (json.load(open(f"{w}/{n}.json")) for n in ("reach", "full"))
assert reach.get("reached_loss_at") == 4 and reach["steps"] == 4, f"stop_at_loss 1000: {reach}"
assert "reached_loss_at" not in full and full["steps"] == 12, f"stop_at_loss 0.001: {full}"
lines = [json.loads(l) for l in open(f"{w}/full/metrics.jsonl")]
for kind in ("train", "eval"):
    clock = [l["wall_seconds"] for l in lines if l["kind"] == kind]
    assert clock and all(b >= a for a, b in zip(clock, clock[1:])), f"{kind} wall_seconds: {clock}"
run = next(l for l in lines if l["kind"] == "run")
assert run["config"]["stop_at_loss"] == 0.001, run["config"]
print("stop_at_loss and wall_seconds: ok")
PY

/usr/bin/python3 - "$src/benchmarks/peers" <<'PY'
import sys
sys.path.insert(0, sys.argv[1]); sys.argv = sys.argv[:1]
import torch_gpt_train as peer
p = peer.Permutation(1000, 1234, 0)
got = [p(i) for i in range(8)]
assert got == [834, 386, 554, 477, 211, 777, 719, 639], f"shuffled order: {got}"
print("peer's shuffled order: ok")
PY
peer=(/usr/bin/python3 "$src/benchmarks/peers/torch_gpt_train.py" --config "$work/model.json" --train "$work/train.tok"
      --valid "$work/valid.tok" --batch 4 --seq 32 --steps 8 --warmup-steps 2 --eval-every 4 --eval-batches 2 --threads 1
      --order shuffled --data-seed 7)
mkdir -p "$work/race"
"${peer[@]}" --metrics "$work/race/pytorch.jsonl" > /dev/null
echo 8 > "$work/race/steps"
cp -r "$work/full" "$work/race/dense-fp32-seed1"
cp "$work/full.json" "$work/race/dense-fp32-seed1/summary.json"  # as time_to_quality.sh leaves a finished run
/usr/bin/python3 - "$work" <<'PY'
import json, sys
w = sys.argv[1]
peer = [json.loads(l) for l in open(f"{w}/race/pytorch.jsonl")]
ours = [json.loads(l) for l in open(f"{w}/full/metrics.jsonl")]
pr, orun = peer[0], next(l for l in ours if l["kind"] == "run")
assert pr["train_windows"] == orun["train_windows"], (pr["train_windows"], orun["train_windows"])
p0 = next(l["loss"] for l in peer if l["kind"] == "eval" and l["step"] == 0)
o0 = next(l["loss"] for l in ours if l["kind"] == "eval" and l["step"] == 0)
assert abs(p0 - o0) < 0.02 * o0, f"first evaluation: PyTorch {p0}, ours {o0}"
assert [l["step"] for l in peer if l["kind"] == "eval"] == [0, 4, 8]
print(f"peer: {pr['train_windows']} windows as ours; first evaluation {p0:.4f} vs ours {o0:.4f}")
PY
/usr/bin/python3 "$src/benchmarks/time_to_quality.py" "$work/race" --variants dense-fp32 --seeds 1 --json "$work/results.jsonl" \
  --plot "$work/race.png" > "$work/table.txt"
grep -q "^| pytorch | 1 of 1 |" "$work/table.txt" || fail "no PyTorch row: $(cat "$work/table.txt")"
grep -q "^| dense-fp32 |" "$work/table.txt" || fail "no dense-fp32 row: $(cat "$work/table.txt")"
[ "$(wc -l < "$work/results.jsonl")" = 2 ] || fail "expected 2 results lines"
echo "check_time_to_quality.sh: ok"
