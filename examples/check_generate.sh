#!/usr/bin/env bash
# ctest examples.generate_from_run: trains a tiny block-sparse GPT for a few steps with gpt_train,
# then runs generate on the run directory (which stands for its latest checkpoint) and checks that
#   - sampling (temperature 1, no top-k/top-p, fixed seed) with the KV cache and without it (full
#     recompute every token) prints the same text (the logits agree to rounding; a 20-step model's
#     greedy text is one repeated token, so sampling is the sharper check),
#   - sampling with a seed prints the same text on 1 and 2 threads,
#   - a bad checkpoint path and an over-long request fail with a message naming the culprit.
#
#   check_generate.sh GPT_TRAIN ENCODE_DATASET GENERATE SOURCE_DIR WORK_DIR
set -euo pipefail
train=$1 encode=$2 generate=$3 src=$4 work=$5
rm -rf "$work"; mkdir -p "$work"
"$encode" --mode gpt -i "$src/data/corpus/valid" -o "$work/train.tok" --vocab "$src/data/gpt2" > /dev/null
"$train" --config "$src/configs/gpt-mini-train.json" --train "$work/train.tok" --valid "$work/train.tok" \
  --layers 2 --embd 64 --heads 2 --positions 48 --seq-len 32 --batch-size 2 --steps 20 --warmup-steps 2 \
  --eval-batches 1 --block-size 16 --sparsity 0.5 --threads 2 --out "$work/run" > "$work/train.json" 2> "$work/train.err"
[ -f "$work/run/checkpoints/latest" ] || { echo "FAIL: no checkpoint written"; cat "$work/train.err"; exit 1; }

gen_from() { local ckpt=$1; shift; "$generate" --checkpoint "$ckpt" --prompt "Call me Ishmael." --vocab-dir "$src/data/gpt2" --no-stop "$@"; }
gen() { gen_from "$work/run" "$@"; }
full=(--temperature 1 --top-k 0 --top-p 1 --seed 3 --max-new-tokens 24 --threads 2)
gen "${full[@]}" > "$work/cached.txt" 2> "$work/g1.err"
gen "${full[@]}" --no-cache > "$work/recomputed.txt" 2> "$work/g2.err"
gen --seed 7 --max-new-tokens 24 --threads 1 > "$work/sample-1t.txt" 2> /dev/null
gen --seed 7 --max-new-tokens 24 --threads 2 > "$work/sample-2t.txt" 2> /dev/null
grep -q "checkpoint .*step-000020" "$work/g1.err" || { echo "FAIL: run directory not resolved to step-000020"; cat "$work/g1.err"; exit 1; }
grep -q "^Call me Ishmael." "$work/cached.txt" || { echo "FAIL: the prompt is not echoed"; exit 1; }
[ "$(wc -c < "$work/cached.txt")" -gt 20 ] || { echo "FAIL: nothing generated"; exit 1; }
cmp "$work/cached.txt" "$work/recomputed.txt" || { echo "FAIL: KV-cache and full-recompute texts differ"; exit 1; }
cmp "$work/sample-1t.txt" "$work/sample-2t.txt" || { echo "FAIL: sampled text depends on the thread count"; exit 1; }

if gen_from "$work/nowhere" > /dev/null 2> "$work/bad.err"; then echo "FAIL: a missing checkpoint was accepted"; exit 1; fi
grep -q "nowhere" "$work/bad.err" || { echo "FAIL: the error does not name the path"; cat "$work/bad.err"; exit 1; }
if gen --max-new-tokens 100 > /dev/null 2> "$work/long.err"; then echo "FAIL: 100 new tokens fit a 48-position model"; exit 1; fi
grep -qi "n_positions\|context" "$work/long.err" || { echo "FAIL: the overflow error is unclear"; cat "$work/long.err"; exit 1; }
echo "generate ok: $(head -c 120 "$work/cached.txt" | tr '\n' ' ')"
