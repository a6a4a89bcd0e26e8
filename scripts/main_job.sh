#!/usr/bin/env bash
# The main job after the set-up and the build (scripts/run.sh does those, then runs this): encodes
# the bundled corpus with GPT-2's tokenizer, trains configs/gpt-mini-train.json (or resumes the run
# in OUT when it has checkpoints), prints validation perplexity against the unigram baseline, plots
# the curves (with gnuplot) and prints a generated sample.
#
# Environment: BUILD_DIR (build; holds examples/encode_dataset, gpt_train, generate), OUT
# (runs/gpt-mini), DATA (runs/data: the encoded token files), STEPS (the config's 600), THREADS (all
# cores), EVAL_BATCHES (the config's 0: the whole validation split). Paths are relative to the
# repository's root.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
out=${OUT:-runs/gpt-mini}
data=${DATA:-runs/data}

echo "== encoding the bundled corpus (data/corpus: Moby-Dick and State of the Union addresses)"
mkdir -p "$data"
"$build/examples/encode_dataset" --mode gpt -i data/corpus/train -o "$data/train.tok" \
  --validation-input data/corpus/valid --validation-output "$data/valid.tok" --vocab data/gpt2

echo "== training a GPT (configs/gpt-mini-train.json) into $out"
mkdir -p "$out"
args=(--config configs/gpt-mini-train.json --train "$data/train.tok" --valid "$data/valid.tok" --out "$out")
[ -n "${STEPS:-}" ] && args+=(--steps "$STEPS" --warmup-steps $(( STEPS / 20 + 1 )))
[ -n "${THREADS:-}" ] && args+=(--threads "$THREADS")
[ -n "${EVAL_BATCHES:-}" ] && args+=(--eval-batches "$EVAL_BATCHES")
if [ -f "$out/checkpoints/latest" ]; then
  echo "   ($out already has checkpoints: resuming that run)"
  args+=(--resume)
fi
# The summary goes into the run directory only once the program has finished: a fresh run refuses an
# --out that already holds files, and tee would create summary.json there before gpt_train starts.
summary=$(mktemp)
trap 'rm -f "$summary"' EXIT  # not left in /tmp when gpt_train fails
"$build/examples/gpt_train" "${args[@]}" | tee "$summary"
mv "$summary" "$out/summary.json"

echo "== validation"
/usr/bin/python3 - "$out/summary.json" "$out/metrics.jsonl" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
lines = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
u = s.get("unigram_perplexity") or next((l["unigram_perplexity"] for l in lines if l.get("kind") == "run"), 0)
v = s.get("valid") or next((l for l in reversed(lines) if l.get("kind") == "eval"), None)  # a finished run
if v:
    speed = f"{s['tokens_per_s']:.0f} tokens/s, " if s.get("tokens") else ""
    print(f"validation perplexity {v['perplexity']:.1f} (unigram baseline {u:.1f}, {u / v['perplexity']:.1f}x lower), "
          f"token accuracy {100 * v['accuracy']:.1f} %, {speed}checkpoint {s.get('checkpoint')}")
PY

if command -v gnuplot > /dev/null; then
  /usr/bin/python3 scripts/plot_metrics.py "$out/metrics.jsonl" -o "$out/curves.png"  # prints the PNG's path
fi

echo "== a sample from the trained model"
"$build/examples/generate" --checkpoint "$out" \
  --prompt "It was the best of" --max-new-tokens 60 --temperature 0.8 --top-k 40 --seed 1
echo
