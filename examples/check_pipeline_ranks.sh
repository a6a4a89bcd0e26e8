#!/usr/bin/env bash
# ctest examples.pipeline_ranks (label mpi): a pipeline whose stages are MPI ranks
# (--pipeline-placement ranks; policies/pipeline.hpp).
#   - gpt_train, a 4-layer GPT, 8 steps of 4 micro-batches: one process on one stage, 2 ranks
#     (1F1B) and 3 ranks (GPipe) give the same training losses and final validation loss within
#     1e-5 relative (the ranks' gradients sum to the sequential ones except the tied embedding's two
#     contributions, added in another order), and describe the pipeline over ranks;
#   - the 2-rank run stopped at step 4 and resumed (--resume, same 2 ranks) ends bit for bit on the
#     uninterrupted run (the schedule's total_steps fixed at 8); its step-4 checkpoint resumed by one
#     process without a pipeline ends within 1e-5 of it;
#   - with --shard-optimizer each of the 2 ranks keeps its stage's optimiser state, weights and
#     gradients only (the two ranks' state adds up to one unsharded rank's; the last rank also keeps
#     the tied table) and the run logs the unsharded run's losses and
#     final validation loss bit for bit; stopped at step 4 and resumed on 2 sharded ranks, it ends
#     on them too;
#   - sparse_lm with RigL pattern updates every 2 steps on 2 ranks makes the updates one process
#     makes and ends on its validation loss within 1e-5 (each layer's scores come from one rank),
#     also with the optimiser state sharded by stage;
#   - data parallelism with threads-placed stages: 2 ranks x 2 rows on 2 stages each log the losses
#     of 1 process x 4 rows within 1e-4 (the data-parallel tolerance, examples/check_data_parallel.sh);
#   - a 2-D grid, 2 data replicas of a 2-stage pipeline on 4 ranks x 2 rows, logs the losses of
#     1 process x 4 rows within 1e-5 (the same sums in another order) and says so; stopped at step 4
#     and resumed on the same grid it ends bit for bit on the uninterrupted grid run; sparse_lm with
#     RigL updates on the grid makes the updates one process makes with the doubled batch and ends
#     within 1e-4 of its validation loss; with --shard-optimizer each replica's ranks keep their
#     stages' state (a replica's two ranks add up to one unsharded rank) and the grid logs the
#     unsharded grid's losses bit for bit, also after a stop and resume, and for sparse_lm; its
#     step-4 checkpoint resumed by 2 ranks (one pipeline, 4 rows) and by 1 process ends within 1e-5;
#   - 3 ranks for 2 stages and 6 for 4 are errors naming both, and no rank is left waiting.
#
#   check_pipeline_ranks.sh GPT_TRAIN ENCODE_DATASET SPARSE_LM SOURCE_DIR WORK_DIR
set -euo pipefail
train=$1 encode=$2 sparse_lm=$3 src=$4 work=$5
rm -rf "$work"; mkdir -p "$work"
"$encode" --mode gpt -i "$src/data/corpus/valid" -o "$work/train.tok" --vocab "$src/data/gpt2" > /dev/null
mpi_opts=(--oversubscribe --bind-to none)
[ "$(id -u)" = 0 ] && mpi_opts+=(--allow-run-as-root)
export OMP_NUM_THREADS=1
common=(--config "$src/configs/gpt-mini-train.json" --train "$work/train.tok" --valid "$work/train.tok"
        --layers 4 --embd 64 --heads 2 --positions 48 --seq-len 32 --batch-size 2 --accumulation 4
        --warmup-steps 2 --eval-every 4 --eval-batches 2 --log-every 1 --threads 1 --seed 5
        --set schedule.total_steps=8)
run() {  # name, ranks (0: no mpirun), extra flags...
  local name=$1 np=$2; shift 2
  local cmd=("$train" "${common[@]}" --out "$work/$name" "$@")
  [ "$np" -gt 0 ] && cmd=(timeout 300 mpirun -np "$np" "${mpi_opts[@]}" "${cmd[@]}")
  "${cmd[@]}" > "$work/$name.json" 2> "$work/$name.err" || { echo "FAIL: $name: ${cmd[*]}"; cat "$work/$name.err"; exit 1; }
}
run one 0 --steps 8
run two 2 --steps 8 --pipeline-stages 2 --pipeline-placement ranks
run three 3 --steps 8 --pipeline-stages 3 --pipeline-placement ranks --pipeline-schedule gpipe
run resumed 2 --steps 4 --pipeline-stages 2 --pipeline-placement ranks
cp -r "$work/resumed" "$work/resumed-one"
run resumed 2 --steps 8 --pipeline-stages 2 --pipeline-placement ranks --resume
run resumed-one 0 --steps 8 --resume
grep -q "pipeline of 2 stages (1f1b) over MPI, 2 ranks" "$work/two.err" ||
  { echo "FAIL: the 2-rank run does not describe its pipeline"; cat "$work/two.err"; exit 1; }
run two-shard 2 --steps 8 --pipeline-stages 2 --pipeline-placement ranks --shard-optimizer
run shard-resumed 2 --steps 4 --pipeline-stages 2 --pipeline-placement ranks --shard-optimizer
run shard-resumed 2 --steps 8 --pipeline-stages 2 --pipeline-placement ranks --shard-optimizer --resume
/usr/bin/python3 "$src/examples/compare_pipeline_runs.py" "$work" one ranks two:2:1f1b three:3:gpipe
/usr/bin/python3 - "$work" <<'PY'
import json, sys
w = sys.argv[1]
def lines(p, kind):
    return [l for l in map(json.loads, open(f"{w}/{p}/metrics.jsonl")) if l["kind"] == kind]
two, shard, res = (json.load(open(f"{w}/{p}.json")) for p in ("two", "two-shard", "shard-resumed"))
assert [l["loss"] for l in lines("two-shard", "train")] == [l["loss"] for l in lines("two", "train")]
assert shard["valid"]["loss"] == two["valid"]["loss"], (shard["valid"], two["valid"])
assert res["resumed_from"] == 4 and res["valid"]["loss"] == two["valid"]["loss"], (res, two["valid"])
full, = {tuple(l["optimizer_state_mib"]) for l in lines("two", "run")}
mine = lines("two-shard", "run")[0]["optimizer_state_mib"]
assert len(full) == len(mine) == 2 and full[0] == full[1] and all(0 < m < full[0] for m in mine), (full, mine)
assert abs(sum(mine) - full[0]) <= 1e-6 * full[0], (full, mine)
# each rank keeps only its stage's weights and gradients (as many bytes as AdamW's two slots of them),
# the last rank also the tied table its head reads; unsharded, every rank keeps the whole model
kept = lines("two-shard", "run")[0]["stage_weights_and_gradients_mib"]
assert "stage_weights_and_gradients_mib" not in lines("two", "run")[0]
assert kept[0] == mine[0] and mine[1] < kept[1] < full[0], (kept, mine, full)
print("2 ranks, state sharded by stage:", mine, "MiB of", full[0], "(weights and gradients kept:", kept,
      ") - same losses, resumed too:", res["valid"]["loss"])
PY
/usr/bin/python3 - "$work" <<'PY'
import json, sys
w = sys.argv[1]
r, two = (json.load(open(f"{w}/{p}.json")) for p in ("resumed", "two"))
assert r["resumed_from"] == 4 and r["steps"] == 8 and r["pipeline"]["stages"] == 2, r
assert r["valid"]["loss"] == two["valid"]["loss"], (r["valid"], two["valid"])
r1 = json.load(open(f"{w}/resumed-one.json"))
assert r1["resumed_from"] == 4 and abs(r1["valid"]["loss"] - r["valid"]["loss"]) <= 1e-5 * r["valid"]["loss"], r1
print("the resumed 2-rank run ends on", r["valid"]["loss"], "- resumed by 1 process:", r1["valid"]["loss"])
PY
run dp-one 0 --steps 8 --batch-size 4 --dropout 0
run dp-pipe 2 --steps 8 --batch-size 2 --dropout 0 --pipeline-stages 2
/usr/bin/python3 - "$work" <<'PY'
import json, sys
w = sys.argv[1]
def train(p):
    return [l["loss"] for l in map(json.loads, open(f"{w}/{p}/metrics.jsonl")) if l["kind"] == "train"]
a, b = train("dp-one"), train("dp-pipe")
assert len(a) == len(b) == 8 and all(abs(x - y) <= 1e-4 * abs(x) for x, y in zip(a, b)), (a, b)
run = [l for l in map(json.loads, open(f"{w}/dp-pipe/metrics.jsonl")) if l["kind"] == "run"][0]
assert run["replicas"] == 2 and run["pipeline"]["placement"] == "threads", run
print("2 data-parallel ranks with 2 stages each = 1 process:", b[-1], a[-1])
PY
run grid 4 --steps 8 --batch-size 2 --dropout 0 --pipeline-stages 2 --pipeline-placement ranks
run grid-res 4 --steps 4 --batch-size 2 --dropout 0 --pipeline-stages 2 --pipeline-placement ranks
run grid-res 4 --steps 8 --batch-size 2 --dropout 0 --pipeline-stages 2 --pipeline-placement ranks --resume
grep -q "pipeline of 2 stages (1f1b) over MPI, 4 ranks .*, one stage per rank, 2 data replicas of the pipeline" \
  "$work/grid.err" || { echo "FAIL: the 4-rank grid does not describe itself"; cat "$work/grid.err"; exit 1; }
/usr/bin/python3 - "$work" <<'PY'
import json, sys
w = sys.argv[1]
def lines(p, kind):
    return [l for l in map(json.loads, open(f"{w}/{p}/metrics.jsonl")) if l["kind"] == kind]
a, b = [l["loss"] for l in lines("dp-one", "train")], [l["loss"] for l in lines("grid", "train")]
assert len(a) == len(b) == 8 and all(abs(x - y) <= 1e-5 * abs(x) for x, y in zip(a, b)), (a, b)
one, grid, res = (json.load(open(f"{w}/{p}.json")) for p in ("dp-one", "grid", "grid-res"))
assert abs(one["valid"]["loss"] - grid["valid"]["loss"]) <= 1e-5 * one["valid"]["loss"], (one["valid"], grid["valid"])
run = lines("grid", "run")[0]
assert run["replicas"] == 2 and run["pipeline"]["placement"] == "ranks" and run["pipeline"]["stages"] == 2, run
assert len(run["optimizer_state_mib"]) == 4, run
assert res["resumed_from"] == 4 and res["valid"]["loss"] == grid["valid"]["loss"], (res, grid["valid"])
assert [l["loss"] for l in lines("grid-res", "train")] == b
print("2 replicas x 2 stages on 4 ranks = 1 process x 4 rows:", b[-1], a[-1], "- resumed on the grid:", res["valid"]["loss"])
PY
run grid-shard 4 --steps 8 --batch-size 2 --dropout 0 --pipeline-stages 2 --pipeline-placement ranks --shard-optimizer
run grid-shard-res 4 --steps 4 --batch-size 2 --dropout 0 --pipeline-stages 2 --pipeline-placement ranks --shard-optimizer
cp -r "$work/grid-shard-res" "$work/grid-to-two"; cp -r "$work/grid-shard-res" "$work/grid-to-one"
run grid-to-two 2 --steps 8 --batch-size 4 --dropout 0 --pipeline-stages 2 --pipeline-placement ranks --resume
run grid-to-one 0 --steps 8 --batch-size 4 --dropout 0 --resume
run grid-shard-res 4 --steps 8 --batch-size 2 --dropout 0 --pipeline-stages 2 --pipeline-placement ranks --shard-optimizer \
  --resume
/usr/bin/python3 - "$work" <<'PY'
import json, sys
w = sys.argv[1]
def lines(p, kind):
    return [l for l in map(json.loads, open(f"{w}/{p}/metrics.jsonl")) if l["kind"] == kind]
grid, shard, res = (json.load(open(f"{w}/{p}.json")) for p in ("grid", "grid-shard", "grid-shard-res"))
losses = [l["loss"] for l in lines("grid", "train")]
assert [l["loss"] for l in lines("grid-shard", "train")] == losses and shard["valid"]["loss"] == grid["valid"]["loss"]
assert res["resumed_from"] == 4 and res["valid"]["loss"] == grid["valid"]["loss"], (res, grid["valid"])
assert [l["loss"] for l in lines("grid-shard-res", "train")] == losses
for p in ("grid-to-two", "grid-to-one"):  # its step-4 checkpoint on one pipeline of 2 ranks, and on 1 process
    r = json.load(open(f"{w}/{p}.json"))
    assert r["resumed_from"] == 4 and abs(r["valid"]["loss"] - grid["valid"]["loss"]) <= 1e-5 * grid["valid"]["loss"], (p, r)
full = lines("grid", "run")[0]["optimizer_state_mib"]
mine = lines("grid-shard", "run")[0]["optimizer_state_mib"]  # ranks 0-1: replica 0's stages, 2-3: replica 1's
assert len(set(full)) == 1 and len(mine) == 4 and mine[:2] == mine[2:] and all(0 < m < full[0] for m in mine), (full, mine)
assert abs(mine[0] + mine[1] - full[0]) <= 1e-6 * full[0], (full, mine)
kept = lines("grid-shard", "run")[0]["stage_weights_and_gradients_mib"]
assert kept[:2] == kept[2:] and kept[0] == mine[0] and mine[1] < kept[1] < full[0], (kept, mine, full)
print("the grid with its state sharded by stage:", mine, "MiB of", full[0], "- same losses, resumed too")
PY
s1=(-c "$src/configs/s1-tiny-train.json" --train "$work/train.tok" --valid "$work/train.tok" --vocab 50257
    --steps 6 --threads 1 --accumulation 2 --update-period 2)
"$sparse_lm" "${s1[@]}" --out "$work/s1-one" > "$work/s1-one.json" 2> "$work/s1-one.err" ||
  { echo "FAIL: sparse_lm one process"; cat "$work/s1-one.err"; exit 1; }
timeout 300 mpirun -np 2 "${mpi_opts[@]}" "$sparse_lm" "${s1[@]}" --pipeline-stages 2 --pipeline-placement ranks \
  --out "$work/s1-two" > "$work/s1-two.json" 2> "$work/s1-two.err" ||
  { echo "FAIL: sparse_lm on 2 ranks"; cat "$work/s1-two.err"; exit 1; }
timeout 300 mpirun -np 2 "${mpi_opts[@]}" "$sparse_lm" "${s1[@]}" --pipeline-stages 2 --pipeline-placement ranks \
  --shard-optimizer --out "$work/s1-shard" > "$work/s1-shard.json" 2> "$work/s1-shard.err" ||
  { echo "FAIL: sparse_lm on 2 ranks, sharded"; cat "$work/s1-shard.err"; exit 1; }
for v in grid grid-shard; do
  timeout 300 mpirun -np 4 "${mpi_opts[@]}" "$sparse_lm" "${s1[@]}" --batch-size 2 --pipeline-stages 2 \
    --pipeline-placement ranks $([ $v = grid ] || echo --shard-optimizer) --out "$work/s1-$v" > "$work/s1-$v.json" \
    2> "$work/s1-$v.err" || { echo "FAIL: sparse_lm on a grid of 4 ranks ($v)"; cat "$work/s1-$v.err"; exit 1; }
done
/usr/bin/python3 - "$work" <<'PY'
import json, sys
w = sys.argv[1]
a, g, gs = (json.load(open(f"{w}/s1-{p}.json")) for p in ("one", "grid", "grid-shard"))
assert a["pattern_updates"] >= 2 and a["pattern_updates"] == g["pattern_updates"], (a, g)
assert gs["pattern_updates"] == g["pattern_updates"] and gs["valid"]["loss"] == g["valid"]["loss"], (g, gs)
assert abs(a["valid"]["loss"] - g["valid"]["loss"]) <= 1e-4 * a["valid"]["loss"], (a["valid"], g["valid"])
print("sparse_lm on 2 replicas x 2 stages (sharded too): pattern updates", g["pattern_updates"], "valid loss", g["valid"]["loss"],
      "(1 process:", a["valid"]["loss"], ")")
PY
/usr/bin/python3 - "$work" <<'PY'
import json, sys
w = sys.argv[1]
a, b, c = (json.load(open(f"{w}/s1-{p}.json")) for p in ("one", "two", "shard"))
assert a["pattern_updates"] >= 2 and a["pattern_updates"] == b["pattern_updates"] == c["pattern_updates"], (a, b, c)
for x in (b, c):
    assert abs(a["valid"]["loss"] - x["valid"]["loss"]) <= 1e-5 * a["valid"]["loss"], (a["valid"], x["valid"])
print("sparse_lm: pattern updates", a["pattern_updates"], "on 1 process and 2 ranks (unsharded, sharded);",
      "valid loss", b["valid"]["loss"], c["valid"]["loss"])
PY
set +e
timeout 120 mpirun -np 3 "${mpi_opts[@]}" "$train" "${common[@]}" --steps 2 --pipeline-stages 2 --pipeline-placement ranks \
  --out "$work/bad" > /dev/null 2> "$work/bad.err"; rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "a pipeline of 2 stages placed on ranks needs as many ranks" "$work/bad.err" ||
  { echo "FAIL: 3 ranks for 2 stages (exit $rc)"; cat "$work/bad.err"; exit 1; }
timeout 120 mpirun -np 6 "${mpi_opts[@]}" "$train" "${common[@]}" --steps 2 --pipeline-stages 4 --pipeline-placement ranks \
  --out "$work/bad-grid" > /dev/null 2> "$work/bad-grid.err"; rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "a pipeline of 4 stages placed on ranks needs as many ranks or a multiple" \
  "$work/bad-grid.err" || { echo "FAIL: 6 ranks for 4 stages (exit $rc)"; cat "$work/bad-grid.err"; exit 1; }
echo "examples.pipeline_ranks: ok"
