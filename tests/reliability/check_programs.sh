#!/usr/bin/env bash
# Hostile and careless inputs against the example programs: every case must end with the expected
# exit status (1: error, 2: usage error, 130: interrupted), no signal, and one message naming the
# culprit. One group per defect class of docs/reliability.md, each its own ctest case
# (reliability.<group>, examples/CMakeLists.txt).
#
#   check_programs.sh <group> <bin dir> <source dir> <work dir>
#   groups: cli, inputs, run_dir, checkpoints, nan_guard, signals
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
  expect 2 "--lr: must be a finite number" "$bin/bert_squad" --lr inf
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
  expect 2 "--slots" "$bin/gpt_train" "${tiny[@]}" --slots fp8 --out slots
  expect 1 "adamw config: field 'slots' is 'fp8'; expected float, bf16 or half" "$bin/gpt_train" "${tiny[@]}" \
    --set optimizer.slots=fp8 --out slots2
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
  flock -o run/.lock sleep 30 &   # -o: the lock is flock's own, released when it is killed
  holder=$!
  sleep 1
  expect 1 "in use by another process" "$bin/gpt_train" "${tiny[@]}" --steps 4 --out run --resume
  kill "$holder"; wait "$holder" 2> /dev/null
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
    "$bin/gpt_train" "${tiny[@]}" --steps 200 --checkpoint-every 0 --lr 1e30 --clip none --out "$work/run" --resume
  check "the NaN run saved nothing and pruned nothing" \
    "[ -d run/checkpoints/step-000002 ] && [ -d run/checkpoints/step-000004 ] && [ ! -d run/checkpoints/step-000006 ] && [ \"\$(cat run/checkpoints/latest)\" = step-000004 ]"
  check "the stop is in metrics.jsonl" "grep -q '\"kind\":\"nonfinite\"' run/metrics.jsonl"
  expect 0 "" "$bin/generate" --checkpoint run --prompt hi --max-new-tokens 2
  expect 1 "steps skipped in a row" "$bin/gpt_train" "${tiny[@]}" --steps 200 --checkpoint-every 0 --lr 1e30 \
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
*) echo "unknown group '$group'"; exit 2 ;;
esac

echo "$group: $failures failure(s)"
[ "$failures" = 0 ]
