#!/usr/bin/env bash
# Stage pipelining on one machine (docs/design/distribution.md): the GPT-2 small training step (8 x 128
# global batch, AdamW, bench_gpt_step) as
#   1 stage  x 2 threads, the batch in one micro-batch            (the usual step)
#   1 stage  x 2 threads, M micro-batches of 8/M rows             (the same accumulation, no pipeline)
#   2 stages x 1 thread,  M micro-batches, 1F1B and GPipe          (the split balanced by measured time)
# for M in MICRO (default "4 8"), the runs interleaved REPS times. Each run prints bench_gpt_step's
# JSON line (median step over STEPS steps after one warm-up step; the pipeline's split, predicted
# and measured bubble); the script ends with the median tokens/s of each configuration and its
# ratio to the usual step.
#
#   benchmarks/pipeline.sh [BUILD_DIR=build] [REPS=3] [STEPS=3] [MICRO="4 8"]
#
# Run it on a quiet machine (it takes the benchmark lock /tmp/sparselm-cpu.lock).
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build} reps=${2:-3} steps=${3:-3} micro=${4:-"4 8"}
bench=("$build/benchmarks/bench_gpt_step" --config "$src/configs/gpt2-small.json" --batch 8 --seq 128
       --steps "$steps" --warmup 1 --threads 2)
out=$(mktemp)
exec 9> /tmp/sparselm-cpu.lock
flock 9
for rep in $(seq "$reps"); do
  "${bench[@]}" | sed 's/^/{"name": "1 stage x 2 threads, 1 micro-batch", /; s/{"impl"/"impl"/' | tee -a "$out"
  for m in $micro; do
    "${bench[@]}" --micro-batches "$m" |
      sed "s/^/{\"name\": \"1 stage x 2 threads, $m micro-batches\", /; s/{\"impl\"/\"impl\"/" | tee -a "$out"
    for order in 1f1b gpipe; do
      "${bench[@]}" --micro-batches "$m" --pipeline-stages 2 --pipeline-schedule "$order" |
        sed "s/^/{\"name\": \"2 stages x 1 thread, $m micro-batches, $order\", /; s/{\"impl\"/\"impl\"/" | tee -a "$out"
    done
  done
done
/usr/bin/python3 - "$out" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
names = list(dict.fromkeys(r["name"] for r in runs))
base = statistics.median(r["tokens_per_second"] for r in runs if r["name"] == names[0])
print(f"{'configuration':48} {'tok/s':>8} {'ratio':>6} {'bubble pred/meas':>17}  split")
for n in names:
    rs = [r for r in runs if r["name"] == n]
    tps = statistics.median(r["tokens_per_second"] for r in rs)
    pb = statistics.median(r["predicted_bubble"] for r in rs)
    mb = statistics.median(r["measured_bubble"] for r in rs)
    print(f"{n:48} {tps:8.1f} {tps / base:6.3f} {pb:8.3f}/{mb:.3f}  {rs[-1]['split']}")
print("FMA peak (GFLOP/s, 2 threads, per run):", [round(r["fma_peak_gflops"]) for r in runs])
PY
rm -f "$out"
