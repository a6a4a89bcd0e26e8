#!/usr/bin/env bash
# Sets up a fresh Debian machine, builds everything and runs the test suite.
#   ./scripts/test.sh            (BUILD_DIR=build by default; JOBS=<n> to limit parallelism)
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh --test
build=${BUILD_DIR:-build}
jobs=${JOBS:-$(nproc)}
# explicit ON: the same build directory may have been configured by run.sh with tests off
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DSPARSELM_BUILD_TESTS=ON -DSPARSELM_BUILD_EXAMPLES=ON \
  -DSPARSELM_BUILD_BENCHMARKS=ON
cmake --build "$build" -j "$jobs"
ctest --test-dir "$build" --output-on-failure -j "$jobs"
