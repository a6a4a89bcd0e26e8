#!/usr/bin/env bash
# ctest examples.generate_from_run: trains three tiny models for a few steps — a block-sparse GPT
# (B = 16) and an unstructured one (B = 1, ERK allocation: each weight its own density) with gpt_train, and the S1 sparse LM with sparse_lm —
# then runs generate on each run directory (which stands for its latest checkpoint) and checks that
#   - sampling (temperature 1, no top-k/top-p, fixed seed) with the KV cache and without it (full
#     recompute every token) prints the same text (the logits agree to rounding; a 20-step model's
#     greedy text is one repeated token, so sampling is the sharper check),
#   - sampling with a seed prints the same text on 1 and 2 threads,
#   - a bad checkpoint path and an over-long request fail with a message naming the culprit.
#
#   check_generate.sh GPT_TRAIN ENCODE_DATASET GENERATE SPARSE_LM SOURCE_DIR WORK_DIR
set -euo pipefail
train=$1 encode=$2 generate=$3 sparse_lm=$4 src=$5 work=$6
rm -rf "$work"; mkdir -p "$work"
"$encode" --mode gpt -i "$src/data/corpus/valid" -o "$work/train.tok" --vocab "$src/data/gpt2" > /dev/null
"$train" --config "$src/configs/gpt-mini-train.json" --train "$work/train.tok" --valid "$work/train.tok" \
  --layers 2 --embd 64 --heads 2 --positions 48 --seq-len 32 --batch-size 2 --steps 20 --warmup-steps 2 \
  --eval-batches 1 --block-size 16 --sparsity 0.5 --threads 2 --out "$work/run" > "$work/train.json" 2> "$work/train.err"
[ -f "$work/run/checkpoints/latest" ] || { echo "FAIL: no checkpoint written"; cat "$work/train.err"; exit 1; }

"$train" --config "$src/configs/gpt-mini-train.json" --train "$work/train.tok" --valid "$work/train.tok" \
  --layers 2 --embd 64 --heads 2 --positions 48 --seq-len 32 --batch-size 2 --steps 6 --warmup-steps 2 \
  --eval-batches 1 --block-size 1 --sparsity 0.7 --allocation erk --threads 2 --out "$work/run-b1" > /dev/null 2> "$work/train-b1.err"
"$sparse_lm" -c "$src/configs/s1-tiny-train.json" --train "$work/train.tok" --valid "$work/train.tok" --vocab 50257 \
  --steps 6 --threads 2 --out "$work/run-s1" > /dev/null 2> "$work/train-s1.err"
for r in run-b1 run-s1; do
  [ -f "$work/$r/checkpoints/latest" ] || { echo "FAIL: $r wrote no checkpoint"; cat "$work/train-${r#run-}.err"; exit 1; }
done

gen_from() { local ckpt=$1; shift; "$generate" --checkpoint "$ckpt" --prompt "Call me Ishmael." --vocab-dir "$src/data/gpt2" --no-stop "$@"; }
full=(--temperature 1 --top-k 0 --top-p 1 --seed 3 --max-new-tokens 10 --threads 2)
# check RUN_DIR: KV cache = full recompute, 1 thread = 2 threads, the prompt echoed, text generated.
check() {
  local run=$1 tag; tag=$(basename "$1")
  gen_from "$run" "${full[@]}" > "$work/$tag-cached.txt" 2> "$work/$tag-g1.err" || { cat "$work/$tag-g1.err"; exit 1; }
  gen_from "$run" "${full[@]}" --no-cache > "$work/$tag-recomputed.txt" 2> "$work/$tag-g2.err"
  gen_from "$run" --seed 7 --max-new-tokens 10 --threads 1 > "$work/$tag-1t.txt" 2> /dev/null
  gen_from "$run" --seed 7 --max-new-tokens 10 --threads 2 > "$work/$tag-2t.txt" 2> /dev/null
  grep -q "^Call me Ishmael." "$work/$tag-cached.txt" || { echo "FAIL: $tag: the prompt is not echoed"; exit 1; }
  [ "$(wc -c < "$work/$tag-cached.txt")" -gt 20 ] || { echo "FAIL: $tag: nothing generated"; exit 1; }
  cmp "$work/$tag-cached.txt" "$work/$tag-recomputed.txt" || { echo "FAIL: $tag: KV-cache and full-recompute texts differ"; exit 1; }
  cmp "$work/$tag-1t.txt" "$work/$tag-2t.txt" || { echo "FAIL: $tag: sampled text depends on the thread count"; exit 1; }
}
check "$work/run"
check "$work/run-b1"
check "$work/run-s1"
grep -q "checkpoint .*step-000020" "$work/run-g1.err" || { echo "FAIL: run directory not resolved to step-000020"; cat "$work/run-g1.err"; exit 1; }
gen() { gen_from "$work/run" "$@"; }

if gen_from "$work/nowhere" > /dev/null 2> "$work/bad.err"; then echo "FAIL: a missing checkpoint was accepted"; exit 1; fi
grep -q "nowhere" "$work/bad.err" || { echo "FAIL: the error does not name the path"; cat "$work/bad.err"; exit 1; }
if gen --max-new-tokens 100 > /dev/null 2> "$work/long.err"; then echo "FAIL: 100 new tokens fit a 48-position model"; exit 1; fi
grep -qi "positions" "$work/long.err" || { echo "FAIL: the overflow error is unclear"; cat "$work/long.err"; exit 1; }
for t in run run-b1 run-s1; do echo "generate ok ($t): $(head -c 100 "$work/$t-cached.txt" | tr '\n' ' ')"; done
