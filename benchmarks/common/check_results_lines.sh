#!/usr/bin/env bash
# Results kept as data, end to end (the benchmarks.results_lines ctest): a tiny bench_bsr run appends
# its results lines (--json), each with the fields scripts/render_performance.py needs and without
# --json in its command, and the renderer makes a bsr table of them that names the run's command.
#
#   benchmarks/common/check_results_lines.sh BENCH_BSR WORK_DIR
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
bench=$1 work=$2
rm -rf "$work" && mkdir -p "$work"
"$bench" --threads 1 --reps 1 --blocks 16,1 --sparsity 0.9 --shapes 32x64 --m 48 --no-blas --json "$work/bsr.jsonl" > /dev/null
/usr/bin/python3 - "$work/bsr.jsonl" <<'PY'
import json, sys
lines = [json.loads(text) for text in open(sys.argv[1])]
assert len(lines) == 2, f"expected a line per block size (2), got {len(lines)}"
need = {"benchmark", "case", "metrics", "threads", "fma_peak_gflops", "host", "commit", "date", "run", "command"}
for ln in lines:
    assert need <= set(ln), f"missing {need - set(ln)} in {ln}"
    assert ln["benchmark"] == "bench_bsr" and ln["threads"] == 1, ln
    assert "--json" not in ln["command"] and "--shapes 32x64" in ln["command"], ln["command"]
    assert ln["metrics"]["speedup_vs_gemm"] > 0 and ln["metrics"]["paired_speedup"] is None, ln["metrics"]
    assert {"vendor", "family", "model", "cpu", "isa", "cpus"} <= set(ln["host"]), ln["host"]
assert sorted(ln["case"]["block"] for ln in lines) == [1, 16], lines
print("results lines: OK")
PY
out=$(/usr/bin/python3 "$src/scripts/render_performance.py" --data "$work")
printf '%s\n' "$out"
grep -q '^<!-- table: bsr ' <<< "$out"
grep -Eq '^\| 1 \| 32×64 \| 48 \| 0\.90 \| 16 \|' <<< "$out"
grep -q 'bench_bsr --threads 1 --reps 1' <<< "$out"
echo "rendered: OK"
