#!/usr/bin/env bash
# ctest examples.llama: the LLaMA family (models/llama.hpp) through the programs.
#   1. gpt_train trains a small LLaMA ("model_type": "llama": 4 heads over 2 KV heads, untied head)
#      dense for a few steps, and block-sparse (B = 4) with dynamic sparsity;
#   2. export_hf writes its HF copy (model.-prefixed names, LlamaConfig keys), and generate prints the
#      same text from the HF copy as from our checkpoint;
#   3. an HF LLaMA directory written by the PyTorch reference (tests/reference/llama_reference.py)
#      loads in generate (when torch is importable);
#   4. a bad LLaMA config fails naming the field;
#   5. --dry-run prints the LLaMA's plan (train/plan.hpp: its parameters are the trained model's), and
#      a memory budget below that plan stops the run before its first step, naming memory_budget.
#   check_llama.sh BIN_DIR SOURCE_DIR WORK_DIR
set -euo pipefail
bin=$1 src=$2 work=$3
rm -rf "$work"; mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }

cat > "$work/llama-mini.json" <<JSON
{"model_type": "llama", "vocab_size": 50257, "max_position_embeddings": 32, "hidden_size": 32,
 "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
 "rms_norm_eps": 1e-5, "tie_word_embeddings": false, "initializer_range": 0.02}
JSON
cat > "$work/run.json" <<JSON
{"model": "llama-mini.json", "batch_size": 2, "seq_len": 32, "steps": 12,
 "optimizer": {"type": "adamw", "weight_decay": 0.1},
 "schedule": {"type": "warmup_cosine", "max_lr": 1e-2, "warmup_steps": 2, "min_lr": 1e-3},
 "eval_every": 12, "eval_batches": 1, "log_every": 1, "checkpoint_every": 12, "seed": 3, "threads": 2}
JSON
"$bin/encode_dataset" --mode gpt -i "$src/data/corpus/valid" -o "$work/train.tok" --vocab "$src/data/gpt2" > /dev/null
"$bin/gpt_train" --config "$work/run.json" --train "$work/train.tok" --valid "$work/train.tok" --out "$work/llama" \
  > /dev/null 2> "$work/train.err" || { cat "$work/train.err"; fail "gpt_train (llama)"; }
grep -q '"model_type": "llama"' "$work/llama/config.json" || fail "run config: $(cat "$work/llama/config.json")"
python3 - "$work/llama/metrics.jsonl" <<'PY' || fail "the LLaMA training loss did not fall"
import json, sys
losses = [r["loss"] for r in map(json.loads, open(sys.argv[1])) if r.get("kind") == "train"]
sys.exit(0 if len(losses) >= 12 and losses[-1] < losses[0] else 1)
PY
"$bin/gpt_train" --config "$work/run.json" --train "$work/train.tok" --valid "$work/train.tok" --out "$work/llama-sparse" \
  --block-size 4 --sparsity 0.5 --update-period 3 > /dev/null \
  2> "$work/sparse.err" || { cat "$work/sparse.err"; fail "gpt_train (block-sparse llama)"; }

"$bin/export_hf" --checkpoint "$work/llama" --out "$work/llama-hf" > "$work/export.json" 2> "$work/export.err" ||
  { cat "$work/export.err"; fail "export_hf (llama)"; }
grep -q '"model_type":"llama"' "$work/export.json" || fail "export summary: $(cat "$work/export.json")"
head -c 4000 "$work/llama-hf/model.safetensors" | grep -q '"model.layers.1.self_attn.k_proj.weight"' ||
  fail "the LLaMA export has no model.layers.1.self_attn.k_proj.weight"
grep -q '"num_key_value_heads": 2' "$work/llama-hf/config.json" || fail "config.json: $(cat "$work/llama-hf/config.json")"

gen=(--prompt "Call me Ishmael." --vocab-dir "$src/data/gpt2" --no-stop --temperature 1 --top-k 0 --top-p 1 --seed 5
     --max-new-tokens 12 --threads 2)
"$bin/generate" --checkpoint "$work/llama" "${gen[@]}" > "$work/ours.txt" 2> "$work/gen.err" ||
  { cat "$work/gen.err"; fail "generate (llama)"; }
grep -q "note: a LLaMA model: the prompt is encoded and the output decoded with the GPT-2 tokenizer" "$work/gen.err" ||
  fail "generate did not say that it uses the GPT-2 tokenizer for LLaMA: $(cat "$work/gen.err")"
"$bin/generate" --checkpoint "$work/llama-hf" "${gen[@]}" > "$work/hf.txt" 2> "$work/gen-hf.err" ||
  { cat "$work/gen-hf.err"; fail "generate from the LLaMA HF copy"; }
grep -q "huggingface" "$work/gen-hf.err" || fail "generate did not report an HF load: $(cat "$work/gen-hf.err")"
cmp "$work/ours.txt" "$work/hf.txt" || fail "text from the HF copy differs from our checkpoint's"
"$bin/generate" --checkpoint "$work/llama-sparse" "${gen[@]}" > /dev/null 2> "$work/gen-sparse.err" ||
  { cat "$work/gen-sparse.err"; fail "generate (block-sparse llama)"; }

if /usr/bin/python3 -c 'import torch' 2> /dev/null; then
  /usr/bin/python3 "$src/tests/reference/llama_reference.py" --out "$work/ref.json" --hf-dir "$work/ref"
  # vocabulary 61: the prompt "#" is GPT-2 token 2
  "$bin/generate" --checkpoint "$work/ref/gqa_untied" --prompt "#" --vocab-dir "$src/data/gpt2" --no-stop \
    --temperature 0 --max-new-tokens 5 --threads 2 > "$work/ref.txt" 2> "$work/ref.err" ||
    { cat "$work/ref.err"; fail "generate from the reference's HF LLaMA directory"; }
  grep -q "huggingface" "$work/ref.err" || fail "generate did not report an HF load: $(cat "$work/ref.err")"
fi

sed 's/"num_key_value_heads": 2/"num_key_value_heads": 3/' "$work/llama-mini.json" > "$work/bad.json"
sed 's/llama-mini.json/bad.json/' "$work/run.json" > "$work/bad-run.json"
if "$bin/gpt_train" --config "$work/bad-run.json" --train "$work/train.tok" --out "$work/bad" > /dev/null 2> "$work/bad.err"; then
  fail "gpt_train accepted num_key_value_heads 3 for 4 heads"
fi
grep -q "num_key_value_heads" "$work/bad.err" || fail "the error does not name the field: $(cat "$work/bad.err")"
"$bin/gpt_train" --config "$work/run.json" --train "$work/train.tok" --dry-run > "$work/plan.json" 2> "$work/plan.err" ||
  { cat "$work/plan.err"; fail "gpt_train --dry-run (llama)"; }
python3 - "$work/plan.json" "$work/llama/metrics.jsonl" <<'PY' || fail "the LLaMA plan: $(cat "$work/plan.err")"
import json, sys
plan = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
run = [r for r in map(json.loads, open(sys.argv[2])) if r.get("kind") == "run"][0]
assert plan["family"] == "llama" and plan["kv_heads"] == 2, plan
assert plan["stored_parameters"] == run["parameters"], (plan["stored_parameters"], run["parameters"])
PY
if "$bin/gpt_train" --config "$work/run.json" --train "$work/train.tok" --out "$work/budget" --memory-budget 0.01 \
    > /dev/null 2> "$work/budget.err"; then
  fail "gpt_train (llama) ran under a 0.01 GiB memory budget"
fi
grep -q "memory budget 0.01 GiB (memory_budget, --memory-budget)" "$work/budget.err" ||
  fail "the budget error does not name memory_budget: $(cat "$work/budget.err")"
[ ! -e "$work/budget/checkpoints" ] || fail "a run over its memory budget wrote checkpoints"
echo "llama ok: $(head -c 80 "$work/hf.txt" | tr '\n' ' ')"
