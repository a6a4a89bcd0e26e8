#!/usr/bin/env bash
# Hostile and careless inputs against the example programs: every case must end with the expected
# exit status (1: error, 2: usage error, 130: interrupted), no signal, and one message naming the
# culprit. One group per defect class of docs/reliability.md, each its own ctest case
# (reliability.<group>, examples/CMakeLists.txt).
#
#   check_programs.sh <group> <bin dir> <source dir> <work dir>
#   groups: cli, inputs, run_dir, checkpoints, nan_guard, signals, outputs, messages
set -uo pipefail
group=$1 bin=$2 src=$3 work=$4/$1
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
export OMP_NUM_THREADS=2
failures=0

# expect <status> <text> <command...>: runs the command (stdin closed, 300 s at most) and checks its
# exit status and that stderr contains <text>; a status above 128 (a signal) always fails.
expect() {
  local want=$1 text=$2
  shift 2
  timeout -s KILL 300 "$@" < /dev/null > out.txt 2> err.txt
  local got=$?
  if [ "$got" != "$want" ] || { [ -n "$text" ] && ! grep -qF -- "$text" err.txt; }; then
    echo "FAIL: $* -> status $got (want $want), stderr must contain '$text':"
    sed 's/^/    /' err.txt | head -5
    failures=$((failures + 1))
  else
    echo "ok: status $got, '$(grep -F -m1 -- "$text" err.txt | cut -c1-150)'"
  fi
}
# check <description> <shell condition>
check() {
  if eval "$2"; then echo "ok: $1"; else echo "FAIL: $1"; failures=$((failures + 1)); fi
}

tok() { [ -f "$work/train.tok" ] || "$bin/encode_dataset" -i "$src/data/corpus/valid" -o "$work/train.tok" > /dev/null; }
tiny=(--config "$src/configs/gpt-mini-train.json" --train "$work/train.tok" --valid "$work/train.tok" --layers 1 --embd 32 --heads 2
      --positions 32 --seq-len 16 --batch-size 2 --warmup-steps 1 --eval-every 0 --eval-batches 1 --log-every 1 --threads 2)

case "$group" in
cli)  # negative numbers, sizes past the limits, overflowing products: usage errors or errors, never a crash
  expect 2 "--vocab: must not be negative" "$bin/gpt_train" --vocab -1
  expect 2 "above the limit" "$bin/gpt_train" --positions 4611686018427387904
  expect 2 "--checkpoint-every: must not be negative" "$bin/gpt_train" --checkpoint-every -1
  expect 2 "--threads" "$bin/gpt_train" --threads 1099511627776
  expect 2 "--threads" "$bin/gpt_train" --threads -3
  expect 2 "--max-new-tokens: must not be negative" "$bin/generate" --checkpoint x --prompt hi --max-new-tokens -1
  expect 2 "--steps: must not be negative" "$bin/sparse_lm" --steps -5
  expect 2 "--seq-len: must not be negative" "$bin/encode_dataset" -i x -o y --seq-len -1
  expect 2 "--layers" "$bin/sparse_lm" --layers 99999999
  expect 2 "--lr: must be a finite number, got nan" "$bin/gpt_train" --lr nan
  expect 2 "--lr: must be a finite number, got inf" "$bin/sparsity_study" --lr inf
  expect 2 "--lr: must be a finite number, got inf" "$bin/bert_squad" --lr inf
  expect 2 "--dropout: must be a finite number, got -nan" "$bin/sparse_lm" --dropout -nan
  expect 2 "--temperature: must be a finite number" "$bin/generate" --checkpoint x --prompt hi --temperature infinity
  echo '{"model": {"n_layer": 1e30}}' > huge.json
  expect 1 "n_layer" "$bin/gpt_train" --config huge.json
  echo '{"model": {"n_layer": 100000, "n_embd": 64, "n_head": 2}}' > many.json
  expect 1 "field 'n_layer' is 100000, above the limit" "$bin/gpt_train" --config many.json
  echo '{"model": {"vocab_size": 4000000000}}' > vocab.json
  expect 1 "vocab_size" "$bin/gpt_train" --config vocab.json
  tok
  expect 1 "activations per buffer" "$bin/gpt_train" "${tiny[@]}" --positions 1000000 --seq-len 1000000 \
    --batch-size 1000000 --out big
  expect 1 "steps" "$bin/gpt_train" "${tiny[@]}" --set steps=1e15 --out steps
  # a memory budget the plan does not fit, and an offload directory that is not one: before any step
  expect 1 "memory budget 0.001 GiB (memory_budget, --memory-budget): the run needs" "$bin/gpt_train" "${tiny[@]}" \
    --memory-budget 0.001 --out budget
  [ ! -e budget/metrics.jsonl ] || { echo "FAIL: the over-budget run wrote metrics"; failures=$((failures + 1)); }
  expect 1 "offloaded to 'no-such-dir': cannot create a file there" "$bin/gpt_train" "${tiny[@]}" --offload no-such-dir \
    --out offload
  expect 2 "--memory-budget" "$bin/sparse_lm" --memory-budget -1
  expect 2 "--slots" "$bin/gpt_train" "${tiny[@]}" --slots fp8 --out slots
  expect 2 "--set optimizer.slots=fp8: field 'optimizer.slots' must be one of: float bf16 half" "$bin/gpt_train" \
    "${tiny[@]}" --set optimizer.slots=fp8 --out slots2
  echo '{"optimizer": {"type": "adamw", "slots": "fp8"}}' > slots.json
  expect 1 "adamw config: field 'slots' is 'fp8'; expected float, bf16 or half" "$bin/gpt_train" "${tiny[@]}" \
    -c slots.json --out slots3
  ;;
inputs)  # files that are not what they claim: FIFOs, loops, long names, deep or null JSON, same in/out
  mkfifo fifo.json fifo.tok
  expect 1 "not a regular file" "$bin/gpt_train" --config fifo.json
  tok
  expect 1 "not a regular file" "$bin/gpt_train" "${tiny[@]}" --train fifo.tok --out fifo-run
  python3 -c "print('[' * 100000 + ']' * 100000)" > deep.json
  expect 1 "nested 100000 levels deep" "$bin/gpt_train" --config deep.json
  echo '{"steps": null}' > null.json
  expect 1 "field 'steps' is null" "$bin/gpt_train" --config null.json
  mkdir -p loop && ln -sfn a loop/b && ln -sfn b loop/a   # loop/a -> loop/b -> loop/a
  expect 1 "loop/a" "$bin/encode_dataset" -i loop/a -o loop.tok
  expect 1 "checkpoint" "$bin/generate" --checkpoint "$(printf 'n%.0s' {1..300})" --prompt hi
  expect 1 "checkpoint" "$bin/generate" --checkpoint loop/a --prompt hi
  echo "some text" > a.txt
  expect 1 "is also an input" "$bin/encode_dataset" -i a.txt -o a.txt
  check "the input survives" "[ \"\$(cat a.txt)\" = 'some text' ]"
  expect 1 "are the same file" "$bin/encode_dataset" -i a.txt -o x.tok --validation-input a.txt --validation-output ./x.tok
  mkdir -p vocab && cp "$src/data/gpt2/encoder.json" vocab/ && : > vocab/vocab.bpe
  expect 1 "no merges" "$bin/encode_dataset" -i a.txt -o y.tok --vocab vocab
  ;;
run_dir)  # fresh runs in used directories, a second process on one directory, stale temporaries
  tok
  expect 0 "" "$bin/gpt_train" "${tiny[@]}" --steps 2 --out run
  expect 1 "is not empty" "$bin/gpt_train" "${tiny[@]}" --steps 2 --out run
  check "the refused run left metrics.jsonl alone" "[ \$(grep -c '\"kind\":\"train\"' run/metrics.jsonl) = 2 ]"
  expect 0 "" "$bin/gpt_train" "${tiny[@]}" --steps 3 --out run --overwrite
  check "--overwrite started again" "[ \$(grep -c '\"kind\":\"train\"' run/metrics.jsonl) = 3 ]"
  mkdir -p other && echo x > other/notes.txt
  expect 1 "is not empty" "$bin/gpt_train" "${tiny[@]}" --steps 2 --out other
  mkdir -p run/checkpoints/step-000003.tmp.999.0 && : > run/metrics.jsonl.tmp.999.1
  # -o: the lock is flock's own, released when it is killed; the sleep's output away from ctest's pipe,
  # which would otherwise stay open (and the case last) until the sleep ends
  flock -o run/.lock sleep 30 > /dev/null 2>&1 &
  holder=$!
  sleep 1
  expect 1 "in use by another process" "$bin/gpt_train" "${tiny[@]}" --steps 4 --out run --resume
  pkill -P "$holder" sleep; kill "$holder"; wait "$holder" 2> /dev/null
  expect 0 "left by an interrupted save" "$bin/gpt_train" "${tiny[@]}" --steps 4 --out run --resume
  check "stale temporaries removed" "[ ! -e run/checkpoints/step-000003.tmp.999.0 ] && [ ! -e run/metrics.jsonl.tmp.999.1 ]"
  ;;
checkpoints)  # damaged checkpoints: checksums, trailing bytes, a training state from another step
  tok
  expect 0 "" "$bin/gpt_train" "${tiny[@]}" --steps 4 --checkpoint-every 2 --out run
  ck=run/checkpoints/step-000004
  cp -r "$ck" good
  python3 - "$ck/model.safetensors" <<'EOF'
import struct, sys
p = sys.argv[1]
b = bytearray(open(p, 'rb').read())
n = struct.unpack('<Q', b[:8])[0]
b[8 + n + 100] ^= 0x01          # one bit of the first tensor's data
open(p, 'wb').write(b)
EOF
  expect 1 "is damaged: its CRC-32C" "$bin/generate" --checkpoint "$ck" --prompt hi --max-new-tokens 2
  expect 1 "is damaged" "$bin/gpt_train" "${tiny[@]}" --steps 6 --out run --resume
  expect 0 "" "$bin/generate" --checkpoint "$ck" --prompt hi --max-new-tokens 2 --no-verify
  cp good/model.safetensors "$ck/" && printf 'x' >> "$ck/model.safetensors"
  expect 1 "bytes after the last tensor" "$bin/generate" --checkpoint "$ck" --prompt hi --max-new-tokens 2
  cp good/model.safetensors "$ck/"
  cp run/checkpoints/step-000002/training_state.safetensors "$ck/"
  expect 1 "the training state is at step 2" "$bin/gpt_train" "${tiny[@]}" --steps 6 --out run --resume
  cp good/training_state.safetensors "$ck/"
  expect 0 "" "$bin/gpt_train" "${tiny[@]}" --steps 6 --out run --resume
  ;;
nan_guard)  # a learning rate that diverges: the run stops, names the last good checkpoint, keeps it
  tok
  expect 0 "" "$bin/gpt_train" "${tiny[@]}" --steps 4 --checkpoint-every 2 --out run
  expect 1 "The last good checkpoint is '$work/run/checkpoints/step-000004'" \
    "$bin/gpt_train" "${tiny[@]}" --steps 200 --checkpoint-every 0 --lr 100 --clip none --out "$work/run" --resume
  check "the NaN run saved nothing and pruned nothing" \
    "[ -d run/checkpoints/step-000002 ] && [ -d run/checkpoints/step-000004 ] && [ ! -d run/checkpoints/step-000006 ] && [ \"\$(cat run/checkpoints/latest)\" = step-000004 ]"
  check "the stop is in metrics.jsonl" "grep -q '\"kind\":\"nonfinite\"' run/metrics.jsonl"
  expect 0 "" "$bin/generate" --checkpoint run --prompt hi --max-new-tokens 2
  expect 1 "steps skipped in a row" "$bin/gpt_train" "${tiny[@]}" --steps 200 --checkpoint-every 0 --lr 100 \
    --clip none --out run \
    --resume --set trainer.on_nonfinite=skip --set trainer.max_skipped_steps=2
  check "skipped steps are logged" "[ \$(grep -c '\"kind\":\"skipped\"' run/metrics.jsonl) -ge 2 ]"
  ;;
signals)  # SIGHUP saves like SIGTERM; a token file truncated under a running job is an error, not SIGBUS
  tok
  "$bin/gpt_train" "${tiny[@]}" --steps 100000 --checkpoint-every 0 --out hup < /dev/null > /dev/null 2> hup.err &
  pid=$!
  for _ in $(seq 600); do grep -qs '"kind":"train"' hup/metrics.jsonl && break; sleep 0.1; done
  kill -HUP "$pid"; wait "$pid"; status=$?
  check "SIGHUP: exit status 130 (got $status)" "[ $status = 130 ]"
  check "SIGHUP: a checkpoint was saved" "[ -f hup/checkpoints/latest ]"
  cp train.tok victim.tok
  "$bin/gpt_train" "${tiny[@]}" --train victim.tok --steps 100000 --out bus < /dev/null > /dev/null 2> bus.err &
  pid=$!
  for _ in $(seq 600); do grep -qs '"kind":"train"' bus/metrics.jsonl && break; sleep 0.1; done
  truncate -s 4096 victim.tok
  for _ in $(seq 600); do kill -0 "$pid" 2> /dev/null || break; sleep 0.1; done
  kill -KILL "$pid" 2> /dev/null   # still running after 60 s: the status below fails
  wait "$pid"; status=$?
  check "truncated token file: exit status 1 (got $status)" "[ $status = 1 ]"
  check "truncated token file: the message names it" "grep -q \"token file '.*victim.tok' was truncated\" bus.err"
  ;;
outputs)  # the one output rule: no output is, holds, lies inside or links to an input; one job per directory
  tok
  expect 0 "" "$bin/gpt_train" "${tiny[@]}" --steps 2 --checkpoint-every 1 --out run
  sum() { find "$@" -type f -exec md5sum {} + | sort; }
  before=$(sum run)
  expect 1 "the output lies inside the input" "$bin/export_hf" --checkpoint run --out run/checkpoints/step-000002
  expect 1 "are the same file" "$bin/export_hf" --checkpoint run --out run
  expect 1 "the output directory contains the input" "$bin/export_hf" --checkpoint run/checkpoints/step-000001 \
    --out run/checkpoints
  ln -s run run-link
  expect 1 "are the same file" "$bin/export_hf" --checkpoint run --out run-link
  check "the run is unchanged" "[ \"\$(sum run)\" = \"\$before\" ]"
  expect 0 "" "$bin/gpt_train" "${tiny[@]}" --steps 3 --out run --resume
  expect 0 "" "$bin/export_hf" --checkpoint run --out hf
  mkdir -p other-hf && echo '{"model_type": "bert"}' > other-hf/config.json && echo weights > other-hf/model.safetensors
  expect 1 "already holds" "$bin/export_hf" --checkpoint run --out other-hf
  check "another model's HF directory is left alone" "grep -q bert other-hf/config.json"
  expect 0 "" "$bin/export_hf" --checkpoint run --out other-hf --overwrite
  cp "$src/data/bert/vocab.txt" vocab.txt && ln vocab.txt vocab-link.txt && echo "Some text. And more text." > a.txt
  expect 1 "are the same file" "$bin/bert_data" -i a.txt -o vocab.txt --vocab vocab.txt
  expect 1 "are the same file" "$bin/bert_data" -i a.txt -o vocab-link.txt --vocab vocab.txt
  check "the vocabulary is intact" "cmp -s vocab.txt '$src/data/bert/vocab.txt'"
  mkdir -p cfg && echo '{"steps": 1}' > cfg/config.json
  for p in gpt_train bert_pretrain bert_classify; do
    expect 1 "the output directory contains the input" "$bin/$p" -c cfg/config.json --out cfg --overwrite
  done
  check "the run config is intact" "[ \"\$(cat cfg/config.json)\" = '{\"steps\": 1}' ]"
  study=(--train train.tok --valid train.tok --variants static --blocks 4 --steps 1 --batch-size 2 --seq-len 16
         --eval-batches 1 --lr-extend 0 --threads 2 --model "$src/configs/gpt-tiny.json")
  mkdir -p study
  flock -o study/.lock sleep 30 > /dev/null 2>&1 &   # another study holds the directory
  holder=$!
  sleep 1
  expect 1 "in use by another process" "$bin/sparsity_study" "${study[@]}" --out study
  pkill -P "$holder" sleep; kill "$holder"; wait "$holder" 2> /dev/null
  check "the refused study wrote nothing" "[ ! -e study/summary.json ] && [ ! -e study/runs ]"
  mkdir -p notes && echo x > notes/notes.txt
  expect 1 "already holds 'notes.txt'" "$bin/sparsity_study" "${study[@]}" --out notes
  expect 1 "the output directory contains the input" "$bin/sparsity_study" "${study[@]}" --out .
  ;;
messages)  # every error names its culprit (file, flag, field); what should be refused is refused
  tok
  expect 0 "" "$bin/gpt_train" "${tiny[@]}" --steps 1 --out run
  cp -r run/checkpoints/step-000001 bad && echo '[]' > bad/config.json
  expect 1 "bad/config.json: expected a JSON object" "$bin/gpt_train" "${tiny[@]}" --init-from bad --out r1
  expect 1 "bad/config.json: expected a JSON object" "$bin/export_hf" --checkpoint bad --out r2
  python3 -c 'import json, sys
j = json.load(open(sys.argv[1])); j["n_layer"] = 1000000000; json.dump(j, open(sys.argv[2], "w"))' \
    run/checkpoints/step-000001/config.json bad/config.json
  expect 1 "bad/config.json: field 'n_layer' is 1000000000, above the limit" "$bin/export_hf" --checkpoint bad --out r3
  echo '{"layer_norm_epsilon": "small"}' > m.json && echo '{"model": "m.json", "steps": 1}' > with-model.json
  expect 1 "m.json: field 'layer_norm_epsilon' must be a number" "$bin/gpt_train" "${tiny[@]}" -c with-model.json --out r4
  # a model file the config names but the flags replace (--set model=FILE) is not read
  echo '{"model": "gone.json", "steps": 1}' > gone-model.json
  expect 1 "gone.json" "$bin/gpt_train" "${tiny[@]}" -c gone-model.json --out r8
  echo '{"n_layer": 1, "n_embd": 32, "n_head": 2, "n_positions": 32, "vocab_size": 50257}' > given-model.json
  expect 0 "" "$bin/gpt_train" "${tiny[@]}" -c gone-model.json --set model=given-model.json --out r9
  check "the run with the replaced model trained" "grep -q '\"kind\":\"train\"' r9/metrics.jsonl"
  expect 2 "--set steps=abc: field 'steps' must be a whole number" "$bin/gpt_train" "${tiny[@]}" --set steps=abc --out r5
  expect 2 "--vocab-limit 2147483648 is above the token files' vocabulary" "$bin/sparsity_study" --train train.tok \
    --valid train.tok --vocab-limit 2147483648 --steps 1 --out study
  echo '{"steps": 2, "steps": 99999}' > dup.json
  expect 1 "dup.json': duplicate key 'steps'" "$bin/gpt_train" "${tiny[@]}" -c dup.json --out r6
  check "the duplicate-key run trained nothing" "[ ! -e r6 ]"
  expect 1 "duplicate key 'type'" "$bin/gpt_train" "${tiny[@]}" --set 'optimizer={"type":"sgd","type":"adamw"}' --out r7
  python3 -c 'import json, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = b[8:8 + n].decode().rstrip()
first = next(k for k in json.loads(h) if k != "__metadata__")
h = h[:-1] + ", " + json.dumps(first) + ": " + json.dumps(json.loads(h)[first]) + "}"   # the first tensor twice
h += " " * (-len(h) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(h)) + h.encode() + b[8 + n:])' \
    run/checkpoints/step-000001/model.safetensors dup.safetensors
  mkdir -p dupck && cp run/checkpoints/step-000001/config.json dupck/ && mv dup.safetensors dupck/model.safetensors
  expect 1 "duplicate key" "$bin/generate" --checkpoint dupck --prompt hi --max-new-tokens 1
  python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
ids = [q["id"] for a in d["data"] for p in a["paragraphs"] for q in p["qas"]]
body = ", ".join(json.dumps(i) + ": \"the\"" for i in ids)
open(sys.argv[2], "w").write("{" + body + ", " + json.dumps(ids[0]) + ": \"another\"}")' \
    "$src/data/squad/dev-v1.1.json" preds.json
  expect 1 "duplicate key" "$bin/squad_eval" "$src/data/squad/dev-v1.1.json" preds.json
  expect 2 "--top-k: must not be empty" "$bin/generate" --checkpoint run --prompt hi --top-k ''
  expect 2 "--steps: must be a whole number, got ''" "$bin/gpt_train" "${tiny[@]}" --steps '' --out r8
  expect 2 "--weight-decay: must be in [0, 10], got 9.22337e+18" "$bin/gpt_train" "${tiny[@]}" \
    --weight-decay 9223372036854775808 --out r9
  expect 2 "--min-lr: must be in [0, 100]" "$bin/gpt_train" "${tiny[@]}" --min-lr 1e30 --out r10
  expect 1 "field 'schedule.min_lr' (--min-lr) is 0.5, above the peak learning rate" "$bin/gpt_train" "${tiny[@]}" \
    --min-lr 0.5 --lr 0.1 --out r11
  expect 2 "--lr: must be in [0, 100]" "$bin/sparse_lm" --lr 9223372036854775808
  expect 2 "--lr: must be in [0, 100]" "$bin/bert_pretrain" --lr 1e30
  echo '{"schedule": {"type": "constant", "lr": 1e30}}' > lr.json
  expect 1 "lr.json: field 'schedule.lr' must be in [0, 100]" "$bin/gpt_train" "${tiny[@]}" -c lr.json --out r12
  expect 2 "--lr: 1000 is outside [1e-7, 100]" "$bin/sparsity_study" --train train.tok --valid train.tok --lr 1000
  "$bin/bert_data" -i "$src/data/corpus/valid" -o t.bex --seq-len 32 --max-predictions 5 > /dev/null
  echo '{"model_type": "bert", "vocab_size": 30522, "hidden_size": 32, "num_hidden_layers": 1,
         "num_attention_heads": 2, "intermediate_size": 64, "max_position_embeddings": 64}' > bert.json
  expect 0 "" "$bin/bert_pretrain" --train t.bex --model bert.json --steps 1 --batch-size 2 --threads 2 --out pre
  echo '{"version": "1.1", "data": [{"title": "t", "paragraphs": [{"context": "Some context.",
         "qas": [{"id": "q1", "question": "  ", "answers": [{"text": "Some", "answer_start": 0}]}]}]}]}' > none.json
  expect 1 "none.json: no usable question to answer" "$bin/bert_squad" --predict-only --init-from pre \
    --predict none.json --max-seq 64 --max-query 16 --threads 2 --out squad
  expect 1 "none.json: no usable question to answer" "$bin/bert_squad" --train "$src/data/squad/train-v1.1.json" \
    --init-from pre --predict none.json --max-seq 64 --max-query 16 --threads 2 --out squad2
  check "nothing was trained for a file without questions" "[ ! -e squad2/checkpoints ]"
  # sparse_lm took --init-from (a common key) and ignored it: now it starts from the checkpoint or fails naming it
  s1=(--train train.tok --valid train.tok --vocab 50257 --layers 1 --hidden 32 --ff 64 --heads 2 --qkv 16 --embedding 16
      --sequence 32 --autoregression-offset 1 --steps 1 --batch-size 2 --seq-len 16 --eval-batches 1 --threads 2)
  expect 1 "nowhere" "$bin/sparse_lm" "${s1[@]}" --init-from nowhere --out s1-a
  expect 0 "" "$bin/sparse_lm" "${s1[@]}" --out s1-b
  expect 0 "sparse_lm: model weights from s1-b/checkpoints/step-000001" "$bin/sparse_lm" "${s1[@]}" --init-from s1-b \
    --out s1-c
  cp -r run other-run && echo "$work/run/checkpoints/step-000001" > other-run/checkpoints/latest
  expect 1 "not a checkpoint of this run" "$bin/generate" --checkpoint other-run --prompt hi --max-new-tokens 1
  # a closed standard output (SIGPIPE): status 1 and a message once the work is done, nothing lost
  printf '%s\n' 'import os, subprocess, sys' 'r, w = os.pipe(); os.close(r)   # a pipe nobody reads' \
    'sys.exit(subprocess.run(sys.argv[1:], stdout=w, stdin=subprocess.DEVNULL).returncode)' > closed.py
  expect 1 "cannot write to standard output" python3 closed.py "$bin/gpt_train" "${tiny[@]}" --steps 1 --out piped
  check "the closed pipe lost no checkpoint" "[ -f piped/checkpoints/step-000001/model.safetensors ]"
  expect 1 "cannot write to standard output" python3 closed.py "$bin/generate" --checkpoint run --prompt hi \
    --max-new-tokens 2
  ;;
*) echo "unknown group '$group'"; exit 2 ;;
esac

echo "$group: $failures failure(s)"
[ "$failures" = 0 ]
