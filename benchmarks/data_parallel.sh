#!/usr/bin/env bash
# Data-parallel throughput and memory on one machine (docs/design/distribution.md): GPT-2 small (12 layers,
# 12 heads, width 768, vocabulary 50,257, dropout 0.1), global batch 8 x 128, AdamW:
#   1 process x 2 threads (batch 8)       against
#   mpirun -np 2, 1 thread per rank (batch 4 per rank), with and without --shard-optimizer,
# the three interleaved REPS times. Prints one JSON line per run (median tokens/s over steps 3..STEPS,
# from the per-step metrics; peak RSS of every process in MiB, in rank order) and the ratios of the medians.
# With MICRO = M > 0, also the stage pipelines over M micro-batches of 8/M rows (docs/design/distribution.md):
#   1 process x 2 threads, M micro-batches, one stage       (the same accumulation, no pipeline)
#   1 process, 2 stages x 1 thread (--pipeline-stages 2)
#   mpirun -np 2, 1 thread per rank, one stage per rank (--pipeline-placement ranks), also with
#     each rank keeping its stage's optimiser state only (--shard-optimizer)
#
#   benchmarks/data_parallel.sh [BUILD_DIR=build] [WORK_DIR=/tmp/sparselm-dp-bench] [REPS=3] [STEPS=8] [MICRO=0]
#
# Run it on a quiet machine (it takes the benchmark lock /tmp/sparselm-cpu.lock).
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build} work=${2:-/tmp/sparselm-dp-bench} reps=${3:-3} steps=${4:-8} micro=${5:-0}
gpt=$build/examples/gpt_train
rm -rf "$work" && mkdir -p "$work"
"$build/examples/encode_dataset" --mode gpt -i "$src/data/corpus/valid" -o "$work/data.tok" --vocab "$src/data/gpt2" \
  > /dev/null
mpi_opts=(--oversubscribe --bind-to none)
[ "$(id -u)" = 0 ] && mpi_opts+=(--allow-run-as-root)
args=(--config "$src/configs/gpt-mini-train.json" --train "$work/data.tok" --valid "$work/data.tok" --layers 12 --heads 12 --embd 768
      --positions 1024 --seq-len 128 --steps "$steps" --warmup-steps 1 --eval-every 0 --eval-batches 1 --log-every 1
      --checkpoint-every 0)
# peak RSS (MiB) of a command: "peak_rss RANK MIB" (ru_maxrss of its children) on stderr; every
# process (each rank) runs under its own wrapper
cat > "$work/peak.py" <<'PY'
import os, resource, subprocess, sys
r = subprocess.run(sys.argv[1:])
rank = os.environ.get("OMPI_COMM_WORLD_RANK", "0")
print("peak_rss", rank, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024, file=sys.stderr)
sys.exit(r.returncode)
PY
peak=(/usr/bin/python3 "$work/peak.py")
run() {  # name, then the command
  local name=$1; shift
  local out="$work/$name-$rep"
  "$@" --out "$out" > /dev/null 2> "$out.err" || { cat "$out.err" >&2; exit 1; }
  /usr/bin/python3 - "$out/metrics.jsonl" "$name" "$out.err" <<'PY'
import json, statistics, sys
steps = [j for j in map(json.loads, open(sys.argv[1])) if j.get("kind") == "train" and j["step"] >= 3]
rss = [int(m) for _, m in sorted((int(r), m) for k, r, m in (l.split() for l in open(sys.argv[3]) if l.startswith("peak_rss ")))]
print(json.dumps({"run": sys.argv[2], "tokens_per_s": statistics.median(j["tokens_per_s"] for j in steps),
                  "steps": len(steps), "peak_rss_mib": rss}))
PY
  rm -rf "$out/checkpoints"  # the final save (1.5 GB for GPT-2 small), not needed here
}
exec 9> /tmp/sparselm-cpu.lock
flock 9
for rep in $(seq 1 "$reps"); do
  run one_process_2_threads "${peak[@]}" "$gpt" "${args[@]}" --batch-size 8 --threads 2
  run mpi_2_ranks_1_thread mpirun -np 2 "${mpi_opts[@]}" "${peak[@]}" "$gpt" "${args[@]}" --batch-size 4 --threads 1
  run mpi_2_ranks_1_thread_sharded mpirun -np 2 "${mpi_opts[@]}" "${peak[@]}" "$gpt" "${args[@]}" --batch-size 4 \
    --threads 1 --shard-optimizer
  if [ "$micro" -gt 0 ]; then
    pipe=(--batch-size $((8 / micro)) --accumulation "$micro")
    run one_process_2_threads_micro "${peak[@]}" "$gpt" "${args[@]}" "${pipe[@]}" --threads 2
    run one_process_2_stages_threads "${peak[@]}" "$gpt" "${args[@]}" "${pipe[@]}" --threads 2 --pipeline-stages 2
    run mpi_2_ranks_2_stages mpirun -np 2 "${mpi_opts[@]}" "${peak[@]}" "$gpt" "${args[@]}" "${pipe[@]}" --threads 1 \
      --pipeline-stages 2 --pipeline-placement ranks
    run mpi_2_ranks_2_stages_sharded mpirun -np 2 "${mpi_opts[@]}" "${peak[@]}" "$gpt" "${args[@]}" "${pipe[@]}" \
      --threads 1 --pipeline-stages 2 --pipeline-placement ranks --shard-optimizer
  fi
done | tee "$work/runs.jsonl"
/usr/bin/python3 - "$work/runs.jsonl" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
med = {n: statistics.median(r["tokens_per_s"] for r in runs if r["run"] == n) for n in {r["run"] for r in runs}}
base = med["one_process_2_threads"]
for n in sorted(med):
    print(f"{n}: median {med[n]:.1f} tokens/s, {med[n] / base:.3f}x one process")
PY
