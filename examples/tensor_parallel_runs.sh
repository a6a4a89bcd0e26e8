# Sourced by check_tensor_parallel.sh and check_tensor_parallel_bert.sh: runs of one training
# program under mpirun and the comparison of their metrics.
#
#   prog=PROGRAM work=DIR args=(FLAGS...)      the program, the runs' directory, every run's flags
#   run NAME NP FLAGS...                        NP ranks (1: no mpirun), --out $work/NAME
#   resume NAME FROM NP FLAGS...                a copy of run FROM continued (--resume)
#   plan NAME NP FLAGS...                       the --dry-run plan's JSON in $work/NAME.plan
#   compare_runs <<'PY' ... PY                  Python with lines(run), same_losses(a, b, tol),
#                                               updates(run) and fails (a list; non-empty fails)
mpi_opts=(--oversubscribe --bind-to none)
[ "$(id -u)" = 0 ] && mpi_opts+=(--allow-run-as-root)
export OMP_NUM_THREADS=1

run() {
  local name=$1 np=$2
  shift 2
  local cmd=("$prog")
  [ "$np" -gt 1 ] && cmd=(mpirun -np "$np" "${mpi_opts[@]}" "$prog")
  "${cmd[@]}" "${args[@]}" --out "$work/$name" "$@" > "$work/$name.json" 2> "$work/$name.err" ||
    { cat "$work/$name.err" >&2; echo "FAIL: $name did not run" >&2; exit 1; }
}
resume() {
  local name=$1 from=$2
  shift 2
  cp -r "$work/$from" "$work/$name"
  run "$name" "$@" --resume
}
plan() {  # plan NAME NP FLAGS...: the dry run's JSON line in $work/NAME.plan
  local name=$1 np=$2
  shift 2
  local cmd=("$prog")
  [ "$np" -gt 1 ] && cmd=(mpirun -np "$np" "${mpi_opts[@]}" "$prog")
  "${cmd[@]}" "${args[@]}" --dry-run "$@" > "$work/$name.plan" 2> "$work/$name.plan.err" ||
    { cat "$work/$name.plan.err" >&2; echo "FAIL: the plan $name did not run" >&2; exit 1; }
}
compare_runs() {
  local body
  body=$(cat)
  /usr/bin/python3 - "$work" "$(basename "$prog")" <<PY
import json, sys
w, label = sys.argv[1], sys.argv[2]
fails = []
def lines(run):
    return [j for j in map(json.loads, open(f"{w}/{run}/metrics.jsonl")) if j.get("kind") in ("train", "eval")]
def same_losses(a, b, tol=1e-4):
    la, lb = lines(a), lines(b)
    if not la or [(x["kind"], x["step"]) for x in la] != [(x["kind"], x["step"]) for x in lb]:
        fails.append(f"{a} / {b}: the runs logged different steps"); return
    worst = max(abs(x["loss"] - y["loss"]) / abs(x["loss"]) for x, y in zip(la, lb))
    print(f"{label}: {b} against {a}: losses within {worst:.2e} (relative) over {len(la)} lines")
    if worst > tol: fails.append(f"{b} against {a}: losses differ by {worst:.2e} (relative; tolerance {tol:.0e})")
def updates(run):
    return {j["step"]: j["sparsity_update"] for j in map(json.loads, open(f"{w}/{run}/metrics.jsonl"))
            if j.get("kind") == "train" and "sparsity_update" in j}
def resumed_at(run):
    return [j["resumed_from"] for j in map(json.loads, open(f"{w}/{run}/metrics.jsonl")) if j.get("kind") == "run"]
$body
for f in fails: print("FAIL:", f, file=sys.stderr)
sys.exit(1 if fails else 0)
PY
}
