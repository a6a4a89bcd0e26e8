#!/usr/bin/env bash
# The main job's script, short (scripts/main_job.sh: what ./scripts/run.sh runs after the set-up and
# the build): a fresh run of 12 steps into a new OUT, then the same command with STEPS=16, which
# must resume from step 12. Checks the summary, the validation line, the curves and the sample.
# Each evaluation reads 4 batches of the validation split (EVAL_BATCHES=4; the main job reads all of it,
# about 80 batches, which would be most of this test's time).
#   check_main_job.sh BUILD_DIR SOURCE_DIR WORK_DIR
set -euo pipefail
build=$1 src=$2 work=$3
rm -rf "$work"
mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }
run() {
  env BUILD_DIR="$build" OUT="$work/run" DATA="$work/data" STEPS="$1" THREADS=2 EVAL_BATCHES=4 "$src/scripts/main_job.sh" \
    > "$work/log$1" 2>&1 || { cat "$work/log$1"; fail "main_job.sh with STEPS=$1 exited non-zero"; }
}
summary() {  # field of the summary.json the script left in OUT
  /usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get(sys.argv[2]))' "$work/run/summary.json" "$1"
}
run 12
grep -q "^validation perplexity .*unigram baseline" "$work/log12" || fail "no validation line: $(tail -5 "$work/log12")"
[ "$(summary steps)" = 12 ] || fail "summary steps $(summary steps), expected 12"
case "$(summary resumed_from)" in None | 0) ;; *) fail "a fresh run says it resumed from $(summary resumed_from)" ;; esac
grep -q "new tokens in" "$work/log12" || fail "no generated sample"
if command -v gnuplot > /dev/null; then [ -s "$work/run/curves.png" ] || fail "no curves.png"; fi
run 16
grep -q "resuming from .*step-000012" "$work/log16" || fail "the second run did not resume: $(head -20 "$work/log16")"
[ "$(summary steps)" = 16 ] || fail "summary steps $(summary steps), expected 16"
[ "$(summary resumed_from)" = 12 ] || fail "summary resumed_from $(summary resumed_from), expected 12"
echo "main job script: fresh 12 steps and resumed to 16: ok"
