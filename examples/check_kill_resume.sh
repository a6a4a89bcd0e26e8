#!/usr/bin/env bash
# ctest examples.*_kill_resume: trains a small model once without interruption and once killed
# with SIGKILL right after a checkpoint, then resumed with --resume; the training and validation
# losses of every step (and, for sparse runs, every pattern update's statistics) must be
# bit-identical (same thread count).
#   check_kill_resume.sh TRAIN_PROGRAM ENCODE_DATASET SOURCE_DIR WORK_DIR [program args: e.g. 120 steps,
#                        log_every 1, checkpoint_every 20 ...]
# (environment: KILL_AFTER, the step of the checkpoint after which the run is killed, default 60;
#  MIN_LINES, the train/eval lines each run must log, default 400; MIN_UPDATES, the pattern updates)
set -euo pipefail
train=$1 encode=$2 src=$3 work=$4
shift 4
rm -rf "$work" && mkdir -p "$work"
"$encode" --mode gpt -i "$src/data/corpus/valid" -o "$work/train.tok" --vocab "$src/data/gpt2" > /dev/null
common=(--train "$work/train.tok" --valid "$work/train.tok" "$@")
"$train" "${common[@]}" --out "$work/full" > /dev/null 2> "$work/full.err"
"$train" "${common[@]}" --out "$work/killed" > /dev/null 2> "$work/killed.err" &
pid=$!
kill_dir=$(printf 'step-%06d' "${KILL_AFTER:-60}")  # the checkpoint after which the run is killed
for _ in $(seq 1 6000); do [ -d "$work/killed/checkpoints/$kill_dir" ] && break; sleep 0.01; done
kill -9 "$pid" 2> /dev/null || true
status=0; wait "$pid" || status=$?
if [ "$status" -ne 137 ]; then
  echo "FAIL: the run was not killed mid-way (exit status $status); make it longer" >&2; exit 1
fi
last=$(cat "$work/killed/checkpoints/latest")
echo "killed at: $(tail -n 1 "$work/killed/metrics.jsonl" | cut -c1-60)...; latest checkpoint $last"
"$train" "${common[@]}" --out "$work/killed" --resume > "$work/resumed.json" 2> "$work/resumed.err"
grep -q "resuming from" "$work/resumed.err" || { echo "FAIL: no resume message" >&2; cat "$work/resumed.err" >&2; exit 1; }
/usr/bin/python3 - "$work/full/metrics.jsonl" "$work/killed/metrics.jsonl" <<'PY'
import json, os, sys
def losses(p):
    return [(j["kind"], j["step"], j["loss"], json.dumps(j.get("sparsity_update"), sort_keys=True))
            for j in map(json.loads, open(p)) if j.get("kind") in ("train", "eval")]
a, b = losses(sys.argv[1]), losses(sys.argv[2])
if len(a) != len(b) or len(a) < int(os.environ.get("MIN_LINES", "400")):
    sys.exit(f"FAIL: {len(a)} lines uninterrupted, {len(b)} killed+resumed")
diff = [(x, y) for x, y in zip(a, b) if x != y]
if diff:
    sys.exit(f"FAIL: {len(diff)} lines differ, first {diff[0]}")
updates = sum(1 for x in a if x[3] != "null")
need = int(os.environ.get("MIN_UPDATES", "0"))  # sparse runs: the kill must fall between updates
if updates < need:
    sys.exit(f"FAIL: {updates} pattern updates, expected at least {need}")
print(f"OK: {len(a)} train/eval lines ({updates} with pattern updates) bit-identical after kill -9 and resume")
PY
