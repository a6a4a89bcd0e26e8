#!/usr/bin/env bash
# ctest examples.pipeline: stage pipelining through the programs (policies/pipeline.hpp).
#   - gpt_train trains a 4-layer GPT for 8 steps of 4 micro-batches on one stage and on 2 stages
#     (1F1B) and 3 stages (GPipe, --set trainer.pipeline.split=[1,3]): every training loss and the
#     final validation loss agree within 1e-5 relative (the staged gradients differ from the
#     sequential ones only in the rounding of the tied embedding's two contributions), the run line
#     and the summary describe the pipeline (stages, split, predicted and measured bubble);
#   - the 2-stage run stopped at step 4 and resumed (--resume) ends bit for bit on the uninterrupted
#     run (the schedule's total_steps fixed at 8);
#   - sparse_lm trains 4 steps on 2 stages;
#   - more stages than blocks, and a split out of range, are errors naming trainer.pipeline before
#     any step; --pipeline-schedule with an unknown order is a usage error (exit 2).
#
#   check_pipeline.sh GPT_TRAIN ENCODE_DATASET SPARSE_LM SOURCE_DIR WORK_DIR
set -euo pipefail
train=$1 encode=$2 sparse_lm=$3 src=$4 work=$5
rm -rf "$work"; mkdir -p "$work"
"$encode" --mode gpt -i "$src/data/corpus/valid" -o "$work/train.tok" --vocab "$src/data/gpt2" > /dev/null
common=(--config "$src/configs/gpt-mini-train.json" --train "$work/train.tok" --valid "$work/train.tok"
        --layers 4 --embd 64 --heads 2 --positions 48 --seq-len 32 --batch-size 2 --accumulation 4
        --warmup-steps 2 --eval-every 8 --eval-batches 2 --log-every 1 --threads 2 --seed 5
        --set schedule.total_steps=8)
run() {  # name, extra flags...
  local name=$1; shift
  "$train" "${common[@]}" --out "$work/$name" "$@" > "$work/$name.json" 2> "$work/$name.err" ||
    { echo "FAIL: gpt_train $name $*"; cat "$work/$name.err"; exit 1; }
}
run one --steps 8
run two --steps 8 --pipeline-stages 2
run three --steps 8 --pipeline-stages 3 --pipeline-schedule gpipe --set 'trainer.pipeline.split=[1,3]'
run resumed --steps 4 --pipeline-stages 2
run resumed --steps 8 --pipeline-stages 2 --resume
grep -q "pipeline of 2 stages (1f1b) over 4 micro-batches" "$work/two.err" ||
  { echo "FAIL: the 2-stage run does not describe its pipeline"; cat "$work/two.err"; exit 1; }
/usr/bin/python3 "$src/examples/compare_pipeline_runs.py" "$work" one threads two:2:1f1b three:3:gpipe:1,3
/usr/bin/python3 - "$work" <<'PY'
import json, sys
w = sys.argv[1]
r, two = (json.load(open(f"{w}/{p}.json")) for p in ("resumed", "two"))
assert r["resumed_from"] == 4 and r["steps"] == 8 and r["pipeline"]["stages"] == 2, r
assert r["valid"]["loss"] == two["valid"]["loss"], (r["valid"], two["valid"])
print("the resumed 2-stage run ends on", r["valid"]["loss"])
PY
"$sparse_lm" -c "$src/configs/s1-tiny-train.json" --train "$work/train.tok" --valid "$work/train.tok" --vocab 50257 \
  --steps 4 --threads 2 --accumulation 2 --pipeline-stages 2 --out "$work/s1" > "$work/s1.json" 2> "$work/s1.err" ||
  { echo "FAIL: sparse_lm on 2 stages"; cat "$work/s1.err"; exit 1; }
grep -q '"stages":2' "$work/s1.json" || { echo "FAIL: sparse_lm summary"; cat "$work/s1.json"; exit 1; }
set +e
"$train" "${common[@]}" --steps 2 --pipeline-stages 5 --out "$work/five" > /dev/null 2> "$work/five.err"; rc=$?
[ $rc -eq 1 ] && grep -q "trainer.pipeline: 5 stages for 4 blocks" "$work/five.err" && ! [ -e "$work/five/checkpoints" ] ||
  { echo "FAIL: 5 stages for 4 blocks (exit $rc)"; cat "$work/five.err"; exit 1; }
"$train" "${common[@]}" --steps 2 --pipeline-stages 2 --set 'trainer.pipeline.split=[4]' --out "$work/split" \
  > /dev/null 2> "$work/split.err"; rc=$?
[ $rc -eq 1 ] && grep -q "split entry 0 (4)" "$work/split.err" ||
  { echo "FAIL: split out of range (exit $rc)"; cat "$work/split.err"; exit 1; }
"$train" "${common[@]}" --steps 2 --pipeline-stages 2 --pipeline-schedule zigzag --out "$work/zz" \
  > /dev/null 2> "$work/zz.err"; rc=$?
[ $rc -eq 2 ] && grep -q "pipeline-schedule" "$work/zz.err" ||
  { echo "FAIL: unknown schedule (exit $rc)"; cat "$work/zz.err"; exit 1; }
echo "examples.pipeline: ok"
