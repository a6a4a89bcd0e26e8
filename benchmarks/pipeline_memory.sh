#!/usr/bin/env bash
# Memory of each rank of a GPT-2 small pipeline over 2 ranks (benchmarks/results/2026-11-29-zen4-distributed.md, "Stage-local
# ranks"): the arguments of benchmarks/data_parallel.sh's pipeline rows (12 layers, width 768,
# vocabulary 50,257, 8 micro-batches of 1 row x 128, one thread per rank), with and without
# --shard-optimizer. Samples every rank's resident set (VmRSS, /proc) every 0.3 s while it trains
# and prints, per run and rank, the largest sample and the median of the middle half of the run
# (the steady state of the training steps), in MiB, with the run line's per-rank figures.
#
#   benchmarks/pipeline_memory.sh [BUILD_DIR=build] [WORK_DIR=/tmp/sparselm-pipeline-memory] [STEPS=6]
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build} work=${2:-/tmp/sparselm-pipeline-memory} steps=${3:-6}
gpt=$(cd "$(dirname "$build/examples/gpt_train")" && pwd)/gpt_train
rm -rf "$work" && mkdir -p "$work"
"$build/examples/encode_dataset" --mode gpt -i "$src/data/corpus/valid" -o "$work/data.tok" --vocab "$src/data/gpt2" \
  > /dev/null
mpi_opts=(--oversubscribe --bind-to none)
[ "$(id -u)" = 0 ] && mpi_opts+=(--allow-run-as-root)
args=(--config "$src/configs/gpt-mini-train.json" --train "$work/data.tok" --valid "$work/data.tok" --layers 12 --heads 12
      --embd 768 --positions 1024 --seq-len 128 --steps "$steps" --warmup-steps 1 --eval-every 0 --eval-batches 1
      --log-every 1 --checkpoint-every 0 --batch-size 1 --accumulation 8 --threads 1 --pipeline-stages 2
      --pipeline-placement ranks)
exec 9> /tmp/sparselm-cpu.lock
flock 9
for shard in "" --shard-optimizer; do
  name=pipeline_2_ranks${shard:+_sharded}
  out="$work/$name"
  mpirun -np 2 "${mpi_opts[@]}" "$gpt" "${args[@]}" $shard --out "$out" > /dev/null 2> "$out.err" &
  job=$!
  : > "$out.rss"
  while kill -0 "$job" 2> /dev/null; do
    for p in $(pgrep -f "^$gpt " || true); do
      r=$(awk '/^VmRSS/ {print $2}' "/proc/$p/status" 2> /dev/null || true)
      [ -n "$r" ] && echo "$p $r" >> "$out.rss"
    done
    sleep 0.3
  done
  wait "$job" || { cat "$out.err" >&2; exit 1; }
  rm -rf "$out/checkpoints"
  /usr/bin/python3 - "$name" "$out.rss" "$out/metrics.jsonl" <<'PY'
import collections, json, statistics, sys
by = collections.defaultdict(list)
for line in open(sys.argv[2]):
    pid, kib = line.split()
    by[int(pid)].append(int(kib) / 1024)
run = next(j for j in map(json.loads, open(sys.argv[3])) if j.get("kind") == "run")
ranks = []
for pid in sorted(by):  # mpirun starts rank 0 first
    v = by[pid]
    mid = v[len(v) // 4: max(len(v) // 4 + 1, 3 * len(v) // 4)]
    ranks.append({"max_mib": round(max(v)), "steady_mib": round(statistics.median(mid)), "samples": len(v)})
print(json.dumps({"run": sys.argv[1], "ranks": ranks, "optimizer_state_mib": run.get("optimizer_state_mib"),
                  "stage_weights_and_gradients_mib": run.get("stage_weights_and_gradients_mib")}))
PY
done
