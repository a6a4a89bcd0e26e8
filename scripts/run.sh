#!/usr/bin/env bash
# The main job, on a fresh Debian 12 machine: installs what it needs, builds the examples, encodes
# the bundled public-domain corpus with GPT-2's tokenizer, trains a small GPT on it for a few
# minutes on all cores (progress bar on a terminal), shows validation perplexity against the
# unigram baseline, saves checkpoints, plots the curves and prints a generated sample.
#
#   ./scripts/run.sh                    # runs/gpt-mini: config.json, metrics.jsonl, checkpoints/, curves.png
#   STEPS=100 ./scripts/run.sh          # shorter
#   ./scripts/run.sh                    # again: resumes (or just reports) the run in runs/gpt-mini
#
# Environment: BUILD_DIR (build), OUT (runs/gpt-mini), STEPS (the config's 600), THREADS (all cores).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
build=${BUILD_DIR:-build}
out=${OUT:-runs/gpt-mini}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DSPARSELM_BUILD_EXAMPLES=ON -DSPARSELM_BUILD_TESTS=OFF \
  -DSPARSELM_BUILD_BENCHMARKS=OFF > /dev/null
cmake --build "$build" -j "$(nproc)" --target encode_dataset gpt_train generate

echo "== encoding the bundled corpus (data/corpus: Moby-Dick and State of the Union addresses)"
"$build/examples/encode_dataset" --mode gpt -i data/corpus/train -o runs/data/train.tok \
  --validation-input data/corpus/valid --validation-output runs/data/valid.tok --vocab data/gpt2

echo "== training a GPT (configs/gpt-mini-train.json) into $out"
mkdir -p "$out"
args=(--config configs/gpt-mini-train.json --out "$out")
[ -n "${STEPS:-}" ] && args+=(--steps "$STEPS" --warmup-steps $(( STEPS / 20 + 1 )))
[ -n "${THREADS:-}" ] && args+=(--threads "$THREADS")
if [ -f "$out/checkpoints/latest" ]; then
  echo "   ($out already has checkpoints: resuming that run)"
  args+=(--resume)
fi
"$build/examples/gpt_train" "${args[@]}" | tee "$out/summary.json"

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
