#!/usr/bin/env bash
# ctest examples.sparsity_study: the four variants of sparsity_study on a small GPT (2 layers,
# width 64) for 40 steps on the bundled validation text: every variant learns (held-out loss below
# the uniform ln V), the dynamic variant updates its patterns at steps 10, 20 and 30 (every 10
# steps, never at the last) and the static one never, the dense-flops variant matches the sparse models' projection MACs within 25 %, and the
# dense-width variant has the sparse models' width.
#   check_sparsity_study.sh SPARSITY_STUDY ENCODE_DATASET SOURCE_DIR WORK_DIR
set -euo pipefail
study=$1 encode=$2 src=$3 work=$4
rm -rf "$work" && mkdir -p "$work"
"$encode" --mode gpt -i "$src/data/corpus/valid" -o "$work/data.tok" --vocab "$src/data/gpt2" > /dev/null
cat > "$work/model.json" <<'JSON'
{"vocab_size": 50257, "n_positions": 32, "n_layer": 2, "n_head": 2, "n_embd": 64,
 "embd_pdrop": 0.0, "attn_pdrop": 0.0, "resid_pdrop": 0.0, "activation_function": "gelu_new"}
JSON
"$study" --train "$work/data.tok" --valid "$work/data.tok" --model "$work/model.json" --steps 40 --batch-size 4 \
  --seq-len 32 --sparsity 0.75 --update-period 10 --eval-every 20 --eval-batches 4 --threads 2 --out "$work/study" \
  > "$work/table.txt" 2> "$work/study.err" || { cat "$work/study.err" >&2; exit 1; }
/usr/bin/python3 - "$work/study" <<'PY'
import json, math, sys
out = sys.argv[1]
s = json.load(open(f"{out}/summary.json"))
v = {x["name"]: x for x in s["variants"]}
fails = []
if set(v) != {"dynamic", "static", "dense-flops", "dense-width"}:
    fails.append(f"variants {sorted(v)}")
for name, x in v.items():
    if not (math.isfinite(x["valid_loss"]) and x["valid_loss"] < math.log(50257)):
        fails.append(f"{name}: held-out loss {x['valid_loss']} is not below ln V")
def updates(name):  # the steps of the pattern updates the training lines report
    return [j["sparsity_update"]["step"] for j in map(json.loads, open(f"{out}/{name}.jsonl")) if "sparsity_update" in j]
if updates("dynamic") != [10, 20, 30]:
    fails.append(f"dynamic: pattern updates at steps {updates('dynamic')}, expected [10, 20, 30]")
if updates("static"):
    fails.append(f"static: pattern updates at steps {updates('static')}")
ratio = v["dense-flops"]["projection_macs_per_token"] / v["dynamic"]["projection_macs_per_token"]
if not 0.75 <= ratio <= 1.25:
    fails.append(f"dense-flops has {ratio:.2f}x the sparse projection MACs")
if v["dense-width"]["width"] != v["dynamic"]["width"] or v["dense-width"]["density"] != 1.0:
    fails.append("dense-width: not the sparse models' width at density 1")
if fails:
    sys.exit("FAIL: " + "; ".join(fails))
print("OK: " + ", ".join(f"{n} {x['valid_loss']:.3f}" for n, x in sorted(v.items())) + f"; dense-flops MACs {ratio:.2f}x")
PY
