#!/usr/bin/env bash
# Compile time of a downstream translation unit that trains a GPT one step
# (benchmarks/compile_time/one_step.cpp: the umbrella header, gpt<float>, trainer, AdamW), against the
# package installed from BUILD_DIR (`cmake --install`), at -O2 -march=native, in three forms:
#   header_only   the headers alone
#   kernels       with sparselm::kernels (-DSPARSELM_PRECOMPILED_KERNELS; the kernels are linked, not compiled)
#   models        with sparselm::models too (-DSPARSELM_PRECOMPILED_MODELS: gpt<float> and its trainer are
#                 linked, not compiled; train/precompiled.hpp)
# The models form is also linked against the installed libraries and run for one step, so that the
# number is of a program that works. Each compile runs alone under /usr/bin/time; prints user +
# system seconds, wall seconds and peak RSS,
# and with --json FILE (or $SPARSELM_RESULTS) appends a results line per form (benchmarks/common/results.py).
#
#   benchmarks/compile_time.sh [--json FILE] [BUILD_DIR=build] [WORK_DIR=/tmp/sparselm-compile-time]
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
json=${SPARSELM_RESULTS:-}
if [ "${1:-}" = --json ]; then json=$2; shift 2; fi
build=${1:-build} work=${2:-/tmp/sparselm-compile-time}
cmd="benchmarks/compile_time.sh $*"
export SPARSELM_RESULTS_RUN
SPARSELM_RESULTS_RUN="$(date -u +%Y-%m-%dT%H:%M:%SZ)-$$"  # the three lines are one run
rm -rf "$work" && mkdir -p "$work"
cmake --install "$build" --prefix "$work/prefix" > /dev/null
for form in header_only kernels models; do
  defs=()
  [ "$form" = kernels ] && defs=(-DSPARSELM_PRECOMPILED_KERNELS)
  [ "$form" = models ] && defs=(-DSPARSELM_PRECOMPILED_KERNELS -DSPARSELM_PRECOMPILED_MODELS)
  /usr/bin/time -f '%U %S %e %M' -o "$work/$form.time" g++ -std=c++20 -O2 -march=native -fopenmp \
    -I"$work/prefix/include" "${defs[@]}" -c "$src/benchmarks/compile_time/one_step.cpp" -o "$work/$form.o"
  read -r user sys wall rss_kb < "$work/$form.time"
  load=$(cut -d' ' -f1 /proc/loadavg)
  printf '{"form": "%s", "cpu_seconds": %.2f, "wall_seconds": %.2f, "peak_rss_mib": %.0f, "object_kib": %d, "load_after": %s}\n' \
    "$form" "$(echo "$user + $sys" | bc)" "$wall" "$(echo "$rss_kb / 1024" | bc)" "$(( $(stat -c %s "$work/$form.o") / 1024 ))" "$load"
  if [ -n "$json" ]; then
    /usr/bin/python3 "$src/benchmarks/common/results.py" --json "$json" --benchmark compile_time --command "$cmd" \
      --threads 1 --case form="$form" --case flags='"-std=c++20 -O2 -march=native -fopenmp"' \
      --case "compiler=$(g++ -dumpfullversion)" --metric "cpu_seconds=$(echo "$user + $sys" | bc)" \
      --metric "wall_seconds=$wall" --metric "peak_rss_mib=$(echo "$rss_kb / 1024" | bc)" \
      --metric "object_kib=$(( $(stat -c %s "$work/$form.o") / 1024 ))"
  fi
done
# the models form links and trains one step (the precompiled instances are the ones it calls)
libdir=$(dirname "$(find "$work/prefix" -name libsparselm_models.a)")
g++ -fopenmp "$work/models.o" -L"$libdir" -lsparselm_models -lsparselm_kernels -o "$work/one_step"
(cd "$src" && "$work/one_step" configs/gpt-mini.json)
