#!/usr/bin/env bash
# ctest examples.sparsity_study: sparsity_study on a small GPT (2 layers, width 64) and the tiny S1
# model, 40 steps on the bundled validation text with its ids renumbered to 512 (--vocab-limit).
# Checks: every variant (dense-flops, static / rigl / random at B = 16 and 1) learns (held-out loss
# below ln 512); the learning rate is tuned on the first seed (best of the grid, the grid widened
# while its best is at an end) and the other seed runs at it; rigl and random update their patterns at steps 10, 20, 30 (never at the last step),
# static never; static and rigl agree bit for bit until the first update; dense-flops matches the
# sparse model's total MACs per token within 10 %; a second invocation reuses every run and prints
# the same table; other settings in the same directory are refused; the S1 family trains too.
#   check_sparsity_study.sh SPARSITY_STUDY ENCODE_DATASET SOURCE_DIR WORK_DIR
set -euo pipefail
study=$1 encode=$2 src=$3 work=$4
rm -rf "$work" && mkdir -p "$work"
"$encode" --mode gpt -i "$src/data/corpus/valid" -o "$work/data.tok" --vocab "$src/data/gpt2" > /dev/null
cat > "$work/model.json" <<'JSON'
{"vocab_size": 50257, "n_positions": 32, "n_layer": 2, "n_head": 2, "n_embd": 64,
 "embd_pdrop": 0.0, "attn_pdrop": 0.0, "resid_pdrop": 0.0, "activation_function": "gelu_new"}
JSON
args=(--train "$work/data.tok" --valid "$work/data.tok" --model "$work/model.json" --vocab-limit 512 --steps 40
      --batch-size 4 --seq-len 32 --sparsity 0.75 --update-period 10 --eval-every 20 --eval-batches 4 --threads 2
      --variants dense-flops,static,rigl,random --blocks 16,1 --lr 2e-3,4e-3 --seeds 7,3 --out "$work/study")
"$study" "${args[@]}" > "$work/table.txt" 2> "$work/study.err" || { cat "$work/study.err" >&2; exit 1; }
# the same settings again: every run is reused, the table is the same
"$study" "${args[@]}" > "$work/table2.txt" 2> "$work/study2.err" || { cat "$work/study2.err" >&2; exit 1; }
cmp "$work/table.txt" "$work/table2.txt" || { echo "FAIL: the second invocation printed another table" >&2; exit 1; }
trained=$(grep -c '^== ' "$work/study.err" || true)
reused=$(grep -c '^== .*: reusing ' "$work/study2.err" || true)
again=$(grep -c '^== ' "$work/study2.err" || true)
[ "$reused" = "$trained" ] && [ "$again" = "$trained" ] && [ "$trained" -ge 21 ] ||
  { echo "FAIL: $trained runs trained, then $reused of $again reused" >&2; exit 1; }
# other settings, same directory: refused, naming the run file
set +e
"$study" "${args[@]/#40/41}" > /dev/null 2> "$work/study3.err"
status=$?
set -e
[ "$status" = 1 ] && grep -q 'runs/dense-flops_lr0.002_seed7.json: this run was trained with other settings' "$work/study3.err" ||
  { echo "FAIL: other settings in the same --out: status $status" >&2; cat "$work/study3.err" >&2; exit 1; }

/usr/bin/python3 - "$work/study" <<'PY'
import json, math, sys
out = sys.argv[1]
s = json.load(open(f"{out}/summary.json"))
v = {x["name"]: x for x in s["variants"]}
fails = []
want = {"dense-flops", "static-b16", "rigl-b16", "random-b16", "static-b1", "rigl-b1", "random-b1"}
if set(v) != want:
    fails.append(f"variants {sorted(v)}")
for name, x in v.items():
    grid = {g["lr"]: g["valid_loss"] for g in x["lr_grid"]}
    lrs = sorted(grid)
    # the grid 2e-3, 4e-3, widened by halving or doubling while its best rate is at an end (twice at most)
    if not ({2e-3, 4e-3} <= set(lrs) and len(lrs) <= 4 and all(abs(b / a - 2) < 1e-9 for a, b in zip(lrs, lrs[1:]))):
        fails.append(f"{name}: lr grid {lrs}")
    elif x["best_lr"] != min(grid, key=grid.get):
        fails.append(f"{name}: best lr {x['best_lr']} is not the grid's best {grid}")
    elif x["best_lr"] in (lrs[0], lrs[-1]) and len(lrs) < 4:
        fails.append(f"{name}: best lr {x['best_lr']} at an end of the grid {lrs}, which was not widened")
    if sorted(r["seed"] for r in x["runs"]) != [3, 7] or any(r["lr"] != x["best_lr"] for r in x["runs"]):
        fails.append(f"{name}: seeds/lrs at the best lr {[(r['seed'], r['lr']) for r in x['runs']]}")
    for r in x["runs"]:
        if r["steps"] != 40:
            fails.append(f"{r['name']}: {r['steps']} steps")
        if not (math.isfinite(r["valid_loss"]) and r["valid_loss"] < math.log(512)):
            fails.append(f"{r['name']}: held-out loss {r['valid_loss']} is not below ln 512")
def lines(run):
    return [json.loads(l) for l in open(f"{out}/runs/{run}.jsonl")]
def updates(run):
    return [j["sparsity_update"]["step"] for j in lines(run) if "sparsity_update" in j]
for b in (16, 1):
    for kind in ("rigl", "random"):
        run = f"{kind}-b{b}_lr{v[f'{kind}-b{b}']['best_lr']:g}_seed7"
        if updates(run) != [10, 20, 30]:
            fails.append(f"{run}: pattern updates at steps {updates(run)}, expected [10, 20, 30]")
        if any(r["updates"] != 3 for r in v[f"{kind}-b{b}"]["runs"]):
            fails.append(f"{kind}-b{b}: update count {[r['updates'] for r in v[f'{kind}-b{b}']['runs']]}")
    if updates(f"static-b{b}_lr0.002_seed7"):
        fails.append(f"static-b{b}: pattern updates at steps {updates(f'static-b{b}_lr0.002_seed7')}")
    # static and rigl: the same initial model, pattern and data, so the same losses up to the first update
    a = [j["loss"] for j in lines(f"static-b{b}_lr0.002_seed7") if j.get("step", 99) <= 10 and "loss" in j]
    c = [j["loss"] for j in lines(f"rigl-b{b}_lr0.002_seed7") if j.get("step", 99) <= 10 and "loss" in j]
    if not a or a != c:
        fails.append(f"B={b}: static and rigl differ before the first update: {a} vs {c}")
ratio = v["dense-flops"]["total_macs_per_token"] / v["static-b16"]["total_macs_per_token"]
if not 0.9 <= ratio <= 1.1:
    fails.append(f"dense-flops has {ratio:.2f}x the sparse model's total MACs")
if v["dense-flops"]["width"] >= v["static-b16"]["width"]:
    fails.append("dense-flops is not narrower than the sparse model")
if fails:
    sys.exit("FAIL: " + "; ".join(fails))
print("OK: " + ", ".join(f"{n} {x['valid_loss_mean']:.3f}" for n, x in sorted(v.items())) + f"; dense-flops MACs {ratio:.2f}x")
PY

# the S1 family (configs/s1-tiny.json, B = 4)
"$study" --family s1 --model "$src/configs/s1-tiny.json" --train "$work/data.tok" --valid "$work/data.tok" \
  --vocab-limit 61 --steps 20 --batch-size 4 --seq-len 16 --sparsity 0.5 --update-period 5 --eval-every 0 \
  --eval-batches 4 --threads 2 --variants dense-flops,static,rigl --blocks 4 --out "$work/s1" \
  > "$work/s1.txt" 2> "$work/s1.err" || { cat "$work/s1.err" >&2; exit 1; }
/usr/bin/python3 - "$work/s1" <<'PY'
import json, math, sys
s = json.load(open(f"{sys.argv[1]}/summary.json"))
v = {x["name"]: x for x in s["variants"]}
fails = []
if set(v) != {"dense-flops", "static-b4", "rigl-b4"} or s["family"] != "s1":
    fails.append(f"variants {sorted(v)}, family {s['family']}")
for n, x in v.items():
    if not math.isfinite(x["valid_loss_mean"]):
        fails.append(f"{n}: loss {x['valid_loss_mean']}")
if v["rigl-b4"]["runs"][0]["updates"] < 1:
    fails.append("rigl-b4: no pattern update moved a block")
if fails:
    sys.exit("FAIL (s1): " + "; ".join(fails))
print("OK (s1): " + ", ".join(f"{n} {x['valid_loss_mean']:.3f}" for n, x in sorted(v.items())))
PY
