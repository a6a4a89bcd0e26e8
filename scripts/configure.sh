#!/usr/bin/env bash
# Configures the one build directory that scripts/run.sh and scripts/test.sh share (BUILD_DIR, build
# by default): Release, with the tests, examples and benchmarks, so that either script can follow the
# other without reconfiguring away what it built. Ninja when it is there (scripts/setup.sh installs it)
# and the directory is new; an existing directory keeps its generator.
#
#   scripts/configure.sh [extra cmake arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
gen=()
if [ ! -f "$build/CMakeCache.txt" ] && command -v ninja > /dev/null; then gen=(-G Ninja); fi
cmake -S . -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DSPARSELM_BUILD_TESTS=ON -DSPARSELM_BUILD_EXAMPLES=ON \
  -DSPARSELM_BUILD_BENCHMARKS=ON "$@"
