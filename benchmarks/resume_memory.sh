#!/usr/bin/env bash
# Peak RSS of a resume against the run it resumes (docs/design/precision.md, "Resuming 16-bit slots"):
# GPT-2 small's shapes (12 layers, 12 heads, width 768, vocabulary 50,257) on 1 x 64 tokens per step,
# so that the arenas, not the activations, set the peak. For bf16 and float optimiser slots, one
# process with 2 threads: 2 steps from scratch, then --resume to step 3; and for bf16 slots, the same
# under `mpirun -np 2 --shard-optimizer` (1 thread per rank). Prints one line per run: peak RSS in MiB
# (every rank's, in rank order) and the last training loss (equal across binaries that differ only in
# how they load).
#
#   benchmarks/resume_memory.sh [BUILD_DIR=build] [WORK_DIR=/tmp/sparselm-resume-memory]
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build} work=${2:-/tmp/sparselm-resume-memory}
gpt=$build/examples/gpt_train
[ -x "$gpt" ] || { echo "resume_memory.sh: no $gpt (build the examples first)" >&2; exit 1; }
mkdir -p "$work"
if [ ! -f "$work/train.tok" ]; then
  "$build/examples/encode_dataset" --mode gpt -i "$src/data/corpus/train" -o "$work/train.tok" \
    --validation-input "$src/data/corpus/valid" --validation-output "$work/valid.tok" --vocab "$src/data/gpt2" > /dev/null
fi
mpi=(mpirun -np 2 --oversubscribe --bind-to none -x OMP_NUM_THREADS=1)
[ "$(id -u)" = 0 ] && mpi+=(--allow-run-as-root)

last_loss() {
  /usr/bin/python3 -c 'import json,sys; print([json.loads(l) for l in open(sys.argv[1]) if "\"train\"" in l][-1]["loss"])' "$1"
}

for run in "bf16 1" "float 1" "bf16 2"; do
  read -r slots ranks <<< "$run"
  out=$work/run-$slots-$ranks
  rm -rf "$out"
  args=(--config "$src/configs/gpt-mini-train.json" --train "$work/train.tok" --valid "$work/valid.tok"
    --layers 12 --heads 12 --embd 768 --vocab 50257 --positions 1024 --batch-size 1 --seq-len 64
    --slots "$slots" --eval-batches 1 --warmup-steps 1 --out "$out")
  for phase in fresh resume; do
    steps=(--steps 2); [ "$phase" = resume ] && steps=(--steps 3 --resume)
    rm -f "$out".*.kb
    if [ "$ranks" = 1 ]; then
      /usr/bin/time -f %M -o "$out.0.kb" "$gpt" "${args[@]}" "${steps[@]}" --threads 2 > /dev/null 2>&1
    else
      "${mpi[@]}" bash -c '/usr/bin/time -f %M -o "$0.$OMPI_COMM_WORLD_RANK.kb" "$@"' "$out" "$gpt" "${args[@]}" \
        "${steps[@]}" --threads 1 --shard-optimizer > /dev/null 2>&1
    fi
    rss=$(for f in "$out".*.kb; do echo -n "$(( $(cat "$f") / 1024 )) "; done)
    echo "{\"slots\": \"$slots\", \"ranks\": $ranks, \"phase\": \"$phase\", \"peak_rss_mib\": [${rss% }], \"loss\": $(last_loss "$out/metrics.jsonl")}" |
      sed 's/\([0-9]\) \([0-9]\)/\1, \2/g'
  done
done
