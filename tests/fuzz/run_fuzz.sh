#!/usr/bin/env bash
# Builds the libFuzzer harnesses with clang and runs them (tests/fuzz/CMakeLists.txt).
#
#   tests/fuzz/run_fuzz.sh [--build DIR] [--runs N | --seconds S] [--timeout S] [--seeds] [target ...]
#
#   --runs N      executions per target (the documented campaign: --runs 10000000)
#   --seconds S   time per target instead (the ctest cases use 5)
#   --timeout S   seconds one input may take before it counts as a hang (default 10; the fuzzers run
#                 at nice 19, so beside other jobs on few cores a longer limit avoids false hangs)
#   --seeds       regenerate the committed seed corpora (tests/fuzz/corpus/<target>/) first
#   --build-only  build the harnesses and stop (the ctest fixture fuzz.build)
#   --no-build    run harnesses built before (the ctest cases fuzz.<target>, after fuzz.build)
#   target        safetensors token_header run_config gpt2_files gpt2_encoder pattern training_state
#                 squad email_text
#                 (default: all)
#
# Each target starts from its seed corpus (read only) and writes new inputs to DIR/corpus/<target>;
# a crash, leak or UB report stops it and leaves crash-* in DIR/findings/<target>. The last line per
# target reports its executions. Exit status 0 only when every target ran clean.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$here/../../build-fuzz runs="" seconds=60 timeout=10 seeds=0 build_step=1 run_step=1 targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --timeout) timeout=$2; shift 2 ;;
    --seeds) seeds=1; shift ;;
    --build-only) run_step=0; shift ;;
    --no-build) build_step=0; shift ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    *) targets+=("$1"); shift ;;
  esac
done
[ ${#targets[@]} -gt 0 ] || targets=(safetensors token_header run_config gpt2_files gpt2_encoder pattern training_state squad email_text)
command -v clang++ > /dev/null || { echo "run_fuzz.sh: clang++ not found (scripts/setup.sh --test installs it)"; exit 2; }

mkdir -p "$build"
if [ "$build_step" = 1 ]; then
  exec 9> "$build/.build.lock"   # parallel callers: one configure + build at a time
  flock 9
  # configured every time: a build directory from before a harness was added learns of it
  CXX=clang++ cmake -S "$here" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo > "$build/configure.log"
  # fuzz_all holds every harness; fuzz_<target> are links to it (tests/fuzz/CMakeLists.txt)
  extra=(); [ "$seeds" = 1 ] && extra=(make_seeds)
  nice -n 19 cmake --build "$build" -j2 --target fuzz_all "${extra[@]}" > "$build/build.log" \
    || { tail -30 "$build/build.log"; exit 1; }
  if [ "$seeds" = 1 ]; then "$build/make_seeds" "$here/corpus"; fi
  flock -u 9
fi
[ "$run_step" = 1 ] || exit 0

status=0
for t in "${targets[@]}"; do
  [ -x "$build/fuzz_$t" ] || { echo "fuzz_$t: not built in $build (run without --no-build)"; status=1; continue; }
  mkdir -p "$build/corpus/$t" "$build/findings/$t"
  limit=(-max_total_time="$seconds")
  [ -n "$runs" ] && limit=(-runs="$runs")
  log=$build/findings/$t/last.log
  if nice -n 19 "$build/fuzz_$t" "${limit[@]}" -max_len=65536 -timeout="$timeout" -rss_limit_mb=4096 -print_final_stats=1 \
       -artifact_prefix="$build/findings/$t/" "$build/corpus/$t" "$here/corpus/$t" > "$log" 2>&1; then
    echo "fuzz_$t: ok, $(grep -m1 'stat::number_of_executed_units' "$log" | awk '{print $2}') executions"
  else
    echo "fuzz_$t: FINDING (see $log and $build/findings/$t/)"
    grep -m3 -E "ERROR|runtime error|unexpected exception|deadly signal" "$log" || tail -5 "$log"
    status=1
  fi
done
exit $status
