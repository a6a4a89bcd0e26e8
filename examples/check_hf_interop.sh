#!/usr/bin/env bash
# ctest examples.hf_interop: HuggingFace directories through the programs.
#   1. gpt_train a tiny GPT for a few steps; export_hf writes its HF copy (transformer.-prefixed
#      names, config.json with model_type gpt2);
#   2. generate from the HF copy prints exactly the text generated from our checkpoint;
#   3. gpt_train --init-from the HF copy loads its 28 tensors (the load report says so) and takes
#      the copy's model config;
#   4. bert_pretrain a tiny BERT; export_hf; bert_pretrain --init-from the HF copy (no --model:
#      the copy's config) loads the encoder and every head;
#   5. export_hf of a missing checkpoint fails naming it.
#   check_hf_interop.sh BIN_DIR SOURCE_DIR WORK_DIR
set -euo pipefail
bin=$1 src=$2 work=$3
rm -rf "$work"; mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }

"$bin/encode_dataset" --mode gpt -i "$src/data/corpus/valid" -o "$work/train.tok" --vocab "$src/data/gpt2" > /dev/null
"$bin/gpt_train" --config "$src/configs/gpt-mini-train.json" --train "$work/train.tok" --valid "$work/train.tok" \
  --layers 2 --embd 32 --heads 2 --positions 32 --seq-len 32 --batch-size 2 --steps 6 --warmup-steps 2 \
  --eval-batches 1 --threads 2 --out "$work/gpt" > /dev/null 2> "$work/gpt.err" || { cat "$work/gpt.err"; fail "gpt_train"; }
"$bin/export_hf" --checkpoint "$work/gpt" --out "$work/gpt-hf" > "$work/export-gpt.json" 2> "$work/export-gpt.err" ||
  { cat "$work/export-gpt.err"; fail "export_hf (gpt)"; }
grep -q '"model_type":"gpt2"' "$work/export-gpt.json" || fail "export summary: $(cat "$work/export-gpt.json")"
head -c 4000 "$work/gpt-hf/model.safetensors" | grep -q '"transformer.h.1.attn.c_attn.weight"' ||
  fail "the GPT-2 export has no transformer.h.1.attn.c_attn.weight"
grep -q '"model_type": "gpt2"' "$work/gpt-hf/config.json" || fail "config.json: $(cat "$work/gpt-hf/config.json")"

gen=(--prompt "Call me Ishmael." --vocab-dir "$src/data/gpt2" --no-stop --temperature 1 --top-k 0 --top-p 1 --seed 5
     --max-new-tokens 12 --threads 2)
"$bin/generate" --checkpoint "$work/gpt" "${gen[@]}" > "$work/ours.txt" 2> /dev/null
"$bin/generate" --checkpoint "$work/gpt-hf" "${gen[@]}" > "$work/hf.txt" 2> "$work/gen-hf.err" ||
  { cat "$work/gen-hf.err"; fail "generate from the HF copy"; }
grep -q "huggingface" "$work/gen-hf.err" || fail "generate did not report an HF load: $(cat "$work/gen-hf.err")"
cmp "$work/ours.txt" "$work/hf.txt" || fail "text from the HF copy differs from our checkpoint's"

"$bin/gpt_train" --config "$src/configs/gpt-mini-train.json" --train "$work/train.tok" --valid "$work/train.tok" \
  --seq-len 32 --batch-size 2 --steps 2 --warmup-steps 1 --eval-batches 1 --threads 2 --init-from "$work/gpt-hf" \
  --out "$work/gpt-ft" > /dev/null 2> "$work/gpt-ft.err" || { cat "$work/gpt-ft.err"; fail "gpt_train --init-from HF"; }
grep -q "model weights from .*gpt-hf/model.safetensors: 28 tensors loaded (huggingface, prefix 'transformer.'" \
  "$work/gpt-ft.err" || fail "gpt_train --init-from: $(cat "$work/gpt-ft.err")"
grep -q '"n_layer": 2' "$work/gpt-ft/config.json" || fail "gpt_train --init-from did not take the HF config"

"$bin/bert_data" -i "$src/data/corpus/valid" -o "$work/b.bex" --seq-len 64 --max-predictions 10 --dupe-factor 1 > /dev/null
bert=(--batch-size 4 --lr 2e-3 --eval-batches 1 --log-every 1 --threads 2 --train "$work/b.bex")
"$bin/bert_pretrain" --model "$src/configs/bert-tiny.json" "${bert[@]}" --steps 3 --out "$work/bert" > /dev/null \
  2> "$work/bert.err" || { cat "$work/bert.err"; fail "bert_pretrain"; }
"$bin/export_hf" --checkpoint "$work/bert" --out "$work/bert-hf" > /dev/null 2> "$work/export-bert.err" ||
  { cat "$work/export-bert.err"; fail "export_hf (bert)"; }
head -c 8000 "$work/bert-hf/model.safetensors" | grep -q '"bert.encoder.layer.1.attention.self.query.weight"' ||
  fail "the BERT export has no bert.encoder.layer.1.attention.self.query.weight"
"$bin/bert_pretrain" "${bert[@]}" --steps 2 --init-from "$work/bert-hf" --out "$work/bert-ft" > /dev/null \
  2> "$work/bert-ft.err" || { cat "$work/bert-ft.err"; fail "bert_pretrain --init-from HF"; }
grep -q "(huggingface, prefix 'bert.'.*heads loaded: mlm, nsp, pooler" "$work/bert-ft.err" ||
  fail "bert_pretrain --init-from: $(cat "$work/bert-ft.err")"

# bad inputs
if "$bin/export_hf" --checkpoint "$work/nowhere" --out "$work/x" > /dev/null 2> "$work/bad1.err"; then
  fail "export_hf accepted a missing checkpoint"
fi
grep -q "nowhere" "$work/bad1.err" || fail "the error does not name the path: $(cat "$work/bad1.err")"
echo "hf_interop ok: $(head -c 80 "$work/hf.txt" | tr '\n' ' ')"
